-- Move a dead job back to ready, as if pushed anew for its budget and backoff: max
-- deliveries are counted afresh from here, and the takes report the attempt since this
-- requeue (from which the retry backoff restarts); its delivery number keeps increasing (it
-- is the job's fence, and must never repeat).
-- KEYS: 1 dead, 2 ready, 3 priorities, 4 sequence counter, 5 deliveries, 6 bases, 7 reasons
-- (the reason it died is forgotten).
-- ARGV: 1 id, 2 channel. Returns 1 requeued, 0 not on the dead list.
redis.call('LLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[6])
redis.call('HLEN', KEYS[7])
local bad = bad_sequence(KEYS[4])
if bad then
  return bad
end
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[7], ARGV[1])
-- The base is the deliveries now; a job's timeout ('base:timeout') is kept.
local timeout = string.match(redis.call('HGET', KEYS[6], ARGV[1]) or '', ':(%d+)$')
local base = tonumber(redis.call('HGET', KEYS[5], ARGV[1])) or 0
redis.call('HSET', KEYS[6], ARGV[1], timeout and (base .. ':' .. timeout) or base)
local priority = tonumber(redis.call('HGET', KEYS[3], ARGV[1])) or 0
redis.call('ZADD', KEYS[2], ready_score(priority, KEYS[4]), ARGV[1])
notify(ARGV[2], '1')
return 1
