-- counting(key, now): names the queue's counts (key: the stem of its per-minute hashes)
-- and the server's clock (ms) for count. count(event, n): adds n to this minute's count
-- of event (pushed, taken, acked, failed, retried, dead, expired) in the hash
-- <key>:<minute since the epoch>, which expires 48 h and a minute after its first field of
-- each event was made (so one expiry call per event per minute, not per job). It never
-- fails the script: on a key of the wrong type the event is not counted (pcall).
local counts_key = nil
local function counting(key, now)
  counts_key = key .. ':' .. math.floor(now / 60000)
end
local function count(event, n)
  if counts_key and n ~= 0 and redis.pcall('HINCRBY', counts_key, event, n) == n then
    redis.pcall('PEXPIRE', counts_key, 172860000)
  end
end
