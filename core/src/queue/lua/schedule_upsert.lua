-- Create or change a schedule. ARGV: 1 name, 2 spec, 3 payload, 4 priority (0..255),
-- 5 channel, 6 from (ms), 7 the schedule's first occurrence strictly after `from` (ms; -1:
-- none), both '' when the caller does not know the server's time yet.
-- The hash's field '@epoch' is set to now when missing (schedule_epoch.lua).
-- Returns {0, next, now}: unchanged (same spec and template; its pending occurrence exists,
-- or it has none left: next -1); {1, next, now}: created or changed, its waiting pending
-- occurrence (if any) replaced by `next` (-1: no occurrence left); {-1, -1, now}: the first
-- occurrence must be computed from `now` and sent again (`from` after the server's time, or
-- the occurrence given is already past).
local now = now_ms()
local h = read_all()
-- The schedules' epoch: when this hash was first written (server ms). Only a loss of the
-- queue's data (a restart without persistence, a failover to an empty replica) changes it,
-- so a client that upserted schedules can tell when to upsert them again.
if not redis.call('HGET', KEYS[1], '@epoch') then
  redis.call('HSET', KEYS[1], '@epoch', now)
end
local next = h[5]
if h[1] == ARGV[2] and h[2] == ARGV[3] and h[3] == ARGV[4] and next
    and (next == '-1' or redis.call('HEXISTS', KEYS[4], prefix .. next) == 1) then
  return {0, tonumber(next), now}
end
local from, due = tonumber(ARGV[6]), tonumber(ARGV[7])
if not from or not due or from > now or (due ~= -1 and due < now) then
  return {-1, -1, now}
end
if next and next ~= '-1' then
  drop_waiting(next)
end
local n = ARGV[1]
redis.call('HSET', KEYS[1], 's:' .. n, ARGV[2], 'p:' .. n, ARGV[3], 'r:' .. n, ARGV[4],
  'v:' .. n, (tonumber(h[4]) or 0) + 1, 'n:' .. n, ARGV[7])
if due ~= -1 then
  occur(ARGV[7], ARGV[3], ARGV[4], ARGV[5], now)
end
return {1, due, now}
