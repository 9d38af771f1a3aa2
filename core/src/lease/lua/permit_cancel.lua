-- A waiter gives up: leave the line, and wake whoever that lets take a free permit.
-- KEYS[1] holders, KEYS[2] waiters, KEYS[3] waiter timeouts, KEYS[4] permit count;
-- ARGV[1] token, ARGV[2] channel.
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
redis.call('ZCARD', KEYS[1])
redis.call('LLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
local permits = tonumber(redis.call('GET', KEYS[4])) or 0
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local free = permits - redis.call('ZCARD', KEYS[1])
if free > 0 then
  for _, next in ipairs(redis.call('LRANGE', KEYS[2], 0, free - 1)) do
    notify(ARGV[2], next)
  end
end
return 1
