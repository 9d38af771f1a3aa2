-- The dead list's shared part: a death's record, retention, deletion and requeue. Each
-- function takes the queue's dead list key (`<stem>:q:dead`, or a grouped queue's
-- `<stem>:q:g:dead`) and names the queue's other keys after it (`<stem>:q:` + part), as
-- group_take.lua names a group's keys: every key of a queue shares its `{name}` hash tag,
-- so they are in the slot of the keys the script declares. Only a job's death (rare) and
-- the dead-list scripts touch them: a plain job's path never does. A script reads the keys
-- it declares before it writes any; these functions write the others with redis.pcall, so
-- that a foreign value at one (a key of the wrong type) leaves that part undone and fails
-- nothing half-way.
-- A death's record: the payloads hash's field id .. '\254' = '<server ms> <kind>', kind one
-- of failed (the handler's error: the reasons hash keeps its message), expired (its lease
-- ran out on its last delivery), timed_out (past its timeout), cancelled. Retention:
-- '<max jobs> <max age ms>' (0: no limit) in '<stem>:q:dead_keep', else the defaults below.
local DEAD_KEEP_JOBS, DEAD_KEEP_MS = 10000, 15552000000
-- erase_dead(dead, id): deletes every trace of dead job id but its entry in the list: its
-- payload, enqueue time and death record, priority, deliveries, base, reason, dedup entry.
local function erase_dead(dead, id)
  local p = string.sub(dead, 1, -5)
  redis.pcall('HDEL', p .. 'payloads', id, id .. '\255', id .. '\254')
  for _, part in ipairs({'priorities', 'deliveries', 'bases', 'reasons'}) do
    redis.pcall('HDEL', p .. part, id)
  end
  if string.byte(id, 1) == 126 then
    pcall(function()
      dedup_clear(p .. 'dedup', p .. 'dedup_of', id)
    end)
  end
end
-- dead_keep(dead): the retention, jobs and ms (0: no limit).
local function dead_keep(dead)
  local text = redis.pcall('GET', string.sub(dead, 1, -5) .. 'dead_keep')
  if type(text) == 'string' then
    local jobs, ms = string.match(text, '^(%d+) (%d+)$')
    if jobs then
      return tonumber(jobs), tonumber(ms)
    end
  end
  return DEAD_KEEP_JOBS, DEAD_KEEP_MS
end
-- trim_dead(dead, now): applies the retention at server time now (ms): the oldest dead jobs
-- beyond the count, and those that died longer ago than the age, are deleted for good, at
-- most 50 a call (a lowered retention is applied in steps). A job that died before deaths
-- were recorded has no time: the age stops there (the count still applies). Returns how
-- many were deleted.
local function trim_dead(dead, now)
  local jobs, ms = dead_keep(dead)
  local payloads = string.sub(dead, 1, -5) .. 'payloads'
  local n = 0
  while n < 50 do
    local id = redis.call('LINDEX', dead, 0)
    if not id then
      break
    end
    local over = jobs > 0 and redis.call('LLEN', dead) > jobs
    if not over and ms > 0 then
      local rec = redis.pcall('HGET', payloads, id .. '\254')
      local at = type(rec) == 'string' and tonumber(string.match(rec, '^%d+'))
      over = at and at + ms <= now
    end
    if not over then
      break
    end
    redis.call('LPOP', dead)
    erase_dead(dead, id)
    n = n + 1
  end
  return n
end
