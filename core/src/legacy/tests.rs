//! The legacy machines driven by scripted replies on virtual time.

use std::time::{Duration, Instant};

use super::release::MAX_ATTEMPTS;
use super::*;
use crate::command::Request;
use crate::error::{InvalidArgument, LossReason};
use crate::protocol::{Protocol, Step};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};
use crate::testing::{Scenario, err, origin};

/// The Unix time at the start of every scenario.
const UNIX: u64 = 1_700_000_000_000;
const TTL: Duration = Duration::from_secs(10);

fn keys() -> LegacyKeys {
    LegacyKeys::new(&Keyspace::default(), "job").unwrap()
}

fn token() -> Token {
    Token::from_random([1; 16])
}

fn opts(algorithm: LegacyAlgorithm, wait: Option<Duration>) -> LegacyOptions {
    LegacyOptions {
        algorithm,
        ttl: TTL,
        wait,
        ..LegacyOptions::default()
    }
}

fn acquire(algorithm: LegacyAlgorithm, wait: Option<Duration>) -> Scenario<LegacyAcquire> {
    let now = origin();
    Scenario::new(
        LegacyAcquire::new(keys(), token(), &opts(algorithm, wait), 9, now, UNIX).unwrap(),
        now,
    )
}

fn getset(wait: Option<Duration>) -> Scenario<LegacyAcquire> {
    acquire(LegacyAlgorithm::GetSet, wait)
}

fn setnx_expire(wait: Option<Duration>) -> Scenario<LegacyAcquire> {
    acquire(LegacyAlgorithm::SetNxExpire, wait)
}

fn args(r: &Request) -> Vec<String> {
    r.command
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// Our GetSet value when written at `unix` (ms).
fn ours_at(unix: u64) -> String {
    getset_value(unix + 10_000, &token())
}

/// Polls and expects a batch (of any size), recording it.
fn expect_batch<P: Protocol>(s: &mut Scenario<P>) -> Vec<Request>
where
    P::Output: std::fmt::Debug,
{
    match s.machine.poll(s.now) {
        Step::Send(batch) => {
            assert!(batch.deadline > s.now, "batch deadline in the past");
            s.sent.extend(batch.requests.iter().cloned());
            batch.requests
        }
        other => panic!("expected a send, got {other:?}"),
    }
}

/// Sends one batch and answers its requests with `replies`, in order.
fn answer_all<P: Protocol>(s: &mut Scenario<P>, replies: Vec<Reply>) -> Vec<Request>
where
    P::Output: std::fmt::Debug,
{
    let requests = expect_batch(s);
    assert_eq!(requests.len(), replies.len(), "{requests:?}");
    for (r, reply) in requests.iter().zip(replies) {
        s.machine.handle(Response::reply(r.id, reply), s.now);
    }
    requests
}

fn acquired<T: std::fmt::Debug>(r: Result<LegacyAcquisition, T>) -> LegacyLease {
    match r {
        Ok(LegacyAcquisition::Acquired(lease)) => lease,
        other => panic!("expected an acquisition, got {other:?}"),
    }
}

fn lease(algorithm: LegacyAlgorithm, now: Instant) -> LegacyLease {
    LegacyLease {
        keys: keys(),
        algorithm,
        token: token(),
        value: match algorithm {
            LegacyAlgorithm::GetSet => ours_at(UNIX),
            LegacyAlgorithm::SetNxExpire => token().as_str().to_owned(),
        },
        ttl: TTL,
        acquired_at: now,
        attempts: 1,
        valid_until: crate::lease::valid_until(now, TTL),
    }
}

fn release(l: &LegacyLease, now: Instant, unix_ms: u64) -> Scenario<LegacyRelease> {
    Scenario::new(
        LegacyRelease::new(l, now + Duration::from_secs(1), now, unix_ms),
        now,
    )
}

fn not_owner(reason: LossReason) -> Result<(), Error> {
    Err(Error::NotOwner {
        name: "job".into(),
        reason,
    })
}

// ----- values, keys, clock, options -----

#[test]
fn key_value_and_clock_basics() {
    assert_eq!(keys().lock, "redlease:{job}:legacy");
    assert_eq!(
        LegacyKeys::new(&Keyspace::default(), ""),
        Err(Error::InvalidArgument(InvalidArgument::EmptyName))
    );
    let v = getset_value(123, &token());
    assert_eq!(v, format!("123:{}", "01".repeat(16)));
    assert_eq!(getset_expiry(v.as_bytes()), Some(123));
    for bad in [
        &b""[..],
        b"123",
        b"123:",
        b":tok",
        b"-5:tok",
        b"+5:tok",
        b"1 2:tok",
        b"abc:tok",
        b"99999999999999999999999:tok",
        b"\xff\xfe:tok",
    ] {
        assert_eq!(getset_expiry(bad), None, "{bad:?}");
    }
    let t = origin();
    let clock = WallClock::new(t + Duration::from_secs(1), UNIX);
    assert_eq!(
        clock.unix_ms_at(t + Duration::from_millis(1500)),
        UNIX + 500
    );
    assert_eq!(clock.unix_ms_at(t), UNIX - 1000);
    assert_eq!(
        WallClock::new(t, 5).unix_ms_at(t + Duration::from_secs(1)),
        1005
    );
    assert_eq!(
        WallClock::new(t + Duration::from_secs(1), 5).unix_ms_at(t),
        0
    );
    assert_eq!(LegacyAlgorithm::default(), LegacyAlgorithm::GetSet);
}

#[test]
fn bad_options_are_rejected_before_anything_is_sent() {
    let now = origin();
    for algorithm in [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire] {
        for ttl in [Duration::ZERO, Duration::from_micros(10), Duration::MAX] {
            let o = LegacyOptions {
                ttl,
                ..opts(algorithm, None)
            };
            assert!(matches!(
                LegacyAcquire::new(keys(), token(), &o, 0, now, UNIX),
                Err(Error::InvalidArgument(_))
            ));
        }
        let o = LegacyOptions {
            reply_timeout: Duration::ZERO,
            ..opts(algorithm, None)
        };
        assert!(LegacyAcquire::new(keys(), token(), &o, 0, now, UNIX).is_err());
    }
}

// ----- GetSet -----

#[test]
fn getset_free_lock_is_acquired_with_one_setnx() {
    let mut s = getset(None);
    let start = s.now;
    let r = s.answer(Reply::Int(1));
    assert_eq!(args(&r), ["SETNX", "redlease:{job}:legacy", &ours_at(UNIX)]);
    let lease = acquired(s.expect_done());
    assert_eq!(lease.value, ours_at(UNIX));
    assert_eq!(lease.expires_at_unix_ms(), Some(UNIX + 10_000));
    assert_eq!(lease.algorithm, LegacyAlgorithm::GetSet);
    assert_eq!(lease.attempts, 1);
    assert_eq!(lease.acquired_at, start);
    assert_eq!(
        lease.valid_until,
        start + Duration::from_millis(10_000 - 102)
    );
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

#[test]
fn getset_busy_when_the_holders_time_has_not_passed() {
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    let r = s.answer(bulk(&format!("{}:someone", UNIX + 2500)));
    assert_eq!(args(&r), ["GET", "redlease:{job}:legacy"]);
    assert_eq!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy {
            holder_ttl: Some(Duration::from_millis(2500))
        })
    );
    assert_eq!(s.sent.len(), 2, "nothing written");
}

#[test]
fn getset_expired_lock_is_taken_over_when_getset_returns_what_we_read() {
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    s.now += Duration::from_millis(7);
    let dead = format!("{}:crashed", UNIX - 1);
    s.answer(bulk(&dead));
    s.now += Duration::from_millis(3);
    let takeover_at = s.now;
    let r = s.answer(bulk(&dead));
    // The new value is stamped from the moment it is sent.
    let value = ours_at(UNIX + 10);
    assert_eq!(args(&r), ["GETSET", "redlease:{job}:legacy", &value]);
    let lease = acquired(s.expect_done());
    assert_eq!(lease.value, value);
    assert_eq!(lease.acquired_at, takeover_at);
    assert_eq!(
        lease.valid_until,
        takeover_at + Duration::from_millis(10_000 - 102)
    );
    assert_eq!(lease.attempts, 1);
}

#[test]
fn getset_takeover_of_a_key_deleted_meanwhile_is_ours() {
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    s.answer(bulk(&format!("{}:crashed", UNIX - 1)));
    s.answer(Reply::Nil);
    acquired(s.expect_done());
}

#[test]
fn getset_takeover_lost_to_another_waiter_is_busy_and_never_claimed_later() {
    // Trying once: another waiter's value came back, so it won; we overwrote it.
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    s.answer(bulk(&format!("{}:crashed", UNIX - 1)));
    s.answer(bulk(&format!("{}:winner", UNIX + 10_000)));
    assert_eq!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy {
            holder_ttl: Some(TTL)
        })
    );

    // Waiting: the key now shows the value our lost GETSET wrote; it is not ours to claim.
    let mut s = getset(Some(Duration::from_secs(60)));
    s.answer(Reply::Int(0));
    s.answer(bulk(&format!("{}:crashed", UNIX - 1)));
    let ours = args(&s.answer(bulk(&format!("{}:winner", UNIX + 10_000))))[2].clone();
    let w = s.sleep_through();
    assert_eq!(w.wake_on, None, "no pub/sub for legacy locks");
    s.answer(Reply::Int(0));
    s.answer(bulk(&ours));
    assert!(
        matches!(s.machine.poll(s.now), Step::Wait(_)),
        "busy, not acquired"
    );
}

#[test]
fn getset_takeover_overwriting_garbage_is_a_typed_error() {
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    s.answer(bulk(&format!("{}:crashed", UNIX - 1)));
    s.answer(bulk("not a lock value"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::UnexpectedReply { .. })
    ));
}

#[test]
fn getset_a_key_that_vanishes_is_tried_again_at_once_a_few_times() {
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    s.answer(Reply::Nil);
    let r = s.answer(Reply::Int(1));
    assert_eq!(r.command.name(), "SETNX");
    assert_eq!(acquired(s.expect_done()).attempts, 2);

    // A key that keeps flapping is reported busy rather than spun on.
    let mut s = getset(None);
    for _ in 0..3 {
        s.answer(Reply::Int(0));
        s.answer(Reply::Nil);
    }
    assert_eq!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy { holder_ttl: None })
    );
}

#[test]
fn getset_lost_setnx_reply_is_resolved_by_recognising_our_value() {
    let mut s = getset(None);
    let start = s.now;
    let first = s.fail(TransportFailure::no_reply("read timed out"));
    s.now += Duration::from_millis(5);
    let second = s.answer(Reply::Int(0));
    assert_ne!(
        args(&first)[2],
        args(&second)[2],
        "a fresh value per attempt"
    );
    s.answer(bulk(&args(&first)[2]));
    let lease = acquired(s.expect_done());
    assert_eq!(lease.value, args(&first)[2]);
    assert_eq!(lease.acquired_at, start, "valid from the write that did it");
    assert_eq!(
        lease.valid_until,
        start + Duration::from_millis(10_000 - 102)
    );
    assert_eq!(lease.attempts, 2);
    assert_eq!(s.sent.len(), 3, "no takeover, no cleanup");
}

#[test]
fn getset_lost_takeover_reply_is_never_claimed() {
    let mut s = getset(None);
    s.answer(Reply::Int(0));
    s.answer(bulk(&format!("{}:crashed", UNIX - 1)));
    let takeover = s.fail(TransportFailure::no_reply("timeout"));
    // The retry finds the value that GETSET wrote: it may have lost, so it is not ours.
    s.answer(Reply::Int(0));
    s.answer(bulk(&args(&takeover)[2]));
    assert!(matches!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy {
            holder_ttl: Some(_)
        })
    ));
    assert_eq!(s.sent.len(), 5, "and no cleanup deletes it");
}

#[test]
fn getset_giving_up_after_a_lost_setnx_releases_what_we_may_hold() {
    let mut s = getset(None);
    let first = s.fail(TransportFailure::no_reply("timeout"));
    s.now += Duration::from_millis(1);
    let second = s.fail(TransportFailure::no_reply("timeout"));
    assert_ne!(args(&first)[2], args(&second)[2]);
    // Either write may have landed: the first one did.
    let get = s.expect_send();
    assert_eq!(args(&get), ["GET", "redlease:{job}:legacy"]);
    assert!(get.id > second.id, "the cleanup numbers its requests on");
    // A late reply to a SETNX is not taken for the cleanup's answer.
    s.machine
        .handle(Response::reply(first.id, Reply::Int(1)), s.now);
    assert!(
        matches!(s.machine.poll(s.now), Step::Wait(_)),
        "the GET is still owed"
    );
    s.machine
        .handle(Response::reply(get.id, bulk(&args(&first)[2])), s.now);
    let del = s.answer(Reply::Int(1));
    assert_eq!(args(&del), ["DEL", "redlease:{job}:legacy"]);
    match s.expect_done() {
        Err(Error::Unavailable { attempts: 2, last }) => {
            assert_eq!(last.kind, FailureKind::NoReply)
        }
        other => panic!("{other:?}"),
    }

    // The cleanup deletes only a value of ours.
    let mut s = getset(None);
    s.fail(TransportFailure::no_reply("timeout"));
    s.fail(TransportFailure::no_reply("timeout"));
    s.answer(bulk(&format!("{}:someone", UNIX + 5000)));
    assert!(matches!(s.expect_done(), Err(Error::Unavailable { .. })));
    assert_eq!(s.sent.len(), 3, "no DEL of another holder's key");
}

#[test]
fn a_command_that_never_left_is_not_retried_when_trying_once() {
    for mut s in [getset(None), setnx_expire(None)] {
        s.fail(TransportFailure::not_sent("connection refused"));
        assert!(matches!(
            s.expect_done(),
            Err(Error::Unavailable { attempts: 1, .. })
        ));
        assert_eq!(s.sent.len(), 1, "no cleanup for a command that never ran");
    }
}

#[test]
fn getset_foreign_values_are_typed_errors_and_nothing_is_written() {
    for value in [
        &b"garbage"[..],
        b"abc:tok",
        b":tok",
        b"123:",
        b"\xff\xfe",
        b"-5:x",
        b"99999999999999999999999:x",
    ] {
        let mut s = getset(Some(Duration::from_secs(1)));
        s.answer(Reply::Int(0));
        s.answer(Reply::Bulk(value.to_vec()));
        match s.expect_done() {
            Err(Error::UnexpectedReply { context, .. }) => {
                assert!(context.contains("value"), "{context}")
            }
            other => panic!("{value:?}: {other:?}"),
        }
        assert_eq!(s.sent.len(), 2, "no GETSET over foreign data");
    }
}

#[test]
fn malformed_replies_are_typed_errors() {
    let odd = [
        Reply::Nil,
        Reply::Int(2),
        Reply::Int(-1),
        Reply::Status("OK".into()),
        Reply::Bulk(b"\xff".to_vec()),
        Reply::Array(vec![Reply::Int(1)]),
    ];
    for algorithm in [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire] {
        // To SETNX.
        for reply in &odd {
            let mut s = acquire(algorithm, Some(Duration::from_secs(1)));
            s.answer(reply.clone());
            // The SETNX may have written our value: the cleanup reads the key first (and
            // deletes only a value of ours; here the key is gone).
            let cleanup = s.answer(Reply::Nil);
            assert_eq!(cleanup.command.name(), "GET", "{algorithm:?} {reply:?}");
            assert!(
                matches!(s.expect_done(), Err(Error::UnexpectedReply { .. })),
                "{algorithm:?} {reply:?}"
            );
        }
    }
    // To GET and GETSET (GetSet).
    for reply in [
        Reply::Int(5),
        Reply::Status("OK".into()),
        Reply::Array(vec![]),
    ] {
        let mut s = getset(None);
        s.answer(Reply::Int(0));
        s.answer(reply.clone());
        assert!(
            matches!(s.expect_done(), Err(Error::UnexpectedReply { .. })),
            "{reply:?}"
        );
        let mut s = getset(None);
        s.answer(Reply::Int(0));
        s.answer(bulk(&format!("{}:crashed", UNIX - 1)));
        s.answer(reply.clone());
        assert!(
            matches!(s.expect_done(), Err(Error::UnexpectedReply { .. })),
            "{reply:?}"
        );
    }
    // To GET + PTTL and PEXPIRE (SetNxExpire).
    for (get, pttl) in [
        (Reply::Int(1), Reply::Int(5)),
        (bulk("other"), Reply::Nil),
        (bulk("other"), Reply::Int(-3)),
        (bulk("other"), Reply::Status("x".into())),
    ] {
        let mut s = setnx_expire(None);
        s.answer(Reply::Int(0));
        answer_all(&mut s, vec![get.clone(), pttl.clone()]);
        assert!(
            matches!(s.expect_done(), Err(Error::UnexpectedReply { .. })),
            "{get:?} {pttl:?}"
        );
    }
    // After a SETNX that wrote, the failure first deletes our key (it has no expiry yet).
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(1));
    s.answer(Reply::Status("OK".into()));
    assert_eq!(s.answer(bulk(token().as_str())).command.name(), "GET");
    assert_eq!(s.answer(Reply::Int(1)).command.name(), "DEL");
    assert!(matches!(
        s.expect_done(),
        Err(Error::UnexpectedReply { .. })
    ));
}

#[test]
fn wrongtype_is_typed_and_nothing_is_written() {
    let wrongtype = || {
        err(
            "WRONGTYPE",
            "Operation against a key holding the wrong kind of value",
        )
    };
    // SETNX does not check the type of an existing key; the GET that follows does.
    let mut s = getset(Some(Duration::from_secs(5)));
    s.answer(Reply::Int(0));
    s.answer(wrongtype());
    match s.expect_done() {
        Err(Error::WrongType { name, keys, .. }) => {
            assert_eq!(name, "job");
            assert_eq!(keys, "redlease:{job}:legacy");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.sent.len(), 2);

    // SetNxExpire: the PTTL of a hash says "no expiry", but no repair is sent to it.
    let mut s = setnx_expire(Some(Duration::from_secs(5)));
    s.answer(Reply::Int(0));
    answer_all(&mut s, vec![wrongtype(), Reply::Int(-1)]);
    assert!(matches!(s.expect_done(), Err(Error::WrongType { .. })));
    assert_eq!(s.sent.len(), 3, "no PEXPIRE on a foreign key");

    // Other error replies keep their code.
    let mut s = getset(None);
    s.answer(err(
        "OOM",
        "command not allowed when used memory > 'maxmemory'.",
    ));
    assert!(matches!(s.expect_done(), Err(Error::Redis { code, .. }) if code == "OOM"));
}

#[test]
fn waiting_retries_with_backoff_until_the_deadline() {
    let mut s = getset(Some(Duration::from_millis(100)));
    let start = s.now;
    let busy = |s: &mut Scenario<LegacyAcquire>| {
        s.answer(Reply::Int(0));
        let holder = format!("{}:someone", UNIX + 60_000);
        s.answer(bulk(&holder));
    };
    busy(&mut s);
    let w = s.sleep_through();
    assert_eq!(w.wake_on, None);
    assert!(
        w.until <= start + Duration::from_millis(5),
        "first pause is about retry_initial"
    );
    let mut attempts = 1;
    loop {
        busy(&mut s);
        attempts += 1;
        match s.machine.poll(s.now) {
            Step::Wait(w) => {
                assert!(
                    w.until <= start + Duration::from_millis(100),
                    "never past the deadline"
                );
                s.now = w.until;
            }
            Step::Done(Err(Error::Timeout {
                waited,
                attempts: n,
                name,
            })) => {
                assert_eq!(name, "job");
                assert_eq!(n, attempts);
                assert_eq!(waited, Duration::from_millis(100));
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(attempts < 100);
    }
    assert!((4..=12).contains(&attempts), "{attempts}");
}

#[test]
fn the_pause_is_capped_by_the_holders_time_left_then_the_lock_is_taken_over() {
    let mut s = getset(Some(Duration::from_secs(10)));
    let start = s.now;
    let wall = |s: &Scenario<LegacyAcquire>| UNIX + (s.now - start).as_millis() as u64;
    for _ in 0..8 {
        s.answer(Reply::Int(0));
        let holder = format!("{}:someone", wall(&s) + 5000);
        s.answer(bulk(&holder));
        s.sleep_through();
    }
    s.answer(Reply::Int(0));
    let holder = format!("{}:someone", wall(&s) + 2);
    s.answer(bulk(&holder));
    let short = s.expect_wait();
    assert!(
        short.until - s.now <= Duration::from_millis(2),
        "{:?}",
        short.until - s.now
    );
    s.now = short.until;
    s.answer(Reply::Int(0));
    s.answer(bulk(&holder));
    s.answer(bulk(&holder));
    assert_eq!(acquired(s.expect_done()).attempts, 10);
}

// ----- SetNxExpire -----

#[test]
fn setnx_expire_free_lock_is_acquired_with_setnx_then_pexpire() {
    let mut s = setnx_expire(None);
    let start = s.now;
    let r = s.answer(Reply::Int(1));
    assert_eq!(
        args(&r),
        ["SETNX", "redlease:{job}:legacy", token().as_str()]
    );
    s.now += Duration::from_millis(1);
    let r = s.answer(Reply::Int(1));
    assert_eq!(args(&r), ["PEXPIRE", "redlease:{job}:legacy", "10000"]);
    let lease = acquired(s.expect_done());
    assert_eq!(lease.value, token().as_str());
    assert_eq!(lease.algorithm, LegacyAlgorithm::SetNxExpire);
    assert_eq!(lease.expires_at_unix_ms(), None);
    assert_eq!(
        lease.valid_until,
        start + Duration::from_millis(10_000 - 102),
        "from the SETNX"
    );
}

#[test]
fn setnx_expire_busy_reads_value_and_ttl_in_one_round_trip() {
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(0));
    let rs = answer_all(&mut s, vec![bulk("someone"), Reply::Int(2500)]);
    assert_eq!(args(&rs[0]), ["GET", "redlease:{job}:legacy"]);
    assert_eq!(args(&rs[1]), ["PTTL", "redlease:{job}:legacy"]);
    assert_eq!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy {
            holder_ttl: Some(Duration::from_millis(2500))
        })
    );
    assert_eq!(s.sent.len(), 3, "nothing written");
}

#[test]
fn setnx_expire_a_key_without_ttl_is_repaired_then_busy() {
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(0));
    answer_all(&mut s, vec![bulk("dead-holder"), Reply::Int(-1)]);
    let r = s.answer(Reply::Int(1));
    assert_eq!(args(&r), ["PEXPIRE", "redlease:{job}:legacy", "10000"]);
    assert_eq!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy {
            holder_ttl: Some(TTL)
        })
    );
}

#[test]
fn setnx_expire_a_key_gone_meanwhile_is_tried_again_at_once() {
    for (get, pttl) in [(Reply::Nil, Reply::Int(-2)), (bulk("x"), Reply::Int(-2))] {
        let mut s = setnx_expire(None);
        s.answer(Reply::Int(0));
        answer_all(&mut s, vec![get, pttl]);
        s.answer(Reply::Int(1));
        s.answer(Reply::Int(1));
        assert_eq!(acquired(s.expect_done()).attempts, 2);
    }
    // Deleted between our SETNX and our PEXPIRE: not ours any more, start over.
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(1));
    s.answer(Reply::Int(0));
    let r = s.answer(Reply::Int(1));
    assert_eq!(r.command.name(), "SETNX");
    s.answer(Reply::Int(1));
    assert_eq!(acquired(s.expect_done()).attempts, 2);
}

#[test]
fn setnx_expire_lost_setnx_reply_is_resolved_by_recognising_our_token() {
    // The SETNX ran and so did a repair by someone else: ours, with the ttl Redis reports.
    let mut s = setnx_expire(None);
    s.fail(TransportFailure::no_reply("timeout"));
    s.now += Duration::from_millis(20);
    let read_at = s.now;
    s.answer(Reply::Int(0));
    answer_all(&mut s, vec![bulk(token().as_str()), Reply::Int(9000)]);
    let lease = acquired(s.expect_done());
    assert_eq!(
        lease.valid_until,
        read_at + Duration::from_millis(9000 - 102)
    );
    assert_eq!(lease.attempts, 2);

    // The SETNX ran, its key has no expiry yet: we set it.
    let mut s = setnx_expire(None);
    s.fail(TransportFailure::no_reply("timeout"));
    s.answer(Reply::Int(0));
    answer_all(&mut s, vec![bulk(token().as_str()), Reply::Int(-1)]);
    let r = s.answer(Reply::Int(1));
    assert_eq!(args(&r), ["PEXPIRE", "redlease:{job}:legacy", "10000"]);
    acquired(s.expect_done());
}

#[test]
fn setnx_expire_lost_pexpire_reply_is_resolved_by_the_retry() {
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(1));
    s.fail(TransportFailure::no_reply("timeout"));
    s.answer(Reply::Int(0));
    answer_all(&mut s, vec![bulk(token().as_str()), Reply::Int(-1)]);
    s.answer(Reply::Int(1));
    assert_eq!(acquired(s.expect_done()).attempts, 2);
}

#[test]
fn setnx_expire_giving_up_with_a_key_without_ttl_releases_it() {
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(1));
    s.fail(TransportFailure::not_sent("refused"));
    // Trying once, a SETNX that wrote is worth one retry even after a command that never left.
    s.fail(TransportFailure::not_sent("refused"));
    let get = s.answer(bulk(token().as_str()));
    assert_eq!(get.command.name(), "GET");
    let del = s.answer(Reply::Int(1));
    assert_eq!(del.command.name(), "DEL");
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 2, .. })
    ));
}

#[test]
fn waiting_through_an_outage_ends_unavailable_at_the_deadline() {
    for mut s in [
        getset(Some(Duration::from_millis(50))),
        setnx_expire(Some(Duration::from_millis(50))),
    ] {
        let start = s.now;
        let mut n = 0;
        loop {
            s.fail(TransportFailure::not_sent("connection refused"));
            n += 1;
            match s.machine.poll(s.now) {
                Step::Wait(w) => s.now = w.until,
                Step::Done(Err(Error::Unavailable { attempts, .. })) => {
                    assert_eq!(attempts, n);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(s.now, start + Duration::from_millis(50));
    }
}

#[test]
fn stale_and_unknown_replies_are_ignored() {
    let mut s = setnx_expire(None);
    s.answer(Reply::Int(0));
    let rs = expect_batch(&mut s);
    s.machine
        .handle(Response::reply(rs[0].id, bulk("someone")), s.now);
    s.machine
        .handle(Response::reply(crate::RequestId(999), Reply::Int(1)), s.now);
    assert!(
        matches!(s.machine.poll(s.now), Step::Wait(w) if w.wake_on.is_none()),
        "PTTL still owed"
    );
    // A duplicate answer to the GET changes nothing.
    s.machine
        .handle(Response::reply(rs[0].id, bulk(token().as_str())), s.now);
    s.machine
        .handle(Response::reply(rs[1].id, Reply::Int(700)), s.now);
    assert_eq!(
        s.expect_done(),
        Ok(LegacyAcquisition::Busy {
            holder_ttl: Some(Duration::from_millis(700))
        })
    );
}

// ----- Release -----

#[test]
fn getset_release_outcomes() {
    let now = origin();
    let l = lease(LegacyAlgorithm::GetSet, now);
    let ours = l.value.clone();

    // Ours and unexpired: deleted.
    let mut s = release(&l, now, UNIX + 100);
    let get = s.answer(bulk(&ours));
    assert_eq!(args(&get), ["GET", "redlease:{job}:legacy"]);
    let del = s.answer(Reply::Int(1));
    assert_eq!(args(&del), ["DEL", "redlease:{job}:legacy"]);
    assert_eq!(s.expect_done(), Ok(()));

    // Gone: expired.
    let mut s = release(&l, now, UNIX + 100);
    s.answer(Reply::Nil);
    assert_eq!(s.expect_done(), not_owner(LossReason::Expired));

    // Another value: taken.
    let mut s = release(&l, now, UNIX + 100);
    s.answer(bulk(&format!("{}:other", UNIX + 20_000)));
    assert_eq!(s.expect_done(), not_owner(LossReason::Taken));
    assert_eq!(s.sent.len(), 1);

    // Ours, but its time has passed by the local wall clock: expired, and not deleted.
    let mut s = release(&l, now, UNIX + 10_000);
    s.answer(bulk(&ours));
    assert_eq!(s.expect_done(), not_owner(LossReason::Expired));
    assert_eq!(s.sent.len(), 1, "no DEL of an expired value");

    // Gone between GET and DEL.
    let mut s = release(&l, now, UNIX + 100);
    s.answer(bulk(&ours));
    s.answer(Reply::Int(0));
    assert_eq!(s.expect_done(), not_owner(LossReason::Expired));

    // Foreign data and wrong types are typed errors.
    let mut s = release(&l, now, UNIX + 100);
    s.answer(bulk("garbage"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::UnexpectedReply { .. })
    ));
    let mut s = release(&l, now, UNIX + 100);
    s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    assert!(matches!(s.expect_done(), Err(Error::WrongType { .. })));
    let mut s = release(&l, now, UNIX + 100);
    s.answer(Reply::Int(3));
    assert!(matches!(
        s.expect_done(),
        Err(Error::UnexpectedReply { .. })
    ));
}

#[test]
fn setnx_expire_release_outcomes() {
    let now = origin();
    let l = lease(LegacyAlgorithm::SetNxExpire, now);
    let mut s = release(&l, now, UNIX);
    s.answer(bulk(token().as_str()));
    s.answer(Reply::Int(1));
    assert_eq!(s.expect_done(), Ok(()));
    let mut s = release(&l, now, UNIX);
    s.answer(Reply::Nil);
    assert_eq!(s.expect_done(), not_owner(LossReason::Expired));
    let mut s = release(&l, now, UNIX);
    s.answer(bulk("another-token"));
    assert_eq!(s.expect_done(), not_owner(LossReason::Taken));
    // Redis's ttl decides in this mode: a key still holding our token was not expired.
    let mut s = release(&l, now, UNIX + 3_600_000);
    s.answer(bulk(token().as_str()));
    s.answer(Reply::Int(1));
    assert_eq!(s.expect_done(), Ok(()));
}

#[test]
fn release_retried_after_a_lost_del_counts_the_lost_del() {
    let now = origin();
    for algorithm in [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire] {
        let l = lease(algorithm, now);
        for after in [Reply::Nil, bulk(&format!("{}:next", UNIX + 20_000))] {
            let mut s = release(&l, now, UNIX);
            s.answer(bulk(&l.value));
            s.fail(TransportFailure::no_reply("timeout"));
            s.sleep_through();
            s.answer(after.clone());
            assert_eq!(s.expect_done(), Ok(()), "{algorithm:?} {after:?}");
        }
    }
    // A lost GET proves nothing.
    let l = lease(LegacyAlgorithm::GetSet, now);
    let mut s = release(&l, now, UNIX);
    s.fail(TransportFailure::no_reply("timeout"));
    s.sleep_through();
    s.answer(Reply::Nil);
    assert_eq!(s.expect_done(), not_owner(LossReason::Expired));
}

#[test]
fn release_gives_up_after_max_attempts_or_deadline() {
    let now = origin();
    let l = lease(LegacyAlgorithm::GetSet, now);
    let mut s = Scenario::new(
        LegacyRelease::new(&l, now + Duration::from_secs(5), now, UNIX),
        now,
    );
    for _ in 0..MAX_ATTEMPTS - 1 {
        s.fail(TransportFailure::not_sent("refused"));
        s.sleep_through();
    }
    s.fail(TransportFailure::not_sent("refused"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 3, .. })
    ));
    let mut s = Scenario::new(
        LegacyRelease::new(&l, now + Duration::from_millis(15), now, UNIX),
        now,
    );
    s.fail(TransportFailure::not_sent("refused"));
    s.sleep_through();
    s.fail(TransportFailure::not_sent("refused"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 2, .. })
    ));
}

// ----- Robustness -----

/// Every machine, fed any sequence of odd replies and failures, ends with a result within a
/// bounded number of steps and never panics.
#[test]
fn no_reply_sequence_makes_a_machine_panic_or_spin() {
    let catalogue = [
        Ok(Reply::Nil),
        Ok(Reply::Int(-7)),
        Ok(Reply::Int(-2)),
        Ok(Reply::Int(-1)),
        Ok(Reply::Int(0)),
        Ok(Reply::Int(1)),
        Ok(Reply::Bulk(vec![0xff])),
        Ok(bulk(&format!("{}:x", UNIX - 5))),
        Ok(bulk(&format!("{}:x", UNIX + 5))),
        Ok(bulk(&ours_at(UNIX))),
        Ok(bulk(token().as_str())),
        Ok(Reply::Status("QUEUED".into())),
        Ok(Reply::Array(vec![Reply::Nil; 3])),
        Ok(err("ERR", "x")),
        Ok(err("WRONGTYPE", "x")),
        Err(TransportFailure::no_reply("t")),
        Err(TransportFailure::not_sent("r")),
    ];
    let now = origin();
    for a in &catalogue {
        for b in &catalogue {
            for c in &catalogue {
                let script = [a.clone(), b.clone(), c.clone()];
                for algorithm in [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire] {
                    for wait in [None, Some(Duration::from_millis(30))] {
                        run_to_end(
                            LegacyAcquire::new(
                                keys(),
                                token(),
                                &opts(algorithm, wait),
                                1,
                                now,
                                UNIX,
                            )
                            .unwrap(),
                            now,
                            &script,
                        );
                    }
                    run_to_end(
                        LegacyRelease::new(
                            &lease(algorithm, now),
                            now + Duration::from_millis(30),
                            now,
                            UNIX,
                        ),
                        now,
                        &script,
                    );
                }
            }
        }
    }
}

fn run_to_end<P: Protocol>(mut m: P, start: Instant, script: &[Result<Reply, TransportFailure>]) {
    let mut now = start;
    let mut fed = 0;
    for _ in 0..1000 {
        match m.poll(now) {
            Step::Send(batch) => {
                for r in batch.requests {
                    // After the scripted replies, the lock stays busy forever.
                    let result = script.get(fed).cloned().unwrap_or(Ok(Reply::Int(0)));
                    fed += 1;
                    m.handle(Response { id: r.id, result }, now);
                }
            }
            Step::Wait(w) => {
                assert!(w.until >= now);
                assert_eq!(w.wake_on, None);
                now = w.until;
            }
            Step::Done(_) => {
                assert!(matches!(m.poll(now), Step::Done(Err(Error::Finished))));
                return;
            }
        }
    }
    panic!("machine did not finish: {script:?}");
}
