-- remember(key, member, now, keep): keeps member in the zset key for keep ms from now (ms),
-- dropping the members whose time has passed; the key lives at least that long.
local function remember(key, member, now, keep)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  redis.call('ZADD', key, now + keep, member)
  if redis.call('PTTL', key) < keep then
    redis.call('PEXPIRE', key, keep)
  end
end
