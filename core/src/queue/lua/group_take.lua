-- Take the next grouped job on a lease: round robin among the groups with ready jobs, each
-- group under its concurrency and rate limits, the whole set of groups under the queue's.
-- KEYS: 1 staging (zset id -> ready score: jobs made ready again by a nack, a lease that ran
-- out or a given-back take, sorted into their groups here), 2 delayed, 3 payloads,
-- 4 priorities, 5 sequence counter, 6 in flight (zset id -> lease expiry ms), 7 leases,
-- 8 deliveries, 9 dead, 10 holders, 11 bases, 12 undone takes (the take script's keys, for
-- the shared reclaiming), 13 ring (zset group -> turn it was last served: the groups with
-- ready jobs that may be eligible), 14 rate-blocked groups (zset group -> until ms),
-- 15 full groups (zset group -> ms until the first of its leases runs out; an ack frees
-- them sooner), 16 limits (hash: '*' the defaults, 'g:<group>' a group's own, '!' the
-- whole queue's: "concurrency interval_us tolerance_us max_size", 0 = none), 17 turn
-- counter, 18 the queue's rate state (GCRA time), 19 pauses (hash: '*' the whole queue,
-- 'g:<group>' one group), 20 paused groups set aside (zset group -> 0), 21 counts
-- (count.lua: taken, and what the reclaiming moves), 22 and 23 the full and the
-- rate-blocked groups to look at again after a change of limits (group_limits.lua: 16 a
-- take come back to the ring, a rate-blocked one's rate state started afresh).
-- A group's own keys are named after KEYS[13] without its 'ring': 'r:<group>' its ready
-- jobs (zset id -> ready score), 'i:<group>' its leased jobs (zset id -> lease expiry at
-- the take, checked against the in-flight zset), 't:<group>' its rate state.
-- A job id is '<group>\31<id>'.
-- ARGV: 1 lease token, 2 visibility timeout ms (with the hold limit's parts: lease_args in
-- reclaim.lua), 3 max deliveries.
-- Returns what the take script returns: {1, delivery, id, payload[, attempt...]} or
-- {0, ms until something may change (a delayed job due, a lease running out, a group's
-- rate or block ending), or -2}.
-- A group's rate slot is reserved ahead: a take that finds its group's next slot at most
-- RESERVE_US away (GROUP_RESERVE in core/src/queue/groups.rs; at most one interval of the
-- group's rate, so that a group has about one booking at a time) leases the job now and books
-- that slot (the GCRA time moves from the slot, not from the take, so a take that comes a
-- little early or late loses nothing of the rate); its reply's tail then has six items,
-- the sixth the µs from the take's run to the slot, when the job may start (the taker waits
-- it out). The booking is kept in '<stem>s:<token>' (µs, until the slot) for a retry after
-- a lost reply, which is told what is left of it. A blocked group comes back to the ring
-- that margin before its slot, so that an idle taker's wake-up and round trip fall inside it.
-- The whole queue's rate is booked the same way (its next slot at most RESERVE_US and one of
-- its intervals away), and a blocked queue is looked at again that margin before its slot;
-- a take that books both starts at the later slot, each rate's time moved as from there.
local RESERVE_US = 10000
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(us / 1000)
counting(KEYS[21], now)
local token = ARGV[1]
local stem = string.sub(KEYS[13], 1, -5)
-- reply(n, id, payload, base, timeout, left, at, start): handed's reply, with the wait until
-- a booked slot (µs from us) as a sixth item of its tail when there is one.
local function reply(n, id, payload, base, timeout, left, at, start)
  if not start then
    return handed(1, n, id, payload, base, timeout, left, at, now)
  end
  local waited = at and string.format('%d', math.max(now - tonumber(at), 0)) or ''
  return {1, n, id, payload, string.format('%d', n - base), timeout or '',
    left and string.format('%d', left) or '', at or '', waited, string.format('%d', start)}
end
local visibility, slack, queue_timeout = lease_args(ARGV[2])
local undone = redis.call('ZSCORE', KEYS[12], token)
local mine = redis.call('HGET', KEYS[10], token)
if undone and tonumber(undone) > now then
  return {0, -2}
end
local expiry = mine and redis.call('HGET', KEYS[7], mine) == token
    and tonumber(redis.call('ZSCORE', KEYS[6], mine) or '0')
if expiry and expiry > now then
  -- A retry after a lost reply: the job leased to this token, its lease renewed.
  local n = tonumber(redis.call('HGET', KEYS[8], mine)) or 1
  local payload, at = job_of(mine)
  local base, timeout = base_of(mine)
  local upto, e = renewed_until(token, now, visibility)
  if expiry < upto then
    redis.call('ZADD', KEYS[6], upto, mine)
  end
  local booked = tonumber(redis.call('GET', stem .. 's:' .. token))
  local start = booked and booked > us and booked - us or nil
  return reply(n, mine, payload or '', base, timeout, left_of(e, now), at, start)
end
-- The whole queue paused: nothing is taken, nothing is written (resume wakes the takers).
if redis.call('HEXISTS', KEYS[19], '*') == 1 then
  return {0, -2}
end
-- Every key is read before any is written (a wrong type fails before any write).
for _, i in ipairs({3, 4, 7, 8, 10, 11, 16}) do
  redis.call('HLEN', KEYS[i])
end
for _, i in ipairs({1, 13, 14, 15, 20, 22, 23}) do
  redis.call('ZCARD', KEYS[i])
end
redis.call('LLEN', KEYS[9])
-- The count of jobs waiting in their groups (group_push.lua); never taken below 0 (jobs
-- sorted before the count was kept are not in it).
local waiting = tonumber(redis.call('GET', stem .. 'sorted') or '0') or 0
local bad = bad_sequence(KEYS[5])
if bad then
  return bad
end
local turn = tonumber(redis.call('GET', KEYS[17]) or '0')
if not turn then
  return redis.error_reply('ERR the turn counter ' .. KEYS[17] .. ' is not a number')
end
local function limits(field)
  local text = redis.call('HGET', KEYS[16], field)
  if not text then
    return nil
  end
  local c, i, t = string.match(text, '^(%d+) (%d+) (%d+)')
  return {c = tonumber(c) or 0, i = tonumber(i) or 0, t = tonumber(t) or 0}
end
local none = {c = 0, i = 0, t = 0}
local whole = limits('!') or none
local defaults = limits('*') or none
-- The group's rate state, checked (nil: it is not a time).
local function rate(key, l)
  if l.i == 0 then
    return true, nil, 0
  end
  return gcra(key, us, l.i, l.t, 1)
end
-- The whole queue's rate: allowed now (whole_tat: its time after this take, at us), its
-- next slot near enough to book (whole_start: µs to it, whole_tat: its time now), or
-- blocked for whole_wait µs.
local whole_tat, whole_wait, whole_start = nil, 0, nil
if whole.i > 0 then
  local allowed, tat, wait = rate(KEYS[18], whole)
  if allowed == nil then
    return redis.error_reply('WRONGTYPE the rate state ' .. KEYS[18] .. ' does not hold a time')
  end
  if allowed then
    whole_tat = tat
  elseif wait <= math.min(RESERVE_US, whole.i) then
    whole_tat, whole_start = tat, wait
  else
    whole_wait = wait
  end
end
-- Jobs due or whose lease ran out, back to staging (or dead after max deliveries).
local due, expired = overdue(now)
if #due > 0 or #expired > 0 then
  reclaim(due, expired, tonumber(ARGV[3]), now)
end
-- A group with ready jobs joins the ring, unless it is set aside (blocked, full, paused).
local function enlist(g)
  if not (redis.call('ZSCORE', KEYS[13], g) or redis.call('ZSCORE', KEYS[14], g)
      or redis.call('ZSCORE', KEYS[15], g) or redis.call('ZSCORE', KEYS[20], g)) then
    redis.call('ZADD', KEYS[13], turn, g)
  end
end
-- Staged jobs into their groups. A staged job freed a slot of its group (nacked, given
-- back, its lease ran out): a full group is looked at again.
local staged = redis.call('ZRANGE', KEYS[1], 0, 999, 'WITHSCORES')
local sorted = 0
for i = 1, #staged, 2 do
  local id = staged[i]
  redis.call('ZREM', KEYS[1], id)
  local at = string.find(id, '\31', 1, true)
  if at then
    local g = string.sub(id, 1, at - 1)
    redis.call('ZADD', stem .. 'r:' .. g, staged[i + 1], id)
    redis.call('ZREM', KEYS[15], g)
    enlist(g)
    sorted = sorted + 1
  end
end
if sorted > 0 then
  redis.call('INCRBY', stem .. 'sorted', sorted)
end
-- Groups whose block or first lease ended, and paused groups resumed, back to the ring.
for _, k in ipairs({KEYS[14], KEYS[15]}) do
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', k, '-inf', now, 'LIMIT', 0, 16)) do
    redis.call('ZREM', k, g)
    if redis.call('ZCARD', stem .. 'r:' .. g) > 0 then
      enlist(g)
    end
  end
end
for i = 22, 23 do
  for _, g in ipairs(redis.call('ZRANGE', KEYS[i], 0, 15)) do
    redis.call('ZREM', KEYS[i], g)
    if i == 23 then
      redis.call('DEL', stem .. 't:' .. g)
    end
    if redis.call('ZCARD', stem .. 'r:' .. g) > 0 then
      enlist(g)
    end
  end
end
for _, g in ipairs(redis.call('ZRANGE', KEYS[20], 0, 15)) do
  if redis.call('HEXISTS', KEYS[19], 'g:' .. g) == 0 then
    redis.call('ZREM', KEYS[20], g)
    if redis.call('ZCARD', stem .. 'r:' .. g) > 0 then
      enlist(g)
    end
  end
end
-- The whole queue's concurrency and rate.
local blocked_for = nil
if whole.c > 0 and redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf') >= whole.c then
  blocked_for = -1
end
if whole_wait > 0 then
  -- Looked at again that margin before its slot, which the take then books.
  local early = math.min(RESERVE_US, whole.i)
  blocked_for = math.max(math.ceil((whole_wait - early) / 1000), 1)
end
-- At most 16 groups are looked at: each is taken from, or set aside until it may be
-- eligible again, so the next take looks at others.
-- chosen_tat: the group's rate time after the take, at us; chosen_at: its time now, when
-- the take books its next slot (start: µs to it).
local chosen, chosen_l, chosen_tat, chosen_at, start = nil, nil, nil, nil, nil
if not blocked_for then
  for _, g in ipairs(redis.call('ZRANGE', KEYS[13], 0, 15)) do
    local l = limits('g:' .. g) or defaults
    local eligible = true
    if redis.call('ZCARD', stem .. 'r:' .. g) == 0 then
      redis.call('ZREM', KEYS[13], g)
      eligible = false
    elseif redis.call('HEXISTS', KEYS[19], 'g:' .. g) == 1 then
      redis.call('ZREM', KEYS[13], g)
      redis.call('ZADD', KEYS[20], 0, g)
      eligible = false
    end
    if eligible and l.c > 0 then
      -- Its leases: every ending of a lease frees its slot (group_free.lua; a lease that ran
      -- out, when reclaimed above), so the index counts the leases that run. Entries whose
      -- take-time expiry passed are checked against the in-flight set, at most 2 a look
      -- (renewed: their expiry copied; gone: dropped), so that an index written before
      -- every ending freed its slot empties too, at a bounded cost.
      local key = stem .. 'i:' .. g
      local live = redis.call('ZCARD', key)
      if live >= l.c then
        for _, old in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, 2)) do
          local e = tonumber(redis.call('ZSCORE', KEYS[6], old) or '0')
          if e > now then
            redis.call('ZADD', key, e, old)
          else
            redis.call('ZREM', key, old)
            live = live - 1
          end
        end
      end
      if live >= l.c then
        -- Set aside until the first of its leases may end (an ending brings it back sooner).
        local first = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) or now
        redis.call('ZREM', KEYS[13], g)
        redis.call('ZADD', KEYS[15], first, g)
        eligible = false
      end
    end
    if eligible then
      local allowed, tat, wait = rate(stem .. 't:' .. g, l)
      if allowed == nil then
        return redis.error_reply('WRONGTYPE the rate state of group ' .. g .. ' does not hold a time')
      end
      if allowed then
        chosen_tat = tat
      elseif wait <= math.min(RESERVE_US, l.i) then
        -- Its next slot is near: booked now, at the slot (as the GCRA would allow it then).
        chosen_at, start = tat, wait
      else
        redis.call('ZREM', KEYS[13], g)
        local early = math.min(RESERVE_US, l.i)
        redis.call('ZADD', KEYS[14], now + math.max(math.ceil((wait - early) / 1000), 1), g)
        eligible = false
      end
    end
    if eligible then
      chosen, chosen_l = g, l
      break
    end
  end
end
if chosen then
  local g = chosen
  local ready = stem .. 'r:' .. g
  local id = redis.call('ZRANGE', ready, 0, 0)[1]
  redis.call('ZREM', ready, id)
  if waiting + sorted > 0 then
    redis.call('INCRBY', stem .. 'sorted', -1)
  end
  local payload, at = job_of(id)
  local base, timeout = base_of(id)
  local e = hold_end(now, timeout, slack, queue_timeout)
  local n, upto = lease_next(id, token, now, visibility, e)
  count('taken', 1)
  -- Its leases' record, tidied: two whose lease ran out at the take are dropped (or their
  -- renewed expiry copied), so that it does not keep what no longer runs.
  local leased = stem .. 'i:' .. g
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', leased, '-inf', now, 'LIMIT', 0, 2)) do
    local e = tonumber(redis.call('ZSCORE', KEYS[6], old) or '0')
    if e > now then
      redis.call('ZADD', leased, e, old)
    else
      redis.call('ZREM', leased, old)
    end
  end
  redis.call('ZADD', leased, upto, id)
  -- The job starts at the later of the group's and the whole queue's booked slots (now
  -- when neither is booked): each rate's time moves as the GCRA would move it at that
  -- start, max(its time, start) + interval, so that a start later than one's own slot (held
  -- back by the other's) keeps that rate's spacing.
  if whole_start and (not start or whole_start > start) then
    start = whole_start
  end
  local from = us + (start or 0)
  if chosen_at then
    chosen_tat = math.max(chosen_at, from) + chosen_l.i
  elseif chosen_tat and start then
    chosen_tat = math.max(chosen_tat, from + chosen_l.i)
  end
  if chosen_tat then
    gcra_store(stem .. 't:' .. g, chosen_tat, us)
  end
  if start then
    redis.call('SET', stem .. 's:' .. token, string.format('%d', us + start), 'PX',
      string.format('%d', math.ceil(start / 1000) + 1))
  end
  if whole_tat then
    if whole_start then
      whole_tat = math.max(whole_tat, from) + whole.i
    elseif start then
      whole_tat = math.max(whole_tat, from + whole.i)
    end
    gcra_store(KEYS[18], whole_tat, us)
  end
  turn = turn + 1
  redis.call('SET', KEYS[17], turn)
  if redis.call('ZCARD', ready) > 0 then
    redis.call('ZADD', KEYS[13], turn, g)
  else
    redis.call('ZREM', KEYS[13], g)
  end
  return reply(n, id, payload or '', base, timeout, left_of(e, now), at, start)
end
-- Nothing taken: the time until something may change without a message.
local wait = next_wait(now)
local function sooner(ms)
  if ms and (wait < 0 or ms < wait) then
    wait = ms
  end
end
if blocked_for and blocked_for > 0 then
  sooner(blocked_for)
end
for _, k in ipairs({KEYS[14], KEYS[15]}) do
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if first[2] then
    sooner(math.max(tonumber(first[2]) - now, 1))
  end
end
if not blocked_for and redis.call('ZCARD', KEYS[13]) > 0 then
  -- More groups than were looked at: look again at once.
  sooner(1)
end
return {0, wait}
