-- Release a read hold; the last reader out wakes the waiting writers.
-- KEYS[1] readers; ARGV[1] token, ARGV[2] channel.
-- Returns 1 released, 0 the hold was gone (expired).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], 'w')
end
if tonumber(expiry) <= now then
  return 0
end
return 1
