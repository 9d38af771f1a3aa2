-- The take scripts' reclaiming (dequeue.lua, ack_take.lua), on their KEYS: 1 ready,
-- 2 delayed, 3 payloads, 4 priorities, 5 sequence counter, 6 in flight, 7 leases,
-- 8 deliveries, 9 dead, 10 holders, 11 bases (and the counts that counting named).
-- base_of(id): the job's deliveries when it was last requeued from the dead list (0:
-- never), and its timeout in ms (a string; nil: none), kept as 'base:timeout' when it has one;
-- v: the stored value if the caller read it already (false: none), nil to read it here.
local function base_of(id, v)
  if v == nil then
    v = redis.call('HGET', KEYS[11], id)
  end
  if not v then
    return 0
  end
  local base, timeout = string.match(v, '^(%d+):(%d+)$')
  if base then
    return tonumber(base), timeout
  end
  return tonumber(v) or 0
end
-- overdue(now): the delayed jobs due and the jobs whose lease ran out (at most 1,000 of
-- each), as two lists.
local function overdue(now)
  local upto = string.format('%d', now)
  return redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', upto, 'LIMIT', '0', '1000'),
    redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', upto, 'LIMIT', '0', '1000')
end
-- reclaim(due, expired, max, now): the due delayed jobs back to ready; the jobs whose lease
-- ran out back to ready or, after max deliveries (counted from the job's base), to the dead
-- list (bury.lua: 'timed_out' when the lease ended at the delivery's hold limit, else
-- 'expired').
-- Call it only once every key it touches was read (a wrong type fails before any write):
-- ready, delayed, priorities, the sequence counter, in flight, leases, deliveries, dead,
-- holders, bases.
local function reclaim(due, expired, max, now)
  local function make_ready(id)
    local priority = tonumber(redis.call('HGET', KEYS[4], id)) or 0
    redis.call('ZADD', KEYS[1], ready_score(priority, KEYS[5]), id)
  end
  for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[2], id)
    make_ready(id)
  end
  for _, id in ipairs(expired) do
    local ended = tonumber(redis.call('ZSCORE', KEYS[6], id))
    redis.call('ZREM', KEYS[6], id)
    local token = redis.call('HGET', KEYS[7], id)
    local hold = nil
    if token then
      hold = redis.call('HGET', KEYS[10], token .. ':e')
      redis.call('HDEL', KEYS[10], token, token .. ':e')
    end
    redis.call('HDEL', KEYS[7], id)
    -- A grouped job (on the grouped keys): its slot in its group freed.
    group_freed(KEYS[1], id)
    local n = tonumber(redis.call('HGET', KEYS[8], id)) or 0
    if n - base_of(id) >= max then
      -- Timed out: its lease ended at its hold limit (the driver asks for a lease that ends
      -- 1 ms before it; whole ms), not before (its worker died or hung earlier).
      local timed_out = hold and ended and ended >= tonumber(hold) - 2
      bury(KEYS[9], id, timed_out and 'timed_out' or 'expired', now)
    else
      make_ready(id)
      count('retried', 1)
    end
    count('expired', 1)
  end
end
-- lease_args(s): a take's lease argument, '<visibility ms>' or '<visibility ms>:<slack
-- ms>' or '<visibility ms>:<slack ms>:<queue timeout ms>': the visibility, the slack (the
-- timeout's grace plus 2 ms) and the queue's timeout (nil: none). The bare visibility (a
-- queue without a timeout, with the default grace of 1 s: DEFAULT_SLACK_MS in
-- core/src/queue/mod.rs) has the default slack, 1002.
local function lease_args(s)
  local vis = tonumber(s)
  if vis then
    return vis, 1002
  end
  local slack, qt
  vis, slack, qt = string.match(s, '^(%d+):(%d+):?(%d*)$')
  return tonumber(vis), tonumber(slack), tonumber(qt)
end
-- hold_end(now, timeout, slack, qt): the hold limit, on this server's clock, of a delivery
-- taken now: the job's own timeout (a string, from base_of), else the queue's (qt), plus
-- the slack; nil without a timeout or a slack. No lease of that delivery, by its take, a
-- retry of it or an extension, however late it arrives, runs past it.
local function hold_end(now, timeout, slack, qt)
  local t = tonumber(timeout) or qt
  if t and slack then
    return now + t + slack
  end
end
-- left_of(e, now): the ms left to hold limit e from when the script runs, nil without one:
-- e - now less 1 (now is the clock rounded down: the script may run up to 1 ms later).
local function left_of(e, now)
  return e and math.max(e - now - 1, 0)
end
-- renewed_until(token, now, visibility): where a take's retry renews the lease of the
-- delivery leased to token: the visibility from now, but not past its hold limit (kept in
-- holders under '<token>:e'); and that hold limit (nil: none).
local function renewed_until(token, now, visibility)
  local upto = now + visibility
  local e = tonumber(redis.call('HGET', KEYS[10], token .. ':e'))
  if e and e < upto then
    return e, e
  end
  return upto, e
end
-- lease_next(id, token, now, visibility, e): leases ready job id to token until now +
-- visibility ms, or until e (its hold limit, kept beside its holder) if that is sooner;
-- returns its delivery number and lease expiry. The caller counts the take (a batch in one
-- count, an ack and take in one counter: ack_take.lua). Its first write is to the
-- deliveries (a script may let that write be the type check of the deliveries when it is
-- its first).
local function lease_next(id, token, now, visibility, e)
  local n = redis.call('HINCRBY', KEYS[8], id, '1')
  local upto = now + visibility
  if e and e < upto then
    upto = e
  end
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[6], string.format('%d', upto), id)
  redis.call('HSET', KEYS[7], id, token)
  if e then
    redis.call('HSET', KEYS[10], token, id, token .. ':e', e)
  else
    redis.call('HSET', KEYS[10], token, id)
  end
  return n, upto
end
-- handed(first, n, id, payload, base, timeout, left, at, now): the reply for a job handed
-- out as delivery n: {first, n, id, payload}, then
-- - for a job whose enqueue time is known (at: server ms, as text): its attempt since its
--   last requeue from the dead list (n - base; '' when it was never requeued: the attempt is
--   then the delivery), its own timeout ('' for none), the ms left to
--   its hold limit (left_of; '' for none), at, and how long ago at was (ms), as strings;
-- - else, for a delivery with a hold limit: its attempt, its own timeout ('' for none: the
--   queue's) and the ms left to the hold limit;
-- - else, for a job requeued from the dead list (base > 0) or pushed with a timeout: its
--   attempt, then its timeout if it has one.
local function handed(first, n, id, payload, base, timeout, left, at, now)
  if at then
    local waited = string.format('%d', math.max(now - tonumber(at), 0))
    local left_text = left and string.format('%d', left) or ''
    -- The attempt is the delivery for a job never requeued from the dead list: sent as ''
    -- then (the client reads it so), which spares formatting it.
    local attempt = base > 0 and string.format('%d', n - base) or ''
    return {first, n, id, payload, attempt, timeout or '', left_text, at, waited}
  end
  if left then
    return {first, n, id, payload, tostring(n - base), timeout or '', tostring(left)}
  end
  if timeout then
    return {first, n, id, payload, tostring(n - base), timeout}
  end
  if base > 0 then
    return {first, n, id, payload, tostring(n - base)}
  end
  return {first, n, id, payload}
end
-- job_of(id): the payload of job id (false: none) and when it was pushed (server ms as
-- text, kept in the payloads under id .. '\255'; false: not recorded), in one read.
local function job_of(id)
  local v = redis.call('HMGET', KEYS[3], id, id .. '\255')
  return v[1], v[2]
end
-- next_wait(now): ms until a delayed job is due or a lease runs out (at least 1), or -2
-- when neither holds a job.
local function next_wait(now)
  local next = -2
  for _, k in ipairs({KEYS[2], KEYS[6]}) do
    local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if first[2] then
      local ms = math.max(tonumber(first[2]) - now, 1)
      if next < 0 or ms < next then
        next = ms
      end
    end
  end
  return next
end
