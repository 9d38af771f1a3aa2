-- Extend a reentrant lock held by ARGV[1] to ARGV[2] ms from now.
-- ARGV[3] '1': the caller asks for a shorter lease (a hold limit, or extend_to a shorter
-- ttl): set exactly that when this owner holds the lock once, so the key ends then.
-- Returns 1 extended, 0 gone (expired), -1 held by another owner.
local count = redis.call('HGET', KEYS[1], ARGV[1])
if count then
  if ARGV[3] == '1' and tonumber(count) <= 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  -- Otherwise never shorten: another hold of the same owner may have a longer lease.
  elseif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
return 0
