-- Cancel a job, wherever it waits or runs. KEYS: 1 ready, 2 delayed, 3 payloads (and the
-- enqueue times beside them, id .. '\255': dropped with a removed job, kept with a dead
-- one as every dead job keeps it),
-- 4 priorities, 5 in flight, 6 leases, 7 holders, 8 deliveries, 9 bases, 10 dead,
-- 11 reasons, 12 cancelled (zset token -> until when the holder's renewal answers
-- "cancelled", ms), 13 cancel messages (hash token -> the message), 14 dedup ids, 15 the
-- jobs' dedup entries (14 and 15 touched only for a job pushed with a dedup id, removed),
-- 16 counts (a job sent to the dead list counts as dead), 17 pauses (hash; field 'drain':
-- the channel a drain waiter listens on, announced on when a job in flight is cancelled).
-- ARGV: 1 id, 2 message, 3 'dead' (the job goes to the dead list, its reason the message)
-- or 'remove' (forgotten), 4 the channel of cancel messages, 5 how long past the job's
-- lease the mark is kept (ms), 6 the queue's wake channel (a group slot freed or a
-- keep-latest follow-up made ready wakes the idle takers).
-- Returns 1 a waiting or delayed job cancelled, 2 a job in flight cancelled (its lease
-- ended, its holder told by a message on the channel, the payload its token, and at its next
-- renewal), 0 no such job waiting, delayed or in flight (done, dead or never pushed).
-- Every key is read before any is written (a wrong type fails before any write).
local id, message = ARGV[1], ARGV[2]
local in_ready = redis.call('ZSCORE', KEYS[1], id)
-- A grouped job ('<group>\31<id>', on the grouped keys, whose ready set is '...:q:g:ready')
-- may wait in its group's own ready set ('...:q:g:r:<group>'); in flight, it holds a slot
-- in its group's index ('...:q:g:i:<group>'), freed with its lease (group_free.lua).
local group_ready, in_group, group_sorted, group_waiting
local sep = string.find(id, '\31', 1, true)
if sep and string.sub(KEYS[1], -8) == ':g:ready' then
  local stem, g = string.sub(KEYS[1], 1, -6), string.sub(id, 1, sep - 1)
  group_ready = stem .. 'r:' .. g
  -- The count of jobs waiting in their groups (group_push.lua).
  group_sorted = stem .. 'sorted'
  group_waiting = tonumber(redis.call('GET', group_sorted) or '0') or 0
  in_group = redis.call('ZSCORE', group_ready, id)
  redis.call('ZCARD', stem .. 'i:' .. g)
end
local in_delayed = redis.call('ZSCORE', KEYS[2], id)
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
local expiry = redis.call('ZSCORE', KEYS[5], id)
local token = redis.call('HGET', KEYS[6], id)
redis.call('HLEN', KEYS[7])
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
redis.call('LLEN', KEYS[10])
redis.call('HLEN', KEYS[11])
redis.call('ZCARD', KEYS[12])
redis.call('HLEN', KEYS[13])
local drain = redis.call('HGET', KEYS[17], 'drain')
if string.byte(id, 1) == 126 then
  redis.call('HLEN', KEYS[14])
  redis.call('HLEN', KEYS[15])
end
local outcome, wake
if in_ready or in_delayed or in_group then
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  if in_group then
    redis.call('ZREM', group_ready, id)
    if group_waiting > 0 then
      redis.call('INCRBY', group_sorted, -1)
    end
  end
  outcome = 1
elseif expiry or token then
  local now = now_ms()
  redis.call('ZREM', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
  wake = group_freed(KEYS[1], id)
  if token then
    redis.call('HDEL', KEYS[7], token, token .. ':e')
    -- Marks of cancels whose time has passed are dropped with their messages, at most 64
    -- a cancel (a cancel adds one: the sweep keeps up, at a bounded cost).
    local ended = redis.call('ZRANGEBYSCORE', KEYS[12], '-inf', now, 'LIMIT', 0, 64)
    for _, old in ipairs(ended) do
      redis.call('HDEL', KEYS[13], old)
      redis.call('ZREM', KEYS[12], old)
    end
    local left = math.max((tonumber(expiry) or now) - now, 0)
    local keep = left + tonumber(ARGV[5])
    remember(KEYS[12], token, now, keep, true)
    redis.call('HSET', KEYS[13], token, message)
    if redis.call('PTTL', KEYS[13]) < keep then
      redis.call('PEXPIRE', KEYS[13], keep)
    end
  end
  outcome = 2
else
  return 0
end
if ARGV[3] == 'dead' then
  local now = now_ms()
  redis.call('HSET', KEYS[11], id, 'cancelled: ' .. message)
  counting(KEYS[16], now)
  if bury(KEYS[10], id, 'cancelled', now) then
    wake = true
  end
else
  if string.byte(id, 1) == 126 then
    -- A job pushed with a dedup id: its entry goes with it, as the deletion of a dead job
    -- drops it; a keep-latest follow-up parked behind it (answered Queued) is made ready
    -- and holds the dedup id in its place (to the dead list, bury does the same).
    local p = string.sub(KEYS[10], 1, -5)
    if dedup_release(KEYS[14], KEYS[15], id, KEYS[3], KEYS[4], KEYS[1], p .. 'seq', now_ms()) then
      wake = true
    end
  end
  redis.call('HDEL', KEYS[3], id, id .. '\255')
  redis.call('HDEL', KEYS[4], id)
  redis.call('HDEL', KEYS[8], id)
  redis.call('HDEL', KEYS[9], id)
  redis.call('HDEL', KEYS[11], id)
end
if outcome == 2 and token then
  notify(ARGV[4], token)
end
if outcome == 2 and drain then
  notify(drain, '*')
end
if wake then
  notify(ARGV[6], '1')
end
return outcome
