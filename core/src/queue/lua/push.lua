-- Push jobs. KEYS: 1 ready (zset id -> score), 2 delayed (zset id -> due ms), 3 payloads
-- (hash id -> payload), 4 priorities (hash id -> priority), 5 sequence counter.
-- ARGV: 1 delay ms, 2 priority (0..255, higher first), 3 channel, then pairs of (id, payload).
-- Returns a flat list of (1 pushed | 0 duplicate, id) per job. A job id that is queued,
-- delayed, running or dead is a duplicate: nothing is written for it.
-- Read every key once before writing any: a key of the wrong type fails the call before
-- anything is written (Redis does not roll back a failed script's writes).
-- A channel given as '{shard}<name>' is a shard channel (Redis Cluster): SPUBLISH reaches only
-- the subscribers on this key's shard instead of being broadcast to every node. (No channel
-- of ours starts with '{': prefixes may not contain braces.)
local function notify(channel, message)
  if string.sub(channel, 1, 7) == '{shard}' then
    redis.call('SPUBLISH', string.sub(channel, 8), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end
redis.call('ZCARD', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
local seq_now = redis.call('GET', KEYS[5])
if seq_now and not tonumber(seq_now) then
  return redis.error_reply('ERR the sequence counter ' .. KEYS[5] .. ' is not an integer')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay, priority = tonumber(ARGV[1]), tonumber(ARGV[2])
-- Delayed jobs already due go to ready first, so they keep their place before the jobs
-- pushed now.
for _, due in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', KEYS[2], due)
  local p = tonumber(redis.call('HGET', KEYS[4], due)) or 0
  local seq = redis.call('INCR', KEYS[5])
  redis.call('ZADD', KEYS[1], (255 - p) * 1099511627776 + seq, due)
end
local out, ready, delayed = {}, 0, 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HSETNX', KEYS[3], id, ARGV[i + 1]) == 0 then
    out[#out + 1] = 0
  else
    redis.call('HSET', KEYS[4], id, priority)
    if delay > 0 then
      redis.call('ZADD', KEYS[2], now + delay, id)
      delayed = delayed + 1
    else
      local seq = redis.call('INCR', KEYS[5])
      redis.call('ZADD', KEYS[1], (255 - priority) * 1099511627776 + seq, id)
      ready = ready + 1
    end
    out[#out + 1] = 1
  end
  out[#out + 1] = id
end
-- Wake takers: every idle one for a batch, one for a single job; a delayed job wakes one
-- too, so that a taker asleep until a later due time sleeps until this one instead.
if ready > 1 then
  notify(ARGV[3], '*')
elseif ready + delayed > 0 then
  notify(ARGV[3], '1')
end
return out
