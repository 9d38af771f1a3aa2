-- notify(channel, message). A channel given as '{shard}<name>' is a shard channel (Redis
-- Cluster): SPUBLISH reaches only the subscribers on this key's shard instead of being
-- broadcast to every node. (No channel of ours starts with '{': prefixes may not contain
-- braces.)
local function notify(channel, message)
  if string.sub(channel, 1, 7) == '{shard}' then
    redis.call('SPUBLISH', string.sub(channel, 8), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end
