-- Release the write hold and wake every waiter (readers can all proceed).
-- KEYS[1] writer; ARGV[1] token, ARGV[2] channel.
-- Returns 1 released, 0 gone (expired), -1 another writer holds it.
local writer = redis.call('GET', KEYS[1])
if writer == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '*')
  return 1
end
if writer then
  return -1
end
return 0
