-- Extend a job's lease. KEYS: 1 in flight, 2 leases, optionally 3 cancelled (zset token ->
-- until ms, written by the cancel script). ARGV: 1 id, 2 token, 3 ms.
-- Returns 1 extended, 0 the lease ran out, -1 another delivery holds it, -3 this delivery
-- was cancelled (its lease ended then).
local now = now_ms()
local holder = redis.call('HGET', KEYS[2], ARGV[1])
if holder ~= ARGV[2] then
  if KEYS[3] then
    local cancelled = redis.call('ZSCORE', KEYS[3], ARGV[2])
    if cancelled and tonumber(cancelled) > now then
      return -3
    end
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
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
