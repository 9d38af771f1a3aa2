-- dedup_release(map, of, id, payloads, priorities, ready, seq, now): job id was acked, so
-- its deduplication entry goes with it (as in dedup.lua), and when it held its dedup id, a
-- keep-latest follow-up parked behind it (field '>' .. dedup id of `of`:
-- '<priority>|<id length>|<id><payload>', written by push_dedup.lua while id was in
-- flight) is made ready now and holds the dedup id in its place: a follow-up never runs
-- beside the job it follows. Its enqueue time (beside its payload, as push.lua's) is `now`
-- (server ms), when it is made ready: it waited behind that job since its push. For the
-- scripts that ack a job; call it only for ids starting with '~', once every key it writes
-- was read. Needs the ready part (ready_score) before it. Returns the follow-up's id, or
-- nil. With `only_parked` (a death: a dead job keeps its entry), nothing changes unless a
-- follow-up is parked behind the job.
local function dedup_release(map, of, id, payloads, priorities, ready, seq, now, only_parked)
  local entry = redis.call('HGET', of, id)
  if not entry then
    return nil
  end
  local d = string.sub(entry, (string.find(entry, '|', 1, true) or 0) + 1)
  local holder = redis.call('HGET', map, d)
  local parked = holder == id and redis.call('HGET', of, '>' .. d)
  if only_parked and not parked then
    return nil
  end
  redis.call('HDEL', of, id)
  if not parked then
    if holder == id then
      redis.call('HDEL', map, d)
    end
    return nil
  end
  local bar = string.find(parked, '|', 1, true)
  local bar2 = string.find(parked, '|', bar + 1, true)
  local priority = tonumber(string.sub(parked, 1, bar - 1))
  local n = tonumber(string.sub(parked, bar + 1, bar2 - 1))
  local f = string.sub(parked, bar2 + 1, bar2 + n)
  redis.call('HDEL', of, '>' .. d)
  redis.call('HSET', payloads, f, string.sub(parked, bar2 + n + 1), f .. '\255', string.format('%d', now))
  if priority > 0 then
    redis.call('HSET', priorities, f, priority)
  end
  redis.call('ZADD', ready, ready_score(priority, seq), f)
  redis.call('HSET', map, d, f)
  redis.call('HSET', of, f, '0|' .. d)
  return f
end
