-- Read a queue's per-minute counts (written by the count prelude). KEYS: 1 counts (the
-- stem of the per-minute hashes). ARGV: 1 first minute, 2 last minute (since the epoch;
-- at most 2,881 minutes apart, checked by the caller).
-- Returns {minute, {event, n, ...}, ...} for the minutes that counted something.
local out = {}
for m = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local fields = redis.call('HGETALL', KEYS[1] .. ':' .. m)
  if #fields > 0 then
    out[#out + 1] = m
    out[#out + 1] = fields
  end
end
return out
