-- The epoch of a queue's schedules: the server ms their hash was first written, kept while
-- the queue's data is (schedule_upsert.lua sets it). KEYS: 1 schedules (hash, as in
-- schedule_part.lua). Returns it, or false when there is none (no schedule was ever
-- upserted, or the data was lost).
return redis.call('HGET', KEYS[1], '@epoch')
