-- Pause, resume or drain a queue or one of its groups (the pause is read by
-- pause_state.lua, a read-only script).
-- KEYS: 1 pauses (hash: '*' the whole queue, 'g:<group id>' one group -> the server ms of
-- the pause; 'drain' -> the channel a drain waiter listens on), 2 in flight (zset id ->
-- lease expiry ms), 3 the queue's other in flight set (its grouped jobs' for the plain
-- keys, its plain jobs' for the grouped keys: a drain counts both).
-- A group's resume names its group's keys too: 4 the paused groups set aside (zset), 5 the
-- ring, 6 the turn counter, 7 the rate-blocked groups, 8 the full groups, 9 the group's
-- ready jobs ('...:q:g:r:<group>'): the group leaves the set aside and, with ready jobs,
-- joins the ring (unless blocked or full: it comes back from there by itself).
-- ARGV: 1 op ('pause', 'resume' or 'drain'), 2 the field ('*' or 'g:<id>'),
-- 3 the queue's wake channel (resume wakes every idle taker on it, and on 5), 4 the drain
-- channel, 5 the queue's other wake channel (plain or grouped).
-- pause: the field set to now unless already set (the first pause's time is kept); returns
-- 1 paused now, 0 already paused. resume: the field deleted (the queue's drain channel
-- too) and every idle taker woken; returns 1 resumed, 0 was not paused. drain: the queue
-- paused as by pause, the drain channel recorded (the settling scripts announce on it
-- while it is), and the jobs whose lease is live counted: returns {count, ms until the
-- first of their leases runs out, or -2}; at 0 the drain channel is dropped.
-- Every key is read before any is written (a wrong type fails before any write).
local op, field = ARGV[1], ARGV[2]
redis.call('HLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('ZCARD', KEYS[3])
local now = now_ms()
if op == 'pause' then
  return redis.call('HSETNX', KEYS[1], field, now)
end
if op == 'resume' then
  if KEYS[9] then
    for i = 4, 9 do
      redis.call(i == 6 and 'GET' or 'ZCARD', KEYS[i])
    end
  end
  local n = redis.call('HDEL', KEYS[1], field)
  if field == '*' then
    redis.call('HDEL', KEYS[1], 'drain')
  end
  if KEYS[9] then
    local g = string.sub(field, 3)
    redis.call('ZREM', KEYS[4], g)
    if redis.call('ZCARD', KEYS[9]) > 0 and not (redis.call('ZSCORE', KEYS[5], g)
        or redis.call('ZSCORE', KEYS[7], g) or redis.call('ZSCORE', KEYS[8], g)) then
      redis.call('ZADD', KEYS[5], tonumber(redis.call('GET', KEYS[6]) or '0') or 0, g)
    end
  end
  if n == 1 then
    notify(ARGV[3], '*')
    notify(ARGV[5], '*')
  end
  return n
end
if op == 'drain' then
  redis.call('HSETNX', KEYS[1], '*', now)
  local live = '(' .. now
  local count, soonest = 0, nil
  for i = 2, 3 do
    local n = redis.call('ZCOUNT', KEYS[i], live, '+inf')
    if n > 0 then
      count = count + n
      local first = redis.call('ZRANGEBYSCORE', KEYS[i], live, '+inf', 'LIMIT', 0, 1, 'WITHSCORES')
      local at = tonumber(first[2])
      if not soonest or at < soonest then
        soonest = at
      end
    end
  end
  if count == 0 then
    redis.call('HDEL', KEYS[1], 'drain')
    return {0, -2}
  end
  redis.call('HSET', KEYS[1], 'drain', ARGV[4])
  return {count, math.max(soonest - now, 1)}
end
return redis.error_reply('ERR unknown pause op')
