-- notify(channel, message). A channel given as '{shard}<name>' is a shard channel (Redis
-- Cluster): SPUBLISH reaches only the subscribers on this key's shard instead of being
-- broadcast to every node. (No other channel of ours starts with '{': prefixes may not
-- contain braces. So the first byte, 123, tells: string.sub would make a string per call.)
local function notify(channel, message)
  if string.byte(channel, 1) == 123 then
    redis.call('SPUBLISH', string.sub(channel, 8), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end
