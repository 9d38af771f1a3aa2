-- Push jobs into one group. KEYS: 1 delayed, 2 payloads, 3 priorities, 4 sequence counter,
-- 5 ring, 6 rate-blocked groups, 7 full groups, 8 paused groups set aside, 9 turn counter,
-- 10 limits (as in group_take.lua: a group's ready jobs are in the zset named after KEYS[5]
-- without its 'ring', then 'r:<group>'), 11 counts (count.lua).
-- ARGV: 1 delay ms (rounded up by the caller), 2 priority (0..255), 3 channel, 4 group,
-- then pairs of (id, payload); a job's id in the queue is '<group>\31<id>'.
-- Returns one character per job: '1' pushed, '0' duplicate (nothing written), '2' the
-- group holds its maximum of ready jobs (nothing written).
-- A job's enqueue time (server ms) is kept beside its payload, under id .. '\255' (as
-- push.lua keeps it; group_ack.lua drops it with the job).
-- '<stem>sorted' counts the jobs waiting in their groups' own ready sets (every script
-- that adds to or takes from one keeps it: group_take.lua, group_defer.lua, cancel.lua),
-- so that the grouped stats count them without walking the groups.
-- Every key is read before any is written (a wrong type fails before any write).
local delay, priority, g = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[4]
local ready = string.sub(KEYS[5], 1, -5) .. 'r:' .. g
redis.call('ZCARD', KEYS[1])
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
for i = 5, 8 do
  redis.call('ZCARD', KEYS[i])
end
local size = redis.call('ZCARD', ready)
redis.call('GET', string.sub(KEYS[5], 1, -5) .. 'sorted')
local bad = bad_sequence(KEYS[4])
if bad then
  return bad
end
local turn = tonumber(redis.call('GET', KEYS[9]) or '0') or 0
-- The most ready jobs the group may hold (0: no maximum).
local max = 0
local text = redis.call('HGET', KEYS[10], 'g:' .. g) or redis.call('HGET', KEYS[10], '*')
if text then
  max = tonumber(string.match(text, '^%d+ %d+ %d+ (%d+)')) or 0
end
local up, now = now_ms_up()
local now_text = string.format('%d', now)
local out, pushed, sorted = {}, 0, 0
for i = 5, #ARGV, 2 do
  local id = g .. '\31' .. ARGV[i]
  if max > 0 and delay == 0 and size >= max then
    out[#out + 1] = '2'
  elseif redis.call('HSETNX', KEYS[2], id, ARGV[i + 1]) == 0 then
    out[#out + 1] = '0'
  else
    redis.call('HSET', KEYS[2], id .. '\255', now_text)
    if priority > 0 then
      redis.call('HSET', KEYS[3], id, priority)
    end
    if delay > 0 then
      redis.call('ZADD', KEYS[1], up + delay, id)
    else
      redis.call('ZADD', ready, ready_score(priority, KEYS[4]), id)
      size = size + 1
      sorted = sorted + 1
    end
    pushed = pushed + 1
    out[#out + 1] = '1'
  end
end
if pushed > 0 and delay == 0 then
  -- The group joins the ring unless it is set aside (blocked, full, paused).
  if not (redis.call('ZSCORE', KEYS[5], g) or redis.call('ZSCORE', KEYS[6], g)
      or redis.call('ZSCORE', KEYS[7], g) or redis.call('ZSCORE', KEYS[8], g)) then
    redis.call('ZADD', KEYS[5], turn, g)
  end
end
if sorted > 0 then
  redis.call('INCRBY', string.sub(KEYS[5], 1, -5) .. 'sorted', sorted)
end
counting(KEYS[11], now)
count('pushed', pushed)
if pushed > 1 then
  notify(ARGV[3], '*')
elseif pushed > 0 then
  notify(ARGV[3], '1')
end
return table.concat(out)
