-- Extend a read hold to ARGV[2] ms from now (server time).
-- KEYS[1] readers; ARGV[1] token. Returns 1 extended, 0 gone (expired).
-- The watchdog's renewal of every read hold and permit: the prelude's now_ms is spelled out
-- (a helper costs a closure per call), and the ttl goes to PEXPIRE as the text it came as
-- (Redis formats a Lua number argument with '%.17g': about 3,500 instructions).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not expiry) or tonumber(expiry) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
