-- Extend a lease lock to ttl from now if the caller still owns it.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] ttl in ms.
-- Returns 1 extended, 0 the key was gone (expired), -1 another holder owns it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder == false then
  return 0
end
return -1
