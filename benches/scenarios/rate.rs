//! Scenarios of the rate limiter.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

use crate::common::*;

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
