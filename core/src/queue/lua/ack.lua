-- Acknowledge a job: it is done and forgotten. Refused once the lease ran out (the job is
-- then redelivered to someone else).
-- KEYS: 1 in flight, 2 leases, 3 payloads, 4 priorities, 5 deliveries, 6 holders, 7 bases,
-- 8 settled (zset delivery token -> until when its ack or nack is remembered, ms).
-- ARGV: 1 id, 2 token, 3 how long to remember the settlement (ms).
-- Returns 1 acked (or: this very delivery was settled already, so a retry after a lost
-- reply finds its own ack), 0 the lease ran out (or the job is gone), -1 another delivery
-- holds it.
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('ZCARD', KEYS[1])
for i = 2, 7 do
  redis.call('HLEN', KEYS[i])
end
redis.call('ZCARD', KEYS[8])
local now = now_ms()
local holder = redis.call('HGET', KEYS[2], ARGV[1])
if holder ~= ARGV[2] then
  local settled = redis.call('ZSCORE', KEYS[8], ARGV[2])
  if settled and tonumber(settled) > now then
    return 1
  end
  if holder then
    return -1
  end
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not expiry) or tonumber(expiry) <= now then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[2])
redis.call('HDEL', KEYS[7], ARGV[1])
remember(KEYS[8], ARGV[2], now, tonumber(ARGV[3]))
return 1
