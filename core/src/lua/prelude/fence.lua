-- fence_counter(key, text): the fence counter read from key (text: its value, nil when
-- unset, counting as 0), or nil and an error reply to return when it does not hold an
-- integer below 2^53 - 1.
local function fence_counter(key, text)
  if not text then
    return 0
  end
  local counter = tonumber(text)
  if (not counter) or counter ~= math.floor(counter) or counter >= 9007199254740991 then
    return nil, redis.error_reply('ERR the fence counter ' .. key .. ' does not hold an integer below 2^53 - 1')
  end
  return counter
end
-- issue_fence(key, counter, us, t): stores and returns the next fence and its text. A fence
-- is max(counter + 1, server clock in microseconds): a counter lost with the data (restart
-- without persistence, an older snapshot, failover to a lagging replica) cannot issue a
-- fence at or below one issued before, as long as the server clock reads later than it did
-- when those were issued. Fences stay exact integers (below 2^53) until about 2255.
-- t: the TIME reply us was read from (now_us's second value), if at hand: the clock's text
-- is then its digits (seconds, microseconds padded to 6) instead of a formatted float
-- (about 3,500 server instructions less).
local function issue_fence(key, counter, us, t)
  local fence, text
  if counter < us and t then
    fence, text = us, t[1] .. string.sub('00000', #t[2]) .. t[2]
  else
    fence = math.max(counter + 1, us)
    text = string.format('%.0f', fence)
  end
  redis.call('SET', key, text)
  return fence, text
end
