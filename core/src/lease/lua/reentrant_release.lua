-- Release one hold of a reentrant lock; the last hold deletes the hash and announces it.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] op id, ARGV[3] release channel.
-- Returns 1 released (a retried release with the same op id is not counted twice),
-- 0 the lock was gone (expired), -1 another owner holds it.
-- A channel given as '{shard}<name>' is a shard channel (Redis Cluster): SPUBLISH reaches only
-- the subscribers on this key's shard instead of being broadcast to every node. (No channel
-- of ours starts with '{': prefixes may not contain braces.)
local function notify(channel, message)
  if string.sub(channel, 1, 7) == '{shard}' then
    redis.call('SPUBLISH', string.sub(channel, 8), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end
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
