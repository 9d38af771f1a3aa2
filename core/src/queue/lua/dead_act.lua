-- Requeue or delete the dead jobs a filter picks: one page of the dead list, oldest first.
-- KEYS: 1 dead, 2 ready, 3 priorities, 4 sequence counter, 5 deliveries, 6 bases,
-- 7 reasons, 8 payloads, 9 dedup ids, 10 the jobs' dedup entries (dead_list.lua and
-- revive.lua name them after the dead list: they are declared and read here), 11 this
-- page's record ('...:q:dead:page:<call id>', a list kept a minute): a page sent again
-- after a lost reply is answered from it and acts on nothing more.
-- ARGV: 1 'requeue' or 'delete', 2 the index in the dead list to look from, 3 how many
-- entries to look at (at most), 4 how many to act on (at most), 5 the kind of death to
-- pick ('' any: bury.lua's kinds), 6 text the reason must contain ('' any), 7 pick only
-- jobs dead at or before this server time (ms; '' any), 8 the channel a requeue announces.
-- A job whose death was not recorded (dead before records were kept) has no kind and no
-- time: only a filter without either picks it.
-- Returns {next, id...}: the index to look from next (-1: the list's end was reached),
-- then the ids acted on.
-- The cost is bounded by the page: the picked entries are marked in place and removed by
-- one LREM from the list's nearer end (an LREM per pick scanned the list from its head).
if redis.call('EXISTS', KEYS[11]) == 1 then
  return redis.call('LRANGE', KEYS[11], 0, -1)
end
local len = redis.call('LLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
for _, i in ipairs({3, 5, 6, 7, 8, 9, 10}) do
  redis.call('HLEN', KEYS[i])
end
local bad = bad_sequence(KEYS[4])
if bad then
  return bad
end
local from, scan, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local kind, text, before = ARGV[5], ARGV[6], tonumber(ARGV[7])
local page = redis.call('LRANGE', KEYS[1], from, from + scan - 1)
local out = {0}
local looked = 0
-- No id is this long (ids are at most 512 bytes, a group's 128 more).
local mark = string.rep('\0', 1024)
for i, id in ipairs(page) do
  if #out - 1 >= limit then
    break
  end
  looked = looked + 1
  local record = redis.call('HGET', KEYS[8], id .. '\254') or ''
  local at, of = string.match(record, '^(%d+) (%S+)$')
  local picked = (kind == '' or of == kind)
    and (not before or (at and tonumber(at) <= before))
  if picked and text ~= '' then
    local reason = redis.call('HGET', KEYS[7], id)
    picked = reason and string.find(reason, text, 1, true) ~= nil
  end
  if picked then
    redis.call('LSET', KEYS[1], from + i - 1, mark)
    if ARGV[1] == 'requeue' then
      revive(KEYS[1], id, ARGV[8])
    else
      erase_dead(KEYS[1], id)
    end
    out[#out + 1] = id
  end
end
local picked = #out - 1
if picked > 0 then
  local last = from + looked - 1
  if last < len - from then
    redis.call('LREM', KEYS[1], picked, mark)
  else
    redis.call('LREM', KEYS[1], -picked, mark)
  end
end
if looked == #page and #page < scan then
  out[1] = -1
else
  out[1] = from + looked - picked
end
redis.call('RPUSH', KEYS[11], unpack(out))
redis.call('PEXPIRE', KEYS[11], 60000)
return out
