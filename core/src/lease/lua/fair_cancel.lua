-- A waiter of a fair lock gives up: leave the line, and if that makes a free lock's next
-- waiter the head, wake it.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] queue timeouts; ARGV[1] token, ARGV[2] channel.
-- Read every key once before writing any (a wrong type fails before any write).
redis.call('GET', KEYS[1])
redis.call('LLEN', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    notify(ARGV[2], head)
  end
end
return 1
