//! Scenarios of the rate limiter.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

use crate::common::*;

/// A hand-written GCRA script (as go-redis/redis_rate's, on integer microseconds of the
/// server clock), the same as `benches/cpu.rs`'s `RAW_GCRA_SCRIPT`. KEYS[1] the TAT; ARGV
/// interval µs, tolerance µs, cost.
const RAW_GCRA_SCRIPT: &str = "local t = redis.call('TIME')
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

/// The rate limiter's baseline: [`RAW_GCRA_SCRIPT`] as `EVALSHA` on one plain connection,
/// 1,000,000/s with a burst of 1,000,000 (always allowed).
pub struct GcraCycle {
    con: redis::Connection,
    sha: String,
    key: String,
}

impl GcraCycle {
    pub fn new(url: &str) -> Self {
        let mut con = connect(url);
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RAW_GCRA_SCRIPT)
            .query(&mut con)
            .expect("bench: SCRIPT LOAD failed");
        GcraCycle {
            con,
            sha,
            key: fresh("bench-raw-gcra"),
        }
    }
}

impl Cycle for GcraCycle {
    // A ratio of its own (printed on the scenario's line, over this cycle), not the lock's.
    const AGAINST: Against = Against::Nothing;

    fn op(&mut self) {
        let d: Vec<i64> = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(&self.key)
            .arg(1)
            .arg(1_000_000)
            .arg(1)
            .query(&mut self.con)
            .expect("bench: raw GCRA EVALSHA failed");
        assert_eq!(d[0], 1, "bench: the raw limiter denied");
    }
}

/// `try_acquire(1)` of a limiter that always allows it (1,000,000/s, burst 1,000,000), one
/// thread, interleaved with the hand-written GCRA script ([`GcraCycle`]): `ratio` is over
/// that script (`baseline=raw_gcra`), not over the lock's cycle.
pub fn rate_try_acquire(ctx: &Ctx) -> Measurement {
    let limiter = ctx
        .client
        .rate_limiter(&fresh("bench-rate"))
        .rate(1_000_000, Duration::from_secs(1))
        .burst(1_000_000)
        .build()
        .expect("bench: bad rate limiter");
    let raw = Mutex::new(GcraCycle::new(&ctx.url));
    let (mut m, _) = measure_single_with(ctx, &raw, || {
        let d = limiter.try_acquire(1).expect("bench: try_acquire failed");
        assert!(d.allowed, "bench: the rate limiter denied");
        black_box(d.remaining);
    });
    m.extra.push(("baseline", "raw_gcra".to_owned()));
    m
}
