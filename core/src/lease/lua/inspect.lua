-- Report who holds a lease lock and for how long.
-- KEYS[1] lock key; ARGV[1] owner token.
-- Returns {1, pttl} ours, {0, -2} gone, {-1, pttl} another holder's (pttl -1: no expiry).
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return {1, redis.call('PTTL', KEYS[1])}
end
if holder == false then
  return {0, -2}
end
return {-1, redis.call('PTTL', KEYS[1])}
