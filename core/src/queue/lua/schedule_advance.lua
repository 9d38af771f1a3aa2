-- Advance a schedule past occurrence ARGV[2], taken now: its next occurrence is pushed
-- before this one runs. ARGV: 1 name, 2 due (ms) of the taken occurrence, 3 channel, 4 the
-- version of the spec the caller computed from, 5 from (ms), 6 the first occurrence
-- strictly after `from` (ms; -1: none): 4-6 '' when the caller does not know them yet.
-- Idempotent: only the pending occurrence advances, and once.
-- Returns {code, now, ver, spec, next}: code 1 advanced to `next` (-1: none left); 0 not
-- pending (advanced already, replaced by a change, or the schedule removed: ver and spec
-- false then); -1 the next occurrence must be computed from `spec` (version `ver`) at `now`
-- and sent again: the first occurrence strictly after max(due, now) is wanted.
local now = now_ms()
local h = read_all()
if not h[1] or h[5] ~= ARGV[2] then
  return {0, now, h[4], h[1], tonumber(h[5] or '-1')}
end
local due, from, next = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[6])
local after = math.max(due, now)
if ARGV[4] ~= h[4] or not from or not next or from > after or (next ~= -1 and next <= after) then
  return {-1, now, h[4], h[1], -1}
end
redis.call('HSET', KEYS[1], 'n:' .. ARGV[1], ARGV[6])
if next ~= -1 then
  occur(ARGV[6], h[2], h[3], ARGV[3], now)
end
return {1, now, h[4], h[1], next}
