//! The rate limiter's machines, driven by scripted replies on virtual time.

use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::keys::Keyspace;
use crate::protocol::{Protocol, Step};
use crate::reply::{FailureKind, TransportFailure};
use crate::testing::{Scenario, err, ints, origin};

const NOW_US: i64 = 1_764_000_000_000_000;

fn spec() -> RateLimiterSpec {
    let limit = RateLimit::new(100, Duration::from_secs(1), 20).unwrap();
    RateLimiterSpec::new(&Keyspace::default(), "api", limit).unwrap()
}

fn args(r: &crate::command::Request) -> Vec<String> {
    r.command
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn invalid(e: Error) -> bool {
    matches!(e, Error::InvalidArgument(_))
}

#[test]
fn limits_are_checked_before_anything_is_sent() {
    let sec = Duration::from_secs(1);
    let l = RateLimit::new(100, sec, 20).unwrap();
    assert_eq!(l.interval(), Duration::from_millis(10));
    assert_eq!(l.burst(), 20);
    // Rounded up: 3 per second is never faster than asked.
    assert_eq!(
        RateLimit::new(3, sec, 1).unwrap().interval(),
        Duration::from_micros(333_334)
    );
    for bad in [
        RateLimit::new(0, sec, 1),
        RateLimit::new(1, Duration::ZERO, 1),
        RateLimit::new(1, Duration::from_nanos(999), 1),
        RateLimit::new(1, sec, 0),
        RateLimit::new(2_000_000, sec, 1),
        RateLimit::new(u64::MAX, sec, 1),
        RateLimit::new(1, MAX_WINDOW + sec, 1),
        RateLimit::new(1, Duration::MAX, 1),
        RateLimit::new(1, sec, MAX_BURST + 1),
        RateLimit::new(1, sec, u64::MAX),
        RateLimit::new(1, Duration::from_secs(86_400), 10_000),
    ] {
        assert!(invalid(bad.unwrap_err()));
    }
    assert!(RateLimit::new(1_000_000, sec, MAX_BURST).is_ok());
    let ks = Keyspace::default();
    assert_eq!(
        RateLimiterSpec::new(&ks, "", l).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::EmptyName)
    );
    let s = spec();
    let now = origin();
    assert!(invalid(try_acquire(&s, 21, now).unwrap_err()));
    assert!(invalid(try_acquire(&s, u64::MAX, now).unwrap_err()));
    assert!(invalid(Throttle::new(&s, 21, sec, sec, now).unwrap_err()));
    assert!(invalid(
        Throttle::new(&s, 1, sec, Duration::ZERO, now).unwrap_err()
    ));
}

#[test]
fn a_take_sends_the_limit_and_cost_and_reads_the_decision() {
    let now = origin();
    let s = spec();
    let mut sc = Scenario::new(
        try_acquire(&s, 1, now + Duration::from_secs(1)).unwrap(),
        now,
    );
    let sent = sc.answer(ints(&[1, 19, 0, 10_000, NOW_US]));
    assert_eq!(
        args(&sent),
        [
            "EVALSHA",
            scripts::THROTTLE.sha1,
            "1",
            "redlease:{api}:rate",
            "10000",
            "200000",
            "1",
            "0"
        ]
    );
    let d = sc.expect_done().unwrap();
    assert_eq!(
        d,
        Decision {
            allowed: true,
            remaining: 19,
            retry_after: Duration::ZERO,
            reset_after: Duration::from_millis(10),
            server_time: SystemTime::UNIX_EPOCH + Duration::from_micros(NOW_US as u64),
        }
    );
    // Another cost, and a peek.
    let mut sc = Scenario::new(
        try_acquire(&s, 5, now + Duration::from_secs(1)).unwrap(),
        now,
    );
    let sent = sc.answer(ints(&[0, 3, 20_000, 170_000, NOW_US]));
    assert_eq!(args(&sent)[6..], ["5", "0"]);
    let d = sc.expect_done().unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_millis(20));
    let mut sc = Scenario::new(peek(&s, now + Duration::from_secs(1)), now);
    let sent = sc.answer(ints(&[1, 20, 0, 0, NOW_US]));
    assert_eq!(args(&sent)[6..], ["1", "1"]);
    assert_eq!(sc.expect_done().unwrap().remaining, 20);
}

#[test]
fn a_decision_in_another_shape_is_an_unexpected_reply() {
    let now = origin();
    for reply in [
        ints(&[1, 19, 0, 10_000]),
        ints(&[2, 19, 0, 10_000, NOW_US]),
        ints(&[1, -1, 0, 10_000, NOW_US]),
        ints(&[0, 0, -5, 10_000, NOW_US]),
        Reply::Int(1),
        Reply::Nil,
    ] {
        let mut sc = Scenario::new(
            try_acquire(&spec(), 1, now + Duration::from_secs(1)).unwrap(),
            now,
        );
        sc.answer(reply);
        assert!(matches!(
            sc.expect_done(),
            Err(Error::UnexpectedReply { .. })
        ));
    }
}

#[test]
fn a_foreign_value_in_the_key_is_a_wrong_type_error() {
    let now = origin();
    let mut sc = Scenario::new(
        try_acquire(&spec(), 1, now + Duration::from_secs(1)).unwrap(),
        now,
    );
    sc.answer(err(
        "WRONGTYPE",
        "the rate limiter key redlease:{api}:rate does not hold a time",
    ));
    match sc.expect_done() {
        Err(Error::WrongType { name, keys, .. }) => {
            assert_eq!(name, "api");
            assert_eq!(keys, "redlease:{api}:rate");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn noscript_is_resent_as_eval() {
    let now = origin();
    let mut sc = Scenario::new(
        try_acquire(&spec(), 1, now + Duration::from_secs(1)).unwrap(),
        now,
    );
    sc.answer(err("NOSCRIPT", "No matching script."));
    let sent = sc.answer(ints(&[1, 19, 0, 10_000, NOW_US]));
    assert_eq!(args(&sent)[0], "EVAL");
    assert!(sc.expect_done().unwrap().allowed);
}

#[test]
fn a_lost_take_is_not_resent_but_a_lost_peek_is() {
    let now = origin();
    let deadline = now + Duration::from_secs(1);
    let mut sc = Scenario::new(try_acquire(&spec(), 1, deadline).unwrap(), now);
    sc.fail(TransportFailure::no_reply("timed out"));
    match sc.expect_done() {
        Err(Error::Unavailable { attempts, last }) => {
            assert_eq!((attempts, last.kind), (1, FailureKind::NoReply));
        }
        other => panic!("{other:?}"),
    }
    // Not sent at all: safe to send again.
    let mut sc = Scenario::new(try_acquire(&spec(), 1, deadline).unwrap(), now);
    sc.fail(TransportFailure::not_sent("refused"));
    sc.sleep_through();
    sc.answer(ints(&[1, 19, 0, 10_000, NOW_US]));
    assert!(sc.expect_done().unwrap().allowed);
    let mut sc = Scenario::new(peek(&spec(), deadline), now);
    sc.fail(TransportFailure::no_reply("timed out"));
    sc.sleep_through();
    sc.answer(ints(&[1, 20, 0, 0, NOW_US]));
    assert!(sc.expect_done().unwrap().allowed);
}

#[test]
fn reset_deletes_the_key() {
    let now = origin();
    let mut sc = Scenario::new(reset(&spec(), now + Duration::from_secs(1)), now);
    let sent = sc.answer(Reply::Int(1));
    assert_eq!(
        args(&sent),
        ["EVALSHA", scripts::RESET.sha1, "1", "redlease:{api}:rate"]
    );
    assert_eq!(sc.expect_done(), Ok(()));
    let mut sc = Scenario::new(reset(&spec(), now + Duration::from_secs(1)), now);
    sc.answer(Reply::Int(0));
    assert_eq!(sc.expect_done(), Ok(()));
}

fn throttle(wait: Duration, now: Instant) -> Scenario<Throttle> {
    let m = Throttle::new(&spec(), 2, wait, Duration::from_secs(1), now).unwrap();
    Scenario::new(m, now)
}

#[test]
fn acquire_sleeps_exactly_until_the_units_are_due_then_asks_again() {
    let start = origin();
    let mut sc = throttle(Duration::from_millis(100), start);
    let first = sc.answer(ints(&[0, 0, 12_345, 190_000, NOW_US]));
    assert_eq!(args(&first)[6], "2");
    let w = sc.expect_wait();
    assert_eq!(w.until, start + Duration::from_micros(12_345));
    assert!(w.wake_on.is_none());
    // Polled early (a spurious wake-up): still waiting, nothing sent.
    sc.now = start + Duration::from_millis(5);
    assert_eq!(sc.expect_wait().until, w.until);
    sc.now = w.until;
    // Someone else took the units: due again in 10 ms, still within the wait.
    sc.answer(ints(&[0, 1, 10_000, 190_000, NOW_US + 12_345]));
    let w2 = sc.sleep_through();
    assert_eq!(w2.until, w.until + Duration::from_millis(10));
    let again = sc.answer(ints(&[1, 0, 0, 200_000, NOW_US + 22_345]));
    assert_eq!(args(&again), args(&first));
    let d = sc.expect_done().unwrap();
    assert!(d.allowed);
    assert!(matches!(
        sc.machine.poll(sc.now),
        Step::Done(Err(Error::Finished))
    ));
}

#[test]
fn acquire_fails_at_once_when_the_units_are_due_after_the_wait() {
    let start = origin();
    let mut sc = throttle(Duration::from_millis(10), start);
    sc.now = start + Duration::from_millis(1);
    // Due in 9,001 µs from the reply: 10.001 ms after the start, past the 10 ms wait.
    sc.answer(ints(&[0, 0, 9_001, 190_000, NOW_US]));
    match sc.expect_done() {
        Err(Error::Timeout {
            name,
            waited,
            attempts,
        }) => {
            assert_eq!(name, "api");
            assert_eq!(waited, Duration::from_millis(1));
            assert_eq!(attempts, 1);
        }
        other => panic!("{other:?}"),
    }
    // Exactly at the deadline is within it.
    let mut sc = throttle(Duration::from_millis(10), start);
    sc.answer(ints(&[0, 0, 10_000, 190_000, NOW_US]));
    assert_eq!(sc.expect_wait().until, start + Duration::from_millis(10));
    // A zero wait: a denial is a timeout at once.
    let mut sc = throttle(Duration::ZERO, start);
    sc.answer(ints(&[0, 0, 1, 190_000, NOW_US]));
    assert!(matches!(sc.expect_done(), Err(Error::Timeout { .. })));
    // Allowed at once needs no wait at all.
    let mut sc = throttle(Duration::ZERO, start);
    sc.answer(ints(&[1, 0, 0, 190_000, NOW_US]));
    assert!(sc.expect_done().unwrap().allowed);
}

#[test]
fn acquire_without_deadline_waits_however_long() {
    let start = origin();
    let mut sc = throttle(Duration::MAX, start);
    let year = 365 * 24 * 3600 * 1_000_000;
    sc.answer(ints(&[0, 0, year, 190_000, NOW_US]));
    let w = sc.sleep_through();
    assert_eq!(w.until, start + Duration::from_micros(year as u64));
    sc.answer(ints(&[1, 0, 0, 190_000, NOW_US + year]));
    assert!(sc.expect_done().unwrap().allowed);
}

#[test]
fn acquire_passes_errors_and_lost_replies_through() {
    let start = origin();
    let mut sc = throttle(Duration::from_secs(1), start);
    sc.fail(TransportFailure::no_reply("timed out"));
    assert!(matches!(sc.expect_done(), Err(Error::Unavailable { .. })));
    let mut sc = throttle(Duration::from_secs(1), start);
    sc.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    assert!(matches!(sc.expect_done(), Err(Error::WrongType { .. })));
}
