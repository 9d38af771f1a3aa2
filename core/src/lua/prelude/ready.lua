-- bad_sequence(key): an error reply to return when the queue's sequence counter holds
-- something other than an integer (nil when it is fine or unset).
local function bad_sequence(key)
  local text = redis.call('GET', key)
  if text and not tonumber(text) then
    return redis.error_reply('ERR the sequence counter ' .. key .. ' is not an integer')
  end
end
-- ready_score(priority, seq_key): the score of a job made ready now: higher priorities
-- (0..255) first, then first in, first out (the sequence counter at seq_key).
local function ready_score(priority, seq_key)
  local seq = redis.call('INCR', seq_key)
  return (255 - priority) * 1099511627776 + seq
end
