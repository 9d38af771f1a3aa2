-- The schedules of a queue. KEYS: 1 schedules (hash, as in schedule_part.lua).
-- Returns its fields and values, flat, but the epoch ('@epoch': schedule_epoch.lua).
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  if all[i] ~= '@epoch' then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
