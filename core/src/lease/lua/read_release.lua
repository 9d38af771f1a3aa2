-- Release a read hold; the last reader out wakes the waiting writers.
-- KEYS[1] readers; ARGV[1] token, ARGV[2] channel. As the undo of an acquisition: KEYS[2]
-- undone acquisitions, ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 the hold was gone (expired).
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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
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
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) == 0 then
  notify(ARGV[2], 'w')
end
if tonumber(expiry) <= now then
  return 0
end
return 1
