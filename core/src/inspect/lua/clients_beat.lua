-- A live client's heartbeat in the registry of clients (one round trip per interval).
-- KEYS[1] registry (hash: client id -> heartbeat ms, a newline, the record), KEYS[2]
-- heartbeats (zset: client id -> until when it counts as live, server ms); ARGV[1] client
-- id, ARGV[2] how long the entry lives without another heartbeat (ms), ARGV[3] the record.
-- Entries whose time ran out (clients that died without leaving) are dropped here, up to 100
-- a call, so readers never write. Both keys live as long as one client's entry does.
-- Returns the server time of the heartbeat (ms).
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('HLEN', KEYS[1])
redis.call('ZCARD', KEYS[2])
local now = now_ms()
local keep = tonumber(ARGV[2])
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('HDEL', KEYS[1], gone)
  redis.call('ZREM', KEYS[2], gone)
end
redis.call('ZADD', KEYS[2], now + keep, ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], now .. '\n' .. ARGV[3])
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < keep then
    redis.call('PEXPIRE', KEYS[i], keep)
  end
end
return now
