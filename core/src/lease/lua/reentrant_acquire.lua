-- Acquire a reentrant lock: a hash of owner -> hold count, plus the holder's fence.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] undone acquisitions (zset op id ->
-- until ms); ARGV[1] owner, ARGV[2] op id, ARGV[3] ttl ms.
-- Returns {1, fence} when held by the owner (first or nested hold; a retried acquisition
-- with the same op id is not counted twice), {0, pttl of the holder} otherwise.
-- A fence is max(counter + 1, server clock in microseconds): issue_fence in the prelude.
-- Read every key once before writing any (a wrong type fails before any write).
local owner, op = ARGV[1], ARGV[2]
local count = redis.call('HGET', KEYS[1], owner)
local last = redis.call('GET', KEYS[2])
if undone(KEYS[3], op) then
  return {0, -2}
end
local counter, bad = fence_counter(KEYS[2], last)
if bad then
  return bad
end
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
local fence, text = issue_fence(KEYS[2], counter, now_us())
redis.call('HSET', KEYS[1], owner, 1, owner .. ':op', op, 'fence', text)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, fence}
