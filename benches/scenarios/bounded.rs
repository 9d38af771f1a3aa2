//! Bounded scripts: the longest script `SLOWLOG` records for each call whose cost once grew
//! with what a set holds, on a queue whose set holds 100,000 entries (40,000 leases of one
//! group for the one-group take), against the same call when the set holds 10 (the baseline
//! of this scenario, measured in the same run on the same server).
//!
//! One line, `bench queue_bounded ...`, with for each call `<call>_us=<at 100,000>`,
//! `<call>_us_small=<at 10>` and `<call>_ratio=<the two's ratio>`, and `longest_us`, the
//! longest of them all (the goal: at most 5,000). The takes are timed as the median of
//! `TAKES` takes (one take is a few microseconds, below `SLOWLOG`'s resolution to tell
//! apart); the other calls as the longest script of one call.

use std::time::{Duration, Instant};

use crate::common::*;
use redlease::{
    queue::GroupLimits, queue::LimitsOf, queue::PushOptions, queue::dead::DeadFilter,
    queue::dead::DeathCause, queue::dedup::Dedup,
};
use redlease_suite::testkit;

/// Takes timed per take-shaped row.
const TAKES: usize = 101;
/// A lease end far in the future (ms since 1970): the leases the fill writes never expire.
const FAR: u64 = 4_000_000_000_000;

/// The `SLOWLOG` entries' durations (µs) of the scripts run since the last reset.
fn script_durations(conn: &mut redis::Connection) -> Vec<u64> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(conn)
        .expect("bench: SLOWLOG GET failed");
    let mut out = Vec::new();
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let (Some(redis::Value::Int(us)), Some(redis::Value::Array(argv))) =
            (fields.get(2), fields.get(3))
        else {
            continue;
        };
        let name = match argv.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
            _ => continue,
        };
        if name.starts_with("eval") || name.starts_with("fcall") {
            out.push(*us as u64);
        }
    }
    out
}

fn slowlog_reset(conn: &mut redis::Connection) {
    let () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(conn)
        .expect("bench: SLOWLOG RESET failed");
}

/// Runs `call` once and answers the longest script it ran (µs).
fn longest(conn: &mut redis::Connection, call: impl FnOnce()) -> u64 {
    slowlog_reset(conn);
    call();
    script_durations(conn).into_iter().max().unwrap_or(0)
}

/// Runs `take` `TAKES` times and answers the median script time of a take (µs, the longest
/// script of each take).
fn median_take(conn: &mut redis::Connection, mut take: impl FnMut()) -> u64 {
    let mut each = Vec::with_capacity(TAKES);
    for _ in 0..TAKES {
        each.push(longest(conn, &mut take));
    }
    each.sort_unstable();
    each[TAKES / 2]
}

/// `ZADD key <score> <member(i)>` for `i` in `0..n`, pipelined.
fn fill_zset(
    conn: &mut redis::Connection,
    keys: &[&str],
    n: usize,
    score: u64,
    member: impl Fn(usize) -> String,
) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for key in keys {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(*key);
            for &i in chunk {
                zadd.arg(score).arg(member(i));
            }
            pipe.add_command(zadd);
        }
        let () = pipe.query(conn).expect("bench: zset fill failed");
    }
}

/// The median script time (µs) of push + group take + ack of a job of `group` on queue
/// `queue`, whose `limits` allow any number in flight, after `fill` (given the queue's
/// name) wrote the state the takes look at.
fn group_takes(
    ctx: &Ctx,
    conn: &mut redis::Connection,
    queue: &str,
    limits: LimitsOf<'_>,
    group: &str,
    fill: impl FnOnce(&mut redis::Connection, &str),
) -> u64 {
    let q = ctx.client.queue(queue).expect("bench: queue");
    q.set_group_limits(limits, Some(GroupLimits::new().concurrency(10_000_000)))
        .expect("bench: set_group_limits failed");
    fill(conn, q.name());
    let g = q.groups().expect("bench: groups");
    median_take(conn, || {
        q.push_with(JOB_PAYLOAD, PushOptions::new().group(group))
            .expect("bench: push failed");
        let job = g
            .try_take()
            .expect("bench: group take failed")
            .expect("bench: a grouped job");
        job.ack().expect("bench: ack failed");
    })
}

/// The longest script of each call at `n` entries in the set it once walked (µs), in the
/// order of [`ROWS`].
fn measure_at(ctx: &Ctx, conn: &mut redis::Connection, n: usize, tag: &str) -> Vec<u64> {
    let c = &ctx.client;
    let name = |row: &str| fresh(&format!("bench-bounded-{row}-{tag}"));
    let mut out = Vec::new();

    // requeue_dead_where(cause, 1000): the matching 1,000 at the end.
    let q = c.queue(&name("requeue")).expect("bench: queue");
    testkit::fill_dead(conn, q.name(), "d", n + 1_000, 1_000);
    let filter = DeadFilter::new().cause(DeathCause::LeaseExpired);
    out.push(longest(conn, || {
        let ids = q
            .requeue_dead_where(&filter, 1_000)
            .expect("bench: requeue_dead_where failed");
        assert_eq!(ids.len(), 1_000, "bench: the requeue picked {}", ids.len());
    }));
    q.purge_dead().expect("bench: purge failed");

    // purge_dead(): the whole list, in pages.
    let q = c.queue(&name("purge")).expect("bench: queue");
    testkit::fill_dead(conn, q.name(), "d", n, 0);
    out.push(longest(conn, || {
        let purged = q.purge_dead().expect("bench: purge_dead failed");
        assert_eq!(purged, n as u64, "bench: purged {purged}");
    }));

    // set_dead_retention: the list trimmed from n to 10.
    let q = c.queue(&name("retain")).expect("bench: queue");
    testkit::fill_dead(conn, q.name(), "d", n + 10, 0);
    out.push(longest(conn, || {
        let trimmed = q
            .set_dead_retention(redlease::queue::dead::DeadRetention {
                max_jobs: Some(10),
                max_age: None,
            })
            .expect("bench: set_dead_retention failed");
        assert_eq!(trimmed, n as u64, "bench: trimmed {trimmed}");
    }));

    // set_group_limits(EveryGroup): n groups set aside as full.
    let q = c.queue(&name("limits")).expect("bench: queue");
    let full = format!("redlease:{{{}}}:q:g:full", q.name());
    fill_zset(conn, &[&full], n, FAR, |i| format!("idle{i}"));
    out.push(longest(conn, || {
        q.set_group_limits(
            LimitsOf::EveryGroup,
            Some(GroupLimits::new().concurrency(2)),
        )
        .expect("bench: set_group_limits failed");
    }));

    // cancel of a job in flight: n ended cancel marks.
    let q = c.queue(&name("cancel")).expect("bench: queue");
    testkit::fill_ended(
        conn,
        &format!("redlease:{{{}}}:q:cancelled", q.name()),
        &format!("redlease:{{{}}}:q:cancel_messages", q.name()),
        n,
    );
    q.push(JOB_PAYLOAD).expect("bench: push failed");
    let job = q
        .try_take()
        .expect("bench: take failed")
        .expect("bench: a job");
    out.push(longest(conn, || {
        q.cancel(job.id(), "stop").expect("bench: cancel failed");
    }));
    drop(job);

    // push_dedup(Throttle): n ended throttle windows.
    let q = c.queue(&name("throttle")).expect("bench: queue");
    testkit::fill_ended(
        conn,
        &format!("redlease:{{{}}}:q:throttle", q.name()),
        &format!("redlease:{{{}}}:q:throttled", q.name()),
        n,
    );
    out.push(longest(conn, || {
        q.push_dedup("d", JOB_PAYLOAD, Dedup::Throttle(Duration::from_secs(60)))
            .expect("bench: push_dedup failed");
    }));

    // Every group take: n grouped jobs in flight under a queue-wide limit.
    out.push(group_takes(
        ctx,
        conn,
        &name("wide"),
        LimitsOf::Queue,
        "t",
        |conn, q| {
            let inflight = format!("redlease:{{{q}}}:q:g:inflight");
            fill_zset(conn, &[&inflight], n, FAR, |i| {
                format!("other{i}\u{1f}m{i}")
            });
        },
    ));

    // Every group take of one group holding 40% of n live leases.
    out.push(group_takes(
        ctx,
        conn,
        &name("onegroup"),
        LimitsOf::Group("big"),
        "big",
        |conn, q| {
            let index = format!("redlease:{{{q}}}:q:g:i:big");
            let inflight = format!("redlease:{{{q}}}:q:g:inflight");
            fill_zset(conn, &[&index, &inflight], n * 2 / 5, FAR, |i| {
                format!("big\u{1f}m{i}")
            });
        },
    ));

    // A plain take beside n ready jobs (the take's own cost at scale).
    let q = c.queue(&name("take")).expect("bench: queue");
    let batch: Vec<redlease::queue::NewJob> = (0..n)
        .map(|i| redlease::queue::NewJob {
            id: format!("j{i}"),
            payload: JOB_PAYLOAD.to_vec(),
        })
        .collect();
    for chunk in batch.chunks(1_000) {
        q.push_batch(chunk, PushOptions::new())
            .expect("bench: push_batch failed");
    }
    out.push(median_take(conn, || {
        q.push(JOB_PAYLOAD).expect("bench: push failed");
        let job = q
            .try_take()
            .expect("bench: take failed")
            .expect("bench: a job");
        job.ack().expect("bench: ack failed");
    }));

    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("redlease:{{bench-bounded-*-{tag}-*"))
        .query(conn)
        .expect("bench: KEYS failed");
    keys.sort();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("UNLINK")
            .arg(&keys)
            .query(conn)
            .expect("bench: UNLINK failed");
    }
    out
}

/// The rows, in the order [`measure_at`] measures them: the keys of the row's figures at
/// 100,000, at 10, and their ratio.
const ROWS: [(&str, &str, &str); 9] = [
    (
        "requeue_dead_where_us",
        "requeue_dead_where_us_small",
        "requeue_dead_where_ratio",
    ),
    ("purge_dead_us", "purge_dead_us_small", "purge_dead_ratio"),
    (
        "dead_retention_us",
        "dead_retention_us_small",
        "dead_retention_ratio",
    ),
    (
        "set_group_limits_us",
        "set_group_limits_us_small",
        "set_group_limits_ratio",
    ),
    (
        "cancel_in_flight_us",
        "cancel_in_flight_us_small",
        "cancel_in_flight_ratio",
    ),
    (
        "push_throttle_us",
        "push_throttle_us_small",
        "push_throttle_ratio",
    ),
    (
        "group_take_wide_us",
        "group_take_wide_us_small",
        "group_take_wide_ratio",
    ),
    (
        "group_take_one_group_us",
        "group_take_one_group_us_small",
        "group_take_one_group_ratio",
    ),
    ("take_us", "take_us_small", "take_ratio"),
];

/// See the module doc. `ops_per_s` is not a throughput (the calls are few); `ratio` is the
/// worst of the rows' ratios (at 100,000 over at 10).
pub fn queue_bounded(ctx: &Ctx) -> Measurement {
    const LARGE: usize = 100_000;
    let mut conn = ctx.raw_connection();
    let old: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query(&mut conn)
        .expect("bench: CONFIG GET failed");
    let old_max: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-max-len")
        .query(&mut conn)
        .expect("bench: CONFIG GET failed");
    for (k, v) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "100000"),
    ] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut conn)
            .expect("bench: CONFIG SET failed");
    }
    let started = Instant::now();
    let small = measure_at(ctx, &mut conn, 10, "s");
    let large = measure_at(ctx, &mut conn, LARGE, "l");
    let elapsed = started.elapsed();
    for pair in [old, old_max] {
        if let [k, v] = pair.as_slice() {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(k)
                .arg(v)
                .query(&mut conn)
                .expect("bench: CONFIG SET failed");
        }
    }
    let mut m = Measurement {
        total: Slice {
            ops: ROWS.len() as u64,
            elapsed,
        },
        against: Against::Nothing,
        ..Measurement::default()
    };
    m.per_thread = vec![m.total.ops];
    let mut longest_us = 0;
    for (i, &(at_large, at_small, ratio)) in ROWS.iter().enumerate() {
        let (s, l) = (small[i], large[i]);
        longest_us = longest_us.max(l);
        m.extra.push((at_large, l.to_string()));
        m.extra.push((at_small, s.to_string()));
        m.extra
            .push((ratio, format!("{:.2}", l as f64 / s.max(1) as f64)));
    }
    m.extra.push(("longest_us", longest_us.to_string()));
    m
}
