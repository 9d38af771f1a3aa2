-- Extend a reentrant lock held by ARGV[1] to ARGV[2] ms from now.
-- Returns 1 extended, 0 gone (expired), -1 held by another owner.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  -- Never shorten: another hold of the same owner may have a longer lease.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
return 0
