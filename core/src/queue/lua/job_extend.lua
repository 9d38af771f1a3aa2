-- Extend a job's lease. KEYS: 1 in flight, 2 leases, optionally 3 cancelled (zset token ->
-- until ms, written by the cancel script) and 4 holders (whose '<token>:e' is the
-- delivery's hold limit, written by its take: reclaim.lua's lease_next). ARGV: 1 id, 2
-- token, 3 ms.
-- The lease runs ms from now, but never past the hold limit: a renewal that reaches the
-- server late (delayed, held, sent again) cannot carry a timed-out job past timeout + grace;
-- and a renewal never shortens a delivery with a hold limit.
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
local upto = now + tonumber(ARGV[3])
if KEYS[4] then
  local e = tonumber(redis.call('HGET', KEYS[4], ARGV[2] .. ':e'))
  if e and e < upto then
    upto = e
  end
  -- Nor is a delivery with a hold limit shortened: the limit ends it (the watchdog's last
  -- renewal, asking for what is left in whole ms by the taker's clock, would end it up to a
  -- few ms early, and another delivery could start before timeout + grace).
  if e and upto < tonumber(expiry) then
    upto = tonumber(expiry)
  end
end
if upto <= now then
  -- Past the hold limit (a lease written before it was kept): it ends now.
  redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', upto, ARGV[1])
return 1
