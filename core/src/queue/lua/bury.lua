-- A job's death (after dead_list.lua, whose naming of a queue's keys it shares; count.lua:
-- a death is counted; and dedup_release.lua, after ready.lua).
-- bury(dead, id, kind, now): job id onto the dead list, its death recorded (kind, server
-- time now in ms), counted, and the retention applied. A keep-latest follow-up parked
-- behind it (its push was answered Queued) is made ready now, holding the dedup id in the
-- dead job's place; without one, the dead job keeps its dedup entry.
local function bury(dead, id, kind, now)
  redis.call('RPUSH', dead, id)
  local p = string.sub(dead, 1, -5)
  redis.pcall('HSET', p .. 'payloads', id .. '\254', string.format('%d ', now) .. kind)
  if string.byte(id, 1) == 126 then
    pcall(function()
      dedup_release(p .. 'dedup', p .. 'dedup_of', id, p .. 'payloads', p .. 'priorities',
        p .. 'ready', p .. 'seq', now, true)
    end)
  end
  count('dead', 1)
  trim_dead(dead, now)
end
