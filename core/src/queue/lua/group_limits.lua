-- Set or clear flow limits of a grouped queue. KEYS: 1 limits (hash; see group_take.lua),
-- 2 ring, 3 rate-blocked groups, 4 full groups. ARGV: 1 field ('*' the defaults of every
-- group, 'g:<group>' one group's own, '!' the whole queue's), 2 "concurrency interval_us
-- tolerance_us max_size" (0 = none) or '' to clear, 3 channel.
-- Groups set aside as full are looked at again by the next take (a new limit
-- may let them run), and idle takers are woken. Returns 1.
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
notify(ARGV[3], '*')
return 1
