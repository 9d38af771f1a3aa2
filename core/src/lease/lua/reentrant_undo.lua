-- Undo one reentrant acquisition whose outcome is unknown (its reply was lost, or the
-- replicas did not acknowledge it): only if this very acquisition (op id) was counted.
-- KEYS[1] lock hash, KEYS[2] undone acquisitions (zset op id -> until ms); ARGV[1] owner,
-- ARGV[2] op id of the acquisition, ARGV[3] channel, ARGV[4] how long to remember the op id.
-- Returns 1 undone, 0 the acquisition had not been counted (nothing to undo).
local owner, op = ARGV[1], ARGV[2]
local last_op = redis.call('HGET', KEYS[1], owner .. ':op')
if KEYS[2] then
  redis.call('ZCARD', KEYS[2])
end
-- Undoing an acquisition whose reply was lost (KEYS[2] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[2] then
  remember(KEYS[2], op, now_ms(), tonumber(ARGV[4]))
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
