-- now_ms_up(): the server's clock in milliseconds since the epoch rounded up, then rounded
-- down (the clock the other scripts read). A due time is the rounded-up clock plus a delay in whole
-- milliseconds (rounded up by the client), and a job is due once the rounded-down clock
-- reaches it: never before the delay has passed since the script ran.
local function now_ms_up()
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  local down = tonumber(t[1]) * 1000 + math.floor(us / 1000)
  if us % 1000 > 0 then
    return down + 1, down
  end
  return down, down
end
