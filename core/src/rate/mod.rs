//! A rate limiter: GCRA (the generic cell rate algorithm) on the server's clock, one key
//! per limiter holding its theoretical arrival time (TAT), expiring when it no longer
//! matters (the moment the limiter would be full again), so nothing is left behind.
//!
//! A limit is a rate (`n` per `period`) and a burst: the emission interval is
//! `period / n` (rounded up to the microsecond: never faster than asked), and up to `burst`
//! units may be taken at once from a full limiter. Over any window of length `w` starting
//! from a full limiter, at most `burst + w / interval` units are allowed (100/s with a
//! burst of 20: 1,020 in 10 s). Each decision is one script ([`scripts::THROTTLE`], the
//! engine [`GCRA`](crate::script::prelude::GCRA) any other script can reuse) that reads
//! `TIME` on the server, so client clocks play no part.
//!
//! ```text
//!  try_acquire / peek:  ScriptOp ──EVALSHA rate_throttle──► Done(Decision) (allowed or not)
//!
//!  acquire (Throttle):
//!    Attempt ──EVALSHA rate_throttle──► allowed ──────────────────────► Done(Ok(decision))
//!       ▲                                  │ denied: retry_after
//!       │                                  ├── now + retry_after past the deadline
//!       │                                  │        ──► Done(Err(Timeout)) at once
//!       └──── Wait(until now + retry_after) ◄┘  (no polling: the moment it is due)
//!  reset:  ScriptOp ──EVALSHA rate_reset──► Done(())
//! ```
//!
//! A walk through that graph with scripted replies: denied (12.5 ms to wait), then allowed.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Protocol, Reply, Response, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::rate::{RateLimit, RateLimiterSpec, Throttle};
//!
//! let limit = RateLimit::new(100, Duration::from_secs(1), 20).unwrap();
//! let spec = RateLimiterSpec::new(&Keyspace::default(), "partner-api", limit).unwrap();
//! assert_eq!(spec.key(), "redlease:{partner-api}:rate");
//! let mut now = Instant::now();
//! let wait = Duration::from_millis(50);
//! let mut acquire = Throttle::new(&spec, 1, wait, Duration::from_secs(1), now).unwrap();
//!
//! // Attempt: the script answers {allowed, remaining, retry_after µs, reset_after µs,
//! // server time µs}.
//! let Step::Send(batch) = acquire.poll(now) else { unreachable!() };
//! let ints = |v: [i64; 5]| Reply::Array(v.iter().map(|n| Reply::Int(*n)).collect());
//! let denied = ints([0, 0, 12_500, 200_000, 1_764_000_000_000_000]);
//! acquire.handle(Response::reply(batch.requests[0].id, denied), now);
//! // Denied, due in 12.5 ms (within the wait): sleep exactly that long.
//! let Step::Wait(w) = acquire.poll(now) else { unreachable!() };
//! assert_eq!(w.until, now + Duration::from_micros(12_500));
//! assert!(w.wake_on.is_none());
//!
//! now = w.until;
//! let Step::Send(batch) = acquire.poll(now) else { unreachable!() };
//! let allowed = ints([1, 0, 0, 200_000, 1_764_000_000_012_500]);
//! acquire.handle(Response::reply(batch.requests[0].id, allowed), now);
//! let Step::Done(Ok(decision)) = acquire.poll(now) else { unreachable!() };
//! assert!(decision.allowed);
//! assert_eq!(decision.reset_after, Duration::from_millis(200));
//! ```
//!
//! A reply lost in transit ([`FailureKind::NoReply`](crate::FailureKind)) is not resent by
//! a take (the units may have been taken: the call fails with
//! [`Error::Unavailable`]); a peek or a reset is resent.
//!
//! Native commands: a server's own GCRA command (Dragonfly's `CL.THROTTLE`; Redis's `GCRA`
//! is not in a release) is not used: every server runs the script.

mod throttle;

pub mod scripts;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, InvalidArgument};
use crate::keys::{Keyspace, cat};
use crate::lease::{OpKind, ScriptOp, Target};
use crate::reply::Reply;
use crate::script::ScriptCall;

pub use throttle::Throttle;

/// The longest `burst * period / rate` (the time a limiter takes to fill up from empty)
/// and the longest period accepted: 10 years. It keeps every time the script computes an
/// exact integer of microseconds in a Lua number (below 2^53) for centuries.
pub const MAX_WINDOW: Duration = Duration::from_secs(3_652 * 24 * 3600);

/// The most units a limit may allow at once (its burst): 2^40, about 10^12.
pub const MAX_BURST: u64 = 1 << 40;

/// A rate limit: `rate` units per `period`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// The emission interval, µs: `period / rate`, rounded up.
    interval_us: u64,
    burst: u64,
}

impl RateLimit {
    /// `rate` units per `period`, up to `burst` at once from a full limiter. Refused with
    /// [`InvalidArgument`]: a zero rate, period or burst; a period shorter than the rate
    /// (more than one unit per microsecond) or longer than [`MAX_WINDOW`]; a burst above
    /// [`MAX_BURST`] or taking longer than [`MAX_WINDOW`] to refill.
    pub fn new(rate: u64, period: Duration, burst: u64) -> Result<Self, Error> {
        crate::limits::count("rate", rate, 1, u64::MAX)?;
        crate::limits::duration(
            "rate limit period",
            period,
            Duration::from_micros(1),
            MAX_WINDOW,
        )?;
        crate::limits::count("burst", burst, 1, MAX_BURST)?;
        // period <= MAX_WINDOW: its nanoseconds fit in a u128 many times over.
        let interval_us = period.as_nanos().div_ceil(u128::from(rate) * 1000);
        let period_us = period.as_micros();
        if u128::from(rate) > period_us {
            return Err(InvalidArgument::Setting(format!(
                "a rate of {rate} per {period:?} is more than one per microsecond, the \
                 limiter's resolution"
            ))
            .into());
        }
        let window = interval_us.saturating_mul(u128::from(burst));
        if window > MAX_WINDOW.as_micros() {
            return Err(InvalidArgument::Setting(format!(
                "a burst of {burst} at {rate} per {period:?} takes longer than {MAX_WINDOW:?} \
                 to refill"
            ))
            .into());
        }
        Ok(RateLimit {
            // Below MAX_WINDOW in µs, so it fits.
            interval_us: interval_us as u64,
            burst,
        })
    }

    /// The emission interval: the time one unit takes to come back.
    pub fn interval(&self) -> Duration {
        Duration::from_micros(self.interval_us)
    }

    /// The most units taken at once.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// `interval * burst`, µs: how far ahead of the clock the TAT may run.
    pub(crate) fn tolerance_us(&self) -> u64 {
        self.interval_us * self.burst
    }
}

/// A limiter: its name, its key and its limit, with the script call every decision shares
/// (built once, so a decision for one unit copies nothing).
#[derive(Debug, Clone)]
pub struct RateLimiterSpec {
    target: Target,
    key: String,
    limit: RateLimit,
    /// `THROTTLE` on the key with interval, tolerance, cost 1, take.
    call: ScriptCall,
}

impl RateLimiterSpec {
    /// The limiter `name` (key `<prefix>:{<name>}:rate`) with `limit`. Refuses an empty or
    /// too long name.
    pub fn new(keyspace: &Keyspace, name: &str, limit: RateLimit) -> Result<Self, Error> {
        let key = cat(&[&keyspace.stem(name)?, ":rate"]);
        let call = ScriptCall::new(&scripts::THROTTLE)
            .key(&key)
            .arg(limit.interval_us.to_string())
            .arg(limit.tolerance_us().to_string())
            .arg("1")
            .arg("0")
            .compact();
        Ok(RateLimiterSpec {
            target: Target::new(name, vec![key.clone()]),
            key,
            limit,
            call,
        })
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.target.name
    }

    /// Its key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its limit.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Checks a cost: at most the burst (more could never be allowed).
    fn check_cost(&self, cost: u64) -> Result<(), Error> {
        crate::limits::count("cost", cost, 0, self.limit.burst)?;
        Ok(())
    }

    /// The call deciding for `cost` units (`peek`: without taking them).
    fn decide(&self, cost: u64, peek: bool) -> ScriptCall {
        let call = self.call.clone();
        let call = if cost == 1 {
            call
        } else {
            call.with_arg(2, cost.to_string())
        };
        if peek { call.with_arg(3, "1") } else { call }
    }
}

/// What a limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the units were allowed (and taken, unless this was a peek).
    pub allowed: bool,
    /// How many units could be taken at once after this decision.
    pub remaining: u64,
    /// Denied: how long until the same cost would be allowed (if nobody else takes units
    /// meanwhile). Zero when allowed.
    pub retry_after: Duration,
    /// How long until the limiter is full again (its key expires then).
    pub reset_after: Duration,
    /// The server's clock when it decided.
    pub server_time: SystemTime,
}

impl Decision {
    /// The decision in a script's reply `{allowed, remaining, retry µs, reset µs, now µs}`.
    fn from_reply(reply: &Reply) -> Option<Decision> {
        let [allowed, remaining, retry, reset, now] = reply.as_array()? else {
            return None;
        };
        let us = |r: &Reply| u64::try_from(r.as_int()?).ok();
        Some(Decision {
            allowed: match allowed.as_int()? {
                1 => true,
                0 => false,
                _ => return None,
            },
            remaining: us(remaining)?,
            retry_after: Duration::from_micros(us(retry)?),
            reset_after: Duration::from_micros(us(reset)?),
            server_time: SystemTime::UNIX_EPOCH.checked_add(Duration::from_micros(us(now)?))?,
        })
    }
}

/// Take units: yields the [`Decision`]. A lost reply is not resent (the units may have
/// been taken).
#[derive(Debug, Clone, Copy, Default)]
pub struct Take;

/// Peek: what taking one unit would decide, without taking it. Yields the [`Decision`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Peek;

/// Reset: forget the limiter's state (full again). Yields `()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reset;

impl OpKind for Take {
    type Output = Decision;
    const CONTEXT: &'static str = "rate limiter decision";
    const RETRY_LOST_REPLY: bool = false;

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Decision, Error>> {
        Decision::from_reply(reply).map(Ok)
    }
}

impl OpKind for Peek {
    type Output = Decision;
    const CONTEXT: &'static str = "rate limiter peek";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Decision, Error>> {
        Decision::from_reply(reply).map(Ok)
    }
}

impl OpKind for Reset {
    type Output = ();
    const CONTEXT: &'static str = "rate limiter reset";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<(), Error>> {
        match reply.as_int()? {
            0 | 1 => Some(Ok(())),
            _ => None,
        }
    }
}

/// Takes `cost` units if the limit allows it now (0 to the burst; more is refused before
/// anything is sent), giving up at `deadline`. A denial is a [`Decision`] too.
pub fn try_acquire(
    spec: &RateLimiterSpec,
    cost: u64,
    deadline: Instant,
) -> Result<ScriptOp<Take>, Error> {
    spec.check_cost(cost)?;
    Ok(ScriptOp::new(
        Take,
        spec.decide(cost, false),
        spec.target.clone(),
        None,
        deadline,
    ))
}

/// What taking one unit would decide now, taking nothing; gives up at `deadline`.
pub fn peek(spec: &RateLimiterSpec, deadline: Instant) -> ScriptOp<Peek> {
    ScriptOp::new(
        Peek,
        spec.decide(1, true),
        spec.target.clone(),
        None,
        deadline,
    )
}

/// Resets the limiter to full (deletes its key); gives up at `deadline`.
pub fn reset(spec: &RateLimiterSpec, deadline: Instant) -> ScriptOp<Reset> {
    let call = ScriptCall::new(&scripts::RESET).key(spec.key());
    ScriptOp::new(Reset, call, spec.target.clone(), None, deadline)
}

/// The limiter's name shared with a machine, for errors.
fn name_of(spec: &RateLimiterSpec) -> Arc<str> {
    spec.target.name.clone()
}
