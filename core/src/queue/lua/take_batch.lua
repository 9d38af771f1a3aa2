-- Take up to n ready jobs in one call, each on its own lease (its own token).
-- KEYS: those of dequeue.lua: 1 ready, 2 delayed, 3 payloads, 4 priorities, 5 sequence
-- counter, 6 in flight, 7 leases, 8 deliveries, 9 dead, 10 holders, 11 bases, 12 undone
-- takes, 13 pauses (field '*': the queue is paused), 14 counts (taken, and what the
-- reclaiming moves).
-- ARGV: 1 visibility timeout ms, 2 max deliveries, 3.. one lease token per job wanted.
-- A retry after a lost reply (the same tokens) gets the jobs leased to them, their leases
-- renewed to the visibility timeout from now (never shortened); a token remembered as
-- undone takes nothing; the other tokens get the next ready jobs in order (none while the
-- queue is paused). Due delayed jobs and jobs whose lease ran out are made ready first, as
-- by the take.
-- Returns {wait, job, job, ...}: each job {token number (1 for ARGV[3]), delivery, id,
-- payload, and what handed in reclaim.lua adds: attempt, timeout, hold limit, enqueue time
-- and wait}; wait is 0 when a job is handed out, else the ms until a delayed job is due or a
-- lease runs out, or -2 (nothing scheduled, or paused).
-- Every key is read before any is written (a wrong type fails before any write).
local now = now_ms()
counting(KEYS[14], now)
local visibility, slack, queue_timeout = lease_args(ARGV[1])
local paused = redis.call('HEXISTS', KEYS[13], '*') == 1
local renew, fresh = {}, {}
for i = 3, #ARGV do
  local token = ARGV[i]
  local undone = redis.call('ZSCORE', KEYS[12], token)
  if not (undone and tonumber(undone) > now) then
    local mine = redis.call('HGET', KEYS[10], token)
    local expiry = mine and redis.call('HGET', KEYS[7], mine) == token
        and tonumber(redis.call('ZSCORE', KEYS[6], mine) or '0')
    if expiry and expiry > now then
      renew[#renew + 1] = {i - 2, mine, expiry, token}
    else
      fresh[#fresh + 1] = i - 2
    end
  end
end
local due, expired = overdue(now)
local top = {}
if #fresh > 0 and not paused then
  top = redis.call('ZRANGE', KEYS[1], 0, #fresh - 1)
else
  redis.call('ZCARD', KEYS[1])
end
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
redis.call('HLEN', KEYS[7])
redis.call('HLEN', KEYS[8])
redis.call('LLEN', KEYS[9])
redis.call('HLEN', KEYS[11])
local bad = bad_sequence(KEYS[5])
if bad then
  return bad
end
local out = {0}
for _, r in ipairs(renew) do
  local n = tonumber(redis.call('HGET', KEYS[8], r[2])) or 1
  local payload, at = job_of(r[2])
  local base, timeout = base_of(r[2])
  local upto, e = renewed_until(r[4], now, visibility)
  if r[3] < upto then
    redis.call('ZADD', KEYS[6], upto, r[2])
  end
  out[#out + 1] = handed(r[1], n, r[2], payload or '', base, timeout, left_of(e, now), at, now)
end
if #due > 0 or #expired > 0 then
  reclaim(due, expired, tonumber(ARGV[2]), now)
  if #fresh > 0 and not paused then
    top = redis.call('ZRANGE', KEYS[1], 0, #fresh - 1)
  end
end
for k, id in ipairs(top) do
  local payload, at = job_of(id)
  local base, timeout = base_of(id)
  local e = hold_end(now, timeout, slack, queue_timeout)
  local n = lease_next(id, ARGV[fresh[k] + 2], now, visibility, e)
  out[#out + 1] = handed(fresh[k], n, id, payload or '', base, timeout, left_of(e, now), at, now)
end
count('taken', #top)
if #out == 1 then
  if paused then
    out[1] = -2
  else
    out[1] = next_wait(now)
  end
end
return out
