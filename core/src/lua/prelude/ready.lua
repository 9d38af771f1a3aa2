-- bad_sequence(key): an error reply to return when the queue's sequence counter holds
-- something other than an integer (nil when it is fine or unset).
local function bad_sequence(key)
  local text = redis.call('GET', key)
  if text and not tonumber(text) then
    return redis.error_reply('ERR the sequence counter ' .. key .. ' is not an integer')
  end
end
-- ready_score(priority, seq_key): the score of a job made ready now, as text (for ZADD):
-- higher priorities (0..255) first, then first in, first out (the sequence counter at
-- seq_key). (A number given to redis.call is formatted with %.17g, which costs the server
-- about twice what string.format('%d') does; the scripts on a job's path pass integers as
-- text.)
local function ready_score(priority, seq_key)
  local seq = redis.call('INCR', seq_key)
  return string.format('%d', (255 - priority) * 1099511627776 + seq)
end
