-- A job's death (after dead_list.lua, whose naming of a queue's keys it shares; and
-- count.lua: a death is counted).
-- bury(dead, id, kind, now): job id onto the dead list, its death recorded (kind, server
-- time now in ms), counted, and the retention applied.
local function bury(dead, id, kind, now)
  redis.call('RPUSH', dead, id)
  redis.pcall('HSET', string.sub(dead, 1, -5) .. 'payloads', id .. '\254', string.format('%d ', now) .. kind)
  count('dead', 1)
  trim_dead(dead, now)
end
