//! Queue scenarios: their ratios are over the queue baseline (`LPUSH` + `RPOP`), not the lock's.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::common::*;
use redlease_core::keys::Keyspace;

/// The dedicated, continuous run of the queue baseline cycle (see [`QueueCycle`]); it also warms
/// up the connection the queue scenarios' interleaved baseline slices use.
pub fn queue_baseline(ctx: &Ctx) -> Measurement {
    dedicated_run(ctx, &ctx.queue_baseline)
}

/// A queue whose name is fresh per run (no leftovers from an aborted run on a shared server).
fn fresh_queue(ctx: &Ctx, prefix: &str) -> redlease::Queue {
    ctx.client
        .queue(&fresh(prefix))
        .expect("bench: bad queue name")
}

/// One job through a queue: push, take (there must be one), ack.
fn push_take_ack(queue: &redlease::Queue) {
    queue.push(JOB_PAYLOAD).expect("bench: queue push failed");
    let job = queue
        .try_take()
        .expect("bench: queue take failed")
        .expect("bench: the queue was empty right after a push");
    black_box(job.payload());
    job.ack().expect("bench: queue ack failed");
}

/// Push + take + ack of one job, one thread (three round trips, each a script).
pub fn queue_1worker(ctx: &Ctx) -> Measurement {
    let queue = fresh_queue(ctx, "bench-q1");
    let (m, _) = measure_single_with(ctx, &ctx.queue_baseline, || push_take_ack(&queue));
    m
}

/// 4 threads, each looping push + take + ack on one shared queue (a thread may take another's
/// job; the queue is never empty when a thread takes, since every taker pushed first).
pub fn queue_4workers(ctx: &Ctx) -> Measurement {
    const WORKERS: usize = 4;
    let queue = fresh_queue(ctx, "bench-q4");
    let (mut m, _) = measure_threads_with(
        ctx,
        &ctx.queue_baseline,
        WORKERS,
        || {},
        |_| {
            let queue = queue.clone();
            move || push_take_ack(&queue)
        },
    );
    m.push_thread_spread();
    m
}

/// The keys of queue `name` (client with the default prefix): `<prefix>:{<name>}:q:<part>`.
fn queue_keys(name: &str) -> Vec<String> {
    let stem = Keyspace::default()
        .stem(name)
        .expect("bench: bad queue name");
    [
        "ready",
        "delayed",
        "payloads",
        "priorities",
        "seq",
        "inflight",
        "leases",
        "deliveries",
        "dead",
    ]
    .iter()
    .map(|part| format!("{stem}:q:{part}"))
    .collect()
}

/// Jobs pushed in batches of 100 with `push_many` (one round trip per batch), one thread. One
/// op is one job (ratio: jobs/s over the queue baseline's cycles/s); `p50_us`/`p99_us` are per
/// batch. The queue's keys are deleted before every slice (untimed), so it does not grow.
pub fn queue_batch_push(ctx: &Ctx) -> Measurement {
    const BATCH: usize = 100;
    let name = fresh("bench-qb");
    let queue = ctx.client.queue(&name).expect("bench: bad queue name");
    let keys = queue_keys(&name);
    let mut con = ctx.raw_connection();
    let mut clear = || {
        let _: i64 = redis::cmd("DEL")
            .arg(&keys)
            .query(&mut con)
            .expect("bench: DEL of the queue failed");
    };
    let mut push = || {
        let ids = queue
            .push_many(std::iter::repeat_n(JOB_PAYLOAD, BATCH))
            .expect("bench: push_many failed");
        assert_eq!(ids.len(), BATCH, "bench: push_many pushed a short batch");
    };
    let mut record = Record::new();
    let pairs = interleave_with(ctx, &ctx.queue_baseline, |len, measured| {
        clear();
        let batches = single_slice(len, &mut push, measured.then_some(&mut record));
        Slice {
            ops: batches.ops * BATCH as u64,
            elapsed: batches.elapsed,
        }
    });
    clear();
    let left = queue.stats().expect("bench: queue stats failed");
    assert_eq!(
        left,
        redlease::QueueStats::default(),
        "bench: the batch queue was not emptied (its keys changed?)"
    );
    let mut m = Measurement::interleaved(&pairs);
    m.against = Against::Queue;
    m.per_thread = vec![m.total.ops];
    m.latencies = record.latencies;
    m.extra.push(("batch", BATCH.to_string()));
    m.extra.push(("latency", "per_batch".to_string()));
    m
}

/// How late delayed jobs are delivered. A round: one taker thread waits on an empty queue
/// (`take`, then ack) while the main thread pushes 200 jobs one by one with delays spread over
/// 0-500 ms, in an order unrelated to their delays. A job's lateness is when `take` returned it
/// minus when its push was sent minus its delay (the payload carries that due time). Rounds
/// repeat for `BENCH_SECS` (at least one); no interleaved baseline (`ratio` is 1).
///
/// `ops_per_s` is jobs over the rounds' time, which the delays bound (not a throughput);
/// `p50_us`/`p99_us` are the lateness percentiles (negatives count as 0 there), `max_us` and
/// `min_us` its extremes, `early` the jobs taken before their due time by this process's clock
/// (the server's due time is in whole milliseconds of its own clock, so up to 1 ms early).
pub fn delayed_lateness(ctx: &Ctx) -> Measurement {
    const JOBS: u64 = 200;
    const MAX_DELAY_MS: u64 = 500;
    let queue = fresh_queue(ctx, "bench-delayed");
    for _ in 0..10 {
        push_take_ack(&queue);
    }
    let origin = Instant::now();
    let mut lateness: Vec<i64> = Vec::new();
    let mut rounds = 0u64;
    let started = Instant::now();
    while rounds == 0 || started.elapsed() < ctx.time.run {
        std::thread::scope(|s| {
            let taker = s.spawn(|| {
                (0..JOBS)
                    .map(|_| {
                        let job = queue
                            .take(Duration::from_secs(5))
                            .expect("bench: delayed take failed")
                            .expect("bench: a delayed job was not delivered within 5 s");
                        let taken = Instant::now();
                        let due_ns = u64::from_le_bytes(
                            job.payload()
                                .try_into()
                                .expect("bench: a delayed job's payload is not a due time"),
                        );
                        job.ack().expect("bench: delayed ack failed");
                        signed_micros(origin + Duration::from_nanos(due_ns), taken)
                    })
                    .collect::<Vec<i64>>()
            });
            for i in 0..JOBS {
                // 211 is prime to 501: 200 distinct delays, shuffled, shifted every round.
                let delay = Duration::from_millis((i * 211 + rounds * 97) % (MAX_DELAY_MS + 1));
                let due = Instant::now() + delay;
                let due_ns = u64::try_from((due - origin).as_nanos()).unwrap_or(u64::MAX);
                queue
                    .push_with(due_ns.to_le_bytes().to_vec(), 0, delay)
                    .expect("bench: delayed push failed");
            }
            lateness.extend(taker.join().expect("bench: the delayed taker panicked"));
        });
        rounds += 1;
    }
    let elapsed = started.elapsed();
    lateness.sort_unstable();
    let mut m = Measurement {
        total: Slice {
            ops: lateness.len() as u64,
            elapsed,
        },
        latencies: lateness
            .iter()
            .map(|&us| u32::try_from(us.max(0)).unwrap_or(u32::MAX))
            .collect(),
        against: Against::Nothing,
        ..Measurement::default()
    };
    m.per_thread = vec![m.total.ops];
    m.extra
        .push(("max_us", percentile_signed(&lateness, 100.0).to_string()));
    m.extra
        .push(("min_us", lateness.first().copied().unwrap_or(0).to_string()));
    m.extra.push((
        "early",
        lateness.iter().filter(|&&us| us < 0).count().to_string(),
    ));
    m.extra.push(("jobs", lateness.len().to_string()));
    m.extra.push(("rounds", rounds.to_string()));
    m.extra.push(("max_delay_ms", MAX_DELAY_MS.to_string()));
    m
}
