-- Report a read hold: {1, ms left} held, {0, -2} gone.
-- KEYS[1] readers; ARGV[1] token.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now then
  return {1, tonumber(expiry) - now}
end
return {0, -2}
