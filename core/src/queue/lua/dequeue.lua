-- Take the next job on a lease. KEYS: 1 ready, 2 delayed, 3 payloads, 4 priorities,
-- 5 sequence counter, 6 in flight (zset id -> lease expiry ms), 7 leases (hash id ->
-- token), 8 deliveries (hash id -> count), 9 dead (list), 10 holders (hash token -> id),
-- 11 bases (hash id -> deliveries when last requeued from the dead list), 12 undone takes
-- (zset token -> until ms: a take given back after its reply was lost takes nothing if it
-- arrives late), 13 pauses (hash; field '*': the queue is paused, see pause.lua),
-- 14 counts (the stem of the per-minute counts: count.lua).
-- ARGV: 1 lease token, 2 visibility timeout ms (with the hold limit's parts: lease_args in
-- reclaim.lua), 3 max deliveries.
-- A retry after a lost reply (same token) gets the job it was leased, not another one, its
-- lease renewed to the visibility timeout from now.
-- First moves due delayed jobs and jobs whose lease ran out back to ready (or, after max
-- deliveries, to the dead list). Returns {1, delivery number, id, payload, and what
-- handed in reclaim.lua adds: attempt, timeout, hold limit, enqueue time and wait} or
-- {0, ms until a delayed job is due or a lease runs out, or -2}. While the queue is paused,
-- due and expired jobs are still made ready but nothing is leased: {0, -2} (the taker
-- sleeps until resume wakes it).
-- Every key is read before any is written (a wrong type fails before any write): by the
-- reads the work needs where there are some, by a type-checking read otherwise; only the
-- deliveries, when the lease is the first write (nothing reclaimed), are checked by that
-- write itself (HINCRBY fails on a wrong type before anything is written).
local now = now_ms()
counting(KEYS[14], now)
local token = ARGV[1]
local visibility, slack, queue_timeout = lease_args(ARGV[2])
local undone = redis.call('ZSCORE', KEYS[12], token)
local mine = redis.call('HGET', KEYS[10], token)
if undone and tonumber(undone) > now then
  return {0, -2}
end
local expiry = mine and redis.call('HGET', KEYS[7], mine) == token
    and tonumber(redis.call('ZSCORE', KEYS[6], mine) or '0')
if expiry and expiry > now then
  -- A retry: the lease runs for the visibility timeout from now at least, since the taker
  -- counts its validity from this attempt's send (the first attempt's lease may end up to
  -- a reply timeout earlier). Never shortened (a late copy of the take after an extend),
  -- never past the delivery's hold limit (a late copy after the timeout).
  -- What the reply needs is read before that write.
  local n = tonumber(redis.call('HGET', KEYS[8], mine)) or 1
  local payload, at = job_of(mine)
  local base, timeout = base_of(mine)
  local upto, e = renewed_until(token, now, visibility)
  if expiry < upto then
    redis.call('ZADD', KEYS[6], upto, mine)
  end
  return handed(1, n, mine, payload or '', base, timeout, left_of(e, now), at, now)
end
local paused = redis.call('HEXISTS', KEYS[13], '*') == 1
local due, expired = overdue(now)
local top = redis.call('ZRANGE', KEYS[1], '0', '0')
local reclaiming = #due > 0 or #expired > 0
if reclaiming then
  redis.call('HLEN', KEYS[3])
  redis.call('HLEN', KEYS[4])
  redis.call('HLEN', KEYS[7])
  redis.call('HLEN', KEYS[8])
  redis.call('LLEN', KEYS[9])
  redis.call('HLEN', KEYS[11])
  local bad = bad_sequence(KEYS[5])
  if bad then
    return bad
  end
  reclaim(due, expired, tonumber(ARGV[3]), now)
  top = redis.call('ZRANGE', KEYS[1], '0', '0')
end
if paused then
  return {0, -2}
end
if top[1] then
  local id = top[1]
  local payload, at = job_of(id)
  if not reclaiming then
    redis.call('HLEN', KEYS[7])
  end
  local base, timeout = base_of(id)
  local e = hold_end(now, timeout, slack, queue_timeout)
  local n = lease_next(id, token, now, visibility, e)
  count('taken', 1)
  return handed(1, n, id, payload or '', base, timeout, left_of(e, now), at, now)
end
return {0, next_wait(now)}
