-- Acquire a lease lock and issue its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] undone acquisitions (zset token -> until
-- ms); ARGV[1] owner token, ARGV[2] ttl in ms.
-- Returns {1, fence} when the caller holds the lock (newly, or already: a retried
-- acquisition gets the fence it was issued before), {0, pttl of the holder} otherwise.
-- A fence is max(counter + 1, server clock in microseconds): a counter lost with the data
-- (restart without persistence, an older snapshot, failover to a lagging replica) cannot
-- issue a fence at or below one issued before, as long as the server clock reads later than
-- it did when those were issued. Fences stay exact integers (below 2^53) until about 2255.
-- Read every key once before writing any (a wrong type fails before any write).
local holder = redis.call('GET', KEYS[1])
local last = redis.call('GET', KEYS[2])
-- An acquisition undone after its reply was lost must not take effect if it arrives late
-- (delayed, overtaken by its undo on another connection): its token is in the undone set.
local undone = redis.call('ZSCORE', KEYS[3], ARGV[1])
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
    return redis.error_reply('ERR the fence counter ' .. KEYS[2] .. ' does not hold an integer below 2^53 - 1')
  end
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter}
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
local t = redis.call('TIME')
local fence = math.max(counter + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], string.format('%.0f', fence))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
