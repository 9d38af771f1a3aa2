-- Release a permit, and wake the waiters that may now take the free permits.
-- KEYS[1] holders, KEYS[2] waiters, KEYS[3] waiter timeouts, KEYS[4] permit count;
-- ARGV[1] token, ARGV[2] channel. As the undo of an acquisition: KEYS[5] undone acquisitions,
-- ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 the permit was gone (it had expired).
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
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('ZCARD', KEYS[1])
redis.call('LLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
local permits = tonumber(redis.call('GET', KEYS[4])) or 0
if KEYS[5] then
  redis.call('ZCARD', KEYS[5])
end
-- Undoing an acquisition whose reply was lost (KEYS[5] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[5] then
  local tt = redis.call('TIME')
  local tnow = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)
  local keep = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', tnow)
  redis.call('ZADD', KEYS[5], tnow + keep, ARGV[1])
  if redis.call('PTTL', KEYS[5]) < keep then
    redis.call('PEXPIRE', KEYS[5], keep)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = permits - redis.call('ZCARD', KEYS[1])
if free > 0 then
  for _, next in ipairs(redis.call('LRANGE', KEYS[2], 0, free - 1)) do
    notify(ARGV[2], next)
  end
end
if tonumber(expiry) <= now then
  return 0
end
return 1
