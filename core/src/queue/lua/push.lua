-- Push jobs. KEYS: 1 ready (zset id -> score), 2 delayed (zset id -> due ms), 3 payloads
-- (hash id -> payload, and id .. '\255' -> server ms when it was pushed: a field that is
-- no job's id, ids being UTF-8), 4 priorities (hash id -> priority), 5 sequence counter,
-- 6 counts (the stem of the per-minute counts).
-- ARGV: 1 delay ms (rounded up by the caller), 2 priority (0..255, higher first), 3 channel, then pairs of (id, payload).
-- Optionally KEYS[7] bases, for jobs pushed with a timeout (see below).
-- Returns a string of one character per job, in order: '1' pushed, '0' duplicate (the
-- caller knows the ids; one string is cheaper to read than a list). A job id that is
-- queued, delayed, running or dead is a duplicate: nothing is written for it.
-- Every key that may be written is read before any is written: a key of the wrong type
-- fails the call before anything is written (Redis does not roll back a failed script's
-- writes). The payloads are read by the first write when nothing comes before it (HSETNX
-- fails on a wrong type before anything is written). The server's clock is read for the
-- enqueue time. The priority of a job is stored only when it is not the default 0 (a
-- missing one reads as 0).
local delay, priority = tonumber(ARGV[1]), tonumber(ARGV[2])
-- A push with a timeout (KEYS[7], the bases: hash id -> deliveries when last requeued, and
-- ':' and the job's timeout in ms): ARGV[1] is 'delay:timeout'.
local timeout = KEYS[7] and string.match(ARGV[1], ':(%d+)$')
if timeout then
  delay = tonumber(string.match(ARGV[1], '^(%d+)'))
  redis.call('HLEN', KEYS[7])
end
local up, now = now_ms_up()
local now_text = string.format('%d', now)
local due = {}
if delay > 0 or redis.call('ZCARD', KEYS[2]) > 0 then
  -- A delayed job is due at the clock rounded up plus its delay (never early); jobs due by
  -- the clock rounded down are made ready.
  due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_text, 'LIMIT', '0', '1000')
end
if delay == 0 or #due > 0 then
  redis.call('ZCARD', KEYS[1])
  local bad = bad_sequence(KEYS[5])
  if bad then
    return bad
  end
end
if #due > 0 then
  redis.call('HLEN', KEYS[3])
end
if priority > 0 or #due > 0 then
  redis.call('HLEN', KEYS[4])
end
-- Delayed jobs already due go to ready first, so they keep their place before the jobs
-- pushed now.
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[2], id)
  local p = tonumber(redis.call('HGET', KEYS[4], id)) or 0
  redis.call('ZADD', KEYS[1], ready_score(p, KEYS[5]), id)
end
local out, ready, delayed = {}, 0, 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HSETNX', KEYS[3], id, ARGV[i + 1]) == 0 then
    out[#out + 1] = '0'
  else
    redis.call('HSET', KEYS[3], id .. '\255', now_text)
    if priority > 0 then
      redis.call('HSET', KEYS[4], id, priority)
    end
    if timeout then
      redis.call('HSET', KEYS[7], id, '0:' .. timeout)
    end
    if delay > 0 then
      redis.call('ZADD', KEYS[2], up + delay, id)
      delayed = delayed + 1
    else
      redis.call('ZADD', KEYS[1], ready_score(priority, KEYS[5]), id)
      ready = ready + 1
    end
    out[#out + 1] = '1'
  end
end
counting(KEYS[6], now)
count('pushed', ready + delayed)
-- Wake takers: every idle one for a batch, one for a single job; a delayed job wakes one
-- too, so that a taker asleep until a later due time sleeps until this one instead.
if ready > 1 then
  notify(ARGV[3], '*')
elseif ready + delayed > 0 then
  notify(ARGV[3], '1')
end
return table.concat(out)
