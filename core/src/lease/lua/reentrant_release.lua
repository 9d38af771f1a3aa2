-- Release one hold of a reentrant lock; the last hold deletes the hash and announces it.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] op id, ARGV[3] release channel; optionally
-- KEYS[2] undone acquisitions and ARGV[4] how long to remember the acquisition (ms).
-- Returns 1 released (also for this very release sent again while the owner still holds
-- the lock: `<owner>:r` keeps the last release's op id), 0 this hold was gone (expired, or
-- released: a delayed copy of a release is never counted twice, so it never ends another
-- hold of the same owner), -1 another owner holds it. The op id is 'r' followed by the op id of the
-- acquisition whose hold it ends (recorded as `<owner>:h:<op>` by the acquire script).
local owner, op = ARGV[1], ARGV[2]
local count = redis.call('HGET', KEYS[1], owner)
-- The release of a hold whose acquisition had an attempt that went unanswered (KEYS[2]
-- given): remember the acquisition's op id for ARGV[4] ms, so that the attempt, if it was
-- only delayed and arrives after this, takes no effect. (The first write, to KEYS[2]
-- itself: a wrong type there fails before any write.)
if KEYS[2] then
  local t = redis.call('TIME')
  local now, keep = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('ZADD', KEYS[2], now + keep, string.sub(op, 2))
  if redis.call('PTTL', KEYS[2]) < keep then
    redis.call('PEXPIRE', KEYS[2], keep)
  end
end
if not count then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return -1
  end
  return 0
end
local hold = owner .. ':h:' .. string.sub(op, 2)
if redis.call('HEXISTS', KEYS[1], hold) == 0 then
  if redis.call('HGET', KEYS[1], owner .. ':r') == op then
    return 1
  end
  return 0
end
if tonumber(count) <= 1 then
  redis.call('DEL', KEYS[1])
  notify(ARGV[3], '1')
  return 1
end
redis.call('HINCRBY', KEYS[1], owner, -1)
redis.call('HDEL', KEYS[1], hold)
redis.call('HSET', KEYS[1], owner .. ':r', op)
return 1
