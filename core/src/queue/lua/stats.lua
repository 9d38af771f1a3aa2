-- Queue counts: {ready, delayed, in flight, dead, age of the oldest ready job (ms, -1: none
-- known), least lease time left among jobs in flight (ms, -1: none in flight)}.
-- KEYS: 1 ready, 2 delayed, 3 in flight, 4 dead, 5 payloads (with each job's enqueue time,
-- server ms, under id .. '\255'); on the grouped keys 6 the count of the jobs waiting in
-- their groups' own ready sets (group_push.lua), which count as ready.
-- The oldest ready job is the one pushed longest ago among the jobs next in line at each
-- priority (within a priority jobs are taken in order): at most 256 lookups.
local now = now_ms()
local oldest, from = -1, '-inf'
for _ = 1, 256 do
  local head = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if not head[1] then
    break
  end
  local at = tonumber(redis.call('HGET', KEYS[5], head[1] .. '\255'))
  if at and now - at > oldest then
    oldest = math.max(now - at, 0)
  end
  from = string.format('%.0f', (math.floor(tonumber(head[2]) / 1099511627776) + 1) * 1099511627776)
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local left = first[2] and math.max(tonumber(first[2]) - now, 0) or -1
local sorted = KEYS[6] and math.max(tonumber(redis.call('GET', KEYS[6]) or '0') or 0, 0) or 0
return {redis.call('ZCARD', KEYS[1]) + sorted, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]), oldest, left}
