-- The requeue of dead jobs (requeue.lua, dead_act.lua), after bury.lua (whose naming of a
-- queue's keys after its dead list it shares).
-- revive(dead, id, channel): dead job id (already out of the list) back to ready, as if
-- pushed anew for its budget and backoff: max deliveries are counted afresh from here (its
-- base is its deliveries now; a timeout of its own, 'base:timeout', is kept), the takes
-- report the attempt since this requeue; its delivery number keeps increasing (it is the
-- job's fence, and must never repeat). Its reason and death record are forgotten.
local function revive(dead, id, channel)
  local p = string.sub(dead, 1, -5)
  redis.call('HDEL', p .. 'reasons', id)
  redis.call('HDEL', p .. 'payloads', id .. '\254')
  local timeout = string.match(redis.call('HGET', p .. 'bases', id) or '', ':(%d+)$')
  local base = tonumber(redis.call('HGET', p .. 'deliveries', id)) or 0
  redis.call('HSET', p .. 'bases', id, timeout and (base .. ':' .. timeout) or base)
  local priority = tonumber(redis.call('HGET', p .. 'priorities', id)) or 0
  redis.call('ZADD', p .. 'ready', ready_score(priority, p .. 'seq'), id)
  notify(channel, '1')
end
