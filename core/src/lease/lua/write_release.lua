-- Release the write hold and wake every waiter (readers can all proceed).
-- KEYS[1] writer; ARGV[1] token, ARGV[2] channel.
-- Returns 1 released, 0 gone (expired), -1 another writer holds it.
-- A channel given as '{shard}<name>' is a shard channel (Redis Cluster): SPUBLISH reaches only
-- the subscribers on this key's shard instead of being broadcast to every node. (No channel
-- of ours starts with '{': prefixes may not contain braces.)
local function notify(channel, message)
  if string.sub(channel, 1, 7) == '{shard}' then
    redis.call('SPUBLISH', string.sub(channel, 8), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end
local writer = redis.call('GET', KEYS[1])
if writer == ARGV[1] then
  redis.call('DEL', KEYS[1])
  notify(ARGV[2], '*')
  return 1
end
if writer then
  return -1
end
return 0
