-- Release a read hold; the last reader out wakes the waiting writers.
-- KEYS[1] readers; ARGV[1] token, ARGV[2] channel. As the undo of an acquisition: KEYS[2]
-- undone acquisitions, ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 the hold was gone (expired).
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if KEYS[2] then
  redis.call('ZCARD', KEYS[2])
end
-- Undoing an acquisition whose reply was lost (KEYS[2] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[2] then
  remember(KEYS[2], ARGV[1], now_ms(), tonumber(ARGV[3]))
end
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) == 0 then
  notify(ARGV[2], 'w')
end
if tonumber(expiry) <= now then
  return 0
end
return 1
