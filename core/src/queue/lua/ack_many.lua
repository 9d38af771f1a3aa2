-- Acknowledge many jobs in one call, each as ack.lua does one: done and forgotten, refused
-- once its lease ran out.
-- KEYS: 1 in flight, 2 leases, 3 payloads, 4 priorities, 5 deliveries, 6 holders, 7 bases,
-- 8 settled (zset delivery token -> until when its ack or nack is remembered, ms), 9 pauses
-- (hash; field 'drain': the channel a drain waiter listens on, announced on once), 10 dedup
-- ids, 11 the jobs' dedup entries, 12 ready, 13 sequence counter (10 to 13 as ack.lua's:
-- touched only for jobs pushed with a dedup id, whose entries go with them and whose
-- keep-latest follow-ups become ready), 14 counts: ack.lua's keys without the undone
-- takes.
-- ARGV: 1 how long to remember each settlement (ms), 2 the queue's wake channel (keep-latest
-- follow-ups made ready wake the idle takers), then an id and its token per job.
-- Returns a string, one character per job: '1' acked (or this very delivery was settled
-- already: a retry after a lost reply finds its own ack), '0' the lease ran out (or the job
-- is gone), '2' another delivery holds it.
-- Every key is read before any is written (a wrong type fails before any write).
local now = now_ms()
redis.call('ZCARD', KEYS[1])
for i = 2, 7 do
  redis.call('HLEN', KEYS[i])
end
redis.call('ZCARD', KEYS[8])
local drain = redis.call('HGET', KEYS[9], 'drain')
for i = 3, #ARGV - 1, 2 do
  if string.byte(ARGV[i], 1) == 126 then
    -- A job pushed with a dedup id: the keys its ack may write, read first.
    redis.call('HLEN', KEYS[10])
    redis.call('HLEN', KEYS[11])
    redis.call('ZCARD', KEYS[12])
    local bad = bad_sequence(KEYS[13])
    if bad then
      return bad
    end
    break
  end
end
local keep = tonumber(ARGV[1])
local out, acked, released = {}, 0, false
for i = 3, #ARGV - 1, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local holder = redis.call('HGET', KEYS[2], id)
  local verdict
  if holder ~= token then
    local settled = redis.call('ZSCORE', KEYS[8], token)
    if settled and tonumber(settled) > now then
      verdict = '1'
    elseif holder then
      verdict = '2'
    else
      verdict = '0'
    end
  else
    local expiry = redis.call('ZSCORE', KEYS[1], id)
    if (not expiry) or tonumber(expiry) <= now then
      verdict = '0'
    else
      if string.byte(id, 1) == 126 then
        -- A job pushed with a dedup id: its entry goes with it, and a keep-latest follow-up
        -- parked behind it becomes ready, as ack.lua does.
        if dedup_release(KEYS[10], KEYS[11], id, KEYS[3], KEYS[4], KEYS[12], KEYS[13], now) then
          released = true
        end
      end
      redis.call('HDEL', KEYS[5], id)
      redis.call('ZREM', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id, id .. '\255')
      redis.call('HDEL', KEYS[4], id)
      redis.call('HDEL', KEYS[6], token, token .. ':e')
      redis.call('HDEL', KEYS[7], id)
      redis.call('ZADD', KEYS[8], now + keep, token)
      verdict, acked = '1', acked + 1
    end
  end
  out[#out + 1] = verdict
end
if acked > 0 then
  counting(KEYS[14], now)
  count('acked', acked)
  -- Settlements whose time has passed are dropped now and then (one call in 64 by the
  -- clock), as the ack-and-take does; the key lives as long as its latest member.
  if now % 64 == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
  end
  redis.call('PEXPIRE', KEYS[8], keep)
  if drain then
    notify(drain, '*')
  end
end
if released then
  notify(ARGV[2], '1')
end
return table.concat(out)
