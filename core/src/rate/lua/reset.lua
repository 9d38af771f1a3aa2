-- Resets a rate limiter to full. KEYS[1]: the TAT key. Returns 1 if it held state, else 0.
return redis.call('DEL', KEYS[1])
