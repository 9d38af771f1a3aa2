-- A waiting writer gives up: stop holding back readers, and wake them if it was the last.
-- KEYS[1] waiting writers; ARGV[1] token, ARGV[2] channel.
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  notify(ARGV[2], '*')
end
return 1
