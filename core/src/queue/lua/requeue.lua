-- Move a dead job back to ready, with max deliveries counted afresh from here; its delivery
-- number keeps increasing (it is the job's fence).
-- KEYS: 1 dead, 2 ready, 3 priorities, 4 sequence counter, 5 deliveries, 6 bases, 7 reasons
-- (the reason it died is forgotten).
-- ARGV: 1 id, 2 channel. Returns 1 requeued, 0 not on the dead list.
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
redis.call('LLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[6])
redis.call('HLEN', KEYS[7])
local seq_now = redis.call('GET', KEYS[4])
if seq_now and not tonumber(seq_now) then
  return redis.error_reply('ERR the sequence counter ' .. KEYS[4] .. ' is not an integer')
end
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('HSET', KEYS[6], ARGV[1], tonumber(redis.call('HGET', KEYS[5], ARGV[1])) or 0)
local priority = tonumber(redis.call('HGET', KEYS[3], ARGV[1])) or 0
local seq = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[2], (255 - priority) * 1099511627776 + seq, ARGV[1])
notify(ARGV[2], '1')
return 1
