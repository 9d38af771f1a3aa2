-- Look one job up by id. KEYS: as inspect.lua's. ARGV: 1 id, 2 preview bytes.
-- Returns {server ms, then job_fields' eight fields} or {server ms} when no job has this
-- id. Its state is where it is found: ready, delayed, in_flight, dead, or other (a payload
-- kept but in none of these: a state added by another feature).
local now = now_ms()
local id, preview = ARGV[1], tonumber(ARGV[2])
local out = {now}
for _, s in ipairs({{'ready', KEYS[1]}, {'delayed', KEYS[2]}, {'in_flight', KEYS[3]}}) do
  local score = redis.call('ZSCORE', s[2], id)
  if score then
    if s[1] == 'ready' then
      score = nil
    end
    job_fields(out, id, s[1], score, preview)
    return out
  end
end
if redis.call('HEXISTS', KEYS[5], id) == 0 then
  return out
end
local dead
if redis.call('TYPE', KEYS[4])['ok'] == 'list' then
  dead = redis.call('LPOS', KEYS[4], id)
else
  dead = redis.call('ZSCORE', KEYS[4], id)
end
job_fields(out, id, dead and 'dead' or 'other', nil, preview)
return out
