-- Delete dead jobs for good: the one named by ARGV[1], or every dead job when ARGV[2] is
-- 'all' (never because an id is empty), with every trace of them (dead_list.lua's
-- erase_dead, which names the keys after the dead list: they are declared and read here).
-- KEYS: 1 dead, 2 payloads (and the enqueue times and death records beside them),
-- 3 priorities, 4 deliveries, 5 bases, 6 reasons, 7 dedup ids (hash dedup id -> job), 8 the
-- jobs' dedup ids (hash job -> entry). Returns how many were deleted.
for i = 1, 8 do
  if i == 1 then
    redis.call('LLEN', KEYS[1])
  else
    redis.call('HLEN', KEYS[i])
  end
end
local ids
if ARGV[2] == 'all' then
  ids = redis.call('LRANGE', KEYS[1], 0, -1)
  redis.call('DEL', KEYS[1])
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
