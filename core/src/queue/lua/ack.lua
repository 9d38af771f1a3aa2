-- Acknowledge a job: it is done and forgotten. Refused once the lease ran out (the job is
-- then redelivered to someone else).
-- KEYS: 1 in flight, 2 leases, 3 payloads, 4 priorities, 5 deliveries, 6 holders, 7 bases,
-- 8 settled (zset delivery token -> until when its ack or nack is remembered, ms),
-- 9 pauses (hash; field 'drain': the channel a drain waiter listens on, announced on by an
-- ack; see pause.lua), 10 dedup ids, 11 the jobs' dedup entries, 12 ready, 13 sequence
-- counter (10 to 13 are touched only for a job pushed with a dedup id:
-- core/src/queue/dedup.rs), 14 counts (the stem of the per-minute counts: count.lua);
-- optionally 15 undone takes.
-- ARGV: 1 id, 2 token, 3 how long to remember the settlement (ms), 4 the queue's wake
-- channel (a follow-up made ready wakes the idle takers); with KEYS[15], 5 how long to
-- remember the token there (ms).
-- A job pushed with a dedup id (its id starts with '~') drops its dedup entry, and a
-- keep-latest follow-up parked behind it becomes ready, in this script.
-- Returns 1 acked (or: this very delivery was settled already, so a retry after a lost
-- reply finds its own ack), 0 the lease ran out (or the job is gone), -1 another delivery
-- holds it.
-- Every key is read before any is written (a wrong type fails before any write), the
-- deliveries by the first write (HDEL fails on a wrong type before anything is written).
local now = now_ms()
local id, token = ARGV[1], ARGV[2]
local holder = redis.call('HGET', KEYS[2], id)
local drain = redis.call('HGET', KEYS[9], 'drain')
if string.byte(id, 1) == 126 then
  -- A job pushed with a dedup id: the keys its settlement may write, read first.
  redis.call('HLEN', KEYS[10])
  redis.call('HLEN', KEYS[11])
  redis.call('ZCARD', KEYS[12])
  local bad = bad_sequence(KEYS[13])
  if bad then
    return bad
  end
end
if KEYS[15] then
  -- The ack of a delivery whose take had an attempt that went unanswered: whatever the
  -- verdict, its token is remembered as undone (KEYS[15], for ARGV[5] ms), so that the
  -- attempt, if only delayed, takes nothing when it arrives. Every key is read first (the
  -- dedup keys, 10 to 13, just above, where the job has a dedup id; the counts are only
  -- added to, never failing the script).
  redis.call('ZCARD', KEYS[1])
  for i = 3, 7 do
    redis.call('HLEN', KEYS[i])
  end
  redis.call('ZCARD', KEYS[8])
  remember(KEYS[15], token, now, tonumber(ARGV[5]))
end
if holder ~= token then
  local settled = redis.call('ZSCORE', KEYS[8], token)
  if settled and tonumber(settled) > now then
    return 1
  end
  if holder then
    return -1
  end
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], id)
if (not expiry) or tonumber(expiry) <= now then
  return 0
end
redis.call('HLEN', KEYS[3])
local has_priority = redis.call('HEXISTS', KEYS[4], id) == 1
redis.call('HLEN', KEYS[6])
local has_base = redis.call('HEXISTS', KEYS[7], id) == 1
redis.call('ZCARD', KEYS[8])
if string.byte(id, 1) == 126 then
  -- A job pushed with a dedup id: its entry goes with it, and a follow-up parked behind it
  -- becomes ready (the deliveries read first; the dedup keys were, at the top).
  redis.call('HLEN', KEYS[5])
  if dedup_release(KEYS[10], KEYS[11], id, KEYS[3], KEYS[4], KEYS[12], KEYS[13], now) then
    notify(ARGV[4], '1')
  end
end
redis.call('HDEL', KEYS[5], id)
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id, id .. '\255')
if has_priority then
  redis.call('HDEL', KEYS[4], id)
end
redis.call('HDEL', KEYS[6], token, token .. ':e')
if has_base then
  redis.call('HDEL', KEYS[7], id)
end
remember(KEYS[8], token, now, tonumber(ARGV[3]))
counting(KEYS[14], now)
count('acked', 1)
if drain then
  notify(drain, '*')
end
return 1
