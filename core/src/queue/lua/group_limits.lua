-- Set or clear flow limits of a grouped queue. KEYS: 1 limits (hash; see group_take.lua),
-- 2 ring, 3 rate-blocked groups, 4 full groups. ARGV: 1 field ('*' the defaults of every
-- group, 'g:<group>' one group's own, '!' the whole queue's), 2 "concurrency interval_us
-- tolerance_us max_size" (0 = none) or '' to clear, 3 channel.
-- Groups set aside as full are looked at again by the next take (a new limit
-- may let them run), rate states start afresh (below), and idle takers are woken.
-- Returns 1.
redis.call('HLEN', KEYS[1])
for i = 2, 4 do
  redis.call('ZCARD', KEYS[i])
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
for _, g in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  redis.call('ZADD', KEYS[4], 0, g)
end
-- A rate takes effect at the next take: the rate state of what the field limits starts
-- afresh, and a group blocked by the old rate comes back to the ring now (its old slot is
-- not waited out). A group's own keys are named after the ring, as group_take.lua names
-- them (every key of the queue shares its hash tag).
local stem = string.sub(KEYS[2], 1, -5)
local turn = tonumber(redis.call('GET', stem .. 'turn') or '0') or 0
local function unblock(g)
  redis.call('DEL', stem .. 't:' .. g)
  if redis.call('ZREM', KEYS[3], g) == 1 then
    redis.call('ZADD', KEYS[2], turn, g)
  end
end
local field = ARGV[1]
if field == '!' then
  redis.call('DEL', stem .. 'rate')
elseif field == '*' then
  for _, g in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    unblock(g)
  end
elseif string.sub(field, 1, 2) == 'g:' then
  unblock(string.sub(field, 3))
end
notify(ARGV[3], '*')
return 1
