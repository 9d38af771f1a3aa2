-- A rate limiter's decision (GCRA on the server clock). KEYS[1]: the TAT key.
-- ARGV: interval (µs), tolerance (µs, interval * burst), cost, '1' to peek (decide for
-- cost units without taking them).
-- Returns {allowed (1/0), remaining, retry_after (µs), reset_after (µs), server time (µs)}:
-- remaining and reset_after describe the limiter after the decision (units that could be
-- taken at once, time until it is full again).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, tolerance, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local allowed, tat, retry = gcra(KEYS[1], now, interval, tolerance, cost)
if allowed == nil then
  return redis.error_reply('WRONGTYPE the rate limiter key ' .. KEYS[1] .. ' does not hold a time')
end
if allowed then
  if ARGV[4] == '1' then
    tat = tat - interval * cost
  elseif cost > 0 then
    gcra_store(KEYS[1], tat, now)
  end
end
-- (remaining is never below 0: a time stored by a limiter of another burst or rate for this
-- name may lie further ahead than this tolerance.)
return {allowed and 1 or 0, math.max(0, math.floor((now + tolerance - tat) / interval)), retry, tat - now, now}
