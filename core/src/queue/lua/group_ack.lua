-- Acknowledge a grouped job (as the ack script does), and free its group's slot: a group
-- set aside as full goes back to the ring, and idle takers are woken when that, or the
-- queue's concurrency limit, may let one take.
-- KEYS: 1 in flight, 2 leases, 3 payloads, 4 priorities, 5 deliveries, 6 holders, 7 bases,
-- 8 settled, 9 ring, 10 full groups, 11 turn counter, 12 limits, 13 counts (count.lua),
-- 14 pauses (field 'drain': the channel a drain waiter listens on, announced on by an
-- ack); optionally 15 undone takes.
-- ARGV: 1 id ('<group>\31<id>'), 2 token, 3 how long to remember the settlement (ms),
-- 4 channel; with KEYS[15], 5 how long to remember the token there (ms).
-- Returns 1 acked (or this delivery's settlement found: a retry), 0 the lease ran out (or
-- the job is gone), -1 another delivery holds it.
local now = now_ms()
local id, token = ARGV[1], ARGV[2]
local holder = redis.call('HGET', KEYS[2], id)
for i = 3, 7 do
  redis.call('HLEN', KEYS[i])
end
redis.call('HLEN', KEYS[12])
local drain = redis.call('HGET', KEYS[14], 'drain')
for _, i in ipairs({1, 8, 9, 10}) do
  redis.call('ZCARD', KEYS[i])
end
if KEYS[15] then
  remember(KEYS[15], token, now, tonumber(ARGV[5]))
end
if holder ~= token then
  local settled = redis.call('ZSCORE', KEYS[8], token)
  if settled and tonumber(settled) > now then
    return 1
  end
  if holder then
    return -1
  end
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], id)
if (not expiry) or tonumber(expiry) <= now then
  return 0
end
redis.call('HDEL', KEYS[5], id)
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id, id .. '\255')
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[6], token, token .. ':e')
redis.call('HDEL', KEYS[7], id)
remember(KEYS[8], token, now, tonumber(ARGV[3]))
counting(KEYS[13], now)
count('acked', 1)
local wake = group_freed(string.sub(KEYS[9], 1, -5) .. 'ready', id)
local whole = redis.call('HGET', KEYS[12], '!')
if whole and (tonumber(string.match(whole, '^(%d+)')) or 0) > 0 then
  wake = true
end
if wake then
  notify(ARGV[4], '1')
end
if drain then
  notify(drain, '*')
end
return 1
