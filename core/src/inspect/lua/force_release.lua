-- Release by force the holds under one lock name whose token starts with a prefix (an
-- operator's action on a holder that is stuck): only that holder's hold, whatever the kind,
-- so a prefix read before the lock changed hands frees nobody else. Waiters are woken as
-- the kind's own release wakes them.
-- KEYS[1] to KEYS[12] as lock_info.lua (lease lock, reentrant hash, fair lock, fair line,
-- fair line timeouts, writer, readers, waiting writers, semaphore holders, semaphore line,
-- semaphore line timeouts, permit count); ARGV[1] the token prefix, ARGV[2] to ARGV[6] the
-- release channels of the lease, reentrant, fair, read-write and semaphore kinds.
-- Returns how many holds it released (0: none had a token with that prefix).
-- (Each zset of holders is read whole: a forced release is an operator's rare action.)
-- Read every key once before writing any (a wrong type fails before any write).
local prefix = ARGV[1]
local lease = redis.call('GET', KEYS[1])
local owners = redis.call('HGETALL', KEYS[2])
local fair = redis.call('GET', KEYS[3])
redis.call('LLEN', KEYS[4])
redis.call('ZCARD', KEYS[5])
local writer = redis.call('GET', KEYS[6])
local readers = redis.call('ZRANGE', KEYS[7], 0, -1)
redis.call('ZCARD', KEYS[8])
local permits = redis.call('ZRANGE', KEYS[9], 0, -1)
redis.call('LLEN', KEYS[10])
redis.call('ZCARD', KEYS[11])
local count = tonumber(redis.call('GET', KEYS[12])) or 0
local function ours(token)
  return string.sub(token, 1, #prefix) == prefix
end
local now = now_ms()
local released = 0
-- Exclusive kinds: a string holding the token.
local function take(key, token)
  if token and ours(token) then
    redis.call('DEL', key)
    released = released + 1
    return true
  end
  return false
end
-- Permits and read holds: entries of a zset (token -> expiry ms).
local function drop(key, members)
  local n = 0
  for _, member in ipairs(members) do
    if ours(member) then
      redis.call('ZREM', key, member)
      n = n + 1
    end
  end
  released = released + n
  return n
end
if take(KEYS[1], lease) then
  notify(ARGV[2], '1')
end
do
  local fields = owners
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f ~= 'fence' and not string.find(f, ':h:', 1, true) and string.sub(f, -2) ~= ':r'
        and ours(f) then
      -- One owner holds a reentrant lock at a time: its holds end together.
      redis.call('DEL', KEYS[2])
      notify(ARGV[3], '1')
      released = released + 1
      break
    end
  end
end
if take(KEYS[3], fair) then
  -- As fair_release: wake the next live waiter, dropping the dead ones before it.
  while true do
    local head = redis.call('LINDEX', KEYS[4], 0)
    if not head then break end
    local expiry = redis.call('ZSCORE', KEYS[5], head)
    if expiry and tonumber(expiry) > now then
      notify(ARGV[4], head)
      break
    end
    redis.call('LPOP', KEYS[4])
    redis.call('ZREM', KEYS[5], head)
  end
end
if take(KEYS[6], writer) then
  notify(ARGV[5], '*')
end
if drop(KEYS[7], readers) > 0 and redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf') == 0 then
  notify(ARGV[5], 'w')
end
if drop(KEYS[9], permits) > 0 then
  -- As permit_release: wake the waiters that may take the free permits.
  local free = count - redis.call('ZCOUNT', KEYS[9], '(' .. now, '+inf')
  if free > 0 then
    for _, next in ipairs(redis.call('LRANGE', KEYS[10], 0, free - 1)) do
      notify(ARGV[6], next)
    end
  end
end
return released
