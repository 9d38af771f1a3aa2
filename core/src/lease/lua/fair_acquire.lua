-- Acquire a fair lock: waiters get it in the order they started waiting.
-- KEYS[1] lock, KEYS[2] queue (list of waiter tokens), KEYS[3] queue timeouts (zset),
-- KEYS[4] fence counter, KEYS[5] undone acquisitions (zset token -> until ms); ARGV[1] token,
-- ARGV[2] ttl ms, ARGV[3] waiter timeout ms, ARGV[4] '1' to take a place in line when the
-- lock is not free ('0': trying once).
-- Returns {1, fence} acquired (or already ours), {0, pttl of the holder or -2} waiting.
-- A waiter stays in line only while it keeps calling (each call refreshes its timeout);
-- a waiter that stopped (died) is dropped once its timeout passes, by the server's clock.
-- A fence is max(counter + 1, server clock in microseconds): issue_fence in the prelude.
-- A retry by the holder gets the fence it was issued before, unless the counter was lost
-- (evicted, deleted): then a higher one, from the clock floor.
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('GET', KEYS[1])
redis.call('LLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
local last = redis.call('GET', KEYS[4])
if undone(KEYS[5], ARGV[1]) then
  return {0, -2}
end
local counter, bad = fence_counter(KEYS[4], last)
if bad then
  return bad
end
local us, t = now_us()
local now = math.floor(us / 1000)
while true do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then break end
  local expiry = redis.call('ZSCORE', KEYS[3], head)
  if expiry and tonumber(expiry) > now then break end
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  -- A retry: the lease runs for the ttl from now at least (the caller counts from this
  -- attempt's send), never shortened (a late copy after an extension to a longer ttl).
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  if last then
    -- A retry: the fence it was issued before.
    return {1, counter}
  end
  -- A retry whose counter is gone (evicted, deleted): a fence from the clock floor, at or
  -- above the one its lost reply carried.
  return {1, (issue_fence(KEYS[4], counter, us, t))}
end
if not holder then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if (not head) or head == ARGV[1] then
    local fence = issue_fence(KEYS[4], counter, us, t)
    if head then
      redis.call('LPOP', KEYS[2])
      redis.call('ZREM', KEYS[3], ARGV[1])
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {1, fence}
  end
end
if ARGV[4] ~= '1' then
  return {0, holder and redis.call('PTTL', KEYS[1]) or -2}
end
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('RPUSH', KEYS[2], ARGV[1])
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
-- The line must not outlive its last waiter, nor end before any live waiter's place does
-- (waiters may have different timeouts): its expiry only grows.
local keep = 2 * tonumber(ARGV[3])
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < keep then
    redis.call('PEXPIRE', KEYS[i], keep)
  end
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {0, -2}
