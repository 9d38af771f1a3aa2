-- A waiter of a fair lock gives up: leave the line, and if that makes a free lock's next
-- waiter the head, wake it.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] queue timeouts; ARGV[1] token, ARGV[2] channel.
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    redis.call('PUBLISH', ARGV[2], head)
  end
end
return 1
