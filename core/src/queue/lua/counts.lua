-- Read a queue's per-minute counts (written by the count prelude). KEYS: 1 counts (the
-- stem of the per-minute counters, <stem>:<minute>:<event>). ARGV: 1 first minute, 2 last
-- minute (since the epoch; at most 2,881 minutes apart, checked by the caller).
-- Returns {minute, {event, n, ...}, ...} for the minutes that counted something. The
-- counters are read with one MGET per 70 minutes (630 keys). A busy worker's ack and take
-- in one script (ack_take.lua) count one 'acked_taken', read here as one of each (it is
-- the last of the events: the others are returned by their names).
local events = {'pushed', 'taken', 'acked', 'failed', 'retried', 'dead', 'expired', 'deferred', 'acked_taken'}
local named = #events - 1
local out = {}
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
for from = first, last, 70 do
  local to = math.min(from + 69, last)
  local names = {}
  for m = from, to do
    local stem = KEYS[1] .. string.format(':%d:', m)
    for _, event in ipairs(events) do
      names[#names + 1] = stem .. event
    end
  end
  local values = redis.call('MGET', unpack(names))
  for m = from, to do
    local base = (m - from) * #events
    local fields = {}
    local both = tonumber(values[base + #events]) or 0
    for i = 1, named do
      local v = values[base + i]
      if both ~= 0 and (i == 2 or i == 3) then
        v = string.format('%d', (tonumber(v) or 0) + both)
      end
      if v then
        fields[#fields + 1] = events[i]
        fields[#fields + 1] = v
      end
    end
    if #fields > 0 then
      out[#out + 1] = m
      out[#out + 1] = fields
    end
  end
end
return out
