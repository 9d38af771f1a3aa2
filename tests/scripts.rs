//! Every script reads each of its keys before its first write (issue 19 item 7): with any one
//! key holding a value of the wrong type, the script fails with WRONGTYPE and changes nothing.
//!
//! One row per script: its keys, its arguments, and a setup that puts the other keys in a
//! state where the script would write (a held lock, a waiter in line, a job in flight). For
//! each key in turn, the test replaces it with a set (a type no script uses), snapshots every
//! key, runs the script, and compares.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Connection;
use redlease::core::lease::scripts as lease;
use redlease::core::queue::scripts as queue;
use redlease::core::script::Script;
use redlease_suite::testkit::{connection, server};

const LOCK: &str = "t:{s}:lock";
const FENCE: &str = "t:{s}:fence";
const HASH: &str = "t:{s}:reentrant";
const QUEUE: &str = "t:{s}:fair:queue";
const TIMEOUTS: &str = "t:{s}:fair:timeouts";
const WRITER: &str = "t:{s}:rw:writer";
const READERS: &str = "t:{s}:rw:readers";
const WAITING: &str = "t:{s}:rw:waiting";
const HOLDERS: &str = "t:{s}:sem:holders";
const WAITERS: &str = "t:{s}:sem:waiters";
const WAIT_TIMES: &str = "t:{s}:sem:timeouts";
const PERMITS: &str = "t:{s}:sem:permits";
const READY: &str = "t:{s}:q:ready";
const DELAYED: &str = "t:{s}:q:delayed";
const PAYLOADS: &str = "t:{s}:q:payloads";
const PRIORITIES: &str = "t:{s}:q:priorities";
const SEQ: &str = "t:{s}:q:seq";
const INFLIGHT: &str = "t:{s}:q:inflight";
const LEASES: &str = "t:{s}:q:leases";
const DELIVERIES: &str = "t:{s}:q:deliveries";
const DEAD: &str = "t:{s}:q:dead";
const JOB_HOLDERS: &str = "t:{s}:q:holders";
const BASES: &str = "t:{s}:q:bases";
const SETTLED: &str = "t:{s}:q:settled";
const REASONS: &str = "t:{s}:q:reasons";
const CHANNEL: &str = "t:{s}:wake";
const UNDONE: &str = "t:{s}:undone";
const Q_UNDONE: &str = "t:{s}:q:undone";

/// A setup step: a command and its arguments; `{far}` is replaced by a time well in the
/// future (ms since the epoch).
type Step = &'static [&'static str];

struct Row {
    script: &'static Script,
    keys: &'static [&'static str],
    args: &'static [&'static str],
    setup: &'static [Step],
}

const HELD_HASH: &[Step] = &[
    &["HSET", HASH, "me", "1", "me:op", "op1", "fence", "5"],
    &["PEXPIRE", HASH, "10000"],
];
const JOB_IN_FLIGHT: &[Step] = &[
    &["ZADD", INFLIGHT, "{far}", "j"],
    &["HSET", LEASES, "j", "tok"],
    &["HSET", PAYLOADS, "j", "p"],
    &["HSET", PRIORITIES, "j", "0"],
    &["HSET", DELIVERIES, "j", "1"],
    &["HSET", JOB_HOLDERS, "tok", "j"],
    &["SET", SEQ, "7"],
];
const DEAD_JOB: &[Step] = &[
    &["RPUSH", DEAD, "j"],
    &["HSET", PAYLOADS, "j", "p"],
    &["HSET", PRIORITIES, "j", "0"],
    &["HSET", DELIVERIES, "j", "5"],
    &["HSET", BASES, "j", "0"],
    &["SET", SEQ, "7"],
];
const SEMAPHORE: &[Step] = &[
    &["ZADD", HOLDERS, "{far}", "tok"],
    &["RPUSH", WAITERS, "tok", "w"],
    &["ZADD", WAIT_TIMES, "{far}", "tok", "{far}", "w"],
    &["SET", PERMITS, "2"],
];

fn rows() -> Vec<Row> {
    vec![
        // The undo variants of the releases: one more key, the undone acquisitions.
        Row {
            script: &lease::RELEASE,
            keys: &[LOCK, UNDONE],
            args: &["tok", CHANNEL, "600000"],
            setup: &[&["SET", LOCK, "tok", "PX", "10000"]],
        },
        Row {
            script: &lease::WRITE_RELEASE,
            keys: &[WRITER, UNDONE],
            args: &["tok", CHANNEL, "600000"],
            setup: &[&["SET", WRITER, "tok", "PX", "10000"]],
        },
        Row {
            script: &lease::READ_RELEASE,
            keys: &[READERS, UNDONE],
            args: &["tok", CHANNEL, "600000"],
            setup: &[&["ZADD", READERS, "{far}", "tok"]],
        },
        Row {
            script: &lease::FAIR_RELEASE,
            keys: &[LOCK, QUEUE, TIMEOUTS, UNDONE],
            args: &["tok", CHANNEL, "600000"],
            setup: &[
                &["SET", LOCK, "tok", "PX", "10000"],
                &["RPUSH", QUEUE, "w"],
                &["ZADD", TIMEOUTS, "{far}", "w"],
            ],
        },
        Row {
            script: &lease::PERMIT_RELEASE,
            keys: &[HOLDERS, WAITERS, WAIT_TIMES, PERMITS, UNDONE],
            args: &["tok", CHANNEL, "600000"],
            setup: SEMAPHORE,
        },
        Row {
            script: &lease::ACQUIRE,
            keys: &[LOCK, FENCE, UNDONE],
            args: &["tok", "30000"],
            setup: &[&["SET", FENCE, "3"]],
        },
        Row {
            script: &lease::RELEASE,
            keys: &[LOCK],
            args: &["tok", CHANNEL],
            setup: &[&["SET", LOCK, "tok", "PX", "10000"]],
        },
        Row {
            script: &lease::EXTEND,
            keys: &[LOCK],
            args: &["tok", "30000"],
            setup: &[&["SET", LOCK, "tok", "PX", "10000"]],
        },
        Row {
            script: &lease::INSPECT,
            keys: &[LOCK],
            args: &["tok"],
            setup: &[&["SET", LOCK, "tok", "PX", "10000"]],
        },
        Row {
            script: &lease::REENTRANT_ACQUIRE,
            keys: &[HASH, FENCE, UNDONE],
            args: &["me", "op2", "30000"],
            setup: HELD_HASH,
        },
        Row {
            script: &lease::REENTRANT_RELEASE,
            keys: &[HASH],
            args: &["me", "op2", CHANNEL],
            setup: HELD_HASH,
        },
        Row {
            script: &lease::REENTRANT_EXTEND,
            keys: &[HASH],
            args: &["me", "30000", "1"],
            setup: HELD_HASH,
        },
        Row {
            script: &lease::REENTRANT_INSPECT,
            keys: &[HASH],
            args: &["me"],
            setup: HELD_HASH,
        },
        Row {
            script: &lease::REENTRANT_UNDO,
            keys: &[HASH, UNDONE],
            args: &["me", "op1", CHANNEL, "600000"],
            setup: HELD_HASH,
        },
        Row {
            script: &lease::FAIR_ACQUIRE,
            keys: &[LOCK, QUEUE, TIMEOUTS, FENCE, UNDONE],
            args: &["tok", "30000", "5000", "1"],
            setup: &[
                &["RPUSH", QUEUE, "tok"],
                &["ZADD", TIMEOUTS, "{far}", "tok"],
                &["SET", FENCE, "3"],
            ],
        },
        Row {
            script: &lease::FAIR_RELEASE,
            keys: &[LOCK, QUEUE, TIMEOUTS],
            args: &["tok", CHANNEL],
            setup: &[
                &["SET", LOCK, "tok", "PX", "10000"],
                &["RPUSH", QUEUE, "w"],
                &["ZADD", TIMEOUTS, "{far}", "w"],
            ],
        },
        Row {
            script: &lease::FAIR_CANCEL,
            keys: &[LOCK, QUEUE, TIMEOUTS],
            args: &["tok", CHANNEL],
            setup: &[
                &["SET", LOCK, "other", "PX", "10000"],
                &["RPUSH", QUEUE, "tok", "w"],
                &["ZADD", TIMEOUTS, "{far}", "tok", "{far}", "w"],
            ],
        },
        Row {
            script: &lease::READ_ACQUIRE,
            keys: &[WRITER, READERS, WAITING, FENCE, UNDONE],
            args: &["tok", "30000"],
            setup: &[&["SET", FENCE, "3"]],
        },
        Row {
            script: &lease::READ_RELEASE,
            keys: &[READERS],
            args: &["tok", CHANNEL],
            setup: &[&["ZADD", READERS, "{far}", "tok"]],
        },
        Row {
            script: &lease::READ_EXTEND,
            keys: &[READERS],
            args: &["tok", "30000"],
            setup: &[&["ZADD", READERS, "{far}", "tok"]],
        },
        Row {
            script: &lease::READ_INSPECT,
            keys: &[READERS],
            args: &["tok"],
            setup: &[&["ZADD", READERS, "{far}", "tok"]],
        },
        Row {
            script: &lease::WRITE_ACQUIRE,
            keys: &[WRITER, READERS, WAITING, FENCE, UNDONE],
            args: &["tok", "30000", "5000", "1"],
            setup: &[&["ZADD", WAITING, "{far}", "tok"], &["SET", FENCE, "3"]],
        },
        Row {
            script: &lease::WRITE_RELEASE,
            keys: &[WRITER],
            args: &["tok", CHANNEL],
            setup: &[&["SET", WRITER, "tok", "PX", "10000"]],
        },
        Row {
            script: &lease::WRITE_CANCEL,
            keys: &[WAITING],
            args: &["tok", CHANNEL],
            setup: &[&["ZADD", WAITING, "{far}", "tok"]],
        },
        Row {
            script: &lease::PERMIT_ACQUIRE,
            keys: &[HOLDERS, WAITERS, WAIT_TIMES, PERMITS, UNDONE],
            args: &["w", "30000", "5000", "2", "1"],
            setup: SEMAPHORE,
        },
        Row {
            script: &lease::PERMIT_RELEASE,
            keys: &[HOLDERS, WAITERS, WAIT_TIMES, PERMITS],
            args: &["tok", CHANNEL],
            setup: SEMAPHORE,
        },
        Row {
            script: &lease::PERMIT_CANCEL,
            keys: &[HOLDERS, WAITERS, WAIT_TIMES, PERMITS],
            args: &["w", CHANNEL],
            setup: SEMAPHORE,
        },
        Row {
            script: &lease::SEMAPHORE_SET,
            keys: &[HOLDERS, WAITERS, PERMITS],
            args: &["5", CHANNEL],
            setup: SEMAPHORE,
        },
        Row {
            script: &lease::SEMAPHORE_STATE,
            keys: &[HOLDERS, WAITERS, WAIT_TIMES, PERMITS],
            args: &[],
            setup: SEMAPHORE,
        },
        Row {
            script: &queue::PUSH,
            keys: &[READY, DELAYED, PAYLOADS, PRIORITIES, SEQ],
            args: &["0", "0", CHANNEL, "new", "payload"],
            setup: &[&["ZADD", DELAYED, "1", "due"], &["SET", SEQ, "7"]],
        },
        Row {
            script: &queue::DEQUEUE,
            keys: &[
                READY,
                DELAYED,
                PAYLOADS,
                PRIORITIES,
                SEQ,
                INFLIGHT,
                LEASES,
                DELIVERIES,
                DEAD,
                JOB_HOLDERS,
                BASES,
                Q_UNDONE,
            ],
            args: &["tok2", "30000", "5"],
            setup: &[
                &["ZADD", READY, "1", "r"],
                &["HSET", PAYLOADS, "r", "p"],
                &["HSET", PRIORITIES, "r", "0"],
                &["SET", SEQ, "7"],
            ],
        },
        Row {
            script: &queue::ACK,
            keys: &[
                INFLIGHT,
                LEASES,
                PAYLOADS,
                PRIORITIES,
                DELIVERIES,
                JOB_HOLDERS,
                BASES,
                SETTLED,
            ],
            args: &["j", "tok", "60000"],
            setup: JOB_IN_FLIGHT,
        },
        Row {
            script: &queue::NACK,
            keys: &[
                INFLIGHT,
                LEASES,
                DELAYED,
                READY,
                PRIORITIES,
                SEQ,
                DELIVERIES,
                DEAD,
                JOB_HOLDERS,
                BASES,
                SETTLED,
                REASONS,
            ],
            args: &["j", "tok", "0", "5", CHANNEL, "60000", "why"],
            setup: JOB_IN_FLIGHT,
        },
        Row {
            script: &queue::JOB_EXTEND,
            keys: &[INFLIGHT, LEASES],
            args: &["j", "tok", "30000"],
            setup: JOB_IN_FLIGHT,
        },
        Row {
            script: &queue::JOB_INSPECT,
            keys: &[INFLIGHT, LEASES],
            args: &["j", "tok"],
            setup: JOB_IN_FLIGHT,
        },
        Row {
            script: &queue::STATS,
            keys: &[READY, DELAYED, INFLIGHT, DEAD],
            args: &[],
            setup: JOB_IN_FLIGHT,
        },
        Row {
            script: &queue::DEAD,
            keys: &[DEAD, PAYLOADS, DELIVERIES, REASONS],
            args: &["10"],
            setup: DEAD_JOB,
        },
        Row {
            script: &queue::REQUEUE,
            keys: &[DEAD, READY, PRIORITIES, SEQ, DELIVERIES, BASES, REASONS],
            args: &["j", CHANNEL],
            setup: DEAD_JOB,
        },
        Row {
            script: &queue::UNTAKE,
            keys: &[
                INFLIGHT,
                LEASES,
                READY,
                PRIORITIES,
                SEQ,
                DELIVERIES,
                JOB_HOLDERS,
                Q_UNDONE,
            ],
            args: &["tok", CHANNEL, "600000"],
            setup: JOB_IN_FLIGHT,
        },
        Row {
            script: &queue::FORGET,
            keys: &[DEAD, PAYLOADS, PRIORITIES, DELIVERIES, BASES, REASONS],
            args: &["j", "one"],
            setup: DEAD_JOB,
        },
    ]
}

/// Type, serialized value and whether it expires, of every key in `keys`.
fn snapshot(conn: &mut Connection, keys: &[&str]) -> Vec<(String, Option<Vec<u8>>, bool)> {
    keys.iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(k).query(conn).unwrap();
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(k).query(conn).unwrap();
            let pttl: i64 = redis::cmd("PTTL").arg(k).query(conn).unwrap();
            (kind, dump, pttl >= 0)
        })
        .collect()
}

fn pttls(conn: &mut Connection, keys: &[&str]) -> Vec<i64> {
    keys.iter()
        .map(|k| redis::cmd("PTTL").arg(k).query(conn).unwrap())
        .collect()
}

fn run(conn: &mut Connection, row: &Row) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(row.script.source).arg(row.keys.len());
    for k in row.keys {
        cmd.arg(*k);
    }
    for a in row.args {
        cmd.arg(*a);
    }
    cmd.query(conn)
}

fn set_up(conn: &mut Connection, setup: &[Step]) {
    let far = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 100_000;
    for step in setup {
        let mut cmd = redis::cmd(step[0]);
        for a in &step[1..] {
            if *a == "{far}" {
                cmd.arg(far.to_string());
            } else {
                cmd.arg(*a);
            }
        }
        let _: redis::Value = cmd.query(conn).unwrap();
    }
}

#[test]
fn every_script_reads_each_key_before_its_first_write() {
    let server = server();
    let mut conn = connection(&server);
    let rows = rows();
    // Every script of the library has a row.
    let covered: BTreeSet<&str> = rows.iter().map(|r| r.script.name).collect();
    let all: BTreeSet<&str> = lease::ALL
        .iter()
        .chain(queue::ALL.iter())
        .map(|s| s.name)
        .collect();
    assert_eq!(covered, all, "one row per script");
    let mut failures = Vec::new();
    for row in &rows {
        // The setup is meaningful: without a planted value the script succeeds.
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        set_up(&mut conn, row.setup);
        if let Err(e) = run(&mut conn, row) {
            failures.push(format!(
                "{}: fails without a wrong type: {e}",
                row.script.name
            ));
        }
        for (i, key) in row.keys.iter().enumerate() {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            set_up(&mut conn, row.setup);
            let _: () = redis::cmd("DEL").arg(*key).query(&mut conn).unwrap();
            let _: () = redis::cmd("SADD")
                .arg(*key)
                .arg("planted")
                .query(&mut conn)
                .unwrap();
            let before = snapshot(&mut conn, row.keys);
            let ttl_before = pttls(&mut conn, row.keys);
            let outcome = run(&mut conn, row);
            let after = snapshot(&mut conn, row.keys);
            let ttl_after = pttls(&mut conn, row.keys);
            let name = row.script.name;
            match outcome {
                Err(e) if e.to_string().contains("WRONGTYPE") => {}
                other => failures.push(format!("{name}, key {i} ({key}): {other:?}")),
            }
            if before != after {
                failures.push(format!("{name}, key {i} ({key}): changed a key"));
            }
            if ttl_before
                .iter()
                .zip(&ttl_after)
                .any(|(b, a)| *a > *b || (*b < 0) != (*a < 0))
            {
                failures.push(format!(
                    "{name}, key {i} ({key}): changed an expiry {ttl_before:?} -> {ttl_after:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn foreign_counters_are_refused_before_anything_is_written() {
    let server = server();
    let mut conn = connection(&server);
    let rows = rows();
    let cases = [
        (lease::PERMIT_ACQUIRE.name, PERMITS),
        (lease::ACQUIRE.name, FENCE),
        (lease::FAIR_ACQUIRE.name, FENCE),
        (lease::WRITE_ACQUIRE.name, FENCE),
        (lease::REENTRANT_ACQUIRE.name, FENCE),
    ];
    for (name, key) in cases {
        let row = rows.iter().find(|r| r.script.name == name).unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        set_up(&mut conn, row.setup);
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("abc")
            .query(&mut conn)
            .unwrap();
        let before = snapshot(&mut conn, row.keys);
        let outcome = run(&mut conn, row);
        assert!(outcome.is_err(), "{name}: {outcome:?}");
        assert_eq!(
            before,
            snapshot(&mut conn, row.keys),
            "{name}: changed a key"
        );
    }
}
