-- Take the next job on a lease. KEYS: 1 ready, 2 delayed, 3 payloads, 4 priorities,
-- 5 sequence counter, 6 in flight (zset id -> lease expiry ms), 7 leases (hash id ->
-- token), 8 deliveries (hash id -> count), 9 dead (list), 10 holders (hash token -> id),
-- 11 bases (hash id -> deliveries when last requeued from the dead list), 12 undone takes
-- (zset token -> until ms: a take given back after its reply was lost takes nothing if it
-- arrives late).
-- ARGV: 1 lease token, 2 visibility timeout ms, 3 max deliveries.
-- A retry after a lost reply (same token) gets the job it was leased, not another one.
-- First moves due delayed jobs and jobs whose lease ran out back to ready (or, after max
-- deliveries, to the dead list). Returns {1, delivery number, id, payload} or
-- {0, ms until a delayed job is due or a lease runs out, or -2}.
-- Read every key once before writing any (a wrong type fails before any write).
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
local undone = redis.call('ZSCORE', KEYS[12], ARGV[1])
local bad = bad_sequence(KEYS[5])
if bad then
  return bad
end
local now = now_ms()
if undone and tonumber(undone) > now then
  return {0, -2}
end
local max = tonumber(ARGV[3])
local mine = redis.call('HGET', KEYS[10], ARGV[1])
if mine and redis.call('HGET', KEYS[7], mine) == ARGV[1]
    and tonumber(redis.call('ZSCORE', KEYS[6], mine) or '0') > now then
  return {1, tonumber(redis.call('HGET', KEYS[8], mine)) or 1, mine, redis.call('HGET', KEYS[3], mine) or ''}
end
local function make_ready(id)
  local priority = tonumber(redis.call('HGET', KEYS[4], id)) or 0
  redis.call('ZADD', KEYS[1], ready_score(priority, KEYS[5]), id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', KEYS[2], id)
  make_ready(id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', KEYS[6], id)
  local token = redis.call('HGET', KEYS[7], id)
  if token then
    redis.call('HDEL', KEYS[10], token)
  end
  redis.call('HDEL', KEYS[7], id)
  local n = tonumber(redis.call('HGET', KEYS[8], id)) or 0
  if n - (tonumber(redis.call('HGET', KEYS[11], id)) or 0) >= max then
    redis.call('RPUSH', KEYS[9], id)
  else
    make_ready(id)
  end
end
local top = redis.call('ZRANGE', KEYS[1], 0, 0)
if top[1] then
  local id = top[1]
  redis.call('ZREM', KEYS[1], id)
  local n = redis.call('HINCRBY', KEYS[8], id, 1)
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), id)
  redis.call('HSET', KEYS[7], id, ARGV[1])
  redis.call('HSET', KEYS[10], ARGV[1], id)
  return {1, n, id, redis.call('HGET', KEYS[3], id) or ''}
end
local next = -2
for _, k in ipairs({KEYS[2], KEYS[6]}) do
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if first[2] then
    local ms = math.max(tonumber(first[2]) - now, 1)
    if next < 0 or ms < next then
      next = ms
    end
  end
end
return {0, next}
