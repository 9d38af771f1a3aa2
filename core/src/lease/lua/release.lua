-- Release a lease lock if the caller still owns it, and announce the release.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] release channel.
-- Returns 1 released, 0 the key was gone (expired), -1 another holder owns it.
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
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  notify(ARGV[2], '1')
  return 1
end
if holder == false then
  return 0
end
return -1
