-- Whether the delivery holding token ARGV[1] was cancelled, and why. KEYS: 1 cancelled
-- (zset token -> until ms), 2 cancel messages (hash token -> message).
-- Returns {1, message} cancelled, {0, ''} not (or its mark is no longer kept).
local now = now_ms()
local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
local message = redis.call('HGET', KEYS[2], ARGV[1])
if until_ms and tonumber(until_ms) > now then
  return {1, message or ''}
end
return {0, ''}
