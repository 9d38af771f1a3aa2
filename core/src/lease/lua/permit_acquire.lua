-- Acquire a permit of a fair counting semaphore, on the server's clock.
-- KEYS[1] holders (zset token -> expiry ms), KEYS[2] waiters (list, in order),
-- KEYS[3] waiter timeouts (zset token -> expiry ms), KEYS[4] permit count, KEYS[5] undone
-- acquisitions (zset token -> until ms);
-- ARGV[1] token, ARGV[2] permit timeout ms, ARGV[3] waiter timeout ms,
-- ARGV[4] permit count to start with if the semaphore has none yet, ARGV[5] '1' to take a
-- place in line when no permit is free ('0': trying once).
-- Returns 0 a permit is ours (a retry finds it again: a grant with fence 0, as a bare
-- integer, a table reply costing the server about 5,000 instructions more), {0, ms until
-- the first permit expires, or -2} waiting. Permits of holders that stopped renewing expire; waiters that
-- stopped asking lose their place; the first N live waiters may take the N free permits.
-- Read every key once before writing any (a wrong type fails before any write).
-- (Their counts spare later calls: the uncontended path makes no call on an empty line.)
-- A hot script: the prelude's now_ms and undone steps are spelled out (a helper costs a
-- closure per call), and the ttl goes to PEXPIRE as the text it came as (Redis formats a
-- Lua number argument with '%.17g': about 3,500 instructions).
local held, waiting, timed = 0, 0, 0
-- An idle semaphore has no holders, line or timeouts key: one EXISTS reads all three then
-- (an absent key holds no wrong type, and counts 0).
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then
  held = redis.call('ZCARD', KEYS[1])
  waiting = redis.call('LLEN', KEYS[2])
  timed = redis.call('ZCARD', KEYS[3])
end
local count = redis.call('GET', KEYS[4])
-- Undone after its reply was lost: if it arrives late, it takes no effect.
local undone = redis.call('ZSCORE', KEYS[5], ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if undone and tonumber(undone) > now then
  return {0, -2}
end
local permits = tonumber(count)
if count and not permits then
  return redis.error_reply('ERR the permit count ' .. KEYS[4] .. ' is not a number')
end
if not permits then
  permits = tonumber(ARGV[4])
  redis.call('SET', KEYS[4], ARGV[4])
end
-- No holder (held 0): no key, so nothing to expire, no permit of ours to find again, and
-- the key made below gets its expiry without asking for the one it has.
local fresh = held == 0
if not fresh then
  held = held - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
end
if timed > 0 then
  for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
    redis.call('LREM', KEYS[2], 0, dead)
    redis.call('ZREM', KEYS[3], dead)
  end
end
local granted = not fresh and redis.call('ZSCORE', KEYS[1], ARGV[1])
if not granted then
  local free = permits - held
  if free > 0 then
    -- Our place in line (the line's length when we are not in it).
    local ahead, queued = 0, false
    if waiting > 0 then
      ahead = redis.call('LPOS', KEYS[2], ARGV[1])
      queued = ahead ~= false
      if not queued then
        ahead = redis.call('LLEN', KEYS[2])
      end
    end
    if ahead < free then
      if queued then
        redis.call('LREM', KEYS[2], 0, ARGV[1])
      end
      if timed > 0 then
        redis.call('ZREM', KEYS[3], ARGV[1])
      end
      granted = true
    end
  end
end
if granted then
  -- Held until now + ttl. The holders' expiry only grows: a holder with a shorter timeout
  -- must not cut it short for one with a longer timeout.
  local ttl = tonumber(ARGV[2])
  -- A retry (granted: our expiry) keeps a later one it has (a late copy after an extension
  -- to a longer ttl): never shortened.
  if granted == true or tonumber(granted) < now + ttl then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  end
  if fresh or redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 0
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -2
if first[2] then
  wait = math.max(tonumber(first[2]) - now, 1)
end
if ARGV[5] ~= '1' then
  return {0, wait}
end
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('RPUSH', KEYS[2], ARGV[1])
end
local wt = tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], now + wt, ARGV[1])
-- The line's expiry only grows: a waiter with a shorter timeout must not cut it short for
-- one with a longer timeout.
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < 2 * wt then
    redis.call('PEXPIRE', KEYS[i], 2 * wt)
  end
end
return {0, wait}
