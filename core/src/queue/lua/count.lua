-- counting(key, now): names the queue's counts (key: the stem of its per-minute counters)
-- and the server's clock (ms) for count; a queue that does not count passes its ready set
-- instead (QueueKeys::with_counts), told apart by the last byte (115: the 's' of counts,
-- not the 'y' of ready), and nothing is counted. count(event, n): adds n to this minute's count
-- of event (pushed, taken, acked, failed, retried, dead, expired, deferred): the string key
-- <key>:<minute since the epoch>:<event>, which expires 48 h and a minute after it was
-- made (one expiry call per event per minute, not per job). One INCR per event: about a
-- third of what a hash field's HINCRBY costs the server. It never fails the script: on a
-- key of the wrong type the event is not counted (pcall).
local counts_at = nil
local function counting(key, now)
  if string.byte(key, -1) == 115 then
    counts_at = key .. string.format(':%d:', math.floor(now / 60000))
  end
end
local function count(event, n)
  if counts_at and n ~= 0 then
    local key = counts_at .. event
    local v
    if n == 1 then
      v = redis.pcall('INCR', key)
    else
      v = redis.pcall('INCRBY', key, string.format('%d', n))
    end
    if v == n then
      redis.pcall('PEXPIRE', key, '172860000')
    end
  end
end
