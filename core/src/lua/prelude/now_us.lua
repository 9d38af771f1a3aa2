-- now_us(): the server's clock in microseconds since the epoch (math.floor(now_us() / 1000)
-- is now_ms(): both are exact integers in a double), and TIME's reply it was read from
-- (for issue_fence: the digits of the clock without formatting a float).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t
end
