-- Acquire a reentrant lock: a hash of owner -> hold count, plus the holder's fence.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] undone acquisitions (zset op id ->
-- until ms); ARGV[1] owner, ARGV[2] op id, ARGV[3] ttl ms.
-- Returns {1, fence} when held by the owner (first or nested hold; a retried acquisition
-- with the same op id is not counted twice), {0, pttl of the holder} otherwise.
-- A fence is max(counter + 1, server clock in microseconds), as in acquire.lua.
-- Read every key once before writing any (a wrong type fails before any write).
local owner, op = ARGV[1], ARGV[2]
local count = redis.call('HGET', KEYS[1], owner)
local last = redis.call('GET', KEYS[2])
-- An acquisition undone after its reply was lost must not take effect if it arrives late
-- (delayed, overtaken by its undo on another connection): its token is in the undone set.
local undone = redis.call('ZSCORE', KEYS[3], op)
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
if count then
  if redis.call('HGET', KEYS[1], owner .. ':op') ~= op then
    redis.call('HINCRBY', KEYS[1], owner, 1)
    redis.call('HSET', KEYS[1], owner .. ':op', op)
  end
  -- Never shorten: an outer hold may have asked for a longer lease.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local t = redis.call('TIME')
local fence = math.max(counter + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
local text = string.format('%.0f', fence)
redis.call('SET', KEYS[2], text)
redis.call('HSET', KEYS[1], owner, 1, owner .. ':op', op, 'fence', text)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, fence}
