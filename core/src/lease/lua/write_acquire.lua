-- Acquire the write side of a read-write lock: no readers and no other writer.
-- KEYS[1] writer, KEYS[2] readers, KEYS[3] waiting writers, KEYS[4] fence counter,
-- KEYS[5] undone acquisitions (zset token -> until ms);
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] waiting-writer timeout ms, ARGV[4] '1' to be
-- noted as a waiting writer when it must wait ('0': trying once).
-- Returns {1, fence} or {0, pttl of the writer or -2}. A writer that must wait is noted
-- (refreshed on every call, dropped after the timeout if it stops calling), which holds
-- back new readers.
-- A fence is max(counter + 1, server clock in microseconds), as in acquire.lua.
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('GET', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('ZCARD', KEYS[3])
local last = redis.call('GET', KEYS[4])
-- An acquisition undone after its reply was lost must not take effect if it arrives late
-- (delayed, overtaken by its undo on another connection): its token is in the undone set.
local undone = redis.call('ZSCORE', KEYS[5], ARGV[1])
if undone then
  local tu = redis.call('TIME')
  if tonumber(undone) > tonumber(tu[1]) * 1000 + math.floor(tonumber(tu[2]) / 1000) then
    return {0, -2}
  end
end
local counter = 0
if last then
  counter = tonumber(last)
  if (not counter) or counter ~= math.floor(counter) or counter >= 9007199254740991 then
    return redis.error_reply('ERR the fence counter ' .. KEYS[4] .. ' does not hold an integer below 2^53 - 1')
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local writer = redis.call('GET', KEYS[1])
if writer == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter}
end
if (not writer) and redis.call('ZCARD', KEYS[2]) == 0 then
  local fence = math.max(counter + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', KEYS[4], string.format('%.0f', fence))
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
