-- Move a dead job back to ready (revive.lua: as if pushed anew for its budget and backoff;
-- its reason and death record are forgotten).
-- KEYS: 1 dead, 2 ready, 3 priorities, 4 sequence counter, 5 deliveries, 6 bases, 7 reasons,
-- 8 payloads (revive names them after the dead list; they are declared and read here).
-- ARGV: 1 id, 2 channel. Returns 1 requeued, 0 not on the dead list.
redis.call('LLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[6])
redis.call('HLEN', KEYS[7])
redis.call('HLEN', KEYS[8])
local bad = bad_sequence(KEYS[4])
if bad then
  return bad
end
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then
  return 0
end
revive(KEYS[1], ARGV[1], ARGV[2])
return 1
