-- Delete dead jobs for good: the one named by ARGV[1], or when ARGV[2] is 'page' (never
-- because an id is empty) the oldest ARGV[3] of them, with every trace of them
-- (dead_list.lua's erase_dead, which names the keys after the dead list: they are declared
-- and read here).
-- KEYS: 1 dead, 2 payloads (and the enqueue times and death records beside them),
-- 3 priorities, 4 deliveries, 5 bases, 6 reasons, 7 dedup ids (hash dedup id -> job), 8 the
-- jobs' dedup ids (hash job -> entry); for a page, 9 its record ('...:q:dead:page:<call
-- id>', kept a minute: a page sent again after a lost reply is answered from it).
-- Returns how many were deleted; a page {deleted, the list's length before it}.
if ARGV[2] == 'page' then
  local done = redis.call('LRANGE', KEYS[9], 0, -1)
  if #done == 2 then
    return {tonumber(done[1]), tonumber(done[2])}
  end
end
for i = 1, 8 do
  if i == 1 then
    redis.call('LLEN', KEYS[1])
  else
    redis.call('HLEN', KEYS[i])
  end
end
local ids
if ARGV[2] == 'page' then
  local len = redis.call('LLEN', KEYS[1])
  local n = tonumber(ARGV[3])
  ids = redis.call('LRANGE', KEYS[1], 0, n - 1)
  redis.call('LTRIM', KEYS[1], n, -1)
  for _, id in ipairs(ids) do
    erase_dead(KEYS[1], id)
  end
  redis.call('RPUSH', KEYS[9], #ids, len)
  redis.call('PEXPIRE', KEYS[9], 60000)
  return {#ids, len}
else
  if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then
    return 0
  end
  ids = {ARGV[1]}
end
for _, id in ipairs(ids) do
  erase_dead(KEYS[1], id)
end
return #ids
