-- Undo one reentrant acquisition whose outcome is unknown (its reply was lost, or the
-- replicas did not acknowledge it): only if this very acquisition (op id) was counted.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] op id of the acquisition, ARGV[3] channel.
-- Returns 1 undone, 0 the acquisition had not been counted (nothing to undo).
local owner, op = ARGV[1], ARGV[2]
if redis.call('HGET', KEYS[1], owner .. ':op') ~= op then
  return 0
end
local count = tonumber(redis.call('HGET', KEYS[1], owner)) or 0
if count <= 1 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], '1')
  return 1
end
redis.call('HINCRBY', KEYS[1], owner, -1)
redis.call('HSET', KEYS[1], owner .. ':op', 'u' .. op)
return 1
