-- List dead jobs: a flat list of (id, deliveries, payload, reason or ''), oldest first, at
-- most ARGV[1]. KEYS: 1 dead, 2 payloads, 3 deliveries, 4 reasons.
-- Every key is read (a wrong type is an error, whatever the contents).
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
local out = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
  out[#out + 1] = id
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[3], id)) or 0
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
  out[#out + 1] = redis.call('HGET', KEYS[4], id) or ''
end
return out
