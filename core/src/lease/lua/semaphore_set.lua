-- Set the permit count of a semaphore. Holders beyond a smaller count keep their permits
-- until they release; no new permit is granted until the holders are under the count.
-- A larger count wakes the waiters that may now proceed.
-- KEYS[1] holders, KEYS[2] waiters, KEYS[3] permit count; ARGV[1] permits, ARGV[2] channel.
-- Returns the previous count (-1: none was set).
-- Read every key once before writing any (a wrong type fails before any write).
local held = redis.call('ZCARD', KEYS[1])
redis.call('LLEN', KEYS[2])
local before = tonumber(redis.call('GET', KEYS[3])) or -1
redis.call('SET', KEYS[3], ARGV[1])
local free = tonumber(ARGV[1]) - held
if free > 0 then
  for _, next in ipairs(redis.call('LRANGE', KEYS[2], 0, free - 1)) do
    notify(ARGV[2], next)
  end
end
return before
