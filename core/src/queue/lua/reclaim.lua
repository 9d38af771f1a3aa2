-- The take scripts' reclaiming (dequeue.lua, ack_take.lua), on their KEYS: 1 ready,
-- 2 delayed, 3 payloads, 4 priorities, 5 sequence counter, 6 in flight, 7 leases,
-- 8 deliveries, 9 dead, 10 holders, 11 bases (and the counts that counting named).
-- overdue(now): the delayed jobs due and the jobs whose lease ran out (at most 1,000 of
-- each), as two lists.
local function overdue(now)
  return redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000),
    redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 1000)
end
-- reclaim(due, expired, max): the due delayed jobs back to ready; the jobs whose lease ran
-- out back to ready or, after max deliveries (counted from the job's base), to the dead
-- list. Call it only once every key it touches was read (a wrong type fails before any
-- write): ready, delayed, priorities, the sequence counter, in flight, leases, deliveries,
-- dead, holders, bases.
local function reclaim(due, expired, max)
  local function make_ready(id)
    local priority = tonumber(redis.call('HGET', KEYS[4], id)) or 0
    redis.call('ZADD', KEYS[1], ready_score(priority, KEYS[5]), id)
  end
  for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[2], id)
    make_ready(id)
  end
  for _, id in ipairs(expired) do
    redis.call('ZREM', KEYS[6], id)
    local token = redis.call('HGET', KEYS[7], id)
    if token then
      redis.call('HDEL', KEYS[10], token)
    end
    redis.call('HDEL', KEYS[7], id)
    local n = tonumber(redis.call('HGET', KEYS[8], id)) or 0
    if n - (tonumber(redis.call('HGET', KEYS[11], id)) or 0) >= max then
      redis.call('RPUSH', KEYS[9], id)
      count('dead', 1)
    else
      make_ready(id)
      count('retried', 1)
    end
    count('expired', 1)
  end
end
-- lease_next(id, token, now, visibility): leases ready job id to token until now +
-- visibility ms; returns its delivery number. Its first write is to the deliveries (a
-- script may let that write be the type check of the deliveries when it is its first).
local function lease_next(id, token, now, visibility)
  local n = redis.call('HINCRBY', KEYS[8], id, 1)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[6], now + visibility, id)
  redis.call('HSET', KEYS[7], id, token)
  redis.call('HSET', KEYS[10], token, id)
  count('taken', 1)
  return n
end
-- base_of(id): the job's deliveries when it was last requeued from the dead list (0: never).
local function base_of(id)
  return tonumber(redis.call('HGET', KEYS[11], id)) or 0
end
-- handed(first, n, id, payload, base, at, now): the reply for a job handed out as
-- delivery n: {first, n, id, payload}, and, for a job requeued from the dead list
-- (base > 0), its attempt since the requeue (n - base, as a string) after them; for a job
-- whose enqueue time is known (at: server ms, as text), its attempt ('' when never
-- requeued), then at and how long ago that was (ms, as text).
local function handed(first, n, id, payload, base, at, now)
  local attempt = base > 0 and tostring(n - base)
  if at then
    return {first, n, id, payload, attempt or '', at, tostring(math.max(now - tonumber(at), 0))}
  end
  if attempt then
    return {first, n, id, payload, attempt}
  end
  return {first, n, id, payload}
end
-- next_wait(now): ms until a delayed job is due or a lease runs out (at least 1), or -2
-- when neither holds a job.
local function next_wait(now)
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
  return next
end
