-- A job's death (after dead_list.lua, whose naming of a queue's keys it shares; count.lua:
-- a death is counted; and dedup_release.lua, after ready.lua).
-- bury(dead, id, kind, now): job id onto the dead list, its death recorded (kind, server
-- time now in ms), counted, and the retention applied. A keep-latest follow-up parked
-- behind it (its push was answered Queued) is made ready now, holding the dedup id in the
-- dead job's place; without one, the dead job keeps its dedup entry. Returns the
-- follow-up's id when one was made ready (its caller wakes the idle takers), or nil.
local function bury(dead, id, kind, now)
  redis.call('RPUSH', dead, id)
  local p = string.sub(dead, 1, -5)
  redis.pcall('HSET', p .. 'payloads', id .. '\254', string.format('%d ', now) .. kind)
  local released = nil
  if string.byte(id, 1) == 126 then
    pcall(function()
      released = dedup_release(p .. 'dedup', p .. 'dedup_of', id, p .. 'payloads',
        p .. 'priorities', p .. 'ready', p .. 'seq', now, true)
    end)
  end
  count('dead', 1)
  trim_dead(dead, now)
  return released
end
