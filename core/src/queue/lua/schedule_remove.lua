-- Remove a schedule: its waiting pending occurrence too (a leased one runs to its end).
-- ARGV: 1 name. Returns 1 if it existed, 0 if not.
local h = read_all()
if not h[1] then
  return 0
end
if h[5] and h[5] ~= '-1' then
  drop_waiting(h[5])
end
local n = ARGV[1]
redis.call('HDEL', KEYS[1], 's:' .. n, 'p:' .. n, 'r:' .. n, 'v:' .. n, 'n:' .. n)
return 1
