-- Acquire a lease lock and issue its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] undone acquisitions (zset token -> until
-- ms); ARGV[1] owner token, ARGV[2] ttl in ms.
-- Returns {1, fence} when the caller holds the lock (newly, or already: a retried
-- acquisition gets the fence it was issued before), {0, pttl of the holder} otherwise.
-- A fence is max(counter + 1, server clock in microseconds): a counter lost with the data
-- (restart without persistence, an older snapshot, failover to a lagging replica) cannot
-- issue a fence at or below one issued before, as long as the server clock reads later than
-- it did when those were issued. Fences stay exact integers (below 2^53) until about 2255.
-- Read every key once before writing any (a wrong type fails before any write).
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  -- Another holder's: this path writes nothing, so it reads nothing more (a waiter's
  -- retry costs two calls).
  return {0, redis.call('PTTL', KEYS[1])}
end
local last = redis.call('GET', KEYS[2])
if undone(KEYS[3], ARGV[1]) then
  return {0, -2}
end
local counter, bad = fence_counter(KEYS[2], last)
if bad then
  return bad
end
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, counter}
end
local fence = issue_fence(KEYS[2], counter, now_us())
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
