-- The schedules of a queue. KEYS: 1 schedules (hash, as in schedule_part.lua).
-- Returns its fields and values, flat.
return redis.call('HGETALL', KEYS[1])
