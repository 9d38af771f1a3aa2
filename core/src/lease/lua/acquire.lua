-- Acquire a lease lock and issue its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] ttl in ms.
-- Returns {1, fence} when the caller holds the lock (newly, or already: a retried
-- acquisition gets the fence it was issued before), {0, pttl of the holder} otherwise.
local holder = redis.call('GET', KEYS[1])
if holder == false then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
return {0, redis.call('PTTL', KEYS[1])}
