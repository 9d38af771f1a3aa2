//! The accepted range of every setting, checked in one place.
//!
//! Every duration a builder accepts ends up either in local `Instant`/`Duration` arithmetic
//! (deadlines, retry pauses, socket timeouts) or in a Lua script as a number of milliseconds,
//! where the scripts add it to the server's clock (about 1.8e12 ms since 1970) and may pass
//! the sum back to Redis or through Lua's `tostring` (which switches to exponent form, which
//! Redis rejects, from 1e14 up). Bounding every duration by [`MAX_DURATION`] (100 years,
//! about 3.2e12 ms) keeps both sides exact: sums of a few such durations never overflow a
//! `Duration` or an `Instant`, and `now + duration` (even doubled) stays far below 1e14 ms
//! and below 2^53 (the integers a Lua double holds exactly), so no script fails halfway.
//!
//! | setting | accepted |
//! |---|---|
//! | lease ttl, permit timeout, visibility timeout, waiter timeout, extension | [`MIN_TTL`] (10 ms) to [`MAX_DURATION`] |
//! | retry pauses (first and longest), RedLock retry maximum, queue idle check | [`MIN_PAUSE`] (1 ms) to [`MAX_DURATION`]; the longest at least the first |
//! | renewal interval (`renew_every`) | 1 ms to under the lease's validity (ttl less its drift allowance) |
//! | maximum hold, queue delays and nack backoff | 0 (hold: 1 ms) to [`MAX_DURATION`] (a longer nack backoff counts as the maximum) |
//! | wait (a lock's, a semaphore's, a queue take's) | any: one past [`MAX_DURATION`] (such as `Duration::MAX`, "as long as it takes") counts as that, no deadline of ours in practice ([`wait`]) |
//! | connect, io, op and node timeouts | 1 ms to [`MAX_DURATION`] |
//! | semaphore permits | 1 to [`MAX_PERMITS`] (2^32 - 1) |
//! | connection pool size (per node) | 1 to [`MAX_POOL_SIZE`] |
//! | worker threads of one pool | 1 to [`MAX_WORKERS`] (more are not started) |
//!
//! Why the floors: a lease shorter than [`MIN_TTL`] is mostly drift allowance (1 % + 2 ms)
//! and would be lost on arrival; a retry or idle pause under [`MIN_PAUSE`] turns a waiter
//! into a busy loop of thousands of scripts per second.

use std::time::Duration;

use crate::error::{Error, InvalidArgument};

/// The longest duration any setting accepts: 100 years (of 365.25 days).
pub const MAX_DURATION: Duration = Duration::from_secs(36_525 * 24 * 3600);

/// The shortest lease (ttl, permit timeout, visibility timeout, waiter timeout): 10 ms.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The shortest retry or idle-check pause: 1 ms.
pub const MIN_PAUSE: Duration = Duration::from_millis(1);

/// The shortest timeout (connect, io, op, node): 1 ms.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// The most permits a semaphore may have: 2^32 - 1 (exact in every number form a script
/// sees; a Redis list or sorted set holds at most that many entries anyway).
pub const MAX_PERMITS: u64 = u32::MAX as u64;

/// The largest connection pool (per node): 10,000, Redis's default `maxclients` (the pool
/// reserves room for this many connections up front).
pub const MAX_POOL_SIZE: u32 = 10_000;

/// The most threads one worker pool starts: 1024.
pub const MAX_WORKERS: usize = 1024;

/// Checks that `d` lies in `min..=max`; `what` names the setting in the error.
pub fn duration(
    what: &'static str,
    d: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, Error> {
    if d < min {
        return Err(InvalidArgument::DurationTooShort {
            what,
            got: d,
            min,
            max,
        }
        .into());
    }
    if d > max {
        return Err(InvalidArgument::DurationTooLong {
            what,
            got: d,
            min,
            max,
        }
        .into());
    }
    Ok(d)
}

/// A lease length ([`MIN_TTL`] to [`MAX_DURATION`]) in whole milliseconds.
pub fn ttl(what: &'static str, d: Duration) -> Result<u64, Error> {
    duration(what, d, MIN_TTL, MAX_DURATION)?;
    // d <= MAX_DURATION, so the cast cannot truncate.
    Ok(d.as_millis() as u64)
}

/// A timeout: [`MIN_TIMEOUT`] to [`MAX_DURATION`].
pub fn timeout(what: &'static str, d: Duration) -> Result<Duration, Error> {
    duration(what, d, MIN_TIMEOUT, MAX_DURATION)
}

/// How long a caller is willing to wait (a lock's, a semaphore's, a queue take's): any
/// duration is accepted, and one past [`MAX_DURATION`] (such as `Duration::MAX`, which
/// Rust callers write for "as long as it takes", as with `recv_timeout(Duration::MAX)`)
/// counts as [`MAX_DURATION`]: no deadline of ours in practice. Unlike ttls and delays, a
/// wait never reaches a script, so clamping it changes nothing a server sees.
pub fn wait(d: Duration) -> Duration {
    d.min(MAX_DURATION)
}

/// A duration that may be zero (a delay): at most [`MAX_DURATION`].
pub fn span(what: &'static str, d: Duration) -> Result<Duration, Error> {
    duration(what, d, Duration::ZERO, MAX_DURATION)
}

/// Retry pauses: the first and the longest each [`MIN_PAUSE`] to [`MAX_DURATION`], the
/// longest at least the first. `what` names the setting (`"retry"`).
pub fn retry(what: &'static str, initial: Duration, max: Duration) -> Result<(), Error> {
    duration(what, initial, MIN_PAUSE, MAX_DURATION)?;
    duration(what, max, MIN_PAUSE, MAX_DURATION)?;
    if max < initial {
        return Err(InvalidArgument::Setting(format!(
            "{what}: the longest pause ({max:?}) must be at least the first ({initial:?})"
        ))
        .into());
    }
    Ok(())
}

/// Checks that `n` lies in `min..=max`; `what` names the setting in the error.
pub fn count(what: &'static str, n: u64, min: u64, max: u64) -> Result<u64, Error> {
    if n < min || n > max {
        return Err(InvalidArgument::CountOutOfRange {
            what,
            got: n,
            min,
            max,
        }
        .into());
    }
    Ok(n)
}

/// A semaphore's permit count: 1 to [`MAX_PERMITS`].
pub fn permits(n: u64) -> Result<u64, Error> {
    count("permits", n, 1, MAX_PERMITS)
}

/// A connection pool size: 1 to [`MAX_POOL_SIZE`].
pub fn pool_size(n: u32) -> Result<u32, Error> {
    count("pool size", u64::from(n), 1, u64::from(MAX_POOL_SIZE))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lua 5.1 prints numbers with `%.14g`: exponent form from 1e14 up.
    const LUA_EXPONENT_FROM_MS: u128 = 100_000_000_000_000;
    /// Unix time in ms in the year 2200, far beyond any server clock this code will meet.
    const NOW_2200_MS: u128 = 7_258_118_400_000;

    #[test]
    fn the_maximum_is_100_years_and_stays_exact_in_lua() {
        assert_eq!(MAX_DURATION.as_secs(), 3_155_760_000);
        // Absolute times (server now + duration, even doubled for line expiries) print as
        // plain integers and are exact doubles.
        let far = NOW_2200_MS + 2 * MAX_DURATION.as_millis();
        assert!(far < LUA_EXPONENT_FROM_MS);
        assert!(far < 1 << 53);
        // Microseconds too (fences, TIME arithmetic).
        assert!(MAX_DURATION.as_micros() < 1 << 53);
        // Local arithmetic: a sum of several maxima does not overflow.
        assert!(MAX_DURATION.checked_mul(1000).is_some());
        // Permits are exact and never reach exponent form.
        assert!(u128::from(MAX_PERMITS) < LUA_EXPONENT_FROM_MS);
    }

    #[test]
    fn ranges_name_the_setting_and_the_bounds() {
        let e = ttl("ttl", Duration::from_millis(3)).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument(InvalidArgument::DurationTooShort {
                what: "ttl",
                got: Duration::from_millis(3),
                min: MIN_TTL,
                max: MAX_DURATION,
            })
        );
        let msg = e.to_string();
        assert!(msg.contains("ttl") && msg.contains("10ms"), "{msg}");
        assert!(msg.contains(&format!("{MAX_DURATION:?}")), "{msg}");
        assert_eq!(ttl("ttl", MIN_TTL), Ok(10));
        assert_eq!(ttl("ttl", MAX_DURATION), Ok(3_155_760_000_000));
        assert!(matches!(
            ttl("ttl", Duration::MAX),
            Err(Error::InvalidArgument(
                InvalidArgument::DurationTooLong { .. }
            ))
        ));
        assert!(timeout("io timeout", Duration::MAX).is_err());
        assert!(timeout("io timeout", Duration::ZERO).is_err());
        assert!(timeout("io timeout", MIN_TIMEOUT).is_ok());
        assert!(span("delay", Duration::ZERO).is_ok());
        assert!(span("delay", Duration::MAX).is_err());
        // A wait past the limit is clamped to it, never refused.
        assert_eq!(wait(Duration::MAX), MAX_DURATION);
        assert_eq!(wait(MAX_DURATION + Duration::from_nanos(1)), MAX_DURATION);
        assert_eq!(wait(Duration::from_secs(1)), Duration::from_secs(1));
    }

    #[test]
    fn retry_pauses_have_a_floor_and_an_order() {
        let zero = Duration::ZERO;
        assert!(retry("retry", zero, zero).is_err());
        assert!(retry("retry", MIN_PAUSE, zero).is_err());
        assert!(retry("retry", Duration::MAX, Duration::MAX).is_err());
        assert!(retry("retry", MIN_PAUSE, Duration::MAX).is_err());
        let ms = Duration::from_millis;
        let e = retry("retry", ms(20), ms(10)).unwrap_err().to_string();
        assert!(
            e.contains("retry") && e.contains("at least the first"),
            "{e}"
        );
        assert!(retry("retry", MIN_PAUSE, MAX_DURATION).is_ok());
        assert!(retry("retry", ms(5), ms(5)).is_ok());
    }

    #[test]
    fn counts() {
        assert!(permits(0).is_err());
        assert_eq!(permits(1), Ok(1));
        assert_eq!(permits(MAX_PERMITS), Ok(MAX_PERMITS));
        for bad in [MAX_PERMITS + 1, (1 << 53) + 1, 1 << 63, u64::MAX] {
            let e = permits(bad).unwrap_err().to_string();
            assert!(e.contains("permits") && e.contains("4294967295"), "{e}");
        }
        assert!(pool_size(0).is_err());
        assert!(pool_size(u32::MAX).is_err());
        assert_eq!(pool_size(MAX_POOL_SIZE), Ok(MAX_POOL_SIZE));
    }
}

/// Extreme options given to the machines directly (as an embedder of the core would):
/// each is refused with a typed error or runs without overflowing.
#[cfg(test)]
mod machine_tests {
    use std::time::Duration;

    use super::*;
    use crate::backoff::Backoff;
    use crate::keys::Keyspace;
    use crate::lease::{Acquire, AcquireOptions, LockSpec, Token};
    use crate::legacy::{LegacyAcquire, LegacyKeys, LegacyOptions};
    use crate::protocol::{Protocol, Step};
    use crate::redlock::{RedLockAcquire, RedLockOptions};
    use crate::testing::origin;

    fn spec() -> LockSpec {
        let token = Token::from_random([1; 16]);
        LockSpec::lease(&Keyspace::default(), "x", token, Duration::from_secs(30)).unwrap()
    }

    fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        match r {
            Err(e @ Error::InvalidArgument(_)) => e.to_string(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn backoff_saturates_instead_of_overflowing() {
        for (initial, max) in [
            (Duration::MAX, Duration::MAX),
            (Duration::from_millis(5), Duration::MAX),
            (MAX_DURATION, MAX_DURATION),
        ] {
            let mut b = Backoff::new(initial, max, 3);
            let delays: Vec<_> = (0..100).map(|_| b.next_delay()).collect();
            assert!(delays.windows(2).all(|w| w[1] >= w[0] / 2), "{delays:?}");
        }
    }

    #[test]
    fn acquire_refuses_pauses_and_timeouts_out_of_range() {
        let now = origin();
        let ms = Duration::from_millis;
        let cases = [
            (ms(0), ms(0), ms(1000), None, "retry"),
            (Duration::MAX, ms(5), ms(1000), None, "retry"),
            (ms(5), Duration::MAX, ms(1000), None, "retry"),
            (ms(5), ms(10), Duration::MAX, None, "reply timeout"),
        ];
        for (retry_initial, retry_max, reply_timeout, wait, what) in cases {
            let options = AcquireOptions {
                wait,
                retry_initial,
                retry_max,
                reply_timeout,
                min_replicas: None,
            };
            let e = invalid(Acquire::new(spec(), &options, 1, now));
            assert!(e.contains(what), "{e}");
            let legacy = LegacyOptions {
                wait,
                retry_initial,
                retry_max,
                reply_timeout,
                ..LegacyOptions::default()
            };
            let keys = LegacyKeys::new(&Keyspace::default(), "x").unwrap();
            let token = Token::from_random([2; 16]);
            let e = invalid(LegacyAcquire::new(keys, token, &legacy, 1, now, 1));
            assert!(e.contains(what), "{e}");
        }
        // The largest accepted values run: the first request goes out with a deadline.
        let options = AcquireOptions {
            wait: Some(MAX_DURATION),
            retry_initial: MAX_DURATION,
            retry_max: MAX_DURATION,
            reply_timeout: MAX_DURATION,
            min_replicas: None,
        };
        let mut m = Acquire::new(spec(), &options, 1, now).unwrap();
        assert!(matches!(m.poll(now), Step::Send(b) if b.deadline > now));
        // A wait of Duration::MAX ("as long as it takes") is accepted by every acquisition.
        let options = AcquireOptions {
            wait: Some(Duration::MAX),
            ..AcquireOptions::default()
        };
        let mut m = Acquire::new(spec(), &options, 1, now).unwrap();
        assert!(matches!(m.poll(now), Step::Send(b) if b.deadline > now));
        let legacy = LegacyOptions {
            wait: Some(Duration::MAX),
            ..LegacyOptions::default()
        };
        let keys = LegacyKeys::new(&Keyspace::default(), "x").unwrap();
        let token = Token::from_random([2; 16]);
        assert!(LegacyAcquire::new(keys, token, &legacy, 1, now, 1).is_ok());
    }

    #[test]
    fn redlock_refuses_extreme_timeouts() {
        let now = origin();
        let mut options = RedLockOptions::new(3);
        options.node_timeout = Duration::MAX;
        let e = invalid(RedLockAcquire::new(spec(), options, 1, now));
        assert!(e.contains("node timeout"), "{e}");
        let mut options = RedLockOptions::new(3);
        options.retry_max = Duration::ZERO;
        let e = invalid(RedLockAcquire::new(spec(), options, 1, now));
        assert!(e.contains("retry"), "{e}");
        // A wait past the limit means no deadline of ours: accepted, the deadline saturates.
        let mut options = RedLockOptions::new(3);
        options.wait = Some(Duration::MAX);
        assert!(RedLockAcquire::new(spec(), options, 1, now).is_ok());
        // The largest node timeout is refused by the ttl rule, not by an overflow.
        let mut options = RedLockOptions::new(3);
        options.node_timeout = MAX_DURATION;
        let e = invalid(RedLockAcquire::new(spec(), options, 1, now));
        assert!(
            e.contains("node timeout") && e.contains("under half the ttl"),
            "{e}"
        );
    }
}
