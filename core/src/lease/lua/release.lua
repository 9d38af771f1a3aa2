-- Release a lease lock if the caller still owns it, and announce the release.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] release channel. As the undo of an
-- acquisition: KEYS[2] undone acquisitions, ARGV[3] how long to remember the token (ms).
-- Returns 1 released, 0 the key was gone (expired), -1 another holder owns it.
local holder = redis.call('GET', KEYS[1])
-- Undoing an acquisition whose reply was lost (KEYS[2] given): remember its token, so
-- that the acquisition, if it was only delayed and arrives after this, takes no effect.
-- (The first write, and to KEYS[2] itself: a wrong type there fails before any write.)
-- Only this path needs the prelude: it is spliced in here.
if KEYS[2] then
--@prelude
  remember(KEYS[2], ARGV[1], now_ms(), tonumber(ARGV[3]))
end
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- The prelude's notify, spelled out: '{shard}<name>' is a shard channel (the only
  -- channel of ours that starts with '{', byte 123).
  local channel = ARGV[2]
  if string.byte(channel, 1) == 123 then
    redis.call('SPUBLISH', string.sub(channel, 8), '1')
  else
    redis.call('PUBLISH', channel, '1')
  end
  return 1
end
if holder == false then
  return 0
end
return -1
