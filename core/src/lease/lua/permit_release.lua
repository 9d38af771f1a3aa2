-- Release a permit, and wake the waiters that may now take the free permits.
-- KEYS[1] holders, KEYS[2] waiters, KEYS[3] waiter timeouts, KEYS[4] permit count;
-- ARGV[1] token, ARGV[2] channel. As the undo of an acquisition: KEYS[5] undone acquisitions,
-- ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 the permit was gone (it had expired).
-- Read every key it uses once before writing any (a wrong type fails before any write;
-- KEYS[5] is first read by its first write, before any other). With nobody in line the
-- permit count is not used, so not read.
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
local waiting, count = 0, nil
-- With no line and no timeouts key (nobody waits), one EXISTS reads both (an absent key
-- holds no wrong type).
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
  waiting = redis.call('LLEN', KEYS[2])
  redis.call('ZCARD', KEYS[3])
  count = redis.call('GET', KEYS[4])
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- Undoing an acquisition whose reply was lost (KEYS[5] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
-- Only this path needs the prelude: it is spliced in here.
if KEYS[5] then
--@prelude
  remember(KEYS[5], ARGV[1], now, tonumber(ARGV[3]))
end
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
-- With nobody in line, nobody to wake: the expired holders are left to the next acquire.
if waiting > 0 then
  local permits = tonumber(count) or 0
  local held = redis.call('ZCARD', KEYS[1])
  held = held - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local free = permits - held
  if free > 0 then
    for _, next in ipairs(redis.call('LRANGE', KEYS[2], 0, free - 1)) do
      -- As the prelude's notify ('{shard}<name>' is a shard channel, the only one of ours
      -- that starts with '{', byte 123).
      if string.byte(ARGV[2], 1) == 123 then
        redis.call('SPUBLISH', string.sub(ARGV[2], 8), next)
      else
        redis.call('PUBLISH', ARGV[2], next)
      end
    end
  end
end
if tonumber(expiry) <= now then
  return 0
end
return 1
