-- A waiter of a fair lock gives up: leave the line, and if that makes a free lock's next
-- waiter the head, wake it.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] queue timeouts; ARGV[1] token, ARGV[2] channel.
-- A channel given as '{shard}<name>' is a shard channel (Redis Cluster): SPUBLISH reaches only
-- the subscribers on this key's shard instead of being broadcast to every node. (No channel
-- of ours starts with '{': prefixes may not contain braces.)
local function notify(channel, message)
  if string.sub(channel, 1, 7) == '{shard}' then
    redis.call('SPUBLISH', string.sub(channel, 8), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('GET', KEYS[1])
redis.call('LLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    notify(ARGV[2], head)
  end
end
return 1
