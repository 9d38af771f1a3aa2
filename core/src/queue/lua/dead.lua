-- List dead jobs: a flat list of (id, deliveries, payload, reason or '', death record or ''
-- ('<server ms> <kind>': bury.lua)), oldest first, at most ARGV[1] from index ARGV[2] (0 if
-- not given). KEYS: 1 dead, 2 payloads, 3 deliveries, 4 reasons.
-- Every key is read (a wrong type is an error, whatever the contents).
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
local out = {}
local from = tonumber(ARGV[2] or '0')
for _, id in ipairs(redis.call('LRANGE', KEYS[1], from, from + tonumber(ARGV[1]) - 1)) do
  out[#out + 1] = id
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[3], id)) or 0
  local v = redis.call('HMGET', KEYS[2], id, id .. '\254')
  out[#out + 1] = v[1] or ''
  out[#out + 1] = redis.call('HGET', KEYS[4], id) or ''
  out[#out + 1] = v[2] or ''
end
return out
