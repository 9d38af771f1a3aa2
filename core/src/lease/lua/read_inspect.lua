-- Report a read hold: {1, ms left} held, {0, -2} gone.
-- KEYS[1] readers; ARGV[1] token.
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) > now then
  return {1, tonumber(expiry) - now}
end
return {0, -2}
