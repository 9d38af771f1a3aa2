-- The schedule scripts' shared part, on their KEYS: 1 schedules (hash: for schedule <name>
-- the fields 's:<name>' spec, 'p:<name>' payload, 'r:<name>' priority, 'v:<name>' version
-- of the spec, 'n:<name>' due time of its pending occurrence, -1 when none is left),
-- 2 ready, 3 delayed, 4 payloads, 5 priorities, 6 in flight, 7 counts (the stem of the
-- per-minute counts: count.lua; an occurrence pushed counts as 'pushed'). ARGV[1] is the
-- schedule's name.
-- An occurrence is the job 'sched:<name>:<due ms>', delayed until its due time.
local prefix = 'sched:' .. ARGV[1] .. ':'
-- read_all(): reads every key a schedule script may write, so that a key of the wrong type
-- fails the call before anything is written; returns the schedule's fields {spec, payload,
-- priority, version, next}.
local function read_all()
  local n = ARGV[1]
  local h = {}
  for i, f in ipairs({'s:', 'p:', 'r:', 'v:', 'n:'}) do
    h[i] = redis.call('HGET', KEYS[1], f .. n)
  end
  redis.call('ZCARD', KEYS[2])
  redis.call('ZCARD', KEYS[3])
  redis.call('HLEN', KEYS[4])
  redis.call('HLEN', KEYS[5])
  redis.call('ZCARD', KEYS[6])
  return h
end
-- drop_waiting(due): removes occurrence `due` if it waits (delayed or ready; a leased one is
-- left to run).
local function drop_waiting(due)
  local id = prefix .. due
  if redis.call('ZREM', KEYS[3], id) + redis.call('ZREM', KEYS[2], id) > 0 then
    redis.call('HDEL', KEYS[4], id, id .. '\255')
    redis.call('HDEL', KEYS[5], id)
  end
end
-- occur(due, payload, priority, channel, now): pushes occurrence `due` as a delayed job (a
-- due time already passed makes it ready at the next take), its enqueue time `now` (server
-- ms) beside its payload, counted as pushed; nothing if that id exists.
local function occur(due, payload, priority, channel, now)
  local id = prefix .. due
  if redis.call('HSETNX', KEYS[4], id, payload) == 1 then
    redis.call('HSET', KEYS[4], id .. '\255', string.format('%d', now))
    counting(KEYS[7], now)
    count('pushed', 1)
    if tonumber(priority) > 0 then
      redis.call('HSET', KEYS[5], id, priority)
    end
    redis.call('ZADD', KEYS[3], due, id)
    notify(channel, '1')
  end
end
