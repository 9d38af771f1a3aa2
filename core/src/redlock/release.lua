-- Release a RedLock on one node if the caller still owns the key there. No announcement:
-- RedLock waiters retry after a random delay, nobody listens for its releases (the lease
-- lock's release script publishes one, which costs every node a PUBLISH per release).
-- KEYS[1] lock key; ARGV[1] owner token.
-- Returns 1 released, 0 the key was gone (expired), -1 another holder owns it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if holder == false then
  return 0
end
return -1
