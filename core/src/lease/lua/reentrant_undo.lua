-- Undo one reentrant acquisition whose outcome is unknown (its reply was lost, or the
-- replicas did not acknowledge it): only if this very acquisition (op id) was counted.
-- KEYS[1] lock hash, KEYS[2] undone acquisitions (zset op id -> until ms); ARGV[1] owner,
-- ARGV[2] op id of the acquisition, ARGV[3] channel, ARGV[4] how long to remember the op id.
-- Returns 1 undone, 0 the acquisition had not been counted (nothing to undo).
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
local last_op = redis.call('HGET', KEYS[1], owner .. ':op')
if KEYS[2] then
  redis.call('ZCARD', KEYS[2])
end
-- Undoing an acquisition whose reply was lost (KEYS[2] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[2] then
  local tt = redis.call('TIME')
  local tnow = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)
  local keep = tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tnow)
  redis.call('ZADD', KEYS[2], tnow + keep, op)
  if redis.call('PTTL', KEYS[2]) < keep then
    redis.call('PEXPIRE', KEYS[2], keep)
  end
end
if last_op ~= op then
  return 0
end
local count = tonumber(redis.call('HGET', KEYS[1], owner)) or 0
if count <= 1 then
  redis.call('DEL', KEYS[1])
  notify(ARGV[3], '1')
  return 1
end
redis.call('HINCRBY', KEYS[1], owner, -1)
redis.call('HSET', KEYS[1], owner .. ':op', 'u' .. op)
return 1
