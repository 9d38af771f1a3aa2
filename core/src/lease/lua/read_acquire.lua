-- Acquire the read side of a read-write lock. Readers share it; a waiting writer blocks new
-- readers (so a stream of readers cannot starve it).
-- KEYS[1] writer, KEYS[2] readers (zset token -> expiry ms), KEYS[3] waiting writers
-- (zset token -> expiry ms), KEYS[4] fence counter, KEYS[5] undone acquisitions (zset token
-- -> until ms); ARGV[1] token, ARGV[2] ttl ms.
-- Returns {1, fence of the last writer (0: none yet)} or {0, pttl to wait for or -2}.
-- Read every key once before writing any, so a key of the wrong type fails the call
-- before anything is written.
redis.call('GET', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('GET', KEYS[4])
if undone(KEYS[5], ARGV[1]) then
  return {0, -2}
end
local now = now_ms()
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not mine then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  if redis.call('ZCARD', KEYS[3]) > 0 then
    return {0, -2}
  end
end
-- A retry (mine) keeps a later expiry it has (a late copy after an extension to a longer
-- ttl): never shortened.
if (not mine) or tonumber(mine) < now + ttl then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
end
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1, tonumber(redis.call('GET', KEYS[4]) or '0')}
