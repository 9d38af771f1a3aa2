-- Release a read hold; the last reader out wakes the waiting writers.
-- KEYS[1] readers; ARGV[1] token, ARGV[2] channel.
-- Returns 1 released, 0 the hold was gone (expired).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], 'w')
end
return 1
