-- Acknowledge a job: it is done and forgotten. Refused once the lease ran out (the job is
-- then redelivered to someone else).
-- KEYS: 1 in flight, 2 leases, 3 payloads, 4 priorities, 5 deliveries, 6 holders, 7 bases.
-- ARGV: 1 id, 2 token.
-- Returns 1 acked, 0 the lease ran out (or the job is gone), -1 another delivery holds it.
redis.call('ZCARD', KEYS[1])
for i = 2, 7 do
  redis.call('HLEN', KEYS[i])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = redis.call('HGET', KEYS[2], ARGV[1])
if holder ~= ARGV[2] then
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
return 1
