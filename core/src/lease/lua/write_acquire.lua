-- Acquire the write side of a read-write lock: no readers and no other writer.
-- KEYS[1] writer, KEYS[2] readers, KEYS[3] waiting writers, KEYS[4] fence counter,
-- KEYS[5] undone acquisitions (zset token -> until ms);
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] waiting-writer timeout ms, ARGV[4] '1' to be
-- noted as a waiting writer when it must wait ('0': trying once).
-- Returns {1, fence} or {0, pttl of the writer or -2}. A writer that must wait is noted
-- (refreshed on every call, dropped after the timeout if it stops calling), which holds
-- back new readers.
-- A fence is max(counter + 1, server clock in microseconds): issue_fence in the prelude.
-- A retry by the holder gets the fence it was issued before, unless the counter was lost
-- (evicted, deleted): then a higher one, from the clock floor.
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('GET', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('ZCARD', KEYS[3])
local last = redis.call('GET', KEYS[4])
if undone(KEYS[5], ARGV[1]) then
  return {0, -2}
end
local counter, bad = fence_counter(KEYS[4], last)
if bad then
  return bad
end
local us, t = now_us()
local now = math.floor(us / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local writer = redis.call('GET', KEYS[1])
if writer == ARGV[1] then
  -- A retry: the lease runs for the ttl from now at least (the caller counts from this
  -- attempt's send), never shortened (a late copy after an extension to a longer ttl).
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  if last then
    -- A retry: the fence it was issued before.
    return {1, counter}
  end
  -- A retry whose counter is gone (evicted, deleted): a fence from the clock floor, at or
  -- above the one its lost reply carried.
  return {1, (issue_fence(KEYS[4], counter, us, t))}
end
if (not writer) and redis.call('ZCARD', KEYS[2]) == 0 then
  local fence = issue_fence(KEYS[4], counter, us, t)
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {1, fence}
end
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
  -- Only grows: another waiting writer may have a longer timeout.
  if redis.call('PTTL', KEYS[3]) < 2 * tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[3], 2 * tonumber(ARGV[3]))
  end
end
if writer then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {0, -2}
