-- Acquire a lease lock and issue its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] ttl in ms.
-- Returns {1, fence} when the caller holds the lock (newly, or already: a retried
-- acquisition gets the fence it was issued before), {0, pttl of the holder} otherwise.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    -- The counter is unusable: undo the SET, so nothing is left half-written.
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence}
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
return {0, redis.call('PTTL', KEYS[1])}
