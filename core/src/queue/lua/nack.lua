-- Give a job back: retry it after a backoff, or after max deliveries put it on the dead
-- list. KEYS: 1 in flight, 2 leases, 3 delayed, 4 ready, 5 priorities, 6 sequence counter,
-- 7 deliveries, 8 dead, 9 holders, 10 bases, 11 settled (zset delivery token -> until when
-- its ack or nack is remembered, ms), 12 reasons. ARGV: 1 id, 2 token, 3 backoff ms,
-- 4 max deliveries (0: dead now), 5 channel, 6 how long to remember the settlement (ms),
-- 7 why it failed ('': not said). KEYS[13] pauses (hash; field 'drain': the channel a drain
-- waiter listens on, announced on by a nack; see pause.lua), KEYS[14] counts. Optionally
-- KEYS[15] undone takes and ARGV[8] how long to remember the token there (ms).
-- Returns 1 retried, 2 dead (the reason kept, the death recorded: bury.lua), 3 this very delivery was settled already (a
-- retry after a lost reply finds its own nack, retried or dead), 0 the lease ran out (or the
-- job is gone), -1 another delivery holds it.
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('ZCARD', KEYS[1])
redis.call('HLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('ZCARD', KEYS[4])
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[7])
redis.call('LLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
redis.call('HLEN', KEYS[10])
redis.call('ZCARD', KEYS[11])
redis.call('HLEN', KEYS[12])
local drain = redis.call('HGET', KEYS[13], 'drain')
if KEYS[15] then
  redis.call('ZCARD', KEYS[15])
end
local bad = bad_sequence(KEYS[6])
if bad then
  return bad
end
local up, now = now_ms_up()
if KEYS[15] then
  -- The nack of a delivery whose take had an attempt that went unanswered: whatever the
  -- verdict, its token is remembered as undone, so that the attempt, if only delayed, takes
  -- nothing when it arrives.
  remember(KEYS[15], ARGV[2], now, tonumber(ARGV[8]))
end
local id = ARGV[1]
local holder = redis.call('HGET', KEYS[2], id)
if holder ~= ARGV[2] then
  local settled = redis.call('ZSCORE', KEYS[11], ARGV[2])
  if settled and tonumber(settled) > now then
    return 3
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
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[9], ARGV[2], ARGV[2] .. ':e')
-- A grouped job's slot is free now, whether it is retried or dead.
local group_back = group_freed(KEYS[4], id)
remember(KEYS[11], ARGV[2], now, tonumber(ARGV[6]))
counting(KEYS[14], now)
count('failed', 1)
if drain then
  notify(drain, '*')
end
local n = tonumber(redis.call('HGET', KEYS[7], id)) or 0
-- The base: deliveries when last requeued ('base:timeout' for a job with a timeout).
local base = tonumber(string.match(redis.call('HGET', KEYS[10], id) or '0', '^%d+')) or 0
if n - base >= tonumber(ARGV[4]) then
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[12], id, ARGV[7])
  end
  -- The library's timed_out says 'timed out' (or 'timed out: <the handler's error>').
  local timed_out = ARGV[7] == 'timed out' or string.sub(ARGV[7], 1, 11) == 'timed out: '
  local released = bury(KEYS[8], id, timed_out and 'timed_out' or 'failed', now)
  if group_back or released then
    notify(ARGV[5], '1')
  end
  return 2
end
local backoff = tonumber(ARGV[3])
if backoff > 0 then
  -- Due at the clock rounded up plus the backoff (rounded up by the caller): never early.
  redis.call('ZADD', KEYS[3], up + backoff, id)
else
  local priority = tonumber(redis.call('HGET', KEYS[5], id)) or 0
  redis.call('ZADD', KEYS[4], ready_score(priority, KEYS[6]), id)
end
count('retried', 1)
notify(ARGV[5], '1')
return 1
