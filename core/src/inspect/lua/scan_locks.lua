-- One step of a walk over the keyspace for lock keys (SCAN, never KEYS), changing nothing.
-- ARGV[1] cursor, ARGV[2] MATCH pattern, ARGV[3] COUNT.
-- Returns SCAN's reply: {next cursor ('0': done), keys}.
return redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
