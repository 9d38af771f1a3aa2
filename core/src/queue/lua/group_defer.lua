-- A grouped job's handler was rate limited ("429, try later"): the job goes back to the head
-- of its group without counting the delivery (its base moves up by one: the attempts that
-- max deliveries counts stay as they were; the delivery number still increases), and the
-- group is blocked for ARGV[3] ms (or longer, if it was blocked longer already).
-- KEYS: 1 in flight, 2 leases, 3 holders, 4 bases, 5 settled, 6 ring, 7 rate-blocked
-- groups, 8 full groups, 9 counts (the stem of the per-minute counts: count.lua; a
-- defer counts one 'deferred'); optionally 10 undone takes.
-- ARGV: 1 id ('<group>\31<id>'), 2 token, 3 ms the group waits, 4 channel, 5 how long to
-- remember the settlement (ms); with KEYS[10], 6 how long to remember the token there (ms).
-- Returns 1 deferred (or this delivery's settlement found: a retry), 0 the lease ran out
-- (or the job is gone), -1 another delivery holds it.
local now = now_ms()
local id, token = ARGV[1], ARGV[2]
local holder = redis.call('HGET', KEYS[2], id)
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
for _, i in ipairs({1, 5, 6, 7, 8}) do
  redis.call('ZCARD', KEYS[i])
end
if KEYS[10] then
  remember(KEYS[10], token, now, tonumber(ARGV[6]))
end
if holder ~= token then
  local settled = redis.call('ZSCORE', KEYS[5], token)
  if settled and tonumber(settled) > now then
    return 1
  end
  if holder then
    return -1
  end
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], id)
local at = string.find(id, '\31', 1, true)
if (not expiry) or tonumber(expiry) <= now or not at then
  return 0
end
local g = string.sub(id, 1, at - 1)
local stem = string.sub(KEYS[6], 1, -5)
local ready = stem .. 'r:' .. g
redis.call('GET', stem .. 'sorted')
local head = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
local score = 0
if head[2] then
  score = tonumber(head[2]) - 1
end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], token, token .. ':e')
redis.call('HINCRBY', KEYS[4], id, 1)
redis.call('ZREM', stem .. 'i:' .. g, id)
redis.call('ZADD', ready, score, id)
redis.call('INCR', stem .. 'sorted')
local until_ms = now + tonumber(ARGV[3])
local blocked = redis.call('ZSCORE', KEYS[7], g)
if not blocked or tonumber(blocked) < until_ms then
  redis.call('ZADD', KEYS[7], until_ms, g)
end
redis.call('ZREM', KEYS[6], g)
redis.call('ZREM', KEYS[8], g)
remember(KEYS[5], token, now, tonumber(ARGV[5]))
counting(KEYS[9], now)
count('deferred', 1)
notify(ARGV[4], '1')
return 1
