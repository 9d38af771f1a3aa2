-- Read the pause of a queue or of one of its groups (read only: sent as EVALSHA_RO).
-- KEYS: 1 pauses (hash: '*' the whole queue, 'g:<group id>' one group -> the server ms of
-- the pause). ARGV: 1 the field ('*' or 'g:<id>').
-- Returns the field's value (the pause's ms) or nil.
return redis.call('HGET', KEYS[1], ARGV[1])
