-- Release the write hold and wake every waiter (readers can all proceed).
-- KEYS[1] writer; ARGV[1] token, ARGV[2] channel. As the undo of an acquisition: KEYS[2]
-- undone acquisitions, ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 gone (expired), -1 another writer holds it.
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
local writer = redis.call('GET', KEYS[1])
if KEYS[2] then
  redis.call('ZCARD', KEYS[2])
end
-- Undoing an acquisition whose reply was lost (KEYS[2] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[2] then
  local tt = redis.call('TIME')
  local tnow = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)
  local keep = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tnow)
  redis.call('ZADD', KEYS[2], tnow + keep, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < keep then
    redis.call('PEXPIRE', KEYS[2], keep)
  end
end
if writer == ARGV[1] then
  redis.call('DEL', KEYS[1])
  notify(ARGV[2], '*')
  return 1
end
if writer then
  return -1
end
return 0
