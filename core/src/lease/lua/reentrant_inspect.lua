-- Report who holds a reentrant lock and for how long.
-- KEYS[1] lock hash; ARGV[1] owner. Returns {1, pttl} ours, {0, -2} gone, {-1, pttl} another's.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return {1, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {-1, redis.call('PTTL', KEYS[1])}
end
return {0, -2}
