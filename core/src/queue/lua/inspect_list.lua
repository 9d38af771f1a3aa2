-- List the jobs in one state, a page at a time. KEYS: as inspect.lua's.
-- ARGV: 1 state (ready, delayed, in_flight, dead), 2 and 3 the cursor: '' to start, else
-- the last job's score (for the dead list while it is a list: the next index) and id,
-- 4 limit (1 or more), 5 preview bytes.
-- Returns {server ms, next cursor's score ('' when this was the last page), its id, then
-- job_fields' eight fields per job}. A zset is paged by (score, id): a job that stays
-- where it is is listed exactly once; one that moves meanwhile may be missed or listed
-- twice. The page starts after the cursor's job if it is still there with that score,
-- else at the first job with that score.
local now = now_ms()
local state, limit, preview = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
local key = ({ready = KEYS[1], delayed = KEYS[2], in_flight = KEYS[3], dead = KEYS[4]})[state]
if not key then
  return redis.error_reply('ERR unknown job state ' .. state)
end
local ids, scores, next_score, next_id = {}, {}, '', ''
if redis.call('TYPE', key)['ok'] == 'list' then
  local start = tonumber(ARGV[2]) or 0
  ids = redis.call('LRANGE', key, start, start + limit - 1)
  if #ids == limit then
    next_score = tostring(start + limit)
  end
else
  local start = 0
  if ARGV[2] ~= '' then
    local rank = redis.call('ZRANK', key, ARGV[3])
    local score = rank and redis.call('ZSCORE', key, ARGV[3])
    if score and tonumber(score) == tonumber(ARGV[2]) then
      start = rank + 1
    else
      start = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[2])
    end
  end
  local page = redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
  for i = 1, #page, 2 do
    ids[#ids + 1] = page[i]
    scores[#ids] = page[i + 1]
  end
  if #ids == limit then
    next_score, next_id = page[#page], page[#page - 1]
  end
end
local out = {now, next_score, next_id}
for i, id in ipairs(ids) do
  local score = scores[i]
  if state == 'ready' or state == 'dead' then
    score = nil
  end
  job_fields(out, id, state, score, preview)
end
return out
