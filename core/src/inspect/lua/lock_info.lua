-- Report what exists under one lock name, of every kind whose keys exist, changing nothing
-- (an operator's ACL user may have read rights only). Every key is read once first, by a
-- command of its kind's type: a key of another type fails the call (WRONGTYPE).
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
local lease = redis.call('GET', KEYS[1])
local owners = redis.call('HGETALL', KEYS[2])
local fair = redis.call('GET', KEYS[3])
local line = redis.call('LLEN', KEYS[4])
redis.call('ZCARD', KEYS[5])
local writer = redis.call('GET', KEYS[6])
local readers = redis.call('ZCARD', KEYS[7])
local writing = redis.call('ZCARD', KEYS[8])
local permits_held = redis.call('ZCARD', KEYS[9])
local sem_line = redis.call('LLEN', KEYS[10])
redis.call('ZCARD', KEYS[11])
local permits = redis.call('GET', KEYS[12])
local out = {redis.call('GET', KEYS[13])}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function subscribers(channel)
  if string.byte(channel, 1) == 123 then
    return redis.call('PUBSUB', 'SHARDNUMSUB', string.sub(channel, 8))[2]
  end
  return redis.call('PUBSUB', 'NUMSUB', channel)[2]
end
-- Live entries of a zset of token -> expiry ms, after `holders`.
local function live(key, role, holders)
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
  return redis.call('ZCOUNT', key, '(' .. now, '+inf')
end
local function exclusive(key, token, role)
  if not token then
    return {}
  end
  return {string.sub(token, 1, shown), redis.call('PTTL', key), 1, role}
end
local function entry(kind, holders, waiters, channel, count)
  out[#out + 1] = {kind, holders, waiters, subscribers(channel), count}
end
if lease then
  entry(1, exclusive(KEYS[1], lease, 'x'), -1, ARGV[2], -1)
end
if #owners > 0 then
  -- Owner -> hold count; `<owner>:h:<op>`, `<owner>:r` and `fence` are bookkeeping.
  local holders = {}
  local ms = redis.call('PTTL', KEYS[2])
  for i = 1, #owners, 2 do
    local f = owners[i]
    if f ~= 'fence' and not string.find(f, ':h:', 1, true) and string.sub(f, -2) ~= ':r' then
      local n = #holders
      holders[n + 1] = string.sub(f, 1, shown)
      holders[n + 2] = ms
      holders[n + 3] = tonumber(owners[i + 1]) or 0
      holders[n + 4] = 'x'
    end
  end
  entry(2, holders, -1, ARGV[3], -1)
end
if fair or line > 0 then
  entry(3, exclusive(KEYS[3], fair, 'x'), count_live(KEYS[5]), ARGV[4], -1)
end
if writer or readers > 0 or writing > 0 then
  local holders = exclusive(KEYS[6], writer, 'w')
  if readers > 0 then
    live(KEYS[7], 'r', holders)
  end
  entry(4, holders, count_live(KEYS[8]), ARGV[5], -1)
end
if permits_held > 0 or sem_line > 0 or permits then
  local holders = {}
  if permits_held > 0 then
    live(KEYS[9], 'p', holders)
  end
  entry(5, holders, count_live(KEYS[11]), ARGV[6], tonumber(permits) or -1)
end
return out
