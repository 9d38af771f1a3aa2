-- Acquire a lease lock and issue its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] undone acquisitions (zset token -> until
-- ms); ARGV[1] owner token, ARGV[2] ttl in ms.
-- Returns the fence (an integer, at least 1) when the caller holds the lock (newly, or
-- already: a retried acquisition gets the fence it was issued before, unless the counter
-- was lost (evicted, deleted), then a higher one from the clock floor), {0, pttl of the
-- holder} otherwise. (A bare integer, not {1, fence}: a table reply costs the server about
-- 5,000 instructions more, on every grant.)
-- A fence is max(counter + 1, server clock in microseconds): a counter lost with the data
-- (restart without persistence, an older snapshot, failover to a lagging replica) cannot
-- issue a fence at or below one issued before, as long as the server clock reads later than
-- it did when those were issued. Fences stay exact integers (below 2^53) until about 2255.
-- Nothing is changed unless the lock is granted: a wrong type in any key, a foreign counter
-- or an undone acquisition leave every key as it was.
-- The hottest script: the prelude's undone, fence_counter and issue_fence steps are spelled
-- out here (a helper costs a closure per call), with one TIME at most. On 7.0+ a fresh grant
-- makes four calls: SET NX GET (lock), ZSCORE (undone), TIME, SET GET (the counter, swapped
-- for the clock's digits and read in one call: the clock is almost always ahead of it).
local holder, last, undone
local set_get = redis.REDIS_VERSION_NUM ~= nil
if set_get then
  -- Redis 7.0+ (SET NX GET): one call takes a free lock and reads the holder (a wrong type
  -- fails it before it writes). The keys read after it undo that write when they fail.
  holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
  if holder and holder ~= ARGV[1] then
    -- Another holder's: this path wrote nothing, so it reads nothing more (a waiter's
    -- retry costs two calls).
    return {0, redis.call('PTTL', KEYS[1])}
  end
  -- (A reply of redis.pcall is an error when it has an `err` field: a string's is nil.)
  -- A retry reads the counter here; a fresh grant swaps it below.
  local failed
  if holder then
    last = redis.pcall('GET', KEYS[2])
    failed = last and last.err and last
  end
  if not failed then
    undone = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
    failed = undone and undone.err and undone
  end
  if failed then
    if not holder then
      redis.call('DEL', KEYS[1])
    end
    return failed
  end
else
  -- Older servers: read every key once before writing any.
  holder = redis.call('GET', KEYS[1])
  if holder and holder ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  last = redis.call('GET', KEYS[2])
  undone = redis.call('ZSCORE', KEYS[3], ARGV[1])
end
-- Past here `holder` is false when the lock was free (on 7.0+ it is ours already: a
-- refusal below deletes it again), else our own token (a retry). A retry whose counter is
-- gone issues a fence as a fresh grant does, so it reads the clock too.
-- Undone after its reply was lost: if it arrives late, it takes no effect.
local t
if undone or not holder or not last then
  t = redis.call('TIME')
end
if undone and tonumber(undone) > t[1] * 1000 + math.floor(t[2] / 1000) then
  if set_get and not holder then
    redis.call('DEL', KEYS[1])
  end
  return {0, -2}
end
-- A fresh grant on 7.0+: the counter gets the clock's digits (seconds, then microseconds
-- padded to 6) and its value before (a wrong type fails before it writes); it is put back
-- below if it was foreign (KEEPTTL in both: a foreign key keeps its expiry), raised to
-- counter + 1 if it was at or above the clock.
local swapped, clock
if set_get and not holder then
  clock = t[1] .. string.sub('00000', #t[2]) .. t[2]
  swapped = true
  last = redis.pcall('SET', KEYS[2], clock, 'KEEPTTL', 'GET')
  if last and last.err then
    redis.call('DEL', KEYS[1])
    return last
  end
end
local counter = 0
if last then
  counter = tonumber(last)
  if (not counter) or counter % 1 ~= 0 or counter >= 9007199254740991 then
    if swapped then
      redis.call('SET', KEYS[2], last, 'KEEPTTL')
    end
    if set_get and not holder then
      redis.call('DEL', KEYS[1])
    end
    return redis.error_reply('ERR the fence counter ' .. KEYS[2] .. ' does not hold an integer below 2^53 - 1')
  end
end
if holder then
  -- A retry: the lease runs for the ttl from now at least (the caller counts from this
  -- attempt's send), never shortened (a late copy after an extension to a longer ttl).
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  if last then
    return counter
  end
  -- Ours with the counter gone (evicted, deleted): a fence from the clock floor, as below,
  -- never 0. It is above the fence the lost reply carried as long as the server clock reads
  -- later than it did then (the rule for any lost counter, see above).
end
local us = t[1] * 1000000 + t[2]
local fence, text
if counter < us then
  if swapped then
    -- The counter holds the clock already.
    return us
  end
  -- The clock: its digits are TIME's own (seconds, then microseconds padded to 6).
  fence, text = us, t[1] .. string.sub('00000', #t[2]) .. t[2]
else
  fence = counter + 1
  text = string.format('%.0f', fence)
end
redis.call('SET', KEYS[2], text)
if not set_get then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return fence
