-- Queue counts: {ready, delayed, in flight, dead}.
-- KEYS: 1 ready, 2 delayed, 3 in flight, 4 dead.
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), redis.call('LLEN', KEYS[4])}
