-- Release by force the holds under one lock name whose token starts with a prefix (an
-- operator's action on a holder that is stuck): only that holder's hold, whatever the kind,
-- so a prefix read before the lock changed hands frees nobody else. Waiters are woken as
-- the kind's own release wakes them.
-- KEYS[1] to KEYS[12] as lock_info.lua (lease lock, reentrant hash, fair lock, fair line,
-- fair line timeouts, writer, readers, waiting writers, semaphore holders, semaphore line,
-- semaphore line timeouts, permit count); ARGV[1] the token prefix, ARGV[2] to ARGV[6] the
-- release channels of the lease, reentrant, fair, read-write and semaphore kinds.
-- Returns how many holds it released (0: none had a token with that prefix).
-- Only keys of the type their kind uses are touched (another type is skipped).
local prefix = ARGV[1]
local function is(key, kind)
  return redis.call('TYPE', key)['ok'] == kind
end
local function ours(token)
  return string.sub(token, 1, #prefix) == prefix
end
local now = now_ms()
local released = 0
-- Exclusive kinds: a string holding the token.
local function take(key)
  if is(key, 'string') and ours(redis.call('GET', key)) then
    redis.call('DEL', key)
    released = released + 1
    return true
  end
  return false
end
-- Permits and read holds: entries of a zset (token -> expiry ms).
local function drop(key)
  local n = 0
  if is(key, 'zset') then
    for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
      if ours(member) then
        redis.call('ZREM', key, member)
        n = n + 1
      end
    end
  end
  released = released + n
  return n
end
if take(KEYS[1]) then
  notify(ARGV[2], '1')
end
if is(KEYS[2], 'hash') then
  local fields = redis.call('HGETALL', KEYS[2])
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
if take(KEYS[3]) and is(KEYS[4], 'list') then
  -- As fair_release: wake the next live waiter, dropping the dead ones before it.
  local timed = is(KEYS[5], 'zset')
  while true do
    local head = redis.call('LINDEX', KEYS[4], 0)
    if not head then break end
    local expiry = timed and redis.call('ZSCORE', KEYS[5], head)
    if expiry and tonumber(expiry) > now then
      notify(ARGV[4], head)
      break
    end
    redis.call('LPOP', KEYS[4])
    if timed then
      redis.call('ZREM', KEYS[5], head)
    end
  end
end
if take(KEYS[6]) then
  notify(ARGV[5], '*')
end
if drop(KEYS[7]) > 0 and redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf') == 0 then
  notify(ARGV[5], 'w')
end
if drop(KEYS[9]) > 0 and is(KEYS[10], 'list') then
  -- As permit_release: wake the waiters that may take the free permits.
  local permits = 0
  if is(KEYS[12], 'string') then
    permits = tonumber(redis.call('GET', KEYS[12])) or 0
  end
  local free = permits - redis.call('ZCOUNT', KEYS[9], '(' .. now, '+inf')
  if free > 0 then
    for _, next in ipairs(redis.call('LRANGE', KEYS[10], 0, free - 1)) do
      notify(ARGV[6], next)
    end
  end
end
return released
