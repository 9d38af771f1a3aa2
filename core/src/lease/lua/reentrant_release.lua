-- Release one hold of a reentrant lock; the last hold deletes the hash and announces it.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] op id, ARGV[3] release channel.
-- Returns 1 released (a retried release with the same op id is not counted twice),
-- 0 the lock was gone (expired), -1 another owner holds it.
local owner, op = ARGV[1], ARGV[2]
local count = redis.call('HGET', KEYS[1], owner)
if not count then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return -1
  end
  return 0
end
if redis.call('HGET', KEYS[1], owner .. ':op') == op then
  return 1
end
if tonumber(count) <= 1 then
  redis.call('DEL', KEYS[1])
  notify(ARGV[3], '1')
  return 1
end
redis.call('HINCRBY', KEYS[1], owner, -1)
redis.call('HSET', KEYS[1], owner .. ':op', op)
return 1
