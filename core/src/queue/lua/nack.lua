-- Give a job back: retry it after a backoff, or after max deliveries put it on the dead
-- list. KEYS: 1 in flight, 2 leases, 3 delayed, 4 ready, 5 priorities, 6 sequence counter,
-- 7 deliveries, 8 dead, 9 holders, 10 bases, 11 settled (zset delivery token -> until when
-- its ack or nack is remembered, ms), 12 reasons. ARGV: 1 id, 2 token, 3 backoff ms,
-- 4 max deliveries (0: dead now), 5 channel, 6 how long to remember the settlement (ms),
-- 7 why it failed ('': not said).
-- Returns 1 retried, 2 dead (the reason kept), 3 this very delivery was settled already (a
-- retry after a lost reply finds its own nack, retried or dead), 0 the lease ran out (or the
-- job is gone), -1 another delivery holds it.
-- Read every key once before writing any (a wrong type fails before any write).
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
redis.call('HLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('ZCARD', KEYS[4])
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[7])
redis.call('LLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
redis.call('HLEN', KEYS[10])
redis.call('ZCARD', KEYS[11])
redis.call('HLEN', KEYS[12])
local seq_now = redis.call('GET', KEYS[6])
if seq_now and not tonumber(seq_now) then
  return redis.error_reply('ERR the sequence counter ' .. KEYS[6] .. ' is not an integer')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local holder = redis.call('HGET', KEYS[2], id)
if holder ~= ARGV[2] then
  local settled = redis.call('ZSCORE', KEYS[11], ARGV[2])
  if settled and tonumber(settled) > now then
    return 3
  end
  if holder then
    return -1
  end
  return 0
end
local expiry = redis.call('ZSCORE', KEYS[1], id)
if (not expiry) or tonumber(expiry) <= now then
  return 0
end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[9], ARGV[2])
local keep = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[11], '-inf', now)
redis.call('ZADD', KEYS[11], now + keep, ARGV[2])
if redis.call('PTTL', KEYS[11]) < keep then
  redis.call('PEXPIRE', KEYS[11], keep)
end
local n = tonumber(redis.call('HGET', KEYS[7], id)) or 0
if n - (tonumber(redis.call('HGET', KEYS[10], id)) or 0) >= tonumber(ARGV[4]) then
  redis.call('RPUSH', KEYS[8], id)
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[12], id, ARGV[7])
  end
  return 2
end
local backoff = tonumber(ARGV[3])
if backoff > 0 then
  redis.call('ZADD', KEYS[3], now + backoff, id)
else
  local priority = tonumber(redis.call('HGET', KEYS[5], id)) or 0
  local seq = redis.call('INCR', KEYS[6])
  redis.call('ZADD', KEYS[4], (255 - priority) * 1099511627776 + seq, id)
end
notify(ARGV[5], '1')
return 1
