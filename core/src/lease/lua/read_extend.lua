-- Extend a read hold to ARGV[2] ms from now (server time).
-- KEYS[1] readers; ARGV[1] token. Returns 1 extended, 0 gone (expired).
local now = now_ms()
local ttl = tonumber(ARGV[2])
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not expiry) or tonumber(expiry) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
