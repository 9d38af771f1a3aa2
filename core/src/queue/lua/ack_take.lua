-- Ack one job and take the next, in one round trip (a busy worker between two jobs).
-- KEYS: 1 ready, 2 delayed, 3 payloads, 4 priorities, 5 sequence counter, 6 in flight,
-- 7 leases, 8 deliveries, 9 dead, 10 holders, 11 bases, 12 settled, 13 undone takes.
-- ARGV: 1 id acked, 2 its token, 3 how long to remember the settlement (ms), 4 the next
-- token, 5 visibility timeout ms, 6 max deliveries.
-- Returns {ack, 1, delivery, id, payload} or {ack, 0, ms until a delayed job is due or a
-- lease runs out, or -2}; ack is 1 acked (or this delivery's settlement found: a retry),
-- 0 the lease ran out (or the job is gone), -1 another delivery holds it. The take part is
-- the take script's: a retry with the same next token gets the job leased to it.
-- Every key is read before any is written (a wrong type fails before any write).
redis.call('ZCARD', KEYS[1])
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
redis.call('ZCARD', KEYS[6])
redis.call('HLEN', KEYS[7])
redis.call('HLEN', KEYS[8])
redis.call('LLEN', KEYS[9])
redis.call('HLEN', KEYS[10])
redis.call('HLEN', KEYS[11])
redis.call('ZCARD', KEYS[12])
local undone = redis.call('ZSCORE', KEYS[13], ARGV[4])
local seq_now = redis.call('GET', KEYS[5])
if seq_now and not tonumber(seq_now) then
  return redis.error_reply('ERR the sequence counter ' .. KEYS[5] .. ' is not an integer')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The ack.
local ack
local id, token = ARGV[1], ARGV[2]
local holder = redis.call('HGET', KEYS[7], id)
if holder ~= token then
  local settled = redis.call('ZSCORE', KEYS[12], token)
  if settled and tonumber(settled) > now then
    ack = 1
  elseif holder then
    ack = -1
  else
    ack = 0
  end
else
  local expiry = redis.call('ZSCORE', KEYS[6], id)
  if (not expiry) or tonumber(expiry) <= now then
    ack = 0
  else
    redis.call('ZREM', KEYS[6], id)
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[8], id)
    redis.call('HDEL', KEYS[10], token)
    redis.call('HDEL', KEYS[11], id)
    local keep = tonumber(ARGV[3])
    redis.call('ZREMRANGEBYSCORE', KEYS[12], '-inf', now)
    redis.call('ZADD', KEYS[12], now + keep, token)
    redis.call('PEXPIRE', KEYS[12], keep)
    ack = 1
  end
end
-- The take.
if undone and tonumber(undone) > now then
  return {ack, 0, -2}
end
local next_token, max = ARGV[4], tonumber(ARGV[6])
local mine = redis.call('HGET', KEYS[10], next_token)
if mine and redis.call('HGET', KEYS[7], mine) == next_token
    and tonumber(redis.call('ZSCORE', KEYS[6], mine) or '0') > now then
  return {ack, 1, tonumber(redis.call('HGET', KEYS[8], mine)) or 1, mine, redis.call('HGET', KEYS[3], mine) or ''}
end
local function make_ready(j)
  local priority = tonumber(redis.call('HGET', KEYS[4], j)) or 0
  local seq = redis.call('INCR', KEYS[5])
  redis.call('ZADD', KEYS[1], (255 - priority) * 1099511627776 + seq, j)
end
for _, j in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', KEYS[2], j)
  make_ready(j)
end
for _, j in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', KEYS[6], j)
  local tok = redis.call('HGET', KEYS[7], j)
  if tok then
    redis.call('HDEL', KEYS[10], tok)
  end
  redis.call('HDEL', KEYS[7], j)
  local n = tonumber(redis.call('HGET', KEYS[8], j)) or 0
  if n - (tonumber(redis.call('HGET', KEYS[11], j)) or 0) >= max then
    redis.call('RPUSH', KEYS[9], j)
  else
    make_ready(j)
  end
end
local top = redis.call('ZRANGE', KEYS[1], 0, 0)
if top[1] then
  local j = top[1]
  redis.call('ZREM', KEYS[1], j)
  local n = redis.call('HINCRBY', KEYS[8], j, 1)
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[5]), j)
  redis.call('HSET', KEYS[7], j, next_token)
  redis.call('HSET', KEYS[10], next_token, j)
  return {ack, 1, n, j, redis.call('HGET', KEYS[3], j) or ''}
end
local due = -2
for _, k in ipairs({KEYS[2], KEYS[6]}) do
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if first[2] then
    local ms = math.max(tonumber(first[2]) - now, 1)
    if due < 0 or ms < due then
      due = ms
    end
  end
end
return {ack, 0, due}
