-- gcra(key, now, interval, tolerance, cost): the generic cell rate algorithm on the
-- theoretical arrival time (TAT) kept in key, in server microseconds (a key that is gone
-- counts as a full limiter). interval: the emission interval (period / rate, µs);
-- tolerance: interval * burst; cost: the units asked for. Reads only; returns
--   true,  the TAT after taking cost units (store it with gcra_store), 0
--   false, the TAT now (at least now), µs until cost units can be taken
-- or nil when key holds something else than a time (a number from 0 to 2^53).
local function gcra(key, now, interval, tolerance, cost)
  local stored = redis.call('GET', key)
  local tat = now
  if stored then
    tat = tonumber(stored)
    if not (tat and tat >= 0 and tat < 9007199254740992) then
      return nil
    end
    if tat < now then
      tat = now
    end
  end
  local after = tat + interval * cost
  local due = after - tolerance
  if due > now then
    return false, tat, due - now
  end
  return true, after, 0
end
-- gcra_store(key, tat, now): keeps tat in key until it passes (a TAT at or before now is
-- the same as no key: nothing is left behind).
local function gcra_store(key, tat, now)
  if tat > now then
    redis.call('SET', key, tat, 'PX', math.ceil((tat - now) / 1000))
  end
end
