-- Set or clear flow limits of a grouped queue. KEYS: 1 limits (hash; see group_take.lua),
-- 2 ring, 3 rate-blocked groups, 4 full groups, 5 and 6 the full and the rate-blocked
-- groups to look at again (group_take.lua). ARGV: 1 field ('*' the defaults of every
-- group, 'g:<group>' one group's own, '!' the whole queue's), 2 "concurrency interval_us
-- tolerance_us max_size" (0 = none) or '' to clear, 3 channel.
-- A change takes effect at the next take: a group's own limits bring it back to the ring
-- now, its rate state started afresh; the defaults move the sets of full and rate-blocked
-- groups whole (RENAME: the cost does not grow with them) to be looked at again by the
-- takes, 16 a take, a rate-blocked group's rate state started afresh then; the whole
-- queue's rate state starts afresh. Idle takers are woken.
-- Returns 1.
redis.call('HLEN', KEYS[1])
for i = 2, 6 do
  redis.call('ZCARD', KEYS[i])
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local stem = string.sub(KEYS[2], 1, -5)
local turn = tonumber(redis.call('GET', stem .. 'turn') or '0') or 0
-- recheck(from, to): every group of set `from` is to be looked at again. Whole when `to` is
-- empty (a rename); else (a change not yet worked through) at most 1,000 of them, and the
-- others at the time they were set aside until.
local function recheck(from, to)
  if redis.call('EXISTS', to) == 0 then
    if redis.call('EXISTS', from) == 1 then
      redis.call('RENAME', from, to)
    end
    return
  end
  for _, g in ipairs(redis.call('ZRANGE', from, 0, 999)) do
    redis.call('ZREM', from, g)
    redis.call('ZADD', to, 0, g)
  end
end
local field = ARGV[1]
if field == '!' then
  redis.call('DEL', stem .. 'rate')
elseif field == '*' then
  recheck(KEYS[4], KEYS[5])
  recheck(KEYS[3], KEYS[6])
elseif string.sub(field, 1, 2) == 'g:' then
  local g = string.sub(field, 3)
  redis.call('DEL', stem .. 't:' .. g)
  if redis.call('ZREM', KEYS[3], g) + redis.call('ZREM', KEYS[4], g) > 0 then
    redis.call('ZADD', KEYS[2], turn, g)
  end
end
notify(ARGV[3], '*')
return 1
