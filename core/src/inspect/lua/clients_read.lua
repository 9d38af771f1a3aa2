-- Read the live clients of the registry, changing nothing.
-- KEYS[1] registry, KEYS[2] heartbeats.
-- Returns {server ms now, then client id, until ms, entry for each live client}.
local now = now_ms()
local out = {now}
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local entry = redis.call('HGET', KEYS[1], live[i])
  if entry then
    out[#out + 1] = live[i]
    out[#out + 1] = tonumber(live[i + 1])
    out[#out + 1] = entry
  end
end
return out
