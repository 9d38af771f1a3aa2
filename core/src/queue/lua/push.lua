-- Push jobs. KEYS: 1 ready (zset id -> score), 2 delayed (zset id -> due ms), 3 payloads
-- (hash id -> payload), 4 priorities (hash id -> priority), 5 sequence counter.
-- ARGV: 1 delay ms, 2 priority (0..255, higher first), 3 channel, then pairs of (id, payload).
-- Returns a flat list of (1 pushed | 0 duplicate, id) per job. A job id that is queued,
-- delayed, running or dead is a duplicate: nothing is written for it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay, priority = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, ready = {}, 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HSETNX', KEYS[3], id, ARGV[i + 1]) == 0 then
    out[#out + 1] = 0
  else
    redis.call('HSET', KEYS[4], id, priority)
    if delay > 0 then
      redis.call('ZADD', KEYS[2], now + delay, id)
    else
      local seq = redis.call('INCR', KEYS[5])
      redis.call('ZADD', KEYS[1], (255 - priority) * 1099511627776 + seq, id)
      ready = ready + 1
    end
    out[#out + 1] = 1
  end
  out[#out + 1] = id
end
if ready > 0 then
  redis.call('PUBLISH', ARGV[3], '1')
end
return out
