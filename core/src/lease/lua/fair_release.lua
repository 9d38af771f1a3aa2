-- Release a fair lock if the caller owns it, and wake only the next live waiter.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] queue timeouts; ARGV[1] token, ARGV[2] channel. As the
-- undo of an acquisition: KEYS[4] undone acquisitions, ARGV[3] how long to remember the
-- token (ms).
-- Returns 1 released, 0 gone (expired), -1 another holder owns it.
-- Read every key once before writing any (a wrong type fails before any write).
local holder = redis.call('GET', KEYS[1])
redis.call('LLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
if KEYS[4] then
  redis.call('ZCARD', KEYS[4])
end
-- Undoing an acquisition whose reply was lost (KEYS[4] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[4] then
  remember(KEYS[4], ARGV[1], now_ms(), tonumber(ARGV[3]))
end
if holder ~= ARGV[1] then
  if holder then
    return -1
  end
  return 0
end
redis.call('DEL', KEYS[1])
local now = now_ms()
while true do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then break end
  local expiry = redis.call('ZSCORE', KEYS[3], head)
  if expiry and tonumber(expiry) > now then
    notify(ARGV[2], head)
    break
  end
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
end
return 1
