//! The lease machines driven by scripted replies on virtual time.

use std::time::Duration;

use super::scripts::{ACQUIRE, EXTEND, RELEASE};
use super::*;
use crate::error::LossReason;
use crate::keys::Keyspace;
use crate::protocol::{Protocol, Step};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};
use crate::semaphore::SemaphoreState;
use crate::testing::{Scenario, err, ints, origin};

const TTL: Duration = Duration::from_secs(10);

fn spec() -> LockSpec {
    LockSpec::lease(&Keyspace::default(), "job", token(), TTL).unwrap()
}

fn token() -> Token {
    Token::from_random([1; 16])
}

/// One spec of every kind of lock.
fn all_kinds() -> Vec<LockSpec> {
    let ks = Keyspace::default();
    let w = Duration::from_secs(5);
    vec![
        spec(),
        LockSpec::reentrant(&ks, "job", "c1:7", token(), TTL).unwrap(),
        LockSpec::fair(&ks, "job", token(), TTL, w).unwrap(),
        LockSpec::read(&ks, "job", token(), TTL).unwrap(),
        LockSpec::write(&ks, "job", token(), TTL, w).unwrap(),
        spec().fenced(false).unwrap(),
    ]
}

fn opts(wait: Option<Duration>) -> AcquireOptions {
    AcquireOptions {
        wait,
        ..AcquireOptions::default()
    }
}

fn acquire(wait: Option<Duration>) -> Scenario<Acquire> {
    let now = origin();
    Scenario::new(Acquire::new(spec(), &opts(wait), 9, now).unwrap(), now)
}

fn lease_at(now: std::time::Instant) -> Lease {
    let spec = spec();
    Lease {
        kind: spec.kind,
        target: spec.target,
        token: token(),
        fence: 3,
        ttl: TTL,
        acquired_at: now,
        valid_until: valid_until(now, TTL),
        attempts: 1,
        unanswered: false,
        calls: spec.calls,
        data: Vec::new(),
    }
}

fn args(r: &crate::command::Request) -> Vec<String> {
    r.command
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn acquire_free_lock_issues_fence_and_lease() {
    let mut s = acquire(None);
    let start = s.now;
    // acquire.lua answers a grant with the bare fence (`{1, fence}` is understood too: see
    // noscript_falls_back_to_eval).
    let r = s.answer(Reply::Int(41));
    assert_eq!(
        args(&r),
        [
            "EVALSHA",
            ACQUIRE.sha1,
            "3",
            "redlease:{job}:lock",
            "redlease:{job}:fence",
            "redlease:{job}:undone",
            token().as_str(),
            "10000"
        ]
    );
    let Ok(Acquisition::Acquired(lease)) = s.expect_done() else {
        panic!("not acquired")
    };
    assert_eq!(lease.fence, 41);
    assert_eq!(
        lease.target,
        spec().target,
        "the lease names its lock and keys"
    );
    assert_eq!(lease.acquired_at, start);
    assert_eq!(
        lease.valid_until,
        start + Duration::from_millis(10_000 - 102)
    );
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

#[test]
fn acquire_busy_when_trying_once() {
    let mut s = acquire(None);
    s.answer(ints(&[0, 2500]));
    assert_eq!(
        s.expect_done(),
        Ok(Acquisition::Busy {
            holder_ttl: Some(Duration::from_millis(2500))
        })
    );
    // A holder without expiry (-1) is reported as such.
    let mut s = acquire(None);
    s.answer(ints(&[0, -1]));
    assert_eq!(s.expect_done(), Ok(Acquisition::Busy { holder_ttl: None }));
}

#[test]
fn noscript_falls_back_to_eval() {
    let mut s = acquire(None);
    s.answer(err("NOSCRIPT", "No matching script. Please use EVAL."));
    let r = s.answer(ints(&[1, 1]));
    assert_eq!(r.command.name(), "EVAL");
    assert_eq!(&r.command.args()[1], ACQUIRE.source.as_bytes());
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(_))));
}

#[test]
fn wrongtype_is_typed_and_sends_nothing_more() {
    let mut s = acquire(Some(Duration::from_secs(5)));
    s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    match s.expect_done() {
        Err(Error::WrongType { name, keys, .. }) => {
            assert_eq!(name, "job");
            assert!(keys.contains("redlease:{job}:lock"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.sent.len(), 1);
}

#[test]
fn other_error_replies_keep_their_code() {
    let mut s = acquire(None);
    s.answer(err(
        "OOM",
        "command not allowed when used memory > 'maxmemory'.",
    ));
    assert!(matches!(s.expect_done(), Err(Error::Redis { code, .. }) if code == "OOM"));
}

#[test]
fn malformed_replies_are_typed_errors() {
    let shapes = [
        Reply::Nil,
        // A bare fence must be at least 1, as a pair's.
        Reply::Int(0),
        Reply::Int(-3),
        Reply::Status("OK".into()),
        Reply::Bulk(b"\xff\xfe".to_vec()),
        ints(&[1]),
        ints(&[1, 0]),
        ints(&[1, -5]),
        ints(&[2, 3]),
        ints(&[1, 2, 3]),
        Reply::Array(vec![Reply::Int(1), Reply::Nil]),
        Reply::Array(vec![Reply::Array(vec![]), Reply::Int(1)]),
    ];
    for shape in shapes {
        let mut s = acquire(Some(Duration::from_secs(1)));
        s.answer(shape.clone());
        // The script ran to its end: whatever it wrote is undone (owner-checked) first.
        let undo = s.answer(Reply::Int(1));
        assert_eq!(args(&undo)[1], RELEASE.sha1, "{shape:?}");
        assert_eq!(args(&undo)[4], "redlease:{job}:undone");
        assert_eq!(args(&undo)[5], token().as_str());
        assert!(
            matches!(s.expect_done(), Err(Error::UnexpectedReply { .. })),
            "{shape:?}"
        );
    }
}

#[test]
fn waiting_retries_with_backoff_woken_by_release_channel_until_deadline() {
    let mut s = acquire(Some(Duration::from_millis(100)));
    let start = s.now;
    s.answer(ints(&[0, 5000]));
    let w = s.sleep_through();
    assert_eq!(
        w.wake_on,
        Some(crate::WakeOn::any("redlease:{job}:released"))
    );
    assert!(
        w.until <= start + Duration::from_millis(5),
        "first pause is about retry_initial"
    );
    let mut attempts = 1;
    loop {
        s.answer(ints(&[0, 5000]));
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
    // Exponential: a handful of attempts in 100 ms, not one per millisecond.
    assert!((4..=12).contains(&attempts), "{attempts}");
}

#[test]
fn a_release_message_ends_the_pause_at_once() {
    let mut s = acquire(Some(Duration::from_secs(10)));
    s.answer(ints(&[0, 5000]));
    for _ in 0..6 {
        s.sleep_through();
        s.answer(ints(&[0, 5000]));
    }
    let w = s.expect_wait();
    assert!(w.until > s.now + Duration::from_millis(50));
    // Polling early without a wake just asks to wait again ...
    assert_eq!(s.expect_wait(), w);
    // ... a wake retries now.
    s.machine.wake(s.now);
    s.answer(ints(&[1, 3]));
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(l)) if l.fence == 3));
    // A wake while not waiting changes nothing.
    let mut s = acquire(None);
    s.machine.wake(s.now);
    s.answer(ints(&[1, 1]));
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(_))));
}

#[test]
fn the_pause_is_capped_by_the_holders_remaining_lease() {
    let mut s = acquire(Some(Duration::from_secs(10)));
    s.answer(ints(&[0, 5000]));
    for _ in 0..8 {
        s.sleep_through();
        s.answer(ints(&[0, 5000]));
    }
    let long = s.expect_wait();
    assert!(long.until - s.now >= Duration::from_millis(100));
    s.now = long.until;
    s.answer(ints(&[0, 2]));
    let short = s.expect_wait();
    assert!(short.until - s.now <= Duration::from_millis(2));
    s.now = short.until;
    s.answer(ints(&[1, 8]));
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(l)) if l.fence == 8));
}

#[test]
fn lost_reply_is_resolved_by_a_retry_that_recognises_our_token() {
    let mut s = acquire(None);
    let first = s.fail(TransportFailure::no_reply("read timed out"));
    let second = s.answer(ints(&[1, 12]));
    // Same script, same token: the retry is the same call.
    assert_eq!(args(&first), args(&second));
    assert!(second.id > first.id);
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(l)) if l.fence == 12));
}

#[test]
fn giving_up_after_a_lost_reply_releases_what_we_may_hold() {
    let mut s = acquire(None);
    s.fail(TransportFailure::no_reply("timeout"));
    s.fail(TransportFailure::no_reply("timeout"));
    let cleanup = s.answer(Reply::Int(1));
    assert_eq!(args(&cleanup)[1], RELEASE.sha1);
    // The undo remembers the token, so a delayed original arriving later takes nothing.
    assert_eq!(
        args(&cleanup)[2..],
        [
            "2",
            "redlease:{job}:lock",
            "redlease:{job}:undone",
            token().as_str(),
            "redlease:{job}:released",
            "600000"
        ]
    );
    match s.expect_done() {
        Err(Error::Unavailable { attempts: 2, last }) => {
            assert_eq!(last.kind, crate::FailureKind::NoReply)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_command_that_never_left_is_not_retried_when_trying_once() {
    let mut s = acquire(None);
    s.fail(TransportFailure::not_sent("connection refused"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 1, .. })
    ));
    assert_eq!(s.sent.len(), 1, "no cleanup for a command that never ran");
}

#[test]
fn waiting_through_an_outage_ends_unavailable_at_the_deadline() {
    let mut s = acquire(Some(Duration::from_millis(50)));
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

/// No poll yields a state a driver cannot act on: polled while its request is unanswered, a
/// machine asks to wait until the batch deadline; polled at that deadline with the request
/// still unanswered (a driver that lost a response), it ends with a driver error rather than
/// wait forever. An answer that arrives in time is taken as usual.
#[test]
fn a_poll_with_a_request_unanswered_waits_for_the_batch_deadline_then_fails() {
    let mut s = acquire(None);
    let sent_at = s.now;
    let Step::Send(batch) = s.machine.poll(s.now) else {
        panic!("expected a send")
    };
    let wait = s.expect_wait();
    assert_eq!((wait.until, wait.wake_on), (batch.deadline, None));
    s.now = batch.deadline - Duration::from_millis(1);
    assert_eq!(s.expect_wait().until, batch.deadline);
    s.now = batch.deadline;
    assert!(matches!(s.expect_done(), Err(Error::Driver(_))));

    // The same for a one-call operation, and in time it completes.
    let lease = lease_at(sent_at);
    let mut op = Scenario::new(
        ScriptOp::release(&lease, sent_at + Duration::from_secs(1)),
        sent_at,
    );
    let r = op.expect_send();
    assert!(op.expect_wait().until > sent_at);
    op.machine
        .handle(Response::reply(r.id, Reply::Int(1)), op.now);
    assert_eq!(op.expect_done(), Ok(()));
    let mut op = Scenario::new(
        ScriptOp::release(&lease, sent_at + Duration::from_secs(1)),
        sent_at,
    );
    op.expect_send();
    op.now = sent_at + Duration::from_secs(1);
    assert!(matches!(op.expect_done(), Err(Error::Driver(_))));
}

#[test]
fn stale_and_unknown_replies_are_ignored() {
    let mut s = acquire(None);
    let r = s.expect_send();
    s.machine.handle(
        Response::reply(crate::RequestId(r.id.0 + 100), ints(&[0, 1])),
        s.now,
    );
    // Still unanswered: wait for it (until the batch deadline), nothing else.
    let wait = s.expect_wait();
    assert_eq!(wait.wake_on, None);
    assert!(wait.until > s.now);
    s.machine
        .handle(Response::reply(r.id, ints(&[1, 2])), s.now);
    // A duplicate of the answer changes nothing.
    s.machine
        .handle(Response::reply(r.id, ints(&[0, 1])), s.now);
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(_))));
}

#[test]
fn bad_options_are_rejected_before_anything_is_sent() {
    let now = origin();
    for ttl in [Duration::ZERO, Duration::from_micros(10), Duration::MAX] {
        assert!(matches!(
            LockSpec::lease(&Keyspace::default(), "job", token(), ttl),
            Err(Error::InvalidArgument(_))
        ));
    }
    let o = AcquireOptions {
        reply_timeout: Duration::ZERO,
        ..AcquireOptions::default()
    };
    assert!(Acquire::new(spec(), &o, 0, now).is_err());
}

#[test]
fn release_reports_three_outcomes() {
    let now = origin();
    let lease = lease_at(now);
    let cases = [
        (Reply::Int(1), Ok(())),
        (
            Reply::Int(0),
            Err(Error::NotOwner {
                name: "job".into(),
                reason: LossReason::Expired,
            }),
        ),
        (
            Reply::Int(-1),
            Err(Error::NotOwner {
                name: "job".into(),
                reason: LossReason::Taken,
            }),
        ),
    ];
    for (reply, expected) in cases {
        let mut s = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(1)), now);
        let r = s.answer(reply);
        assert_eq!(
            args(&r),
            [
                "EVALSHA",
                RELEASE.sha1,
                "1",
                "redlease:{job}:lock",
                token().as_str(),
                "redlease:{job}:released"
            ]
        );
        assert_eq!(s.expect_done(), expected);
    }
}

#[test]
fn release_retried_after_a_lost_reply_counts_the_lost_attempt() {
    let now = origin();
    let lease = lease_at(now);
    // Lost while the lease was valid: the retry finding the key gone means we deleted it.
    let mut s = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(1)), now);
    s.fail(TransportFailure::no_reply("timeout"));
    s.sleep_through();
    s.answer(Reply::Int(0));
    assert_eq!(s.expect_done(), Ok(()));
    // Sent after the lease had run out: gone means expired.
    let late = lease.valid_until + Duration::from_millis(1);
    let mut s = Scenario::new(
        ScriptOp::release(&lease, late + Duration::from_secs(1)),
        late,
    );
    s.fail(TransportFailure::no_reply("timeout"));
    s.sleep_through();
    s.answer(Reply::Int(0));
    assert!(matches!(
        s.expect_done(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
}

#[test]
fn release_after_renewals_judges_a_lost_reply_by_the_current_validity() {
    // Acquired for 10 s, extended to 60 s at 5 s; at 30 s the delete runs but its reply is
    // lost, and the retry finds the key gone: our delete did it.
    let now = origin();
    let lease = lease_at(now);
    let at = now + Duration::from_secs(30);
    let renewed = now + Duration::from_secs(65);
    let op = ScriptOp::release(&lease, at + Duration::from_secs(1)).with_valid_until(renewed);
    let mut s = Scenario::new(op, at);
    s.fail(TransportFailure::no_reply("timeout"));
    s.sleep_through();
    s.answer(Reply::Int(0));
    assert_eq!(s.expect_done(), Ok(()));
    // Sent after even the renewed validity: gone means expired.
    let late = renewed + Duration::from_millis(1);
    let op = ScriptOp::release(&lease, late + Duration::from_secs(1)).with_valid_until(renewed);
    let mut s = Scenario::new(op, late);
    s.fail(TransportFailure::no_reply("timeout"));
    s.sleep_through();
    s.answer(Reply::Int(0));
    assert!(matches!(
        s.expect_done(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
}

#[test]
fn release_gives_up_after_max_attempts_or_deadline() {
    let now = origin();
    let lease = lease_at(now);
    let mut s = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(5)), now);
    for _ in 0..ops::MAX_ATTEMPTS - 1 {
        s.fail(TransportFailure::not_sent("refused"));
        s.sleep_through();
    }
    s.fail(TransportFailure::not_sent("refused"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 3, .. })
    ));

    // A retry is only sent when it can start before the deadline.
    let mut s = Scenario::new(
        ScriptOp::release(&lease, now + Duration::from_millis(15)),
        now,
    );
    s.fail(TransportFailure::not_sent("refused"));
    let w = s.sleep_through();
    assert_eq!(w.until, now + Duration::from_millis(10));
    s.fail(TransportFailure::not_sent("refused"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 2, .. })
    ));
}

#[test]
fn extend_moves_validity_from_the_send_time() {
    let now = origin();
    let lease = lease_at(now);
    let later = now + Duration::from_secs(3);
    let op = ScriptOp::extend(
        &lease,
        Duration::from_secs(20),
        later + Duration::from_secs(1),
    )
    .unwrap();
    let mut s = Scenario::new(op, later);
    let r = s.answer(Reply::Int(1));
    assert_eq!(args(&r)[1], EXTEND.sha1);
    assert_eq!(args(&r)[5], "20000");
    assert_eq!(
        s.expect_done(),
        Ok(later + Duration::from_millis(20_000 - 202))
    );

    let op = ScriptOp::extend(
        &lease,
        Duration::from_secs(20),
        later + Duration::from_secs(1),
    )
    .unwrap();
    let mut s = Scenario::new(op, later);
    s.answer(Reply::Int(0));
    assert!(matches!(
        s.expect_done(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
    assert!(ScriptOp::extend(&lease, Duration::ZERO, later).is_err());
}

#[test]
fn inspect_reports_holder_and_remaining_time() {
    let now = origin();
    let lease = lease_at(now);
    let cases = [
        (
            ints(&[1, 750]),
            LeaseState::Held {
                remaining: Some(Duration::from_millis(750)),
            },
        ),
        (ints(&[0, -2]), LeaseState::Expired),
        (ints(&[-1, -1]), LeaseState::Taken { remaining: None }),
    ];
    for (reply, expected) in cases {
        let mut s = Scenario::new(ScriptOp::inspect(&lease, now + Duration::from_secs(1)), now);
        s.answer(reply);
        assert_eq!(s.expect_done(), Ok(expected));
    }
}

#[test]
fn owner_ops_type_their_errors() {
    let now = origin();
    let lease = lease_at(now);
    let mut s = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(1)), now);
    s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    assert!(matches!(s.expect_done(), Err(Error::WrongType { .. })));
    let mut s = Scenario::new(ScriptOp::inspect(&lease, now + Duration::from_secs(1)), now);
    s.answer(Reply::Status("OK".into()));
    assert!(matches!(
        s.expect_done(),
        Err(Error::UnexpectedReply { .. })
    ));
    let mut s = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(1)), now);
    s.answer(err("NOSCRIPT", "x"));
    s.answer(Reply::Int(1));
    assert_eq!(s.expect_done(), Ok(()));
}

/// Every machine, fed any sequence of odd replies and failures, ends with a result within a
/// bounded number of steps and never panics.
#[test]
fn no_reply_sequence_makes_a_machine_panic_or_spin() {
    let catalogue = [
        Ok(Reply::Nil),
        Ok(Reply::Int(-7)),
        Ok(Reply::Int(1)),
        Ok(Reply::Bulk(vec![0xff])),
        Ok(Reply::Status("QUEUED".into())),
        Ok(ints(&[0, 10])),
        Ok(ints(&[1, 1])),
        Ok(ints(&[-1, -1])),
        Ok(Reply::Array(vec![Reply::Nil; 5])),
        Ok(err("NOSCRIPT", "x")),
        Ok(err("ERR", "x")),
        Ok(err("WRONGTYPE", "x")),
        Err(TransportFailure::no_reply("t")),
        Err(TransportFailure::not_sent("r")),
    ];
    let now = origin();
    let lease = lease_at(now);
    for a in &catalogue {
        for b in &catalogue {
            let script = [a.clone(), b.clone()];
            for spec in all_kinds() {
                let wait = opts(Some(Duration::from_millis(30)));
                run_to_end(Acquire::new(spec.clone(), &wait, 1, now).unwrap(), &script);
                run_to_end(Acquire::new(spec, &opts(None), 1, now).unwrap(), &script);
            }
            run_to_end(
                ScriptOp::release(&lease, now + Duration::from_millis(30)),
                &script,
            );
            run_to_end(
                ScriptOp::extend(
                    &lease,
                    Duration::from_secs(1),
                    now + Duration::from_millis(30),
                )
                .unwrap(),
                &script,
            );
            run_to_end(
                ScriptOp::inspect(&lease, now + Duration::from_millis(30)),
                &script,
            );
        }
    }
}

fn run_to_end<P: Protocol>(mut m: P, script: &[Result<Reply, TransportFailure>]) {
    let mut now = origin();
    let mut fed = 0;
    for _ in 0..1000 {
        match m.poll(now) {
            Step::Send(batch) => {
                for r in batch.requests {
                    // After the scripted replies, the server answers "busy" forever.
                    let result = script.get(fed).cloned().unwrap_or(Ok(ints(&[0, 10])));
                    fed += 1;
                    m.handle(Response { id: r.id, result }, now);
                }
            }
            Step::Wait(w) => {
                assert!(w.until >= now);
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

#[test]
fn a_fair_waiter_is_woken_by_its_own_token_and_leaves_the_line_when_it_gives_up() {
    let now = origin();
    let ks = Keyspace::default();
    let spec = LockSpec::fair(&ks, "q", token(), TTL, Duration::from_secs(5)).unwrap();
    let mut s = Scenario::new(
        Acquire::new(spec, &opts(Some(Duration::from_millis(50))), 3, now).unwrap(),
        now,
    );
    let first = s.answer(ints(&[0, 4000]));
    assert_eq!(args(&first)[1], super::scripts::FAIR_ACQUIRE.sha1);
    let w = s.expect_wait();
    assert_eq!(
        w.wake_on,
        Some(crate::WakeOn::tagged(
            "redlease:{q}:fair:wake",
            token().as_str()
        ))
    );
    // Waiting until the deadline: the last answer is still "busy" ...
    loop {
        match s.machine.poll(s.now) {
            Step::Wait(w) => s.now = w.until,
            Step::Send(b) => {
                let r = &b.requests[0];
                if args(r)[1] == super::scripts::FAIR_CANCEL.sha1 {
                    // ... so the waiter leaves the line before reporting the timeout.
                    s.machine
                        .handle(Response::reply(r.id, Reply::Int(1)), s.now);
                    break;
                }
                s.machine
                    .handle(Response::reply(r.id, ints(&[0, 4000])), s.now);
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(s.expect_done(), Err(Error::Timeout { .. })));
}

#[test]
fn trying_a_busy_fair_write_or_permit_lock_once_takes_no_place_in_line() {
    let now = origin();
    let ks = Keyspace::default();
    let w = Duration::from_secs(5);
    for spec in [
        LockSpec::fair(&ks, "q", token(), TTL, w).unwrap(),
        LockSpec::write(&ks, "q", token(), TTL, w).unwrap(),
        crate::semaphore::SemaphoreKeys::new(&ks, "q")
            .unwrap()
            .permit(token(), TTL, 2, w)
            .unwrap(),
    ] {
        let kind = spec.kind;
        let mut s = Scenario::new(
            Acquire::new(spec.clone(), &opts(None), 3, now).unwrap(),
            now,
        );
        let r = s.answer(ints(&[0, -2]));
        assert_eq!(
            args(&r).last().map(String::as_str),
            Some("0"),
            "{kind:?}: do not join"
        );
        assert_eq!(s.expect_done(), Ok(Acquisition::Busy { holder_ttl: None }));
        assert_eq!(s.sent.len(), 1, "{kind:?}: nothing to cancel");
        // Waiting joins the line.
        let mut s = Scenario::new(Acquire::new(spec, &opts(Some(w)), 3, now).unwrap(), now);
        let r = s.answer(ints(&[0, -2]));
        assert_eq!(
            args(&r).last().map(String::as_str),
            Some("1"),
            "{kind:?}: join"
        );
    }
}

#[test]
fn a_lost_nested_reentrant_acquisition_undoes_only_itself() {
    let now = origin();
    let ks = Keyspace::default();
    let spec = LockSpec::reentrant(&ks, "r", "c1:7", token(), TTL).unwrap();
    let mut s = Scenario::new(Acquire::new(spec, &opts(None), 3, now).unwrap(), now);
    s.fail(TransportFailure::no_reply("timeout"));
    s.fail(TransportFailure::not_sent("refused"));
    let undo = s.answer(Reply::Int(0));
    assert_eq!(args(&undo)[1], super::scripts::REENTRANT_UNDO.sha1);
    assert_eq!(
        args(&undo)[5..],
        [
            "c1:7",
            token().as_str(),
            "redlease:{r}:reentrant:released",
            "600000"
        ]
    );
    assert!(matches!(s.expect_done(), Err(Error::Unavailable { .. })));
}

#[test]
fn min_replicas_settings_are_checked() {
    let now = origin();
    for bad in [
        (0, Duration::from_secs(1)),
        (1, Duration::ZERO),
        (1, Duration::MAX),
    ] {
        let o = AcquireOptions {
            min_replicas: Some(bad),
            ..AcquireOptions::default()
        };
        assert!(
            matches!(
                Acquire::new(spec(), &o, 1, now),
                Err(Error::InvalidArgument(_))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn reentrant_calls_carry_owner_and_op_and_release_with_its_own_op() {
    let now = origin();
    let ks = Keyspace::default();
    let spec = LockSpec::reentrant(&ks, "r", "c1:7", token(), TTL).unwrap();
    let mut s = Scenario::new(Acquire::new(spec, &opts(None), 3, now).unwrap(), now);
    let r = s.answer(ints(&[1, 5]));
    assert_eq!(
        args(&r)[2..],
        [
            "3",
            "redlease:{r}:reentrant",
            "redlease:{r}:fence",
            "redlease:{r}:undone",
            "c1:7",
            token().as_str(),
            "10000"
        ]
    );
    let Ok(Acquisition::Acquired(lease)) = s.expect_done() else {
        panic!()
    };
    assert_eq!(lease.kind, LeaseKind::Lock(LockKind::Reentrant));
    let mut rel = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(1)), now);
    let r = rel.answer(Reply::Int(1));
    assert_eq!(args(&r)[4], "c1:7");
    assert_eq!(args(&r)[5], format!("r{}", token().as_str()));
    assert_eq!(rel.expect_done(), Ok(()));
}

#[test]
fn a_bare_integer_grant_is_only_the_lease_locks_and_the_permits() {
    // acquire.lua answers a grant with the bare fence (>= 1) and permit_acquire.lua with 0;
    // every other script answers `{1, fence}`, so a bare integer from them is a malformed
    // reply (a proxy, a mismatched script), not a grant.
    let now = origin();
    let ks = Keyspace::default();
    let specs = [
        LockSpec::read(&ks, "rw", token(), TTL).unwrap(),
        LockSpec::write(&ks, "rw", token(), TTL, Duration::from_secs(5)).unwrap(),
        LockSpec::reentrant(&ks, "r", "c1:7", token(), TTL).unwrap(),
    ];
    let permit = crate::semaphore::SemaphoreKeys::new(&ks, "s")
        .unwrap()
        .permit(token(), TTL, 3, Duration::from_secs(5))
        .unwrap();
    let cases = specs
        .into_iter()
        .flat_map(|spec| [(spec.clone(), 0), (spec, 5)])
        // A permit's bare grant is 0 only.
        .chain([(permit, 5)]);
    for (spec, fence) in cases {
        let kind = spec.kind;
        let mut s = Scenario::new(Acquire::new(spec, &opts(None), 3, now).unwrap(), now);
        s.answer(Reply::Int(fence));
        // The script may have taken the lock: undone (owner-checked) first.
        s.answer(Reply::Int(1));
        assert!(
            matches!(s.expect_done(), Err(Error::UnexpectedReply { .. })),
            "{kind:?} {fence}"
        );
    }
}

#[test]
fn a_read_hold_may_carry_fence_zero_but_exclusive_holds_may_not() {
    let now = origin();
    let ks = Keyspace::default();
    let read = LockSpec::read(&ks, "rw", token(), TTL).unwrap();
    let mut s = Scenario::new(Acquire::new(read, &opts(None), 3, now).unwrap(), now);
    s.answer(ints(&[1, 0]));
    assert!(
        matches!(s.expect_done(), Ok(Acquisition::Acquired(l)) if l.fence == 0 && l.kind == LeaseKind::Lock(LockKind::Read))
    );
    let write = LockSpec::write(&ks, "rw", token(), TTL, Duration::from_secs(5)).unwrap();
    let mut s = Scenario::new(Acquire::new(write, &opts(None), 3, now).unwrap(), now);
    s.answer(ints(&[1, 0]));
    // Fence 0 is not ours to accept, but the script may have taken the lock: undone first.
    let undo = s.answer(Reply::Int(1));
    assert_eq!(args(&undo)[1], super::scripts::WRITE_RELEASE.sha1);
    assert!(matches!(
        s.expect_done(),
        Err(Error::UnexpectedReply { .. })
    ));
}

fn permit_spec() -> LockSpec {
    crate::semaphore::SemaphoreKeys::new(&Keyspace::default(), "api")
        .unwrap()
        .permit(token(), TTL, 3, Duration::from_secs(5))
        .unwrap()
}

/// The semaphore decides on the server's clock: client times hours apart send the same
/// commands and reach the same outcomes.
#[test]
fn client_clock_skew_changes_nothing_a_semaphore_sends_or_decides() {
    let base = origin();
    let skewed = base + Duration::from_secs(5 * 3600);
    let run = |now: std::time::Instant, replies: &[Reply]| {
        let mut s = Scenario::new(
            Acquire::new(permit_spec(), &opts(Some(Duration::from_secs(1))), 4, now).unwrap(),
            now,
        );
        let mut sent = Vec::new();
        let mut out = None;
        for r in replies {
            sent.push(args(&s.answer(r.clone())));
            match s.machine.poll(s.now) {
                Step::Wait(w) => s.now = w.until,
                Step::Done(result) => {
                    out = Some(result.map(|a| match a {
                        Acquisition::Acquired(l) => l.fence,
                        Acquisition::Busy { .. } => u64::MAX,
                    }));
                }
                other => panic!("{other:?}"),
            }
        }
        let out = out.expect("finished");
        (sent, out)
    };
    let replies = [ints(&[0, 40]), ints(&[0, 20]), Reply::Int(0)];
    assert_eq!(run(base, &replies), run(skewed, &replies));
    let (sent, out) = run(base, &replies);
    assert_eq!(out, Ok(0));
    // No argument carries a client time: token, permit timeout, waiter timeout, permits,
    // join the line.
    assert_eq!(sent[0][8..], [token().as_str(), "10000", "5000", "3", "1"]);
}

#[test]
fn semaphore_state_and_permit_count_replies_are_parsed_or_rejected() {
    let now = origin();
    let keys = crate::semaphore::SemaphoreKeys::new(&Keyspace::default(), "api").unwrap();
    let state = |reply: Reply| {
        let mut s = Scenario::new(
            crate::semaphore::read(&keys, now + Duration::from_secs(1)),
            now,
        );
        s.answer(reply);
        s.expect_done()
    };
    let good = Reply::Array(vec![
        Reply::Int(3),
        Reply::Array(vec![Reply::Bulk(b"a".to_vec()), Reply::Int(100)]),
        Reply::Array(vec![Reply::Bulk(b"w1".to_vec())]),
    ]);
    assert_eq!(
        state(good),
        Ok(SemaphoreState {
            permits: Some(3),
            holders: vec![("a".into(), Duration::from_millis(100))],
            waiters: vec!["w1".into()],
        })
    );
    for bad in [
        Reply::Nil,
        Reply::Array(vec![Reply::Int(3)]),
        Reply::Array(vec![
            Reply::Int(3),
            Reply::Array(vec![Reply::Bulk(b"a".to_vec())]),
            Reply::Array(vec![]),
        ]),
        Reply::Array(vec![
            Reply::Int(3),
            Reply::Array(vec![]),
            Reply::Array(vec![Reply::Int(1)]),
        ]),
    ] {
        assert!(matches!(state(bad), Err(Error::UnexpectedReply { .. })));
    }
    assert!(crate::semaphore::set_permits(&keys, 0, now).is_err());
    let mut s = Scenario::new(
        crate::semaphore::set_permits(&keys, 5, now + Duration::from_secs(1)).unwrap(),
        now,
    );
    s.answer(Reply::Int(-1));
    assert_eq!(s.expect_done(), Ok(None));
    assert!(
        keys.permit(token(), TTL, 0, Duration::from_secs(5))
            .is_err()
    );
}

#[test]
fn min_replicas_waits_and_releases_when_too_few_acknowledged() {
    let now = origin();
    let with = |n| AcquireOptions {
        min_replicas: Some((n, Duration::from_millis(500))),
        ..AcquireOptions::default()
    };
    // Enough replicas: acquired after the WAIT.
    let mut s = Scenario::new(Acquire::new(spec(), &with(1), 1, now).unwrap(), now);
    s.answer(ints(&[1, 4]));
    let wait = s.answer(Reply::Int(1));
    assert_eq!(args(&wait), ["WAIT", "1", "500"]);
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(l)) if l.fence == 4));
    // Too few: released, then a typed error saying how many acknowledged.
    let mut s = Scenario::new(Acquire::new(spec(), &with(2), 1, now).unwrap(), now);
    s.answer(ints(&[1, 4]));
    s.answer(Reply::Int(1));
    let release = s.answer(Reply::Int(1));
    assert_eq!(args(&release)[1], RELEASE.sha1);
    match s.expect_done() {
        Err(Error::ReplicationFailed {
            acknowledged,
            required,
            ..
        }) => assert_eq!((acknowledged, required), (1, 2)),
        other => panic!("{other:?}"),
    }
    // The WAIT went unanswered: released too, and reported.
    let mut s = Scenario::new(Acquire::new(spec(), &with(1), 1, now).unwrap(), now);
    s.answer(ints(&[1, 4]));
    s.fail(TransportFailure::no_reply("timeout"));
    let release = s.answer(Reply::Int(1));
    assert_eq!(args(&release)[1], RELEASE.sha1);
    assert!(matches!(s.expect_done(), Err(Error::Unavailable { .. })));
    // Busy: no WAIT at all.
    let mut s = Scenario::new(Acquire::new(spec(), &with(1), 1, now).unwrap(), now);
    s.answer(ints(&[0, 100]));
    assert!(matches!(s.expect_done(), Ok(Acquisition::Busy { .. })));
    assert_eq!(s.sent.len(), 1);
}

#[test]
fn a_readonly_reply_during_a_failover_is_retried_while_waiting() {
    let mut s = acquire(Some(Duration::from_secs(2)));
    s.answer(err(
        "READONLY",
        "You can't write against a read only replica.",
    ));
    s.sleep_through();
    s.answer(ints(&[1, 2]));
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(_))));
    // Trying once: a passing failure, with the server's words, and nothing more is sent.
    for code in [
        "READONLY",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MASTERDOWN",
        "LOADING",
    ] {
        let mut s = acquire(None);
        s.answer(err(code, "the command did not run"));
        match s.expect_done() {
            Err(Error::Unavailable { attempts, last }) => {
                assert_eq!(attempts, 1);
                assert_eq!(last.kind, FailureKind::NotSent);
                assert!(last.to_string().contains(code), "{last}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_eq!(s.sent.len(), 1, "{code}");
    }
    // A one-call operation retries it too.
    let now = origin();
    let lease = lease_at(now);
    let mut s = Scenario::new(ScriptOp::release(&lease, now + Duration::from_secs(1)), now);
    s.answer(err("READONLY", "x"));
    s.sleep_through();
    s.answer(Reply::Int(1));
    assert_eq!(s.expect_done(), Ok(()));
}

#[test]
fn the_wait_follows_the_acquisitions_connection_and_must_end_within_the_lease() {
    let now = origin();
    let o = AcquireOptions {
        min_replicas: Some((1, Duration::from_secs(1))),
        ..AcquireOptions::default()
    };
    let mut s = Scenario::new(Acquire::new(spec(), &o, 1, now).unwrap(), now);
    let first = s.expect_send();
    s.machine
        .handle(Response::reply(first.id, ints(&[1, 4])), now);
    let Step::Send(wait) = s.machine.poll(now) else {
        panic!("the WAIT")
    };
    assert!(
        wait.same_connection,
        "WAIT only vouches for its own connection's writes"
    );
    assert_eq!(wait.server_wait, Duration::from_secs(1));
    // Acknowledged, but only after the lease ran out: not handed out, and given back.
    let late = now + TTL;
    s.machine
        .handle(Response::reply(wait.requests[0].id, Reply::Int(1)), late);
    s.now = late;
    let undo = s.answer(Reply::Int(0));
    assert_eq!(args(&undo)[1], RELEASE.sha1);
    assert!(matches!(s.expect_done(), Err(Error::Unavailable { .. })));
    // A timeout of half the ttl or more is refused up front.
    let o = AcquireOptions {
        min_replicas: Some((1, TTL / 2)),
        ..AcquireOptions::default()
    };
    assert!(Acquire::new(spec(), &o, 1, now).is_err());
}

#[test]
fn a_reentrant_extension_to_a_shorter_ttl_asks_for_it_exactly() {
    let now = origin();
    let spec = LockSpec::reentrant(&Keyspace::default(), "job", "c1:7", token(), TTL).unwrap();
    let lease = Lease {
        kind: spec.kind,
        target: spec.target,
        token: token(),
        fence: 3,
        ttl: TTL,
        acquired_at: now,
        valid_until: valid_until(now, TTL),
        attempts: 1,
        unanswered: false,
        calls: spec.calls,
        data: Vec::new(),
    };
    for (ttl, exact) in [(TTL, "0"), (TTL * 2, "0"), (TTL / 4, "1")] {
        let op = ScriptOp::extend(&lease, ttl, now + Duration::from_secs(1)).unwrap();
        let mut s = Scenario::new(op, now);
        let r = s.answer(Reply::Int(1));
        let a = args(&r);
        assert_eq!(a[1], super::scripts::REENTRANT_EXTEND.sha1);
        assert_eq!(
            a[a.len() - 2..],
            [ttl.as_millis().to_string(), exact.to_owned()]
        );
    }
    // Extended to 6x since: shorter than that (not than the acquisition's) shortens it.
    for (ttl, exact) in [(TTL * 2, "1"), (TTL * 6, "0"), (TTL * 7, "0")] {
        let op = ScriptOp::extend_current(&lease, TTL * 6, ttl, now + Duration::from_secs(1));
        let mut s = Scenario::new(op.unwrap(), now);
        let r = s.answer(Reply::Int(1));
        let a = args(&r);
        assert_eq!(
            a[a.len() - 2..],
            [ttl.as_millis().to_string(), exact.to_owned()]
        );
    }
    // Other kinds set the ttl they are given anyway: no flag.
    let op = ScriptOp::extend(&lease_at(now), TTL / 4, now + Duration::from_secs(1)).unwrap();
    let mut s = Scenario::new(op, now);
    let r = s.answer(Reply::Int(1));
    assert_eq!(args(&r).last().map(String::as_str), Some("2500"));
}

#[test]
fn a_grant_that_arrives_after_the_validity_is_not_a_lease() {
    // Trying once: undone, and Unavailable.
    let mut s = acquire(None);
    let sent = s.expect_send();
    s.now += TTL;
    s.machine
        .handle(Response::reply(sent.id, ints(&[1, 7])), s.now);
    let undo = s.answer(Reply::Int(1));
    assert_eq!(args(&undo)[1], RELEASE.sha1);
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { last, .. }) if last.kind == crate::FailureKind::NoReply
    ));
    // Waiting: asked again at once; a timely answer is the lease, valid from the new send.
    let mut s = acquire(Some(Duration::from_secs(60)));
    let sent = s.expect_send();
    s.now += TTL;
    s.machine
        .handle(Response::reply(sent.id, ints(&[1, 7])), s.now);
    let again = s.answer(ints(&[1, 7]));
    assert_eq!(args(&again), args(&sent));
    match s.expect_done() {
        Ok(Acquisition::Acquired(l)) => {
            assert_eq!(l.fence, 7);
            assert_eq!(l.valid_until, valid_until(s.now, TTL));
            assert!(l.remaining(s.now) > Duration::ZERO);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_spec_rebound_to_another_token_equals_one_built_for_it() {
    let ks = Keyspace::default();
    let w = Duration::from_secs(5);
    let sem = crate::semaphore::SemaphoreKeys::new(&ks, "job").unwrap();
    type Make = Box<dyn Fn(Token) -> LockSpec>;
    let kinds: Vec<(&str, Make)> = vec![
        (
            "lease",
            Box::new(|t| LockSpec::lease(&Keyspace::default(), "job", t, TTL).unwrap()),
        ),
        (
            "fair",
            Box::new(move |t| LockSpec::fair(&Keyspace::default(), "job", t, TTL, w).unwrap()),
        ),
        (
            "read",
            Box::new(|t| LockSpec::read(&Keyspace::default(), "job", t, TTL).unwrap()),
        ),
        (
            "write",
            Box::new(move |t| LockSpec::write(&Keyspace::default(), "job", t, TTL, w).unwrap()),
        ),
        (
            "permit",
            Box::new(move |t| sem.permit(t, TTL, 3, w).unwrap()),
        ),
    ];
    let (a, b) = (
        Token::from_random([0xaa; 16]),
        Token::from_random([0xbb; 16]),
    );
    for (kind, make) in &kinds {
        for once in [false, true] {
            let built = |t: Token| {
                let s = make(t);
                if once { s.trying_once() } else { s }
            };
            let rebound = built(a.clone()).with_token(b.clone()).unwrap();
            assert_eq!(rebound, built(b.clone()), "{kind}, trying once: {once}");
            // What goes on the wire names the new token, never the old one.
            let mut calls = vec![rebound.acquire.clone(), rebound.calls.release().clone()];
            calls.extend([rebound.calls.extend(), rebound.calls.inspect()]);
            calls.extend(rebound.cancel.clone());
            calls.extend(rebound.undo.clone());
            for call in calls {
                let cmd = call.evalsha();
                let has = |t: &Token| cmd.args().any(|x| x == t.as_str().as_bytes());
                assert!(!has(&a) && has(&b), "{kind}: {:?}", cmd.args());
            }
        }
    }
    // A reentrant lock's calls carry op ids derived from the token: not rebindable.
    let reentrant = LockSpec::reentrant(&ks, "job", "c1:7", a, TTL).unwrap();
    assert_eq!(reentrant.with_token(b), None);
}

fn unfenced(wait: Option<Duration>) -> Scenario<Acquire> {
    let now = origin();
    let spec = spec().fenced(false).unwrap();
    Scenario::new(Acquire::new(spec, &opts(wait), 9, now).unwrap(), now)
}

fn ok() -> Reply {
    Reply::Status("OK".into())
}

/// The first attempt of an unfenced lease lock is the bare `SET NX PX`; `OK` grants a lease
/// with fence 0, valid from that attempt's send time, whose calls are the fenced lock's.
#[test]
fn an_unfenced_lock_is_granted_by_a_bare_set_nx_px_with_fence_zero() {
    let mut s = unfenced(None);
    let start = s.now;
    let r = s.expect_send();
    assert_eq!(
        args(&r),
        [
            "SET",
            "redlease:{job}:lock",
            token().as_str(),
            "NX",
            "PX",
            "10000"
        ]
    );
    // The reply comes 40 ms later: validity counts from the send.
    s.now += Duration::from_millis(40);
    s.machine.handle(Response::reply(r.id, ok()), s.now);
    let Ok(Acquisition::Acquired(lease)) = s.expect_done() else {
        panic!("not acquired")
    };
    assert_eq!((lease.fence, lease.attempts), (0, 1));
    assert_eq!(lease.acquired_at, start);
    assert_eq!(
        lease.valid_until,
        start + Duration::from_millis(10_000 - 102)
    );
    assert_eq!(lease.calls, spec().calls, "released and extended as usual");
    assert_eq!(lease.target, spec().target);
    assert_eq!(s.sent.len(), 1);
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

/// A busy lock (nil) is asked again at once by the acquire script, which reports the
/// holder's time left; a grant by the script reports fence 0 too.
#[test]
fn a_busy_unfenced_lock_goes_on_with_the_acquire_script() {
    let mut s = unfenced(None);
    s.answer(Reply::Nil);
    let second = s.answer(ints(&[0, 2500]));
    assert_eq!(args(&second)[..2], ["EVALSHA", ACQUIRE.sha1]);
    assert_eq!(
        s.expect_done(),
        Ok(Acquisition::Busy {
            holder_ttl: Some(Duration::from_millis(2500))
        })
    );
    assert_eq!(s.sent.len(), 2, "no cleanup after a plain refusal");

    // Waiting: nil, then the script says busy, the waiter pauses (no more than the holder's
    // ttl), is woken, and the script grants: fence 0, not the script's.
    let mut s = unfenced(Some(Duration::from_secs(5)));
    s.answer(Reply::Nil);
    s.answer(ints(&[0, 300]));
    let wait = s.expect_wait();
    assert!(wait.until <= s.now + Duration::from_millis(300));
    s.machine.wake(s.now);
    let third = s.answer(Reply::Int(17));
    assert_eq!(
        args(&third)[..2],
        ["EVALSHA", ACQUIRE.sha1],
        "never SET again"
    );
    let Ok(Acquisition::Acquired(lease)) = s.expect_done() else {
        panic!("not acquired")
    };
    assert_eq!((lease.fence, lease.attempts), (0, 3));
}

/// A lost reply of the `SET`: the script asks next (it recognises our token if the `SET`
/// took the lock); giving up undoes what the lost attempt may have taken.
#[test]
fn a_lost_set_nx_reply_goes_on_with_the_script_and_is_undone_on_giving_up() {
    let mut s = unfenced(None);
    let first = s.fail(TransportFailure::no_reply("read timed out"));
    assert_eq!(first.command.name(), "SET");
    let second = s.answer(Reply::Int(5));
    assert_eq!(args(&second)[..2], ["EVALSHA", ACQUIRE.sha1]);
    assert!(matches!(s.expect_done(), Ok(Acquisition::Acquired(l)) if l.fence == 0));

    let mut s = unfenced(None);
    s.fail(TransportFailure::no_reply("timeout"));
    s.fail(TransportFailure::no_reply("timeout"));
    let cleanup = s.answer(Reply::Int(1));
    assert_eq!(args(&cleanup)[1], RELEASE.sha1);
    assert_eq!(
        args(&cleanup)[3..5],
        ["redlease:{job}:lock", "redlease:{job}:undone"]
    );
    match s.expect_done() {
        Err(Error::Unavailable { attempts: 2, last }) => {
            assert_eq!(last.kind, FailureKind::NoReply)
        }
        other => panic!("{other:?}"),
    }

    // A `SET` that never left is a failure like a script's that never left: trying once,
    // it is not retried, and nothing needs undoing.
    let mut s = unfenced(None);
    s.fail(TransportFailure::not_sent("connection refused"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 1, .. })
    ));
    assert_eq!(s.sent.len(), 1);
}

/// An error reply to the `SET` is left to the script, which reports it typed (or waits out a
/// passing one).
#[test]
fn an_error_reply_to_the_set_nx_goes_on_with_the_script() {
    let mut s = unfenced(Some(Duration::from_secs(5)));
    s.answer(err(
        "OOM",
        "command not allowed when used memory > 'maxmemory'",
    ));
    let second = s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind",
    ));
    assert_eq!(args(&second)[..2], ["EVALSHA", ACQUIRE.sha1]);
    match s.expect_done() {
        Err(Error::WrongType { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.sent.len(),
        2,
        "an error stops the script before it writes"
    );

    // A reply `SET` never gives may have taken the lock: undone on giving up.
    let mut s = unfenced(None);
    s.answer(Reply::Int(1));
    s.answer(err("ERR", "boom"));
    let cleanup = s.answer(Reply::Int(1));
    assert_eq!(args(&cleanup)[1], RELEASE.sha1);
    assert!(matches!(s.expect_done(), Err(Error::Redis { .. })));
}

/// A grant whose reply came after the lease's validity: trying once undoes it.
#[test]
fn a_late_set_nx_grant_is_undone_when_trying_once() {
    let mut s = unfenced(None);
    let r = s.expect_send();
    s.now += TTL;
    s.machine.handle(Response::reply(r.id, ok()), s.now);
    let cleanup = s.answer(Reply::Int(1));
    assert_eq!(args(&cleanup)[1], RELEASE.sha1);
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 1, .. })
    ));
}

/// Only a lease lock can go without a fence: any other kind is refused when its spec is
/// made so, and by the machine if the field was set by hand.
#[test]
fn only_a_lease_lock_can_be_unfenced() {
    let now = origin();
    for spec in all_kinds()
        .into_iter()
        .filter(|s| s.kind != LeaseKind::Lock(LockKind::Lease))
        .chain([permit_spec()])
    {
        let kind = spec.kind;
        let e = spec.clone().fenced(false).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{kind:?}: {e:?}");
        assert!(e.to_string().contains("fence"), "{e}");
        let mut forced = spec.clone();
        forced.fenced = false;
        let e = Acquire::new(forced, &opts(None), 1, now).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{kind:?}: {e:?}");
        // fenced(true) changes nothing.
        assert_eq!(spec.clone().fenced(true).unwrap(), spec);
    }
    // A spec rebound to another token stays unfenced.
    let bound = spec().fenced(false).unwrap().with_token(token()).unwrap();
    assert!(!bound.fenced);
}

/// A grant after an attempt went unanswered (issue 26): that attempt may still arrive after
/// the lease is released, so the lease says so and its release records the token as undone
/// (the undo's set and keep), for every kind; a grant at the first attempt releases plainly.
#[test]
fn a_grant_after_a_lost_reply_releases_with_the_undone_record() {
    let ks = Keyspace::default();
    let permit = crate::semaphore::SemaphoreKeys::new(&ks, "job")
        .and_then(|k| k.permit(token(), TTL, 3, Duration::from_secs(5)))
        .unwrap();
    let kinds = all_kinds().into_iter().chain([permit]);
    for spec in kinds {
        let kind = spec.kind;
        let plain = spec.calls.release().clone();
        let undone_key =
            String::from_utf8(spec.undo.as_ref().unwrap().last_key().unwrap().to_vec()).unwrap();
        // Answered at once: no record, the plain release.
        let now = origin();
        let mut s = Scenario::new(
            Acquire::new(spec.clone(), &opts(None), 9, now).unwrap(),
            now,
        );
        let grant = |kind: LeaseKind| match kind {
            LeaseKind::Lock(LockKind::Lease) => Reply::Int(5),
            LeaseKind::Permit => Reply::Int(0),
            _ => ints(&[1, 5]),
        };
        if !spec.fenced {
            s.answer(Reply::Status("OK".into()));
        } else {
            s.answer(grant(kind));
        }
        let Ok(Acquisition::Acquired(lease)) = s.expect_done() else {
            panic!("{kind:?}: not acquired")
        };
        assert!(!lease.unanswered, "{kind:?}");
        assert_eq!(lease.calls.release(), &plain, "{kind:?}");
        // The first reply lost, the retry answered.
        let mut s = Scenario::new(
            Acquire::new(spec.clone(), &opts(None), 9, now).unwrap(),
            now,
        );
        s.fail(TransportFailure::no_reply("read timed out"));
        s.answer(grant(kind));
        let Ok(Acquisition::Acquired(lease)) = s.expect_done() else {
            panic!("{kind:?}: not acquired after a lost reply")
        };
        assert!(lease.unanswered, "{kind:?}");
        let release = lease.calls.release().evalsha();
        let release = args(&crate::command::Request {
            id: crate::command::RequestId(0),
            command: release,
        });
        assert_eq!(release[1], plain.script().sha1, "{kind:?}: the same script");
        assert!(release.contains(&undone_key), "{kind:?}: {release:?}");
        assert_eq!(
            release.last().map(String::as_str),
            Some("600000"),
            "{kind:?}: kept for UNDONE_KEEP"
        );
        if kind == LeaseKind::Lock(LockKind::Reentrant) {
            // Its release, not its undo (which takes back a hold): the op id to remember
            // is the release's own argument without its `r`.
            assert_eq!(release[2], "2", "{release:?}");
        }
        // Extend and inspect are unchanged.
        assert_eq!(lease.calls.extend(), spec.calls.extend(), "{kind:?}");
        assert_eq!(lease.calls.inspect(), spec.calls.inspect(), "{kind:?}");
    }
}
