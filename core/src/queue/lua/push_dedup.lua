-- Push one job under a dedup id (core/src/queue/dedup.rs).
-- KEYS: 1 ready, 2 delayed, 3 payloads, 4 priorities, 5 sequence counter, 6 in flight,
-- 7 dedup ids (hash dedup id -> the job holding it), 8 the jobs' entries (hash job id ->
-- '<debounce cap ms or 0>|<dedup id>'), 9 throttle windows (zset dedup id -> until ms),
-- 10 throttled jobs (hash dedup id -> job id), 11 counts (count.lua: a job queued, or
-- parked as a new follow-up, counts as pushed; a duplicate or a replaced payload does not).
-- ARGV: 1 mode ('u' until done, dead jobs block; 'l' until done, dead jobs do not block;
-- 't' throttle; 'd' debounce; 'k' keep latest), 2 the throttle's ttl or the debounce's
-- delay (ms), 3 the debounce's maximum wait (ms; 0: none), 4 delay ms (not debounce), 5 priority,
-- 6 channel, 7 dedup id, 8 the new job's id (starts with '~'), 9 payload.
-- Returns {1, id} queued (keep latest behind a job in flight: parked until that job is
-- acked), {0, id, state} a duplicate of job id (nothing written; state: 'ready',
-- 'delayed', 'in_flight', 'dead' or 'done'), {2, id, state} its payload replaced (keep
-- latest: the waiting job; state 'parked' for a follow-up parked behind a job in flight),
-- {3, id, 'delayed'} coalesced (debounce: payload replaced, due time moved).
-- Throttle entries live until their window ends, whatever becomes of their job (both keys
-- expire with the last window: nothing outlives it); the others live as long as their job
-- (ack, ack and take and the deletion of a dead job drop them: dedup_clear).
-- Every key is read before any is written (a wrong type fails before any write).
redis.call('ZCARD', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
redis.call('ZCARD', KEYS[6])
redis.call('HLEN', KEYS[7])
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[10])
local bad = bad_sequence(KEYS[5])
if bad then
  return bad
end
local mode, window, max_wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local delay, priority = tonumber(ARGV[4]), tonumber(ARGV[5])
local d, id, payload = ARGV[7], ARGV[8], ARGV[9]
local up, now = now_ms_up()
counting(KEYS[11], now)
-- Throttle windows that ended are dropped (with their jobs' names), at most 64 a push: a
-- push opens at most one, so the sweep keeps up, and its cost is bounded whatever the set
-- holds. This push's own window, if it ended, is dropped below in any case.
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now, 'LIMIT', 0, 64)) do
  redis.call('HDEL', KEYS[10], gone)
  redis.call('ZREM', KEYS[9], gone)
end
local own_until = tonumber(redis.call('ZSCORE', KEYS[9], d) or '')
if own_until and own_until <= now then
  redis.call('HDEL', KEYS[10], d)
  redis.call('ZREM', KEYS[9], d)
end
local function state_of(j)
  if redis.call('ZSCORE', KEYS[1], j) then
    return 'ready'
  elseif redis.call('ZSCORE', KEYS[2], j) then
    return 'delayed'
  elseif redis.call('ZSCORE', KEYS[6], j) then
    return 'in_flight'
  elseif redis.call('HEXISTS', KEYS[3], j) == 1 then
    return 'dead'
  end
  return 'done'
end
-- The new job: ready, or delayed until `due`.
local function queue_new(due, cap)
  redis.call('HSET', KEYS[3], id, payload, id .. '\255', string.format('%d', now))
  count('pushed', 1)
  if priority > 0 then
    redis.call('HSET', KEYS[4], id, priority)
  end
  if due then
    redis.call('ZADD', KEYS[2], due, id)
  else
    redis.call('ZADD', KEYS[1], ready_score(priority, KEYS[5]), id)
  end
  notify(ARGV[6], '1')
  if mode ~= 't' then
    redis.call('HSET', KEYS[7], d, id)
    redis.call('HSET', KEYS[8], id, cap .. '|' .. d)
  end
  return {1, id}
end
local due = nil
if delay > 0 then
  due = up + delay
end
if mode == 't' then
  local j = redis.call('HGET', KEYS[10], d)
  if j then
    return {0, j, state_of(j)}
  end
  local out = queue_new(due, 0)
  -- The window ends at the clock rounded up plus the ttl, and is over once the clock
  -- rounded down reaches it: never before the ttl has passed since the first push ran.
  redis.call('ZADD', KEYS[9], up + window, d)
  redis.call('HSET', KEYS[10], d, id)
  -- Both keys last as long as their latest window (a key without expiry reads -1).
  for _, k in ipairs({KEYS[9], KEYS[10]}) do
    if redis.call('PTTL', k) < window + 1 then
      redis.call('PEXPIRE', k, window + 1)
    end
  end
  return out
end
local j = redis.call('HGET', KEYS[7], d)
local state = j and state_of(j)
if state == 'done' then
  -- Not reached while every script that removes a job drops its entry; an entry left by a
  -- job removed otherwise (a key deleted by hand) is replaced.
  j = nil
end
if mode == 'u' or mode == 'l' then
  if j and not (mode == 'l' and state == 'dead') then
    return {0, j, state}
  end
  return queue_new(due, 0)
elseif mode == 'd' then
  if j and state == 'delayed' then
    local entry = redis.call('HGET', KEYS[8], j) or '0|'
    local cap = tonumber(string.sub(entry, 1, string.find(entry, '|', 1, true) - 1)) or 0
    local at = up + window
    if cap > 0 and at > cap then
      at = cap
    end
    redis.call('HSET', KEYS[3], j, payload)
    redis.call('ZADD', KEYS[2], at, j)
    return {3, j, 'delayed'}
  end
  local cap = 0
  if max_wait > 0 then
    cap = up + max_wait
  end
  return queue_new(up + window, cap)
elseif mode == 'k' then
  local parked = '>' .. d
  local p = redis.call('HGET', KEYS[8], parked)
  -- This push's own job holds the id (the push sent again after a lost or late reply, its
  -- job pushed by the first copy, maybe taken since): answered as the first copy was,
  -- nothing written (it would otherwise park the job behind itself and run it twice).
  if j == id and (state == 'ready' or state == 'delayed' or state == 'in_flight') then
    return {1, id}
  end
  if j and (state == 'ready' or state == 'delayed') then
    -- (A follow-up parked behind it while it ran, before its lease ran out or it was given
    -- back: superseded, this job carries the latest payload.)
    if p then
      redis.call('HDEL', KEYS[8], parked)
    end
    redis.call('HSET', KEYS[3], j, payload)
    return {2, j, state}
  end
  -- The follow-up of a job in flight: parked in the dedup state (never in the ready set),
  -- made ready by the script that acks that job (ack.lua, ack_take.lua), so that the two
  -- never run side by side. A parked follow-up gets each later push's payload.
  if j and state == 'in_flight' then
    local out = {1, id}
    if p then
      local bar = string.find(p, '|', 1, true)
      local bar2 = string.find(p, '|', bar + 1, true)
      id = string.sub(p, bar2 + 1, bar2 + tonumber(string.sub(p, bar + 1, bar2 - 1)))
      out = {2, id, 'parked'}
    else
      count('pushed', 1)
    end
    redis.call('HSET', KEYS[8], parked, priority .. '|' .. #id .. '|' .. id .. payload)
    return out
  end
  -- A follow-up parked behind a job that is no longer in flight and was not acked (dead, or
  -- back to waiting after its lease ran out and it went dead): this push supersedes it.
  if p then
    redis.call('HDEL', KEYS[8], parked)
  end
  return queue_new(due, 0)
end
return redis.error_reply('ERR unknown dedup mode ' .. mode)
