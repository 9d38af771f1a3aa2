-- Release a lease lock if the caller still owns it, and announce the release.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] release channel.
-- Returns 1 released, 0 the key was gone (expired), -1 another holder owns it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
if holder == false then
  return 0
end
return -1
