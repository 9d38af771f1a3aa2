-- Create or change a schedule. ARGV: 1 name, 2 spec, 3 payload, 4 priority (0..255),
-- 5 channel, 6 from (ms), 7 the schedule's first occurrence strictly after `from` (ms; -1:
-- none), both '' when the caller does not know the server's time yet.
-- The hash's field '@epoch' is set to now when missing (schedule_epoch.lua).
-- Returns {0, next, now}: unchanged (same spec and template; its pending occurrence exists,
-- or it has none left: next -1); {1, next, now}: created or changed, its waiting pending
-- occurrence (if any) replaced by `next` (-1: no occurrence left); {-1, -1, floor}: the
-- first occurrence must be computed strictly after `floor` and sent again (`from` after
-- `floor`, or the occurrence given is already past, or not after `floor`). `floor` is the
-- server's time, or, for the same spec and template whose pending occurrence's job is gone
-- (cancelled and forgotten, or acked before the advance past it ran), that occurrence when
-- it is later: an occurrence whose job ended is never made again.
local now = now_ms()
local h = read_all()
-- The schedules' epoch: when this hash was first written (server ms). Only a loss of the
-- queue's data (a restart without persistence, a failover to an empty replica) changes it,
-- so a client that upserted schedules can tell when to upsert them again.
if not redis.call('HGET', KEYS[1], '@epoch') then
  redis.call('HSET', KEYS[1], '@epoch', now)
end
local next = h[5]
local same = h[1] == ARGV[2] and h[2] == ARGV[3] and h[3] == ARGV[4] and next
if same and (next == '-1' or redis.call('HEXISTS', KEYS[4], prefix .. next) == 1) then
  return {0, tonumber(next), now}
end
local floor = now
if same then
  floor = math.max(now, tonumber(next))
end
local from, due = tonumber(ARGV[6]), tonumber(ARGV[7])
if not from or not due or from > floor or (due ~= -1 and (due < now or (same and due <= floor))) then
  return {-1, -1, floor}
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
