-- Give back the job leased with a token whose take went unanswered (the taker never saw
-- it): back to ready at once, its delivery not counted.
-- KEYS: 1 in flight, 2 leases, 3 ready, 4 priorities, 5 sequence counter, 6 deliveries,
-- 7 holders, 8 undone takes (zset token -> until ms). ARGV: 1 token, 2 channel, 3 how long to
-- remember the token, so that the take, if only delayed, takes nothing when it arrives.
-- Returns 1 given back, 0 nothing was leased to it.
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
redis.call('HLEN', KEYS[4])
redis.call('HLEN', KEYS[6])
redis.call('HLEN', KEYS[7])
redis.call('ZCARD', KEYS[8])
local seq_now = redis.call('GET', KEYS[5])
if seq_now and not tonumber(seq_now) then
  return redis.error_reply('ERR the sequence counter ' .. KEYS[5] .. ' is not an integer')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
redis.call('ZADD', KEYS[8], now + keep, ARGV[1])
if redis.call('PTTL', KEYS[8]) < keep then
  redis.call('PEXPIRE', KEYS[8], keep)
end
local id = redis.call('HGET', KEYS[7], ARGV[1])
if not id or redis.call('HGET', KEYS[2], id) ~= ARGV[1] then
  return 0
end
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('HDEL', KEYS[2], id)
redis.call('ZREM', KEYS[1], id)
redis.call('HINCRBY', KEYS[6], id, -1)
local priority = tonumber(redis.call('HGET', KEYS[4], id)) or 0
local seq = redis.call('INCR', KEYS[5])
redis.call('ZADD', KEYS[3], (255 - priority) * 1099511627776 + seq, id)
notify(ARGV[2], '1')
return 1
