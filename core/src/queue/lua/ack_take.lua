-- Ack one job and take the next, in one round trip (a busy worker between two jobs).
-- KEYS: 1 ready, 2 delayed, 3 payloads, 4 priorities, 5 sequence counter, 6 in flight,
-- 7 leases, 8 deliveries, 9 dead, 10 holders, 11 bases, 12 settled, 13 undone takes,
-- 14 pauses (hash: field '*' the queue is paused, field 'drain' the channel a drain waiter
-- listens on; see pause.lua), 15 dedup ids, 16 the jobs' dedup entries (15 and 16 touched
-- only for an acked job pushed with a dedup id, its id starting with '~': its entry goes,
-- and a keep-latest follow-up parked behind it becomes ready, in this script;
-- core/src/queue/dedup.rs), 17 counts (the stem of the per-minute counts: count.lua).
-- ARGV: 1 id acked, 2 its token, 3 how long to remember the settlement (ms), 4 the next
-- token, 5 visibility timeout ms (with the hold limit's parts: lease_args in reclaim.lua),
-- 6 max deliveries, optionally 7 how long to remember the
-- acked token as undone (ms).
-- Returns {ack, delivery (1 or more), id, payload} (and, for a job requeued from the dead
-- list, its attempt since then as a fifth element) or {ack, 0, ms until a delayed job is
-- due or a lease runs out, or -2}; ack is 1 acked (or this delivery's settlement found: a retry),
-- 0 the lease ran out (or the job is gone), -1 another delivery holds it. The take part is
-- the take script's: a retry with the same next token gets the job leased to it, its lease
-- renewed from now. While the queue is paused the ack is done (announced on the drain
-- channel if one is recorded) and nothing is leased: {ack, 0, -2}.
-- Every key is read before any is written (a wrong type fails before any write): by the
-- reads the work needs where there are some, by a type-checking read otherwise, except the
-- deliveries when a write to them is the script's first (the ack's HDEL, or the lease's
-- HINCRBY when nothing was acked or reclaimed): that write fails on a wrong type before
-- anything is written. Jobs due or whose lease ran out (rare on a busy queue) are read for
-- in full first.
local now = now_ms()
counting(KEYS[17], now)
local id, token, next_token = ARGV[1], ARGV[2], ARGV[4]
local visibility, slack, queue_timeout = lease_args(ARGV[5])
local holder = redis.call('HGET', KEYS[7], id)
local mine = redis.call('HGET', KEYS[10], next_token)
local was_undone = redis.call('ZSCORE', KEYS[13], next_token)
local pause = redis.call('HMGET', KEYS[14], '*', 'drain')
local due, expired = overdue(now)
local top = redis.call('ZRANGE', KEYS[1], '0', '0')
local reclaiming = #due > 0 or #expired > 0
-- Whether the ack waits to be counted with the take (see the ack below).
local paired = false
-- The ack's verdict. A job leased to this token is in flight; its lease ran out when it is
-- among the expired (read in full below 1,000 of them, asked for otherwise).
local acking, settled = false, nil
if holder == token then
  if #expired < 1000 then
    acking = true
    for _, j in ipairs(expired) do
      if j == id then
        acking = false
        break
      end
    end
  else
    local expiry = redis.call('ZSCORE', KEYS[6], id)
    acking = expiry ~= false and tonumber(expiry) > now
  end
else
  settled = redis.call('ZSCORE', KEYS[12], token)
end
-- The next job's payload, read now (read again below if jobs are made ready first).
local payload, at = false, false
if top[1] then
  payload, at = job_of(top[1])
else
  redis.call('HLEN', KEYS[3])
end
local has_priority, has_base, next_base = false, false, nil
if acking then
  -- The acked job's priority and base, if it has any (most have neither: nothing to
  -- delete), and the next job's base in the same read; the settlements, added to.
  has_priority = redis.call('HEXISTS', KEYS[4], id) == 1
  if top[1] then
    local bases = redis.call('HMGET', KEYS[11], id, top[1])
    has_base = bases[1] ~= false
    next_base = bases[2]
  else
    has_base = redis.call('HEXISTS', KEYS[11], id) == 1
  end
  redis.call('ZCARD', KEYS[12])
end
if reclaiming then
  if not acking then
    redis.call('HLEN', KEYS[4])
    redis.call('HLEN', KEYS[8])
    redis.call('HLEN', KEYS[11])
  end
  redis.call('LLEN', KEYS[9])
  local bad = bad_sequence(KEYS[5])
  if bad then
    return bad
  end
end
if acking and string.byte(id, 1) == 126 then
  -- A job pushed with a dedup id: the keys its ack may write, read before any write.
  redis.call('HLEN', KEYS[15])
  redis.call('HLEN', KEYS[16])
  local bad = bad_sequence(KEYS[5])
  if bad then
    return bad
  end
end
-- The acked delivery's take had an attempt that went unanswered (ARGV[7] given): its
-- token is remembered as undone for ARGV[7] ms whatever the verdict, so that the attempt,
-- if only delayed, takes nothing when it arrives. (Every key was read above but the
-- deliveries and, when nothing was acked or reclaimed, the bases: read them first.)
if ARGV[7] then
  redis.call('HLEN', KEYS[8])
  redis.call('HLEN', KEYS[11])
  local keep = tonumber(ARGV[7])
  -- Tokens whose time has passed are dropped first (as the prelude's helper does): the
  -- key's expiry is pushed out by every such write, so it must not keep what no longer
  -- counts.
  redis.call('ZREMRANGEBYSCORE', KEYS[13], '-inf', now)
  redis.call('ZADD', KEYS[13], now + keep, token)
  if redis.call('PTTL', KEYS[13]) < keep then
    redis.call('PEXPIRE', KEYS[13], keep)
  end
end
-- The ack.
local ack
if acking then
  if string.byte(id, 1) == 126 then
    -- A job pushed with a dedup id: its entry goes with it, and a follow-up parked behind
    -- it becomes ready (the deliveries read first; the dedup keys and the sequence counter
    -- were, above; the take below sees it).
    redis.call('HLEN', KEYS[8])
    if dedup_release(KEYS[15], KEYS[16], id, KEYS[3], KEYS[4], KEYS[1], KEYS[5], now) then
      -- (The next job may be the follow-up now: its base is read again below.)
      top = redis.call('ZRANGE', KEYS[1], '0', '0')
      if top[1] then
        payload, at = job_of(top[1])
      end
      next_base = nil
    end
  end
  redis.call('HDEL', KEYS[8], id)
  redis.call('ZREM', KEYS[6], id)
  redis.call('HDEL', KEYS[7], id)
  redis.call('HDEL', KEYS[3], id, id .. '\255')
  if has_priority then
    redis.call('HDEL', KEYS[4], id)
  end
  redis.call('HDEL', KEYS[10], token, token .. ':e')
  if has_base then
    redis.call('HDEL', KEYS[11], id)
  end
  -- Counted with the take below when it takes a job (one 'acked_taken' counter for both,
  -- read back as one of each: counts.lua), else on its own where the script returns.
  paired = true
  -- Remembered for ARGV[3] ms; the key lives as long as its latest member. Members whose
  -- time has passed count for nothing; they are dropped on the acks of one millisecond in
  -- 64 (by the clock), so that a busy queue does not pay for it on every job.
  local keep = tonumber(ARGV[3])
  if now % 64 == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[12], '-inf', string.format('%d', now))
  end
  redis.call('ZADD', KEYS[12], string.format('%d', now + keep), token)
  redis.call('PEXPIRE', KEYS[12], ARGV[3])
  if pause[2] then
    notify(pause[2], '*')
  end
  ack = 1
elseif settled and tonumber(settled) > now then
  ack = 1
elseif holder and holder ~= token then
  ack = -1
else
  ack = 0
end
-- The take.
if was_undone and tonumber(was_undone) > now then
  if paired then
    count('acked', 1)
  end
  return {ack, 0, -2}
end
local expiry = mine and redis.call('HGET', KEYS[7], mine) == next_token
    and tonumber(redis.call('ZSCORE', KEYS[6], mine) or '0')
if expiry and expiry > now then
  -- A retry: the lease runs for the visibility timeout from now at least, since the taker
  -- counts its validity from this attempt's send (the first attempt's lease may end up to
  -- a reply timeout earlier). Never shortened (a late copy of the take after an extend).
  local n = tonumber(redis.call('HGET', KEYS[8], mine)) or 1
  local payload, at = job_of(mine)
  local base, timeout = base_of(mine)
  local upto, e = renewed_until(next_token, now, visibility)
  if expiry < upto then
    redis.call('ZADD', KEYS[6], upto, mine)
  end
  if paired then
    count('acked', 1)
  end
  return handed(ack, n, mine, payload or '', base, timeout, left_of(e, now), at, now)
end
if reclaiming then
  reclaim(due, expired, tonumber(ARGV[6]), now)
  top = redis.call('ZRANGE', KEYS[1], '0', '0')
  if top[1] then
    payload, at = job_of(top[1])
  end
  next_base = nil
end
if pause[1] then
  if paired then
    count('acked', 1)
  end
  return {ack, 0, -2}
end
if top[1] then
  -- Read before the lease's writes (bases was read above when anything was written).
  local base, timeout = base_of(top[1], next_base)
  local e = hold_end(now, timeout, slack, queue_timeout)
  local n = lease_next(top[1], next_token, now, visibility, e)
  if paired then
    count('acked_taken', 1)
  else
    count('taken', 1)
  end
  return handed(ack, n, top[1], payload or '', base, timeout, left_of(e, now), at, now)
end
if paired then
  count('acked', 1)
end
return {ack, 0, next_wait(now)}
