-- Extend a job's lease. KEYS: 1 in flight, 2 leases. ARGV: 1 id, 2 token, 3 ms.
-- Returns 1 extended, 0 the lease ran out, -1 another delivery holds it.
local now = now_ms()
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
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
