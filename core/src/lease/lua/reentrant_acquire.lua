-- Acquire a reentrant lock: a hash of owner -> hold count, plus the holder's fence.
-- KEYS[1] lock hash, KEYS[2] fence counter; ARGV[1] owner, ARGV[2] op id, ARGV[3] ttl ms.
-- Returns {1, fence} when held by the owner (first or nested hold; a retried acquisition
-- with the same op id is not counted twice), {0, pttl of the holder} otherwise.
local owner, op = ARGV[1], ARGV[2]
local count = redis.call('HGET', KEYS[1], owner)
if count then
  if redis.call('HGET', KEYS[1], owner .. ':op') ~= op then
    redis.call('HINCRBY', KEYS[1], owner, 1)
    redis.call('HSET', KEYS[1], owner .. ':op', op)
  end
  -- Never shorten: an outer hold may have asked for a longer lease.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], owner, 1, owner .. ':op', op, 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, fence}
