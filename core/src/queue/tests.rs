//! The queue's calls and machines driven by scripted replies on virtual time.

use std::time::{Duration, Instant};

use super::scripts::{
    ACK, ACK_TAKE, DEAD, DEQUEUE, JOB_EXTEND, JOB_INSPECT, NACK, PUSH, REQUEUE, STATS, UNTAKE,
};
use super::*;
use crate::command::Request;
use crate::error::LossReason;
use crate::lease::{Acquire, AcquireOptions, Acquisition, Lease, LeaseState};
use crate::protocol::{Protocol, Step};
use crate::reply::{Response, TransportFailure};
use crate::testing::{Scenario, err, ints, origin};

const READY: &str = "redlease:{jobs}:q:ready";
const DELAYED: &str = "redlease:{jobs}:q:delayed";
const PAYLOADS: &str = "redlease:{jobs}:q:payloads";
const PRIORITIES: &str = "redlease:{jobs}:q:priorities";
const SEQ: &str = "redlease:{jobs}:q:seq";
const INFLIGHT: &str = "redlease:{jobs}:q:inflight";
const LEASES: &str = "redlease:{jobs}:q:leases";
const DELIVERIES: &str = "redlease:{jobs}:q:deliveries";
const DEAD_LIST: &str = "redlease:{jobs}:q:dead";
const HOLDERS: &str = "redlease:{jobs}:q:holders";
const BASES: &str = "redlease:{jobs}:q:bases";
const SETTLED: &str = "redlease:{jobs}:q:settled";
const UNDONE: &str = "redlease:{jobs}:q:undone";
const DEDUP: &str = "redlease:{jobs}:q:dedup";
const DEDUP_OF: &str = "redlease:{jobs}:q:dedup_of";
const REASONS: &str = "redlease:{jobs}:q:reasons";
const CANCELLED: &str = "redlease:{jobs}:q:cancelled";
const CHANNEL: &str = "redlease:{jobs}:q:pushed";
const PAUSED: &str = "redlease:{jobs}:q:paused";
const COUNTS: &str = "redlease:{jobs}:q:counts";

/// The keys of a queue that counts (so that the counts slot of each call shows).
fn keys() -> QueueKeys {
    QueueKeys::new(&Keyspace::default(), "jobs")
        .unwrap()
        .with_counts(true)
}

fn token() -> Token {
    Token::from_random([7; 16])
}

fn tok() -> String {
    token().as_str().to_owned()
}

fn settings() -> QueueSettings {
    QueueSettings {
        visibility: Duration::from_millis(1500),
        max_deliveries: 4,
        ..QueueSettings::default()
    }
}

fn deadline(now: Instant) -> Instant {
    now + Duration::from_secs(1)
}

/// The arguments of a request, lossily decoded, the command name first.
fn args(r: &Request) -> Vec<String> {
    r.command
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The EVALSHA arguments of a script call.
fn call_args(c: &ScriptCall) -> Vec<String> {
    c.evalsha()
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn strs(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn bulk(s: &[u8]) -> Reply {
    Reply::Bulk(s.to_vec())
}

fn job(id: &str, payload: &[u8]) -> NewJob {
    NewJob {
        id: id.to_owned(),
        payload: payload.to_vec(),
    }
}

fn is_unexpected<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::UnexpectedReply { .. }))
}

fn is_invalid<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

// ---------------------------------------------------------------------------------------
// Push

#[test]
fn push_sends_keys_then_delay_priority_channel_and_id_payload_pairs() {
    let now = origin();
    let jobs = [job("a", b"first"), job("b", b"\x00\xff binary")];
    let op = push(
        &keys(),
        &jobs,
        7,
        Duration::from_millis(1500),
        deadline(now),
    )
    .unwrap();
    let mut s = Scenario::new(op, now);
    // One flag per job, in order: the ids are the client's.
    let r = s.answer(bulk(b"10"));
    let a = args(&r);
    assert_eq!(
        a[..12],
        strs(&[
            "EVALSHA", PUSH.sha1, "6", READY, DELAYED, PAYLOADS, PRIORITIES, SEQ, COUNTS, "1500",
            "7", CHANNEL,
        ])
    );
    assert_eq!(a[12..14], strs(&["a", "first"]));
    assert_eq!(a[14], "b");
    // Payloads travel as raw bytes.
    assert_eq!(r.command.args()[15], b"\x00\xff binary".to_vec());
    assert_eq!(r.command.args().len(), 16);
    assert_eq!(
        s.expect_done(),
        Ok(vec![
            Pushed::Queued("a".into()),
            Pushed::Duplicate("b".into())
        ])
    );
    assert_eq!(s.sent.len(), 1);
}

#[test]
fn push_without_delay_sends_zero_and_the_default_priority() {
    let now = origin();
    let op = push(&keys(), &[job("x", b"")], 0, Duration::ZERO, deadline(now)).unwrap();
    let mut s = Scenario::new(op, now);
    let r = s.answer(bulk(b"1"));
    assert_eq!(args(&r)[9..], strs(&["0", "0", CHANNEL, "x", ""]));
    assert_eq!(s.expect_done(), Ok(vec![Pushed::Queued("x".into())]));
    // The highest priority and a sub-millisecond delay (rounded up to whole ms: a job is
    // never due early).
    let op = push(
        &keys(),
        &[job("y", b"p")],
        MAX_PRIORITY,
        Duration::from_micros(2_999),
        deadline(now),
    )
    .unwrap();
    let mut s = Scenario::new(op, now);
    let r = s.answer(bulk(b"1"));
    assert_eq!(args(&r)[9..11], strs(&["3", "255"]));
    // 999 µs is 1 ms, not nothing; whole milliseconds stay as they are.
    for (delay, sent) in [
        (Duration::from_micros(999), "1"),
        (Duration::from_millis(7), "7"),
    ] {
        let op = push(&keys(), &[job("z", b"")], 0, delay, deadline(now)).unwrap();
        let mut s = Scenario::new(op, now);
        let r = s.answer(bulk(b"1"));
        assert_eq!(args(&r)[9], sent, "{delay:?}");
    }
}

#[test]
fn push_replies_of_the_wrong_shape_are_unexpected() {
    let shapes = [
        Reply::Nil,
        Reply::Int(1),
        Reply::Status("OK".into()),
        // One flag for two jobs, three flags for two jobs; the flags and ids of the script
        // before it stopped echoing the ids, a list of flags.
        bulk(b"1"),
        bulk(b"111"),
        Reply::Array(vec![Reply::Int(1), bulk(b"a"), Reply::Int(1), bulk(b"b")]),
        ints(&[1, 1]),
        // An outcome other than 0, 1 or 2 (a group full).
        bulk(b"31"),
        bulk(b"1 "),
        bulk(b""),
        Reply::Status("11".into()),
    ];
    for shape in shapes {
        let now = origin();
        let jobs = [job("a", b"1"), job("b", b"2")];
        let op = push(&keys(), &jobs, 0, Duration::ZERO, deadline(now)).unwrap();
        let mut s = Scenario::new(op, now);
        s.answer(shape.clone());
        let out = s.expect_done();
        assert!(is_unexpected(&out), "{shape:?}: {out:?}");
        match out {
            Err(Error::UnexpectedReply { context, .. }) => assert_eq!(context, "queue push"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.sent.len(), 1, "nothing more is sent");
    }
}

#[test]
fn push_new_sends_what_a_push_of_one_ready_job_sends_and_reads_its_flag() {
    let now = origin();
    let id = Token::from_random([3; 16]);
    let payload = b"\x00 the payload \xff".to_vec();
    let plain = push(
        &keys(),
        &[job(id.as_str(), &payload)],
        0,
        Duration::ZERO,
        deadline(now),
    )
    .unwrap();
    let expected = args(&Scenario::new(plain, now).answer(bulk(b"1")));
    for (flag, queued) in [(b"1", true), (b"0", false)] {
        let op = push_new(&keys(), &id, payload.clone(), deadline(now));
        let mut s = Scenario::new(op, now);
        let r = s.answer(bulk(flag));
        assert_eq!(args(&r), expected);
        assert_eq!(r.command.args()[13], payload);
        assert_eq!(s.expect_done(), Ok(queued));
    }
    // Other shapes are not an answer.
    for shape in [
        Reply::Int(1),
        ints(&[1]),
        bulk(b"11"),
        bulk(b"2"),
        Reply::Array(vec![Reply::Int(1), bulk(id.as_str().as_bytes())]),
        Reply::Nil,
    ] {
        let mut s = Scenario::new(push_new(&keys(), &id, payload.clone(), deadline(now)), now);
        s.answer(shape.clone());
        assert!(is_unexpected(&s.expect_done()), "{shape:?}");
    }
    // A lost reply is not sent again: the job may have been queued (and taken).
    let mut s = Scenario::new(push_new(&keys(), &id, payload, deadline(now)), now);
    s.fail(TransportFailure::no_reply("timeout"));
    assert!(matches!(
        s.expect_done(),
        Err(Error::Unavailable { attempts: 1, .. })
    ));
}

#[test]
fn push_rejects_empty_batches_and_bad_ids_before_sending() {
    let now = origin();
    let k = keys();
    let d = deadline(now);
    assert!(is_invalid(&push(&k, &[], 0, Duration::ZERO, d)));
    assert!(is_invalid(&push(
        &k,
        &[job("", b"x")],
        0,
        Duration::ZERO,
        d
    )));
    let long = "i".repeat(MAX_ID_LEN + 1);
    assert!(is_invalid(&push(
        &k,
        &[job(&long, b"x")],
        0,
        Duration::ZERO,
        d
    )));
    // One bad id anywhere in the batch refuses the whole batch.
    let batch = [job("ok", b"1"), job("", b"2"), job("ok2", b"3")];
    assert!(is_invalid(&push(&k, &batch, 3, Duration::ZERO, d)));
    let batch = [job("ok", b"1"), job(&long, b"2")];
    assert!(is_invalid(&push(&k, &batch, 3, Duration::ZERO, d)));
    // The longest id is accepted.
    let longest = "i".repeat(MAX_ID_LEN);
    assert!(push(&k, &[job(&longest, b"x")], 0, Duration::ZERO, d).is_ok());
}

#[test]
fn push_error_replies_are_typed() {
    let now = origin();
    let op = push(&keys(), &[job("a", b"1")], 0, Duration::ZERO, deadline(now)).unwrap();
    let mut s = Scenario::new(op, now);
    s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    match s.expect_done() {
        Err(Error::WrongType { name, keys, .. }) => {
            assert_eq!(name, "queue jobs");
            assert!(keys.contains(READY), "{keys}");
            assert!(keys.contains(PAYLOADS), "{keys}");
        }
        other => panic!("{other:?}"),
    }
    let op = push(&keys(), &[job("a", b"1")], 0, Duration::ZERO, deadline(now)).unwrap();
    let mut s = Scenario::new(op, now);
    s.answer(err(
        "OOM",
        "command not allowed when used memory > 'maxmemory'.",
    ));
    assert!(matches!(s.expect_done(), Err(Error::Redis { code, .. }) if code == "OOM"));
}

// ---------------------------------------------------------------------------------------
// Take

fn take_opts(wait: Option<Duration>) -> AcquireOptions {
    AcquireOptions {
        wait,
        retry_initial: Duration::from_millis(50),
        retry_max: Duration::from_secs(2),
        ..AcquireOptions::default()
    }
}

fn taking(wait: Option<Duration>) -> Scenario<Acquire> {
    let now = origin();
    let spec = take(&keys(), token(), &settings()).unwrap();
    Scenario::new(Acquire::new(spec, &take_opts(wait), 5, now).unwrap(), now)
}

fn job_reply(delivery: i64, id: &[u8], payload: &[u8]) -> Reply {
    Reply::Array(vec![
        Reply::Int(1),
        Reply::Int(delivery),
        bulk(id),
        bulk(payload),
    ])
}

fn taken(s: &mut Scenario<Acquire>) -> Lease {
    match s.expect_done() {
        Ok(Acquisition::Acquired(lease)) => *lease,
        other => panic!("{other:?}"),
    }
}

#[test]
fn take_spec_is_a_job_lease_woken_by_pushes() {
    let spec = take(&keys(), token(), &settings()).unwrap();
    assert_eq!(spec.kind, LeaseKind::Job);
    assert_eq!(spec.ttl, Duration::from_millis(1500));
    assert_eq!(spec.token, token());
    assert_eq!(spec.wake, WakeOn::any(CHANNEL));
    assert_eq!(spec.cancel, None);
    assert_eq!(&*spec.target.name, "queue jobs");
    for k in [
        READY, DELAYED, PAYLOADS, INFLIGHT, LEASES, DELIVERIES, DEAD_LIST,
    ] {
        assert!(spec.target.keys.iter().any(|t| t == k), "{k}");
    }
}

#[test]
fn a_queues_takes_share_one_spec_bound_to_each_token_and_job() {
    let keys = keys();
    let first = take(&keys, token(), &settings()).unwrap();
    let other = Token::new("other-token").unwrap();
    let second = take(&keys, other.clone(), &settings()).unwrap();
    // Bound to its own token, copying neither the calls' keys nor the target's.
    assert_eq!(second.token, other);
    for (a, b) in [
        (&first.acquire, &second.acquire),
        (first.calls.release(), second.calls.release()),
        (&first.calls.extend(), &second.calls.extend()),
        (&first.calls.inspect(), &second.calls.inspect()),
        (first.undo.as_ref().unwrap(), second.undo.as_ref().unwrap()),
    ] {
        assert!(a.shares_parts_with(b), "{b:?}");
    }
    assert!(first.target.keys.ptr_eq(&second.target.keys));
    // The same calls a spec built afresh for that token has.
    assert_eq!(
        second,
        take(
            &super::QueueKeys::new(&Keyspace::default(), "jobs")
                .unwrap()
                .with_counts(true),
            other.clone(),
            &settings()
        )
        .unwrap()
    );
    // Other settings: a spec of their own.
    let longer = QueueSettings {
        visibility: Duration::from_secs(9),
        ..settings()
    };
    let third = take(&keys, other.clone(), &longer).unwrap();
    assert_eq!(third.ttl, Duration::from_secs(9));
    assert!(!third.acquire.shares_parts_with(&first.acquire));
    // A job's calls hold its id in their slot: as if it had been prepended, without a copy.
    let calls = second.calls.for_job(b"job-1");
    // Extend and inspect take the token and the job id from the release: every job's lease
    // shares their keys and arguments (and a Box of none).
    for calls in [&first.calls, &second.calls, &calls] {
        assert_eq!(calls.shapes(), ["template"; 2]);
    }
    assert!(calls.release().shares_parts_with(second.calls.release()));
    let t = other.as_str();
    assert_eq!(
        *calls.release(),
        nack(&keys, "job-1", t, Duration::ZERO, settings().max_deliveries)
    );
    assert_eq!(
        call_args(&calls.extend())[2..],
        strs(&["4", INFLIGHT, LEASES, CANCELLED, HOLDERS, "job-1", t])
    );
    assert_eq!(
        call_args(&calls.inspect())[2..],
        strs(&["2", INFLIGHT, LEASES, "job-1", t])
    );
}

#[test]
fn take_acquires_a_job_with_its_delivery_as_fence_and_id_payload_as_data() {
    let mut s = taking(None);
    let start = s.now;
    let r = s.answer(job_reply(3, b"job-1", b"\x00payload\xff"));
    assert_eq!(
        args(&r),
        strs(&[
            "EVALSHA",
            DEQUEUE.sha1,
            "14",
            READY,
            DELAYED,
            PAYLOADS,
            PRIORITIES,
            SEQ,
            INFLIGHT,
            LEASES,
            DELIVERIES,
            DEAD_LIST,
            HOLDERS,
            BASES,
            UNDONE,
            PAUSED,
            COUNTS,
            &tok(),
            "1500",
            "4",
        ])
    );
    let lease = taken(&mut s);
    assert_eq!(lease.kind, LeaseKind::Job);
    assert_eq!(lease.fence, 3);
    assert_eq!(
        lease.data,
        vec![b"job-1".to_vec(), b"\x00payload\xff".to_vec()]
    );
    assert_eq!(lease.token, token());
    assert_eq!(lease.ttl, Duration::from_millis(1500));
    assert_eq!(lease.attempts, 1);
    assert_eq!(lease.acquired_at, start);
    assert_eq!(
        lease.valid_until,
        start + Duration::from_millis(1500 - 15 - 2)
    );
    assert_eq!(lease.name(), "queue jobs job job-1");
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

#[test]
fn a_taken_jobs_calls_have_its_id_bound_first() {
    let mut s = taking(None);
    s.answer(job_reply(1, b"job-1", b"p"));
    let lease = taken(&mut s);
    let t = tok();
    // Release (dropping the handle): a nack without backoff.
    assert_eq!(
        call_args(lease.calls.release()),
        strs(&[
            "EVALSHA", NACK.sha1, "14", INFLIGHT, LEASES, DELAYED, READY, PRIORITIES, SEQ,
            DELIVERIES, DEAD_LIST, HOLDERS, BASES, SETTLED, REASONS, PAUSED, COUNTS, "job-1", &t,
            "0", "4", CHANNEL, "60000", "",
        ])
    );
    assert_eq!(
        *lease.calls.release(),
        nack(&keys(), "job-1", &t, Duration::ZERO, 4)
    );
    assert_eq!(
        call_args(&lease.calls.extend()),
        strs(&[
            "EVALSHA",
            JOB_EXTEND.sha1,
            "4",
            INFLIGHT,
            LEASES,
            CANCELLED,
            HOLDERS,
            "job-1",
            &t
        ])
    );
    assert_eq!(
        call_args(&lease.calls.inspect()),
        strs(&[
            "EVALSHA",
            JOB_INSPECT.sha1,
            "2",
            INFLIGHT,
            LEASES,
            "job-1",
            &t
        ])
    );

    // The extension appends the new visibility in ms after (id, token).
    let now = s.now;
    let op = ScriptOp::extend(&lease, Duration::from_millis(900), deadline(now)).unwrap();
    let mut e = Scenario::new(op, now);
    let r = e.answer(Reply::Int(1));
    assert_eq!(args(&r)[7..], strs(&["job-1", &t, "900"]));
    assert_eq!(
        e.expect_done(),
        Ok(now + Duration::from_millis(900 - 9 - 2))
    );
    for (code, reason) in [
        (0, LossReason::Expired),
        (-1, LossReason::Taken),
        (-3, LossReason::Cancelled),
    ] {
        let op = ScriptOp::extend(&lease, Duration::from_millis(900), deadline(now)).unwrap();
        let mut e = Scenario::new(op, now);
        e.answer(Reply::Int(code));
        match e.expect_done() {
            Err(Error::NotOwner { name, reason: r }) => {
                assert_eq!(name, "queue jobs job job-1");
                assert_eq!(r, reason);
            }
            other => panic!("{other:?}"),
        }
    }

    // Inspection.
    let cases = [
        (
            ints(&[1, 250]),
            LeaseState::Held {
                remaining: Some(Duration::from_millis(250)),
            },
        ),
        (ints(&[0, -2]), LeaseState::Expired),
        (
            ints(&[-1, 100]),
            LeaseState::Taken {
                remaining: Some(Duration::from_millis(100)),
            },
        ),
    ];
    for (reply, state) in cases {
        let mut i = Scenario::new(ScriptOp::inspect(&lease, deadline(now)), now);
        let r = i.answer(reply);
        assert_eq!(args(&r)[5..], strs(&["job-1", &t]));
        assert_eq!(i.expect_done(), Ok(state));
    }

    // The release is the bound nack.
    let mut rel = Scenario::new(ScriptOp::release(&lease, deadline(now)), now);
    let r = rel.answer(Reply::Int(1));
    assert_eq!(args(&r)[1], NACK.sha1);
    assert_eq!(
        args(&r)[17..],
        strs(&["job-1", &t, "0", "4", CHANNEL, "60000", ""])
    );
    assert_eq!(rel.expect_done(), Ok(()));
}

#[test]
fn ack_and_nack_calls_are_owner_checked_with_three_outcomes() {
    let mut s = taking(None);
    s.answer(job_reply(2, b"j", b"p"));
    let lease = taken(&mut s);
    let t = tok();
    let ack = ack_call(&keys(), "j", &t);
    assert_eq!(
        call_args(&ack),
        strs(&[
            "EVALSHA", ACK.sha1, "14", INFLIGHT, LEASES, PAYLOADS, PRIORITIES, DELIVERIES, HOLDERS,
            BASES, SETTLED, PAUSED, DEDUP, DEDUP_OF, READY, SEQ, COUNTS, "j", &t, "60000", CHANNEL,
        ])
    );
    // Bound from the queue's template: the same call.
    assert_eq!(ack_lease_call(&keys(), "j", &token()), ack);
    assert_eq!(
        call_args(&ack_lease_call(&keys(), "j", &token())),
        call_args(&ack)
    );
    let retry = nack(&keys(), "j", &t, Duration::from_millis(2500), 4);
    assert_eq!(
        call_args(&retry),
        strs(&[
            "EVALSHA", NACK.sha1, "14", INFLIGHT, LEASES, DELAYED, READY, PRIORITIES, SEQ,
            DELIVERIES, DEAD_LIST, HOLDERS, BASES, SETTLED, REASONS, PAUSED, COUNTS, "j", &t,
            "2500", "4", CHANNEL, "60000", "",
        ])
    );
    let now = s.now;
    for call in [ack, retry] {
        let cases = [
            (Reply::Int(1), None),
            (Reply::Int(0), Some(LossReason::Expired)),
            (Reply::Int(-1), Some(LossReason::Taken)),
        ];
        for (reply, loss) in cases {
            let op = ScriptOp::release_with(&lease, call.clone(), deadline(now));
            let mut o = Scenario::new(op, now);
            let r = o.answer(reply);
            assert_eq!(args(&r), call_args(&call));
            match (o.expect_done(), loss) {
                (Ok(()), None) => {}
                (Err(Error::NotOwner { name, reason }), Some(loss)) => {
                    assert_eq!(name, "queue jobs job j");
                    assert_eq!(reason, loss);
                }
                (other, loss) => panic!("{other:?} for {loss:?}"),
            }
        }
        // Another number, or not a number, is not an answer (2 is a nack's "dead", 3 its
        // "this delivery was settled already").
        for shape in [Reply::Int(4), Reply::Nil, ints(&[1])] {
            let op = ScriptOp::release_with(&lease, call.clone(), deadline(now));
            let mut o = Scenario::new(op, now);
            o.answer(shape);
            assert!(is_unexpected(&o.expect_done()));
        }
    }
}

#[test]
fn a_nack_says_whether_the_job_went_to_the_dead_list_and_keeps_the_reason() {
    let mut s = taking(None);
    s.answer(job_reply(2, b"j", b"p"));
    let lease = taken(&mut s);
    let t = tok();
    let call = nack_because(&keys(), "j", &t, Duration::ZERO, 0, "bad payload: not JSON");
    assert_eq!(
        call_args(&call)[17..],
        strs(&["j", &t, "0", "0", CHANNEL, "60000", "bad payload: not JSON"])
    );
    let now = s.now;
    let cases = [
        (Reply::Int(1), Ok(Nacked::Retrying)),
        (Reply::Int(2), Ok(Nacked::Dead)),
        (
            Reply::Int(0),
            Err(Error::NotOwner {
                name: "queue jobs job j".into(),
                reason: LossReason::Expired,
            }),
        ),
        (
            Reply::Int(-1),
            Err(Error::NotOwner {
                name: "queue jobs job j".into(),
                reason: LossReason::Taken,
            }),
        ),
    ];
    for (reply, out) in cases {
        let mut o = Scenario::new(nack_op(&lease, call.clone(), deadline(now)), now);
        o.answer(reply);
        assert_eq!(o.expect_done(), out);
    }
    let mut o = Scenario::new(nack_op(&lease, call.clone(), deadline(now)), now);
    o.answer(Reply::Int(3));
    assert_eq!(o.expect_done(), Ok(Nacked::Done));
    let mut o = Scenario::new(nack_op(&lease, call, deadline(now)), now);
    o.answer(Reply::Int(4));
    assert!(is_unexpected(&o.expect_done()));
}

#[test]
fn an_ack_or_nack_retried_after_a_lost_reply_trusts_only_the_scripts_record() {
    let mut s = taking(None);
    s.answer(job_reply(1, b"j", b"p"));
    let lease = taken(&mut s);
    let now = s.now;
    let t = tok();
    let calls = [
        ack_call(&keys(), "j", &t),
        nack(&keys(), "j", &t, Duration::ZERO, 4),
    ];
    let ops = calls
        .into_iter()
        .map(|c| ScriptOp::release_with(&lease, c, deadline(now)))
        .chain([ScriptOp::release(&lease, deadline(now))]);
    for op in ops.collect::<Vec<_>>() {
        let mut o = Scenario::new(op, now);
        o.fail(TransportFailure::no_reply("timeout"));
        o.sleep_through();
        // The lost attempt was sent while the lease was valid, but the job may have been
        // removed by another delivery: the retry's "gone" is not our success.
        o.answer(Reply::Int(0));
        assert!(
            matches!(
                o.expect_done(),
                Err(Error::NotOwner {
                    reason: LossReason::Expired,
                    ..
                })
            ),
            "a retry finding the job gone is refused"
        );
    }
    // The script found its own settlement record: 1, Ok.
    let op = ScriptOp::release_with(&lease, ack_call(&keys(), "j", &t), deadline(now));
    let mut o = Scenario::new(op, now);
    o.fail(TransportFailure::no_reply("timeout"));
    o.sleep_through();
    o.answer(Reply::Int(1));
    assert_eq!(o.expect_done(), Ok(()));
}

#[test]
fn an_empty_queue_waits_for_a_push_or_the_next_due_time() {
    // A long backoff, so that the cap by the due time shows.
    let now = origin();
    let spec = take(&keys(), token(), &settings()).unwrap();
    let opts = AcquireOptions {
        wait: Some(Duration::from_secs(10)),
        retry_initial: Duration::from_secs(2),
        retry_max: Duration::from_secs(2),
        ..AcquireOptions::default()
    };
    let mut s = Scenario::new(Acquire::new(spec, &opts, 5, now).unwrap(), now);
    // A delayed job is due in 30 ms: the pause ends then, not after the backoff.
    s.answer(ints(&[0, 30]));
    let w = s.expect_wait();
    assert_eq!(w.until, now + Duration::from_millis(30));
    assert_eq!(w.wake_on, Some(WakeOn::any(CHANNEL)));
    s.now = w.until;
    // Due "now" (the script says at least 1 ms): a 1 ms pause, never a spin.
    s.answer(ints(&[0, 1]));
    let w = s.expect_wait();
    assert_eq!(w.until, s.now + Duration::from_millis(1));
    s.now = w.until;
    // Nothing delayed or in flight (-2): the backoff decides, at least 1 s here.
    s.answer(ints(&[0, -2]));
    let w = s.expect_wait();
    assert!(w.until >= s.now + Duration::from_secs(1), "{w:?}");
    assert!(w.until <= s.now + Duration::from_secs(2), "{w:?}");
    // A push notification ends the pause at once.
    s.machine.wake(s.now);
    let r = s.answer(job_reply(1, b"pushed", b"x"));
    assert_eq!(args(&r)[1], DEQUEUE.sha1);
    let lease = taken(&mut s);
    assert_eq!(lease.data[0], b"pushed");
    assert_eq!(lease.attempts, 4);
}

#[test]
fn an_idle_taker_backs_off_to_its_maximum_and_times_out_at_the_deadline() {
    let mut s = taking(Some(Duration::from_secs(5)));
    let start = s.now;
    let mut attempts = 0;
    loop {
        s.answer(ints(&[0, -2]));
        attempts += 1;
        match s.machine.poll(s.now) {
            Step::Wait(w) => {
                assert!(w.until <= start + Duration::from_secs(5));
                assert!(w.until - s.now <= Duration::from_secs(2));
                s.now = w.until;
            }
            Step::Done(Err(Error::Timeout {
                name,
                waited,
                attempts: n,
            })) => {
                assert_eq!(name, "queue jobs");
                assert_eq!(waited, Duration::from_secs(5));
                assert_eq!(n, attempts);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    // 50 ms doubling to 2 s: a handful of tries in 5 s, not one per poll interval.
    assert!((4..=10).contains(&attempts), "{attempts}");
    assert_eq!(
        s.sent.len(),
        attempts as usize,
        "no cleanup: nothing was joined"
    );
}

#[test]
fn trying_once_on_an_empty_queue_is_busy() {
    let mut s = taking(None);
    s.answer(ints(&[0, 40]));
    assert_eq!(
        s.expect_done(),
        Ok(Acquisition::Busy {
            holder_ttl: Some(Duration::from_millis(40))
        })
    );
    let mut s = taking(None);
    s.answer(ints(&[0, -2]));
    assert_eq!(s.expect_done(), Ok(Acquisition::Busy { holder_ttl: None }));
    assert_eq!(s.sent.len(), 1);
}

#[test]
fn malformed_take_replies_are_unexpected() {
    let shapes = [
        Reply::Nil,
        Reply::Int(1),
        bulk(b"job"),
        // Acquired without data, with one item, with three.
        ints(&[1, 1]),
        Reply::Array(vec![Reply::Int(1), Reply::Int(1), bulk(b"id")]),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(1),
            bulk(b"id"),
            bulk(b"p"),
            bulk(b"extra"),
        ]),
        // Data of the wrong type.
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(1),
            Reply::Int(5),
            bulk(b"p"),
        ]),
        Reply::Array(vec![Reply::Int(1), Reply::Int(1), bulk(b"id"), Reply::Nil]),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(1),
            bulk(b"id"),
            Reply::Array(vec![]),
        ]),
        // An attempt (after a requeue) that is not 1 to the delivery number.
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(3),
            bulk(b"id"),
            bulk(b"p"),
            bulk(b"0"),
        ]),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(3),
            bulk(b"id"),
            bulk(b"p"),
            bulk(b"4"),
        ]),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(3),
            bulk(b"id"),
            bulk(b"p"),
            Reply::Int(2),
        ]),
        // A delivery number below 1.
        job_reply(0, b"id", b"p"),
        job_reply(-3, b"id", b"p"),
        // Empty, with data, or an unknown code.
        Reply::Array(vec![Reply::Int(0), Reply::Int(10), bulk(b"id"), bulk(b"p")]),
        Reply::Array(vec![Reply::Int(2), Reply::Int(2), bulk(b"id"), bulk(b"p")]),
        ints(&[]),
    ];
    for shape in shapes {
        for wait in [None, Some(Duration::from_secs(1))] {
            let mut s = taking(wait);
            s.answer(shape.clone());
            // The script ran: whatever it leased to our token is given back first.
            let undo = s.answer(Reply::Int(0));
            assert_eq!(&undo.command.args()[1], UNTAKE.sha1.as_bytes(), "{shape:?}");
            let out = s.expect_done();
            match &out {
                Err(Error::UnexpectedReply { context, .. }) => {
                    assert_eq!(*context, "lock acquisition")
                }
                other => panic!("{shape:?}: {other:?}"),
            }
            assert_eq!(s.sent.len(), 2, "{shape:?}: only the undo is sent");
        }
    }
}

#[test]
fn take_wrongtype_is_typed_and_noscript_falls_back_to_eval() {
    let mut s = taking(Some(Duration::from_secs(5)));
    s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    match s.expect_done() {
        Err(Error::WrongType { name, keys, .. }) => {
            assert_eq!(name, "queue jobs");
            assert!(keys.contains(READY), "{keys}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.sent.len(), 1);

    let mut s = taking(None);
    let first = s.answer(err("NOSCRIPT", "No matching script. Please use EVAL."));
    let second = s.answer(job_reply(1, b"j", b"p"));
    assert_eq!(first.command.name(), "EVALSHA");
    assert_eq!(second.command.name(), "EVAL");
    assert_eq!(&second.command.args()[1], DEQUEUE.source.as_bytes());
    assert_eq!(args(&first)[2..], args(&second)[2..]);
    assert_eq!(taken(&mut s).data[0], b"j");
}

#[test]
fn giving_up_after_lost_take_replies_sends_no_nack_with_the_token_as_job_id() {
    // Trying once: a lost reply is asked once more; a second loss gives up, and the
    // acquisition cleans up what the lost attempts may have taken.
    let mut s = taking(None);
    s.fail(TransportFailure::no_reply("read timed out"));
    s.fail(TransportFailure::no_reply("read timed out"));
    let t = tok();
    loop {
        match s.machine.poll(s.now) {
            Step::Send(batch) => {
                for r in batch.requests {
                    let a = args(&r);
                    // The job id is not known here: a nack bound to nothing shifts every
                    // argument (the token becomes the id, "0" the token, the max the
                    // backoff, the channel the max) and can never give the job back.
                    assert!(
                        !(a[1] == NACK.sha1 && a[11] == t),
                        "the cleanup nacks the job whose id is the lease token: {a:?}"
                    );
                    s.machine
                        .handle(crate::reply::Response::reply(r.id, Reply::Int(0)), s.now);
                }
            }
            Step::Done(out) => {
                assert!(matches!(out, Err(Error::Unavailable { .. })), "{out:?}");
                break;
            }
            other => panic!("{other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Stats, dead jobs, requeue

fn stats_op(now: Instant) -> Scenario<ScriptOp<Stats>> {
    Scenario::new(stats(&keys(), deadline(now)), now)
}

#[test]
fn stats_reads_four_counts_and_two_times() {
    let now = origin();
    let mut s = stats_op(now);
    let r = s.answer(ints(&[3, 2, 1, 0, 1500, -1]));
    assert_eq!(
        args(&r),
        strs(&[
            "EVALSHA_RO",
            STATS.sha1,
            "5",
            READY,
            DELAYED,
            INFLIGHT,
            DEAD_LIST,
            PAYLOADS
        ])
    );
    assert_eq!(
        s.expect_done(),
        Ok(QueueStats {
            ready: 3,
            delayed: 2,
            in_flight: 1,
            dead: 0,
            oldest_ready_age: Some(Duration::from_millis(1500)),
            least_lease_left: None,
        })
    );
}

#[test]
fn malformed_stats_are_unexpected() {
    let shapes = [
        Reply::Nil,
        Reply::Int(4),
        ints(&[]),
        ints(&[1, 2, 3]),
        ints(&[1, 2, 3, 4, 5]),
        ints(&[1, -1, 0, 0]),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Nil,
            Reply::Int(0),
            Reply::Int(0),
        ]),
        Reply::Array(vec![
            bulk(b"x"),
            Reply::Int(0),
            Reply::Int(0),
            Reply::Int(0),
        ]),
    ];
    for shape in shapes {
        let mut s = stats_op(origin());
        s.answer(shape.clone());
        match s.expect_done() {
            Err(Error::UnexpectedReply { context, .. }) => assert_eq!(context, "queue stats"),
            other => panic!("{shape:?}: {other:?}"),
        }
    }
}

#[test]
fn stats_falls_back_to_eval_on_noscript() {
    let mut s = stats_op(origin());
    s.answer(err("NOSCRIPT", "No matching script. Please use EVAL."));
    let r = s.answer(ints(&[0, 0, 0, 7, -1, -1]));
    assert_eq!(r.command.name(), "EVAL_RO");
    assert_eq!(&r.command.args()[1], STATS.source.as_bytes());
    assert_eq!(
        args(&r)[2..],
        strs(&["5", READY, DELAYED, INFLIGHT, DEAD_LIST, PAYLOADS])
    );
    assert_eq!(s.expect_done().map(|st| st.dead), Ok(7));
    assert_eq!(s.sent.len(), 2);
}

#[test]
fn dead_jobs_are_listed_with_deliveries_and_payload() {
    let now = origin();
    let mut s = Scenario::new(dead_jobs(&keys(), 25, deadline(now)), now);
    let r = s.answer(Reply::Array(vec![
        bulk(b"a"),
        Reply::Int(5),
        bulk(b"\x00\xff"),
        bulk(b"handler: bad payload"),
        bulk(b"1700000000123 failed"),
        // A grouped job: its group in a field of its own.
        bulk(b"t2\x1fb"),
        Reply::Int(1),
        bulk(b""),
        bulk(b""),
        bulk(b""),
    ]));
    assert_eq!(
        args(&r),
        strs(&[
            "EVALSHA_RO",
            DEAD.sha1,
            "4",
            DEAD_LIST,
            PAYLOADS,
            DELIVERIES,
            REASONS,
            "25"
        ])
    );
    assert_eq!(
        s.expect_done(),
        Ok(vec![
            DeadJob {
                id: "a".into(),
                group: None,
                deliveries: 5,
                payload: b"\x00\xff".to_vec(),
                reason: Some("handler: bad payload".into()),
                died_at: Some(
                    std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
                ),
                cause: Some(super::dead::DeathCause::Failed),
            },
            DeadJob {
                id: "b".into(),
                group: Some("t2".into()),
                deliveries: 1,
                payload: Vec::new(),
                reason: None,
                died_at: None,
                cause: None,
            },
        ])
    );
    // An empty list, and a limit of 0 asks for one.
    let mut s = Scenario::new(dead_jobs(&keys(), 0, deadline(now)), now);
    let r = s.answer(Reply::Array(vec![]));
    assert_eq!(args(&r)[7], "1");
    assert_eq!(s.expect_done(), Ok(vec![]));
}

#[test]
fn malformed_dead_lists_are_unexpected() {
    let shapes = [
        Reply::Nil,
        Reply::Int(0),
        Reply::Array(vec![bulk(b"a"), Reply::Int(1)]),
        Reply::Array(vec![bulk(b"a"), Reply::Int(1), bulk(b"p")]),
        Reply::Array(vec![bulk(b"a"), Reply::Int(1), bulk(b"p"), bulk(b"")]),
        Reply::Array(vec![
            bulk(b"a"),
            Reply::Int(1),
            bulk(b"p"),
            Reply::Int(2),
            bulk(b""),
        ]),
        Reply::Array(vec![
            bulk(b"a"),
            Reply::Int(-1),
            bulk(b"p"),
            bulk(b""),
            bulk(b""),
        ]),
        Reply::Array(vec![
            bulk(b"\xff"),
            Reply::Int(1),
            bulk(b"p"),
            bulk(b""),
            bulk(b""),
        ]),
        Reply::Array(vec![
            Reply::Int(3),
            Reply::Int(1),
            bulk(b"p"),
            bulk(b""),
            bulk(b""),
        ]),
        Reply::Array(vec![
            bulk(b"a"),
            Reply::Int(1),
            Reply::Int(9),
            bulk(b""),
            bulk(b""),
        ]),
        Reply::Array(vec![
            bulk(b"a"),
            Reply::Nil,
            bulk(b"p"),
            bulk(b""),
            bulk(b""),
        ]),
        Reply::Array(vec![
            bulk(b"a"),
            Reply::Int(1),
            bulk(b"p"),
            bulk(b""),
            Reply::Int(5),
        ]),
    ];
    for shape in shapes {
        let now = origin();
        let mut s = Scenario::new(dead_jobs(&keys(), 10, deadline(now)), now);
        s.answer(shape.clone());
        match s.expect_done() {
            Err(Error::UnexpectedReply { context, .. }) => {
                assert_eq!(context, "dead-letter list")
            }
            other => panic!("{shape:?}: {other:?}"),
        }
    }
}

#[test]
fn requeue_says_whether_the_job_was_dead() {
    let now = origin();
    for (reply, out) in [(Reply::Int(1), Ok(true)), (Reply::Int(0), Ok(false))] {
        let mut s = Scenario::new(requeue(&keys(), "a", deadline(now)), now);
        let r = s.answer(reply);
        assert_eq!(
            args(&r),
            strs(&[
                "EVALSHA",
                REQUEUE.sha1,
                "8",
                DEAD_LIST,
                READY,
                PRIORITIES,
                SEQ,
                DELIVERIES,
                BASES,
                REASONS,
                PAYLOADS,
                "a",
                CHANNEL,
            ])
        );
        assert_eq!(s.expect_done(), out);
    }
    for shape in [Reply::Int(2), Reply::Int(-1), Reply::Nil, ints(&[1])] {
        let mut s = Scenario::new(requeue(&keys(), "a", deadline(now)), now);
        s.answer(shape.clone());
        match s.expect_done() {
            Err(Error::UnexpectedReply { context, .. }) => assert_eq!(context, "requeue"),
            other => panic!("{shape:?}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Settings and names

#[test]
fn settings_are_validated_before_anything_is_sent() {
    let d = QueueSettings::default();
    assert_eq!(d.visibility, Duration::from_secs(30));
    assert_eq!(d.max_deliveries, 5);
    assert!(take(&keys(), token(), &d).is_ok());
    for visibility in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        let s = QueueSettings {
            visibility,
            ..QueueSettings::default()
        };
        let out = take(&keys(), token(), &s);
        assert!(is_invalid(&out), "{visibility:?}: {out:?}");
    }
    let s = QueueSettings {
        max_deliveries: 0,
        ..QueueSettings::default()
    };
    assert!(matches!(
        take(&keys(), token(), &s),
        Err(Error::InvalidArgument(InvalidArgument::Setting(_)))
    ));
    // visibility(2ms) would make every job un-ackable: the floor is the lease floor.
    let s = QueueSettings {
        visibility: Duration::from_millis(2),
        max_deliveries: 1,
        ..QueueSettings::default()
    };
    assert!(is_invalid(&take(&keys(), token(), &s)));
    let s = QueueSettings {
        visibility: crate::limits::MIN_TTL,
        max_deliveries: 1,
        ..QueueSettings::default()
    };
    let spec = take(&keys(), token(), &s).unwrap();
    assert_eq!(call_args(&spec.acquire)[18..], strs(&["10", "1"]));
}

#[test]
fn queue_names_are_validated() {
    assert!(matches!(
        QueueKeys::new(&Keyspace::default(), ""),
        Err(Error::InvalidArgument(InvalidArgument::EmptyName))
    ));
    assert!(matches!(
        QueueKeys::new(&Keyspace::default(), &"n".repeat(100_000)),
        Err(Error::InvalidArgument(InvalidArgument::NameTooLong { .. }))
    ));
    let k = QueueKeys::new(&Keyspace::new("app").unwrap(), "mail").unwrap();
    assert_eq!(k.name, "mail");
    assert_eq!(k.ready, "app:{mail}:q:ready");
    assert_eq!(k.channel, "app:{mail}:q:pushed");
}

#[test]
fn a_push_whose_reply_was_lost_is_not_sent_again() {
    let now = origin();
    let jobs = [NewJob {
        id: "once".into(),
        payload: b"p".to_vec(),
    }];
    let op = push(
        &keys(),
        &jobs,
        0,
        Duration::ZERO,
        now + Duration::from_secs(3),
    )
    .unwrap();
    let mut s = Scenario::new(op, now);
    s.fail(TransportFailure::no_reply("timeout"));
    match s.expect_done() {
        Err(Error::Unavailable { attempts, last }) => {
            assert_eq!(attempts, 1);
            assert_eq!(last.kind, crate::FailureKind::NoReply);
        }
        other => panic!("{other:?}"),
    }
    // One that surely never ran is retried.
    let op = push(
        &keys(),
        &jobs,
        0,
        Duration::ZERO,
        now + Duration::from_secs(3),
    )
    .unwrap();
    let mut s = Scenario::new(op, now);
    s.fail(TransportFailure::not_sent("refused"));
    s.sleep_through();
    s.answer(bulk(b"1"));
    assert_eq!(s.expect_done(), Ok(vec![Pushed::Queued("once".into())]));
}

#[test]
fn forgetting_a_dead_job_with_an_empty_id_is_refused_and_a_purge_goes_in_pages() {
    let now = origin();
    assert!(matches!(
        delete_dead(&keys(), "", deadline(now)),
        Err(Error::InvalidArgument(_))
    ));
    let mut one = Scenario::new(delete_dead(&keys(), "j", deadline(now)).unwrap(), now);
    let r = one.answer(Reply::Int(1));
    assert_eq!(args(&r)[args(&r).len() - 2..], strs(&["j", "one"]));
    assert_eq!(one.expect_done(), Ok(1));
    let page = super::dead::purge_page(&keys(), "c:0", deadline(now)).unwrap();
    let mut all = Scenario::new(page, now);
    let r = all.answer(Reply::Array(vec![Reply::Int(3), Reply::Int(3)]));
    assert_eq!(args(&r)[args(&r).len() - 3..], strs(&["", "page", "50"]));
    assert_eq!(
        all.expect_done(),
        Ok(super::dead::PurgedPage {
            deleted: 3,
            before: 3
        })
    );
}

// ---------------------------------------------------------------------------------------
// Named take outcomes

fn take_job(wait: Option<Duration>) -> Scenario<TakeJob> {
    let now = origin();
    let machine = TakeJob::new(&keys(), token(), &settings(), &take_opts(wait), 5, now).unwrap();
    Scenario::new(machine, now)
}

fn taken_job(s: &mut Scenario<TakeJob>) -> TakenJob {
    match s.expect_done() {
        Ok(Take::Taken(job)) => *job,
        other => panic!("{other:?}"),
    }
}

/// A delivery with a hold limit (its own timeout, or none of its own and the queue's): the
/// take reply says what is left of it, and the lease's validity ends by then, counted from
/// the take's send (the server leases it no longer, whatever renews it).
#[test]
fn a_take_with_a_hold_limit_is_valid_no_longer_than_it() {
    for (own, left_ms, valid_ms) in [
        (&b""[..], 400, 400 - 4 - 2),
        (&b"300"[..], 1300, 1300 - 13 - 2),
        // A hold limit past the visibility: the visibility bounds the validity.
        (&b"5000"[..], 6001, 1500 - 15 - 2),
    ] {
        let mut s = take_job(None);
        let start = s.now;
        let left = left_ms.to_string();
        s.answer(Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            bulk(b"j"),
            bulk(b"p"),
            bulk(b"2"),
            bulk(own),
            bulk(left.as_bytes()),
        ]));
        let job = taken_job(&mut s);
        assert_eq!(job.attempt, 2);
        assert_eq!(
            job.timeout,
            std::str::from_utf8(own)
                .unwrap()
                .parse()
                .ok()
                .map(Duration::from_millis)
        );
        assert_eq!(job.hold_left, Some(Duration::from_millis(left_ms)));
        assert_eq!(job.lease.acquired_at, start);
        assert_eq!(
            job.lease.valid_until,
            start + Duration::from_millis(valid_ms),
            "{own:?} {left_ms}"
        );
    }
}

#[test]
fn a_take_names_the_job_its_payload_and_its_delivery() {
    let mut s = take_job(None);
    let start = s.now;
    let r = s.answer(job_reply(3, b"job-1", b"\x00payload\xff"));
    assert_eq!(args(&r)[..2], strs(&["EVALSHA", DEQUEUE.sha1]));
    let job = taken_job(&mut s);
    assert_eq!(job.id, "job-1");
    assert_eq!(job.payload, b"\x00payload\xff");
    assert_eq!(job.delivery, 3);
    // The lease is the job's visibility timeout; its data moved into the named fields.
    assert_eq!(job.lease.fence, 3);
    assert_eq!(job.lease.token, token());
    assert!(job.lease.data.is_empty());
    assert_eq!(
        job.lease.valid_until,
        start + Duration::from_millis(1500 - 15 - 2)
    );
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

/// A job requeued from the dead list: the take's reply adds its attempt since the requeue
/// (issue 27: the backoff and the max-deliveries budget restart, the delivery number does
/// not).
#[test]
fn a_requeued_jobs_take_names_its_attempt_since_the_requeue() {
    let mut s = take_job(None);
    let mut reply = job_reply(7, b"job-1", b"p");
    if let Reply::Array(items) = &mut reply {
        items.push(bulk(b"2"));
    }
    s.answer(reply);
    let job = taken_job(&mut s);
    assert_eq!((job.delivery, job.attempt, job.lease.fence), (7, 2, 7));
    assert!(job.lease.data.is_empty());
    // Never requeued: the attempt is the delivery number.
    let mut s = take_job(None);
    s.answer(job_reply(3, b"job-2", b"p"));
    let job = taken_job(&mut s);
    assert_eq!((job.delivery, job.attempt), (3, 3));
}

#[test]
fn an_empty_take_says_when_the_next_job_is_due() {
    let mut s = take_job(None);
    s.answer(ints(&[0, 40]));
    assert_eq!(
        s.expect_done(),
        Ok(Take::Empty {
            next_due_in: Some(Duration::from_millis(40))
        })
    );
    let mut s = take_job(None);
    s.answer(ints(&[0, -2]));
    assert_eq!(s.expect_done(), Ok(Take::Empty { next_due_in: None }));
}

#[test]
fn a_waiting_take_sleeps_until_the_due_time_woken_by_a_push() {
    let mut s = take_job(Some(Duration::from_secs(5)));
    s.answer(ints(&[0, 40]));
    let w = s.expect_wait();
    assert!(w.until <= s.now + Duration::from_millis(40), "{w:?}");
    assert_eq!(w.wake_on, Some(WakeOn::any(CHANNEL)));
    s.machine.wake(s.now);
    s.answer(job_reply(1, b"j", b"p"));
    assert_eq!(taken_job(&mut s).id, "j");
}

#[test]
fn a_job_id_that_is_not_utf8_is_an_unexpected_reply() {
    let mut s = take_job(None);
    s.answer(job_reply(1, b"\xff\xfe", b"p"));
    assert!(is_unexpected(&s.expect_done()));
}

#[test]
fn a_taken_jobs_own_calls_are_its_ack_nack_give_back_and_extend() {
    let mut s = take_job(None);
    s.answer(job_reply(2, b"job-9", b"p"));
    let job = taken_job(&mut s);
    let now = s.now;
    let mut ack = Scenario::new(job.ack(&keys(), deadline(now)), now);
    let r = ack.answer(Reply::Int(1));
    let a = args(&r);
    assert_eq!(a[..3], strs(&["EVALSHA", ACK.sha1, "14"]));
    assert_eq!(a[17..19], strs(&["job-9", &tok()]));
    assert_eq!(ack.expect_done(), Ok(()));

    let mut nack = Scenario::new(
        job.nack(&keys(), Duration::from_secs(2), 4, "boom", deadline(now)),
        now,
    );
    let r = nack.answer(Reply::Int(2));
    let a = args(&r);
    assert_eq!(a[..2], strs(&["EVALSHA", NACK.sha1]));
    assert_eq!(a[17..21], strs(&["job-9", &tok(), "2000", "4"]));
    assert_eq!(a.last().map(String::as_str), Some("boom"));
    assert_eq!(nack.expect_done(), Ok(Nacked::Dead));

    // Giving back is a nack now: no backoff, no reason.
    let mut back = Scenario::new(job.give_back(deadline(now)), now);
    let r = back.answer(Reply::Int(1));
    let a = args(&r);
    assert_eq!(a[..2], strs(&["EVALSHA", NACK.sha1]));
    assert_eq!(a[17..20], strs(&["job-9", &tok(), "0"]));
    assert_eq!(back.expect_done(), Ok(()));

    let mut extend = Scenario::new(
        job.extend(Duration::from_secs(3), deadline(now)).unwrap(),
        now,
    );
    let r = extend.answer(Reply::Int(1));
    assert_eq!(
        args(&r)[..],
        strs(&[
            "EVALSHA",
            JOB_EXTEND.sha1,
            "4",
            INFLIGHT,
            LEASES,
            CANCELLED,
            HOLDERS,
            "job-9",
            &tok(),
            "3000"
        ])
    );
    assert!(extend.expect_done().is_ok());
}

// ---------------------------------------------------------------------------------------
// Ack and take in one round trip

const NEXT: [u8; 16] = [9; 16];

fn next_tok() -> String {
    Token::from_random(NEXT).as_str().to_owned()
}

/// A job taken at `origin()` (delivery 1), and the combined call acking it.
fn acking_and_taking() -> (TakenJob, Scenario<AckAndTake>) {
    let mut s = take_job(None);
    s.answer(job_reply(1, b"done-1", b"p"));
    let job = taken_job(&mut s);
    let now = s.now;
    let op = job
        .ack_and_take(
            &keys(),
            Token::from_random(NEXT),
            &settings(),
            deadline(now),
        )
        .unwrap();
    (job, Scenario::new(op, now))
}

fn acked_and(ack: i64, rest: Vec<Reply>) -> Reply {
    let mut items = vec![Reply::Int(ack)];
    items.extend(rest);
    Reply::Array(items)
}

fn handed(delivery: i64, id: &[u8], payload: &[u8]) -> Vec<Reply> {
    vec![Reply::Int(delivery), bulk(id), bulk(payload)]
}

#[test]
fn ack_and_take_hands_over_a_requeued_job_with_its_attempt() {
    let (_, mut s) = acking_and_taking();
    let mut rest = handed(6, b"again", b"p");
    rest.push(bulk(b"1"));
    s.answer(acked_and(1, rest));
    let out = s.expect_done().unwrap();
    let Take::Taken(next) = out.next else {
        panic!("{:?}", out.next)
    };
    assert_eq!((next.delivery, next.attempt), (6, 1));
}

#[test]
fn ack_and_take_sends_one_call_and_hands_over_the_next_job() {
    let (_, mut s) = acking_and_taking();
    let sent_at = s.now;
    let r = s.answer(acked_and(1, handed(2, b"next-1", b"np")));
    let a = args(&r);
    assert_eq!(a[..3], strs(&["EVALSHA", ACK_TAKE.sha1, "17"]));
    assert_eq!(
        a[3..20],
        strs(&[
            READY, DELAYED, PAYLOADS, PRIORITIES, SEQ, INFLIGHT, LEASES, DELIVERIES, DEAD_LIST,
            HOLDERS, BASES, SETTLED, UNDONE, PAUSED, DEDUP, DEDUP_OF, COUNTS
        ])
    );
    assert_eq!(
        a[20..],
        strs(&["done-1", &tok(), "60000", &next_tok(), "1500", "4"])
    );
    let out = s.expect_done().unwrap();
    assert_eq!(out.ack, Ok(()));
    let Take::Taken(next) = out.next else {
        panic!("{:?}", out.next)
    };
    assert_eq!(
        (next.id.as_str(), &next.payload[..]),
        ("next-1", &b"np"[..])
    );
    assert_eq!(next.delivery, 2);
    // Its lease is the next token's, counted from the send, with the job's own calls.
    assert_eq!(next.lease.token.as_str(), next_tok());
    assert_eq!(next.lease.fence, 2);
    assert_eq!(
        next.lease.valid_until,
        sent_at + Duration::from_millis(1500 - 15 - 2)
    );
    assert_eq!(next.lease.name(), "queue jobs job next-1");
    let mut ack = Scenario::new(next.ack(&keys(), deadline(s.now)), s.now);
    let r = ack.answer(Reply::Int(1));
    assert_eq!(args(&r)[17..19], strs(&["next-1", &next_tok()]));
    // Its give-back and extension name the job and the next token, as a take's would.
    let mut back = Scenario::new(next.give_back(deadline(s.now)), s.now);
    let r = back.answer(Reply::Int(1));
    assert_eq!(args(&r)[17..20], strs(&["next-1", &next_tok(), "0"]));
    let extend = next
        .extend(Duration::from_secs(3), deadline(s.now))
        .unwrap();
    let r = Scenario::new(extend, s.now).answer(Reply::Int(1));
    assert_eq!(args(&r)[7..], strs(&["next-1", &next_tok(), "3000"]));
    assert_eq!(s.sent.len(), 1);
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

#[test]
fn ack_and_take_on_an_empty_queue_says_when_the_next_job_is_due() {
    let (_, mut s) = acking_and_taking();
    s.answer(acked_and(1, vec![Reply::Int(0), Reply::Int(250)]));
    let out = s.expect_done().unwrap();
    assert_eq!(out.ack, Ok(()));
    assert_eq!(
        out.next,
        Take::Empty {
            next_due_in: Some(Duration::from_millis(250))
        }
    );
    let (_, mut s) = acking_and_taking();
    s.answer(acked_and(1, vec![Reply::Int(0), Reply::Int(-2)]));
    assert_eq!(
        s.expect_done().unwrap().next,
        Take::Empty { next_due_in: None }
    );
}

#[test]
fn a_refused_ack_still_hands_over_the_next_job() {
    for (code, reason) in [(0, LossReason::Expired), (-1, LossReason::Taken)] {
        let (_, mut s) = acking_and_taking();
        s.answer(acked_and(code, handed(1, b"n", b"")));
        let out = s.expect_done().unwrap();
        assert_eq!(
            out.ack,
            Err(Error::NotOwner {
                name: "queue jobs job done-1".into(),
                reason
            })
        );
        assert!(matches!(out.next, Take::Taken(_)), "{:?}", out.next);
    }
}

#[test]
fn a_lost_reply_of_ack_and_take_is_answered_by_the_same_call_again() {
    let (_, mut s) = acking_and_taking();
    let first = s.fail(TransportFailure::no_reply("timed out"));
    s.sleep_through();
    // The same call, same tokens: the script finds its settled ack and the job it leased.
    let again = s.answer(acked_and(1, handed(1, b"next-1", b"np")));
    assert_eq!(args(&again), args(&first));
    let out = s.expect_done().unwrap();
    assert_eq!(out.ack, Ok(()));
    assert!(matches!(&out.next, Take::Taken(j) if j.id == "next-1"));
    assert_eq!(s.sent.len(), 2);
}

#[test]
fn a_retry_answered_acked_and_empty_after_a_lost_reply_untakes_the_next_token() {
    // The first attempt may still arrive: with nothing handed to the next token now, it
    // would lease the next pushed job to a token nobody holds. The token is untaken (and so
    // recorded as undone) before the answer is given.
    let (_, mut s) = acking_and_taking();
    let first = s.fail(TransportFailure::no_reply("timed out"));
    s.sleep_through();
    let again = s.answer(acked_and(1, vec![Reply::Int(0), Reply::Int(-2)]));
    assert_eq!(args(&again), args(&first));
    let untake = s.answer(Reply::Int(0));
    assert_eq!(args(&untake)[..3], strs(&["EVALSHA", UNTAKE.sha1, "9"]));
    assert_eq!(args(&untake)[12], next_tok());
    let out = s.expect_done().unwrap();
    assert_eq!(out.ack, Ok(()));
    assert_eq!(out.next, Take::Empty { next_due_in: None });
    assert_eq!(s.sent.len(), 3);
}

#[test]
fn giving_up_after_lost_replies_gives_back_what_the_next_token_may_hold() {
    let (_, mut s) = acking_and_taking();
    let mut calls = 0;
    loop {
        match s.machine.poll(s.now) {
            Step::Send(batch) => {
                let r = &batch.requests[0];
                s.sent.push(r.clone());
                let failure = TransportFailure::no_reply("timed out");
                if args(r)[1] == UNTAKE.sha1 {
                    s.machine
                        .handle(Response::reply(r.id, Reply::Int(1)), s.now);
                } else {
                    calls += 1;
                    s.machine.handle(Response::failed(r.id, failure), s.now);
                }
            }
            Step::Wait(w) => s.now = w.until,
            Step::Done(out) => {
                assert!(matches!(out, Err(Error::Unavailable { .. })), "{out:?}");
                break;
            }
            #[allow(unreachable_patterns)]
            other => panic!("{other:?}"),
        }
    }
    assert!(calls >= 2, "{calls}");
    let untake = s.sent.last().unwrap();
    assert_eq!(args(untake)[..3], strs(&["EVALSHA", UNTAKE.sha1, "9"]));
    assert_eq!(args(untake)[12], next_tok());
    assert_eq!(s.expect_done(), Err(Error::Finished));
}

#[test]
fn an_ack_and_take_never_sent_or_refused_by_redis_undoes_nothing() {
    let (_, mut s) = acking_and_taking();
    loop {
        match s.machine.poll(s.now) {
            Step::Send(batch) => {
                let r = &batch.requests[0];
                assert_eq!(
                    args(r)[1],
                    ACK_TAKE.sha1,
                    "no untake after not-sent failures"
                );
                let failure = TransportFailure::not_sent("refused");
                s.machine.handle(Response::failed(r.id, failure), s.now);
            }
            Step::Wait(w) => s.now = w.until,
            Step::Done(out) => {
                assert!(matches!(out, Err(Error::Unavailable { .. })), "{out:?}");
                break;
            }
            #[allow(unreachable_patterns)]
            other => panic!("{other:?}"),
        }
    }
    let (_, mut s) = acking_and_taking();
    s.answer(err(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    ));
    assert!(matches!(s.expect_done(), Err(Error::WrongType { .. })));
    assert_eq!(s.sent.len(), 1);
}

#[test]
fn a_reply_not_understood_gives_back_what_the_next_token_may_hold() {
    for bad in [
        ints(&[1]),
        ints(&[1, 1, 2]),
        acked_and(7, handed(1, b"n", b"")),
        acked_and(1, handed(0, b"n", b"")),
        acked_and(1, handed(1, b"\xff", b"")),
        // The shape of the script before it dropped the "taken" flag.
        acked_and(1, vec![Reply::Int(1), Reply::Int(1), bulk(b"n"), bulk(b"")]),
        // An attempt that is not 1 to the delivery number, or not a string; a timeout of
        // 0 ms or not a number after it, or none without a hold limit; a hold limit that is
        // not a number; an enqueue time that is not a number; four or seven of them.
        acked_and(1, [handed(2, b"n", b""), vec![bulk(b"3")]].concat()),
        acked_and(1, [handed(2, b"n", b""), vec![bulk(b"0")]].concat()),
        acked_and(1, [handed(2, b"n", b""), vec![Reply::Int(1)]].concat()),
        acked_and(
            1,
            [handed(2, b"n", b""), vec![bulk(b"1"), bulk(b"0")]].concat(),
        ),
        acked_and(
            1,
            [handed(2, b"n", b""), vec![bulk(b"1"), bulk(b"x")]].concat(),
        ),
        acked_and(
            1,
            [
                handed(2, b"n", b""),
                vec![bulk(b"1"), bulk(b"5"), bulk(b"5"), bulk(b"5")],
            ]
            .concat(),
        ),
        acked_and(
            1,
            [
                handed(2, b"n", b""),
                vec![bulk(b""), bulk(b""), bulk(b""), bulk(b"x"), bulk(b"5")],
            ]
            .concat(),
        ),
        acked_and(
            1,
            [
                handed(2, b"n", b""),
                vec![
                    bulk(b"1"),
                    bulk(b"5"),
                    bulk(b"5"),
                    bulk(b"2"),
                    bulk(b"2"),
                    bulk(b"2"),
                    bulk(b"2"),
                ],
            ]
            .concat(),
        ),
        acked_and(
            1,
            [handed(2, b"n", b""), vec![bulk(b"1"), bulk(b"")]].concat(),
        ),
        acked_and(
            1,
            [
                handed(2, b"n", b""),
                vec![bulk(b"1"), bulk(b""), bulk(b"x")],
            ]
            .concat(),
        ),
    ] {
        let (_, mut s) = acking_and_taking();
        s.answer(bad.clone());
        let untake = s.answer(Reply::Int(1));
        assert_eq!(args(&untake)[1], UNTAKE.sha1, "{bad:?}");
        assert!(is_unexpected(&s.expect_done()), "{bad:?}");
    }
}

#[test]
fn a_next_job_handed_over_after_its_validity_is_given_back() {
    let (_, mut s) = acking_and_taking();
    let r = s.expect_send();
    s.now += Duration::from_millis(1500);
    s.machine.handle(
        Response::reply(r.id, acked_and(1, handed(1, b"n", b""))),
        s.now,
    );
    let untake = s.answer(Reply::Int(1));
    assert_eq!(args(&untake)[1], UNTAKE.sha1);
    let out = s.expect_done().unwrap();
    assert_eq!(out.ack, Ok(()));
    assert_eq!(
        out.next,
        Take::Empty {
            next_due_in: Some(Duration::ZERO)
        }
    );
}

#[test]
fn ack_and_take_binds_tokens_of_any_length_and_the_settings_of_each_call() {
    let now = origin();
    let mut s = take_job(None);
    s.answer(job_reply(1, b"done-1", b"p"));
    let mut job = taken_job(&mut s);
    // A token of another length than the random ones (a driver's own), and settings other
    // than those of the queue's first take (which its calls were built for).
    job.lease.token = Token::new("short").unwrap();
    let other = QueueSettings {
        visibility: Duration::from_millis(7000),
        max_deliveries: 9,
        timeout: Some(Duration::from_millis(2000)),
        timeout_grace: Duration::from_micros(499_500),
    };
    // The lease argument: the visibility, the hold limit's slack (the grace rounded up, plus
    // 2 ms) and the queue's timeout; the bare visibility with neither a timeout nor another
    // grace than the default.
    for (settings, vis, max) in [(other, "7000:502:2000", "9"), (settings(), "1500", "4")] {
        let op = job
            .ack_and_take(&keys(), Token::from_random(NEXT), &settings, deadline(now))
            .unwrap();
        let mut s = Scenario::new(op, now);
        let r = s.answer(acked_and(1, handed(1, b"n", b"")));
        assert_eq!(
            args(&r)[20..],
            strs(&["done-1", "short", "60000", &next_tok(), vis, max])
        );
        let out = s.expect_done().unwrap();
        let Take::Taken(next) = out.next else {
            panic!("{:?}", out.next)
        };
        assert_eq!(next.lease.ttl, settings.visibility);
    }
    // The script call for a driver's own machine is the same call.
    let call = ack_and_take_call(&keys(), "done-1", "short", &next_tok(), &settings());
    let op = job
        .ack_and_take(
            &keys(),
            Token::from_random(NEXT),
            &settings(),
            deadline(now),
        )
        .unwrap();
    let r = Scenario::new(op, now).answer(acked_and(1, handed(1, b"n", b"")));
    assert_eq!(args(&r), call_args(&call));
}

#[test]
fn a_job_leases_name_is_the_queue_then_the_id_however_long() {
    let long = "é".repeat(MAX_ID_LEN / 2);
    for id in ["j", "x".repeat(140).as_str(), long.as_str()] {
        assert_eq!(
            &*job_name("queue jobs job ", id),
            format!("queue jobs job {id}")
        );
    }
}

#[test]
fn a_taken_jobs_lease_is_named_after_the_queue_and_the_id() {
    assert_eq!(&*lease_name("queue jobs", b"j-1"), "queue jobs job j-1");
    let long = "x".repeat(MAX_ID_LEN);
    assert_eq!(
        &*lease_name("queue jobs", long.as_bytes()),
        format!("queue jobs job {long}")
    );
    assert_eq!(
        &*lease_name("queue jobs", b"\xff"),
        "queue jobs job \u{fffd}"
    );
}

#[test]
fn ack_and_take_binds_its_call_without_copying_the_arguments() {
    let keys = keys();
    let settings = settings();
    let visibility_ms = settings.validate().unwrap();
    let bound = keys.bound(&settings, visibility_ms);
    let (acked, next) = (Token::new("short").unwrap(), Token::from_random(NEXT));
    let call = super::ack_take::bind_call(&bound, "done-1", &acked, &next);
    assert!(
        call.shares_parts_with(&bound.ack_take),
        "the id and both tokens are bound in slots: the 13 keys are not copied"
    );
    assert_eq!(
        call,
        ack_and_take_call(&keys, "done-1", "short", &next_tok(), &settings)
    );
}

// ---------------------------------------------------------------------------------------
// Settling a job whose take had an unanswered attempt (issue 26)

/// A take whose first reply was lost, answered by its retry: the job's lease says so, and
/// every call that settles it (ack, nack, give back, ack and take) also records the token
/// as undone, so that the first attempt, if only delayed, takes nothing when it arrives.
/// A take answered at once settles with the plain calls.
#[test]
fn settling_a_job_taken_after_a_lost_reply_records_its_token_as_undone() {
    let keep = crate::lease::UNDONE_KEEP.as_millis().to_string();
    let now = origin();
    let d = deadline(now);
    // Answered at once.
    let mut s = take_job(None);
    s.answer(job_reply(1, b"j", b"p"));
    let plain = taken_job(&mut s);
    assert!(!plain.lease.unanswered);
    let ack = args(&Scenario::new(plain.ack(&keys(), d), now).answer(Reply::Int(1)));
    assert_eq!(ack[2], "14", "the plain ack: {ack:?}");
    let nack = plain.nack(&keys(), Duration::ZERO, 4, "", d);
    let nack = args(&Scenario::new(nack, now).answer(Reply::Int(1)));
    assert_eq!(nack[2], "14", "the plain nack: {nack:?}");
    // The first reply lost.
    let mut s = take_job(None);
    s.fail(TransportFailure::no_reply("timed out"));
    s.answer(job_reply(1, b"j", b"p"));
    let job = taken_job(&mut s);
    assert!(job.lease.unanswered);
    let ack = args(&Scenario::new(job.ack(&keys(), d), now).answer(Reply::Int(1)));
    assert_eq!(ack[1], ACK.sha1);
    assert_eq!(ack[2], "15", "{ack:?}");
    assert_eq!(ack[17], UNDONE);
    assert_eq!(ack[18..], strs(&["j", &tok(), "60000", CHANNEL, &keep]));
    let nack = job.nack(&keys(), Duration::from_micros(1500), 4, "why", d);
    let nack = args(&Scenario::new(nack, now).answer(Reply::Int(1)));
    assert_eq!(nack[1], NACK.sha1);
    assert_eq!(nack[2], "15", "{nack:?}");
    assert_eq!(nack[17], UNDONE);
    // The backoff rounded up (1.5 ms: 2), the reason, then how long to remember.
    assert_eq!(
        nack[18..],
        strs(&["j", &tok(), "2", "4", CHANNEL, "60000", "why", &keep])
    );
    let give_back = args(&Scenario::new(job.give_back(d), now).answer(Reply::Int(1)));
    assert_eq!(give_back[1], NACK.sha1);
    assert_eq!(give_back[17], UNDONE);
    assert_eq!(give_back.last(), Some(&keep));
    // Its ack and take: the acked token remembered too (the seventh argument).
    let op = job
        .ack_and_take(&keys(), Token::from_random(NEXT), &settings(), d)
        .unwrap();
    let r = Scenario::new(op, now).answer(acked_and(1, vec![Reply::Int(0), Reply::Int(-2)]));
    let a = args(&r);
    assert_eq!(a[1], ACK_TAKE.sha1);
    assert_eq!(
        a[a.len() - 7..],
        strs(&["j", &tok(), "60000", &next_tok(), "1500", "4", &keep])
    );
    let op = plain
        .ack_and_take(&keys(), Token::from_random(NEXT), &settings(), d)
        .unwrap();
    let r = Scenario::new(op, now).answer(acked_and(1, vec![Reply::Int(0), Reply::Int(-2)]));
    assert_eq!(
        args(&r).last(),
        Some(&"4".to_owned()),
        "no record for a plain take"
    );
}

/// An ack and take whose first reply was lost hands over a job whose lease says so: its
/// settlement records the next token as undone.
#[test]
fn a_job_handed_over_after_a_lost_reply_records_its_token_when_settled() {
    let keep = crate::lease::UNDONE_KEEP.as_millis().to_string();
    let (_, mut s) = acking_and_taking();
    s.fail(TransportFailure::no_reply("timed out"));
    s.sleep_through();
    s.answer(acked_and(1, handed(1, b"next-1", b"np")));
    let out = s.expect_done().unwrap();
    let Take::Taken(next) = out.next else {
        panic!("{:?}", out.next)
    };
    assert!(next.lease.unanswered);
    let now = s.now;
    let give_back = args(&Scenario::new(next.give_back(deadline(now)), now).answer(Reply::Int(1)));
    assert_eq!(give_back[17], UNDONE, "{give_back:?}");
    assert_eq!(give_back.last(), Some(&keep));
    let ack = args(&Scenario::new(next.ack(&keys(), deadline(now)), now).answer(Reply::Int(1)));
    assert_eq!(ack[17], UNDONE);
    assert_eq!(ack[18..20], strs(&["next-1", &next_tok()]));
    // Answered at once: a plain lease.
    let (_, mut s) = acking_and_taking();
    s.answer(acked_and(1, handed(1, b"next-1", b"np")));
    let Take::Taken(next) = s.expect_done().unwrap().next else {
        panic!("no job")
    };
    assert!(!next.lease.unanswered);
    let give_back = args(&Scenario::new(next.give_back(deadline(now)), now).answer(Reply::Int(1)));
    assert_eq!(give_back[2], "14");
}

#[test]
fn a_job_pushed_with_a_timeout_is_handed_over_with_it() {
    let (_, mut s) = acking_and_taking();
    s.answer(acked_and(
        1,
        [handed(2, b"n", b""), vec![bulk(b"2"), bulk(b"250")]].concat(),
    ));
    match s.expect_done() {
        Ok(AckedAndTaken {
            next: Take::Taken(job),
            ..
        }) => {
            assert_eq!(job.timeout, Some(Duration::from_millis(250)));
            assert_eq!(job.attempt, 2);
        }
        other => panic!("{other:?}"),
    }
    let keys = keys();
    let jobs = [NewJob {
        id: "a".into(),
        payload: b"p".to_vec(),
    }];
    let at = deadline(origin());
    let op = crate::queue::push_with_timeout(
        &keys,
        &jobs,
        0,
        Duration::ZERO,
        Duration::from_micros(1500),
        at,
    )
    .unwrap();
    let mut p = Scenario::new(op, origin());
    let r = p.answer(bulk(b"1"));
    assert_eq!(
        args(&r)[2..11],
        strs(&[
            "7", READY, DELAYED, PAYLOADS, PRIORITIES, SEQ, COUNTS, BASES, "0:2"
        ])
    );
    assert!(
        crate::queue::push_with_timeout(&keys, &jobs, 0, Duration::ZERO, Duration::ZERO, at)
            .is_err()
    );
}

/// A plain take sends the bare visibility, as before hold limits: the scripts then assume the
/// default grace's slack, which they write out.
#[test]
fn the_scripts_default_slack_is_the_default_graces() {
    assert_eq!(
        super::DEFAULT_SLACK_MS,
        super::DEFAULT_TIMEOUT_GRACE.as_millis() as u64 + 2
    );
    assert!(
        super::scripts::RECLAIM.contains(&format!("return vis, {}", super::DEFAULT_SLACK_MS)),
        "lua/reclaim.lua's lease_args"
    );
    let other_grace = QueueSettings {
        timeout_grace: Duration::from_millis(1500),
        ..settings()
    };
    let spec = take(&keys(), token(), &other_grace).unwrap();
    assert_eq!(call_args(&spec.acquire)[18..], strs(&["1500:1502", "4"]));
}

#[test]
fn a_handed_jobs_tail_carries_its_attempt_timeout_hold_limit_and_enqueue_time_together() {
    use super::{JobTail, parse_job_tail};
    let at = |ms| std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    let tail = |t: &[&str]| parse_job_tail(t.iter().map(|t| Some(t.as_bytes())), 3);
    assert_eq!(tail(&[]), Some(JobTail::plain(3)));
    assert_eq!(tail(&["2"]).map(|t| t.attempt), Some(2));
    assert_eq!(
        tail(&["3", "1500"]).map(|t| (t.attempt, t.timeout)),
        Some((3, Some(Duration::from_millis(1500))))
    );
    assert_eq!(
        tail(&["2", "", "900"]).map(|t| (t.attempt, t.timeout, t.hold_left)),
        Some((2, None, Some(Duration::from_millis(900))))
    );
    // With its enqueue time, five: the attempt, the timeout and the hold limit each empty
    // when it has none.
    assert_eq!(
        tail(&["", "", "", "5000", "40"]),
        Some(JobTail {
            enqueued: Some((at(5000), Duration::from_millis(40))),
            ..JobTail::plain(3)
        })
    );
    assert_eq!(
        tail(&["1", "1500", "2400", "5000", "40"]),
        Some(JobTail {
            attempt: 1,
            timeout: Some(Duration::from_millis(1500)),
            hold_left: Some(Duration::from_millis(2400)),
            enqueued: Some((at(5000), Duration::from_millis(40))),
            start_in: None,
        })
    );
    // A grouped job whose take booked its group's rate slot: six, the sixth the µs to it
    // (the enqueue time and wait empty when not recorded).
    assert_eq!(
        tail(&["1", "", "", "5000", "40", "3500"]).map(|t| (t.enqueued, t.start_in)),
        Some((
            Some((at(5000), Duration::from_millis(40))),
            Some(Duration::from_micros(3500))
        ))
    );
    assert_eq!(
        tail(&["", "", "", "", "", "0"]).map(|t| (t.attempt, t.enqueued, t.start_in)),
        Some((3, None, Some(Duration::ZERO)))
    );
    for bad in [
        &["", "1500"][..],
        &["4"],
        &["1", "", "x"],
        &["1", "", "", "5000"],
        &["1", "", "", "x", "40"],
        &["1", "0", "", "5000", "40"],
        &["1", "", "", "5000", "40", ""],
        &["1", "", "", "5000", "40", "-1"],
        &["1", "", "", "5000", "", "1"],
        &["1", "", "", "5000", "40", "1", "2"],
    ] {
        assert_eq!(tail(bad), None, "{bad:?}");
    }
}

#[test]
fn the_counts_slot_names_the_counts_only_when_the_queue_counts() {
    let now = origin();
    let off = QueueKeys::new(&Keyspace::default(), "jobs").unwrap();
    assert!(!off.counts_on() && keys().counts_on());
    assert_eq!(off.clone().with_counts(true), keys());
    assert_eq!(keys().with_counts(false), off);
    let slot = |k: &QueueKeys| {
        let op = push(k, &[job("x", b"")], 0, Duration::ZERO, deadline(now)).unwrap();
        args(&Scenario::new(op, now).answer(bulk(b"1")))[8].clone()
    };
    assert_eq!(slot(&off), READY);
    assert_eq!(slot(&keys()), COUNTS);
    // lua/count.lua tells them apart by the last byte.
    assert_eq!(READY.as_bytes().last(), Some(&b'y'));
    assert_eq!(COUNTS.as_bytes().last(), Some(&b's'));
    assert!(super::scripts::COUNT.contains("if string.byte(key, -1) == 115 then"));
}
