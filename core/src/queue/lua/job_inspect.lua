-- Report a job lease. KEYS: 1 in flight, 2 leases. ARGV: 1 id, 2 token.
-- Returns {1, ms left} ours, {0, -2} ran out or gone, {-1, ms left} another delivery's.
local now = now_ms()
local holder = redis.call('HGET', KEYS[2], ARGV[1])
local expiry = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if holder and expiry > now then
  if holder == ARGV[2] then
    return {1, expiry - now}
  end
  return {-1, expiry - now}
end
return {0, -2}
