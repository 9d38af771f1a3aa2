-- Read a queue's per-minute counts (written by the count prelude). KEYS: 1 counts (the
-- stem of the per-minute counters, <stem>:<minute>:<event>). ARGV: 1 first minute, 2 last
-- minute (since the epoch; at most 2,881 minutes apart, checked by the caller).
-- Returns {minute, {event, n, ...}, ...} for the minutes that counted something.
local events = {'pushed', 'taken', 'acked', 'failed', 'retried', 'dead', 'expired'}
local out = {}
for m = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local stem = KEYS[1] .. ':' .. m .. ':'
  local names = {}
  for i, event in ipairs(events) do
    names[i] = stem .. event
  end
  local values = redis.call('MGET', unpack(names))
  local fields = {}
  for i, event in ipairs(events) do
    if values[i] then
      fields[#fields + 1] = event
      fields[#fields + 1] = values[i]
    end
  end
  if #fields > 0 then
    out[#out + 1] = m
    out[#out + 1] = fields
  end
end
return out
