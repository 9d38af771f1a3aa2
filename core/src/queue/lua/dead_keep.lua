-- The dead list's retention (dead_list.lua): ARGV[1] 'set' (ARGV[2] the most jobs kept,
-- ARGV[3] the longest ms a dead job is kept; 0: no limit), 'default' (the defaults again)
-- or 'get'; 'set' and 'default' then apply it: at most 50 jobs are deleted a call
-- (dead_list.lua's trim_dead; call again while it says 50).
-- KEYS: 1 dead, 2 payloads, 3 priorities, 4 deliveries, 5 bases, 6 reasons, 7 dedup ids,
-- 8 the jobs' dedup entries, 9 the retention (a string '<jobs> <ms>'; dead_list.lua names
-- them all after the dead list: they are declared and read here).
-- Returns {jobs, ms, deleted}.
redis.call('LLEN', KEYS[1])
for i = 2, 8 do
  redis.call('HLEN', KEYS[i])
end
redis.call('GET', KEYS[9])
if ARGV[1] == 'set' then
  redis.call('SET', KEYS[9], ARGV[2] .. ' ' .. ARGV[3])
elseif ARGV[1] == 'default' then
  redis.call('DEL', KEYS[9])
end
local jobs, ms = dead_keep(KEYS[1])
local deleted = 0
if ARGV[1] ~= 'get' then
  local now = now_ms()
  deleted = trim_dead(KEYS[1], now)
end
return {jobs, ms, deleted}
