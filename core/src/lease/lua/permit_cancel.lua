-- A waiter gives up: leave the line, and wake whoever that lets take a free permit.
-- KEYS[1] holders, KEYS[2] waiters, KEYS[3] waiter timeouts, KEYS[4] permit count;
-- ARGV[1] token, ARGV[2] channel.
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
