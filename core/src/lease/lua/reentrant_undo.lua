-- Undo one reentrant acquisition whose outcome is unknown (its reply was lost, or the
-- replicas did not acknowledge it): only if this very acquisition (op id) was counted.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] op id of the acquisition, ARGV[3] channel.
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
if redis.call('HGET', KEYS[1], owner .. ':op') ~= op then
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
