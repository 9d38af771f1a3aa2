-- Release the write hold and wake every waiter (readers can all proceed).
-- KEYS[1] writer; ARGV[1] token, ARGV[2] channel. As the undo of an acquisition: KEYS[2]
-- undone acquisitions, ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 gone (expired), -1 another writer holds it.
local writer = redis.call('GET', KEYS[1])
if KEYS[2] then
  redis.call('ZCARD', KEYS[2])
end
-- Undoing an acquisition whose reply was lost (KEYS[2] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
if KEYS[2] then
  remember(KEYS[2], ARGV[1], now_ms(), tonumber(ARGV[3]))
end
if writer == ARGV[1] then
  redis.call('DEL', KEYS[1])
  notify(ARGV[2], '*')
  return 1
end
if writer then
  return -1
end
return 0
