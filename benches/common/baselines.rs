//! The hand-written baselines both benchmarks measure against (`benches/redis.rs` through
//! `common`, `benches/cpu.rs` by path): one copy, so both compare with the same scripts.

/// The compare-and-delete script of the raw lock cycle.
pub const RAW_RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
/// A hand-written fenced acquisition (issue 28): `SET NX PX`, and when it took the lock, the
/// fence from `INCR` of a counter. KEYS[1] lock, KEYS[2] counter; ARGV[1] token, ARGV[2] ttl
/// ms.
pub const RAW_FENCED_ACQUIRE_SCRIPT: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0";
/// A hand-written GCRA script (as go-redis/redis_rate's, on integer microseconds of the
/// server clock): the baseline of the rate limiter. KEYS[1] the TAT; ARGV interval µs,
/// tolerance µs, cost.
pub const RAW_GCRA_SCRIPT: &str = "local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval, tolerance, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval * cost
local diff = now - (new_tat - tolerance)
if diff < 0 then
  return {0, 0, -diff, tat - now}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000))
return {1, math.floor(diff / interval), 0, new_tat - now}
";
