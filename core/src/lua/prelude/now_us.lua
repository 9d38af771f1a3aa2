-- now_us(): the server's clock in microseconds since the epoch (math.floor(now_us() / 1000)
-- is now_ms(): both are exact integers in a double).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
