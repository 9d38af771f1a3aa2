-- A client leaves the registry of clients (it was dropped).
-- KEYS[1] registry, KEYS[2] heartbeats; ARGV[1] client id. Returns 1 left, 0 was not there.
redis.call('HLEN', KEYS[1])
local there = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return there
