-- Report what exists under one lock name, of every kind whose keys exist, changing nothing
-- (an operator's ACL user may have read rights only). A key holding another type than its
-- kind uses is skipped, as if absent.
-- KEYS[1] lease lock, KEYS[2] reentrant hash, KEYS[3] fair lock, KEYS[4] fair line,
-- KEYS[5] fair line timeouts, KEYS[6] writer, KEYS[7] readers, KEYS[8] waiting writers,
-- KEYS[9] semaphore holders, KEYS[10] semaphore line, KEYS[11] semaphore line timeouts,
-- KEYS[12] permit count, KEYS[13] fence counter;
-- ARGV[1] how many characters of a holder's token to show, ARGV[2] to ARGV[6] the release
-- channels of the lease, reentrant, fair, read-write and semaphore kinds ('{shard}<name>': a
-- shard channel).
-- Returns {fence counter or false, entry...}, an entry per kind found:
-- {kind (1 lease, 2 reentrant, 3 fair, 4 read-write, 5 semaphore), holders, waiters on record
-- (-1: the kind keeps none), connections subscribed to its release channel, permit count (-1:
-- none)}, holders a flat list of token prefix, ms left (-1: no expiry), holds, role ('x'
-- exclusive, 'w' writer, 'r' reader, 'p' permit).
local shown = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function is(key, kind)
  return redis.call('TYPE', key)['ok'] == kind
end
local function subscribers(channel)
  if string.byte(channel, 1) == 123 then
    return redis.call('PUBSUB', 'SHARDNUMSUB', string.sub(channel, 8))[2]
  end
  return redis.call('PUBSUB', 'NUMSUB', channel)[2]
end
-- Live entries of a zset of token -> expiry ms, after `holders`.
local function live(key, role, holders)
  if not is(key, 'zset') then
    return
  end
  local entries = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #entries, 2 do
    local n = #holders
    holders[n + 1] = string.sub(entries[i], 1, shown)
    holders[n + 2] = tonumber(entries[i + 1]) - now
    holders[n + 3] = 1
    holders[n + 4] = role
  end
end
local function count_live(key)
  if not is(key, 'zset') then
    return 0
  end
  return redis.call('ZCOUNT', key, '(' .. now, '+inf')
end
local function exclusive(key, holders)
  if is(key, 'string') then
    local n = #holders
    holders[n + 1] = string.sub(redis.call('GET', key), 1, shown)
    holders[n + 2] = redis.call('PTTL', key)
    holders[n + 3] = 1
    holders[n + 4] = 'x'
  end
end
local out = {false}
if is(KEYS[13], 'string') then
  out[1] = redis.call('GET', KEYS[13])
end
local function entry(kind, holders, waiters, channel, permits)
  out[#out + 1] = {kind, holders, waiters, subscribers(channel), permits}
end
if is(KEYS[1], 'string') then
  local holders = {}
  exclusive(KEYS[1], holders)
  entry(1, holders, -1, ARGV[2], -1)
end
if is(KEYS[2], 'hash') then
  -- Owner -> hold count; `<owner>:h:<op>`, `<owner>:r` and `fence` are bookkeeping.
  local holders = {}
  local ms = redis.call('PTTL', KEYS[2])
  local fields = redis.call('HGETALL', KEYS[2])
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f ~= 'fence' and not string.find(f, ':h:', 1, true) and string.sub(f, -2) ~= ':r' then
      local n = #holders
      holders[n + 1] = string.sub(f, 1, shown)
      holders[n + 2] = ms
      holders[n + 3] = tonumber(fields[i + 1]) or 0
      holders[n + 4] = 'x'
    end
  end
  entry(2, holders, -1, ARGV[3], -1)
end
if is(KEYS[3], 'string') or is(KEYS[4], 'list') then
  local holders = {}
  exclusive(KEYS[3], holders)
  entry(3, holders, count_live(KEYS[5]), ARGV[4], -1)
end
if is(KEYS[6], 'string') or is(KEYS[7], 'zset') or is(KEYS[8], 'zset') then
  local holders = {}
  exclusive(KEYS[6], holders)
  if #holders > 0 then
    holders[4] = 'w'
  end
  live(KEYS[7], 'r', holders)
  entry(4, holders, count_live(KEYS[8]), ARGV[5], -1)
end
if is(KEYS[9], 'zset') or is(KEYS[10], 'list') or is(KEYS[12], 'string') then
  local holders = {}
  live(KEYS[9], 'p', holders)
  local permits = -1
  if is(KEYS[12], 'string') then
    permits = tonumber(redis.call('GET', KEYS[12])) or -1
  end
  entry(5, holders, count_live(KEYS[11]), ARGV[6], permits)
end
return out
