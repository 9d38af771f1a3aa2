-- group_freed(ready_key, id): a grouped job's lease ended (acked, retried, dead, cancelled):
-- its slot in its group's index ('...:q:g:i:<group>') is freed, and a group set aside as
-- full ('...:q:g:full', or to be looked at again after a change of limits:
-- '...:q:g:recheck_full') goes back to the ring ('...:q:g:ring', at the turn counter's
-- score). `ready_key` is the script's ready set: on the grouped keys '...:q:g:ready'; on
-- the plain keys, or for an id without a group, nothing happens. Returns whether the group
-- came back (idle takers should be woken).
local function group_freed(ready_key, id)
  local sep = string.find(id, '\31', 1, true)
  if not sep or string.sub(ready_key, -8) ~= ':g:ready' then
    return false
  end
  local stem, g = string.sub(ready_key, 1, -6), string.sub(id, 1, sep - 1)
  redis.call('ZREM', stem .. 'i:' .. g, id)
  if redis.call('ZREM', stem .. 'full', g) + redis.call('ZREM', stem .. 'recheck_full', g) > 0 then
    local turn = tonumber(redis.call('GET', stem .. 'turn') or '0') or 0
    redis.call('ZADD', stem .. 'ring', turn, g)
    return true
  end
  return false
end
