-- Give back the job leased with a token whose take went unanswered (the taker never saw
-- it): back to ready at once, its delivery not counted.
-- KEYS: 1 in flight, 2 leases, 3 ready, 4 priorities, 5 sequence counter, 6 deliveries,
-- 7 holders, 8 counts (the take is counted no more), 9 undone takes (zset token -> until
-- ms; the last key: the take's undo names it). ARGV: 1 token, 2 channel, 3 how long to
-- remember the token, so that the take, if only delayed, takes nothing when it arrives.
-- Returns 1 given back, 0 nothing was leased to it.
redis.call('ZCARD', KEYS[1])
redis.call('HLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[4])
redis.call('HLEN', KEYS[6])
redis.call('HLEN', KEYS[7])
redis.call('ZCARD', KEYS[9])
local bad = bad_sequence(KEYS[5])
if bad then
  return bad
end
local now = now_ms()
remember(KEYS[9], ARGV[1], now, tonumber(ARGV[3]))
local id = redis.call('HGET', KEYS[7], ARGV[1])
if not id or redis.call('HGET', KEYS[2], id) ~= ARGV[1] then
  return 0
end
redis.call('HDEL', KEYS[7], ARGV[1], ARGV[1] .. ':e')
redis.call('HDEL', KEYS[2], id)
redis.call('ZREM', KEYS[1], id)
-- A grouped job (on the grouped keys, whose ready set is the staging set): its slot freed.
group_freed(KEYS[3], id)
redis.call('HINCRBY', KEYS[6], id, -1)
local priority = tonumber(redis.call('HGET', KEYS[4], id)) or 0
redis.call('ZADD', KEYS[3], ready_score(priority, KEYS[5]), id)
counting(KEYS[8], now)
count('taken', -1)
notify(ARGV[2], '1')
return 1
