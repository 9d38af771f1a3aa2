-- One page of a queue's groups with their figures (read only: sent as EVALSHA_RO).
-- KEYS: 1 ring (groups with ready jobs that may be taken), 2 rate-blocked groups, 3 full
-- groups, 4 paused groups set aside, 5 full groups to look at again, 6 rate-blocked groups
-- to look at again (group_limits.lua), 7 pauses (hash: 'g:<group>' a paused group). A
-- group's own keys are named after KEYS[1] without its 'ring': 'r:<group>' its ready jobs,
-- 'i:<group>' its running leases.
-- ARGV: 1 the set to look in (1 to 6, in KEYS' order), 2 the index in it to look from,
-- 3 how many groups at most.
-- Returns {next set, next index (set 0: the end), then for each group: id, the set it is in
-- (1 to 6), ready jobs, leases running, 1 when paused else 0}.
-- The cost is bounded by the page: a ZRANGE of at most ARGV[3] and three reads a group.
local stem = string.sub(KEYS[1], 1, -5)
local set, from, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {0, 0}
local n = 0
while set <= 6 and n < want do
  local room = want - n
  local page = redis.call('ZRANGE', KEYS[set], from, from + room - 1)
  for _, g in ipairs(page) do
    local paused = redis.call('HEXISTS', KEYS[7], 'g:' .. g)
    out[#out + 1] = g
    out[#out + 1] = set
    out[#out + 1] = redis.call('ZCARD', stem .. 'r:' .. g)
    out[#out + 1] = redis.call('ZCARD', stem .. 'i:' .. g)
    out[#out + 1] = paused
    n = n + 1
  end
  if #page < room then
    set, from = set + 1, 0
  else
    from = from + #page
  end
end
if set <= 6 then
  out[1], out[2] = set, from
end
return out
