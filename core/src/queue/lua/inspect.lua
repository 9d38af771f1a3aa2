-- The inspection scripts' shared part (inspect_list.lua, inspect_job.lua), on their KEYS:
-- 1 ready, 2 delayed, 3 in flight, 4 dead, 5 payloads (with each job's enqueue time,
-- server ms, under id .. '\255'), 6 priorities, 7 deliveries. They only read.
-- job_fields(out, id, state, score, preview): appends job id's eight fields to out: id,
-- state, its score in that state ('' for none: a delayed job's due time, a job in flight's
-- lease expiry, a dead job's time of death from its record (bury.lua), ms), priority,
-- deliveries, enqueue time ('' unknown), payload size, and the payload's first preview
-- bytes.
local function job_fields(out, id, state, score, preview)
  local v = redis.call('HMGET', KEYS[5], id, id .. '\255', id .. '\254')
  local payload = v[1] or ''
  if state == 'dead' and v[3] then
    score = string.match(v[3], '^%d+')
  end
  out[#out + 1] = id
  out[#out + 1] = state
  out[#out + 1] = score or ''
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[6], id)) or 0
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[7], id)) or 0
  out[#out + 1] = v[2] or ''
  out[#out + 1] = #payload
  out[#out + 1] = string.sub(payload, 1, preview)
end
