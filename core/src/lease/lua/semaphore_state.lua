-- Read a semaphore: {permit count (-1: unset), holders, waiters}, where holders is a flat
-- list of token, ms left and waiters the live waiters in order. Expired entries are skipped.
-- KEYS[1] holders, KEYS[2] waiters, KEYS[3] waiter timeouts, KEYS[4] permit count.
-- Every key is read (a wrong type is an error, whatever the contents).
redis.call('ZCARD', KEYS[3])
local now = now_ms()
local holders = {}
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  holders[#holders + 1] = entries[i]
  holders[#holders + 1] = tonumber(entries[i + 1]) - now
end
local waiters = {}
for _, w in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local expiry = redis.call('ZSCORE', KEYS[3], w)
  if expiry and tonumber(expiry) > now then
    waiters[#waiters + 1] = w
  end
end
return {tonumber(redis.call('GET', KEYS[4])) or -1, holders, waiters}
