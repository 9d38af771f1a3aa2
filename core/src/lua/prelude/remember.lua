-- remember(key, member, now, keep): keeps member in the zset key for keep ms from now (ms),
-- dropping the members whose time has passed; the key lives at least that long. On 7.0+
-- PEXPIRE GT moves the expiry later in one call (the usual case: the same keep, later);
-- GT counts a key without expiry as lasting for ever, so a new key is given one after PTTL.
-- (Integers go to redis.call as text: see ready_score.)
-- With `swept` true the caller drops the ended members itself (with what goes with them).
local function remember(key, member, now, keep, swept)
  local keep_text = string.format('%d', keep)
  if not swept then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
  end
  redis.call('ZADD', key, string.format('%d', now + keep), member)
  if redis.REDIS_VERSION_NUM and redis.call('PEXPIRE', key, keep_text, 'GT') == 1 then
    return
  end
  if redis.call('PTTL', key) < keep then
    redis.call('PEXPIRE', key, keep_text)
  end
end
