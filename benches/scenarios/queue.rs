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
fn fresh_queue(ctx: &Ctx, prefix: &str) -> redlease::queue::Queue {
    ctx.client
        .queue(&fresh(prefix))
        .expect("bench: bad queue name")
}

/// The dedicated, continuous run of the reliable-list baseline (see [`ReliableCycle`]); the
/// workers' scenarios are interleaved with it.
pub fn reliable_baseline(ctx: &Ctx) -> Measurement {
    dedicated_run(ctx, &ctx.reliable_baseline)
}

/// One job through a queue the way a busy worker of the pool (`Queue::work`) does it: push
/// it, then ack the job in hand and be handed the next in one round trip
/// (`Job::ack_and_take`; a plain take when no job is in hand, as at the start or when
/// another worker got the job). Two round trips per job, against the baseline's three.
fn push_and_work(queue: &redlease::queue::Queue, held: &mut Option<redlease::queue::Job>) {
    queue.push(JOB_PAYLOAD).expect("bench: queue push failed");
    *held = match held.take() {
        Some(job) => {
            black_box(job.payload());
            let out = job.ack_and_take();
            out.ack.expect("bench: queue ack failed");
            out.next
        }
        None => queue.try_take().expect("bench: queue take failed"),
    };
}

/// Push + process of one job, one thread, as the worker pool does it (push, then ack and
/// take the next in one call); the ratio is over the reliable-list baseline (`LPUSH` +
/// `BLMOVE` + `LREM`).
pub fn queue_1worker(ctx: &Ctx) -> Measurement {
    let queue = fresh_queue(ctx, "bench-q1");
    let mut held = None;
    let (m, _) = measure_single_with(ctx, &ctx.reliable_baseline, || {
        push_and_work(&queue, &mut held)
    });
    m
}

/// 4 threads, each looping push + process on one shared queue (a thread may be handed
/// another's job); over the reliable-list baseline.
pub fn queue_4workers(ctx: &Ctx) -> Measurement {
    const WORKERS: usize = 4;
    let queue = fresh_queue(ctx, "bench-q4");
    let (mut m, _) = measure_threads_with(
        ctx,
        &ctx.reliable_baseline,
        WORKERS,
        || {},
        |_| {
            let queue = queue.clone();
            let mut held = None;
            move || push_and_work(&queue, &mut held)
        },
    );
    m.push_thread_spread();
    m
}

/// One job through a queue: push, take (there must be one), ack.
fn push_take_ack(queue: &redlease::queue::Queue) {
    queue.push(JOB_PAYLOAD).expect("bench: queue push failed");
    let job = queue
        .try_take()
        .expect("bench: queue take failed")
        .expect("bench: the queue was empty right after a push");
    black_box(job.payload());
    job.ack().expect("bench: queue ack failed");
}

/// Every command Redis has run so far (`INFO commandstats`: scripts' inner calls included),
/// and the microseconds spent in `EVALSHA` (the scripts with their inner calls).
fn server_counts(conn: &mut redis::Connection) -> (u64, u64) {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("bench: INFO commandstats failed");
    let field = |line: &str, name: &str| -> u64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|s| s.split(',').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    let mut calls = 0;
    let mut evalsha_usec = 0;
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        // The INFO itself is not the queue's.
        if !line.starts_with("cmdstat_info:") {
            calls += field(line, "calls");
        }
        if line.starts_with("cmdstat_evalsha:") {
            evalsha_usec = field(line, "usec");
        }
    }
    (calls, evalsha_usec)
}

/// Commands per job inside Redis (`INFO commandstats`, scripts' inner calls included, as
/// bullmq's 32 were counted): 2,000 jobs pushed one by one, then processed by one busy
/// worker as the pool does it (ack and take in one call). `ops_per_s` is jobs processed
/// per second; extras: `commands_per_job` (push + processing), `push_commands`,
/// `processing_commands`, and `script_us_per_job` (server time in the scripts).
pub fn queue_commands(ctx: &Ctx) -> Measurement {
    const JOBS: u64 = 2_000;
    let queue = fresh_queue(ctx, "bench-qc");
    // Load the scripts (a NOSCRIPT round would count twice).
    let mut held = None;
    push_and_work(&queue, &mut held);
    push_and_work(&queue, &mut held);
    let mut conn = ctx.raw_connection();
    let (c0, u0) = server_counts(&mut conn);
    for _ in 0..JOBS {
        queue.push(JOB_PAYLOAD).expect("bench: queue push failed");
    }
    let (c1, u1) = server_counts(&mut conn);
    let started = Instant::now();
    let mut done = 0;
    while let Some(job) = held.take() {
        let out = job.ack_and_take();
        out.ack.expect("bench: queue ack failed");
        held = out.next;
        done += 1;
    }
    let elapsed = started.elapsed();
    let (c2, u2) = server_counts(&mut conn);
    assert!(done > JOBS, "bench: only {done} jobs processed");
    let per = |n: u64| n as f64 / JOBS as f64;
    let mut m = Measurement {
        total: Slice { ops: done, elapsed },
        against: Against::Nothing,
        ..Measurement::default()
    };
    m.per_thread = vec![done];
    let (push, work) = (c1 - c0, c2 - c1);
    m.extra
        .push(("commands_per_job", format!("{:.1}", per(push + work))));
    m.extra.push(("push_commands", format!("{:.1}", per(push))));
    m.extra
        .push(("processing_commands", format!("{:.1}", per(work))));
    m.extra.push((
        "script_us_per_job",
        format!("{:.1}", per((u1 - u0) + (u2 - u1))),
    ));
    m
}

/// Server time (µs in `EVALSHA`) and wall time per job of push + ack-and-take on a queue
/// holding `held` other jobs, over `cycles` cycles.
fn cycle_cost(
    queue: &redlease::queue::Queue,
    conn: &mut redis::Connection,
    cycles: u64,
) -> (f64, f64) {
    let mut held = None;
    for _ in 0..100 {
        push_and_work(queue, &mut held);
    }
    let (_, u0) = server_counts(conn);
    let started = Instant::now();
    for _ in 0..cycles {
        push_and_work(queue, &mut held);
    }
    let wall = started.elapsed().as_secs_f64() * 1e6 / cycles as f64;
    let (_, u1) = server_counts(conn);
    ((u1 - u0) as f64 / cycles as f64, wall)
}

/// Scale: push + ack-and-take on a queue holding 1,000 jobs, then on one holding 1,000,000
/// (half ready, half delayed by an hour), filled with `push_many` in batches of 1,000.
/// `ops_per_s` is the cycles per second at 1,000,000; `ratio` is not a throughput ratio
/// (1); extras: `server_us_1k`/`server_us_1m` (µs in the scripts per job), `server_cost_ratio`
/// (1m over 1k: the goal is at most 1.2), the same for wall time, and `fill_s`.
pub fn queue_1m(ctx: &Ctx) -> Measurement {
    const CYCLES: u64 = 5_000;
    const BATCH: usize = 1_000;
    let mut conn = ctx.raw_connection();
    let fill = |queue: &redlease::queue::Queue, jobs: usize| {
        let delayed = jobs / 2;
        let mut n = 0;
        while n < jobs {
            let batch: Vec<redlease::queue::NewJob> = (n..(n + BATCH).min(jobs))
                .map(|i| redlease::queue::NewJob {
                    id: format!("j{i}"),
                    payload: JOB_PAYLOAD.to_vec(),
                })
                .collect();
            let delay = if n < delayed {
                Duration::from_secs(3600)
            } else {
                Duration::ZERO
            };
            queue
                .push_batch(&batch, redlease::queue::PushOptions::new().delay(delay))
                .expect("bench: filling push failed");
            n += batch.len();
        }
    };
    let small = fresh_queue(ctx, "bench-q1k");
    fill(&small, 1_000);
    let (server_1k, wall_1k) = cycle_cost(&small, &mut conn, CYCLES);
    let big = fresh_queue(ctx, "bench-q1m");
    let filling = Instant::now();
    fill(&big, 1_000_000);
    let fill_s = filling.elapsed().as_secs_f64();
    let started = Instant::now();
    let (server_1m, wall_1m) = cycle_cost(&big, &mut conn, CYCLES);
    let elapsed = started.elapsed();
    let stats = big.stats().expect("bench: stats failed");
    for name in [small.name(), big.name()] {
        let keys = queue_keys(name);
        let _: i64 = redis::cmd("UNLINK")
            .arg(&keys)
            .query(&mut conn)
            .expect("bench: UNLINK failed");
    }
    let mut m = Measurement {
        total: Slice {
            ops: CYCLES + 100,
            elapsed,
        },
        against: Against::Nothing,
        ..Measurement::default()
    };
    m.per_thread = vec![m.total.ops];
    m.extra.push((
        "jobs_held",
        (stats.ready + stats.delayed + stats.in_flight).to_string(),
    ));
    m.extra.push(("server_us_1k", format!("{server_1k:.1}")));
    m.extra.push(("server_us_1m", format!("{server_1m:.1}")));
    m.extra
        .push(("server_cost_ratio", format!("{:.3}", server_1m / server_1k)));
    m.extra.push(("wall_us_1k", format!("{wall_1k:.1}")));
    m.extra.push(("wall_us_1m", format!("{wall_1m:.1}")));
    m.extra
        .push(("wall_cost_ratio", format!("{:.3}", wall_1m / wall_1k)));
    m.extra.push(("fill_s", format!("{fill_s:.1}")));
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
        "holders",
        "bases",
        "settled",
        "undone",
        "reasons",
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
        redlease::queue::QueueStats::default(),
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
                    .push_with(
                        due_ns.to_le_bytes().to_vec(),
                        redlease::queue::PushOptions::new().delay(delay),
                    )
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

/// Batch takes (issue 31 item 3): one worker thread, 16-byte jobs, batches of 50: per cycle
/// `push_many` of 50 (one round trip), `take_batch(50)` (one), a handler that only records
/// each job processed, and `ack_batch` (one). One op is one job; the ratio is over the
/// reliable-list baseline, as `queue_1worker`'s is (compare the two in the same run: the
/// goal is at least 5x its jobs/s). Every job must be acked once (checked at the end: the
/// acks counted equal the jobs processed, and the queue is empty).
pub fn queue_batch50(ctx: &Ctx) -> Measurement {
    const BATCH: usize = 50;
    const PAYLOAD: &[u8; 16] = b"0123456789abcdef";
    let queue = fresh_queue(ctx, "bench-qbatch");
    let mut processed: u64 = 0;
    let mut acked: u64 = 0;
    let mut cycle = || {
        queue
            .push_many(std::iter::repeat_n(PAYLOAD, BATCH))
            .expect("bench: push_many failed");
        let jobs = queue
            .try_take_batch(BATCH)
            .expect("bench: take_batch failed");
        assert_eq!(jobs.len(), BATCH, "bench: a short batch");
        for job in &jobs {
            black_box(job.payload());
            processed += 1;
        }
        for outcome in queue.ack_batch(jobs) {
            outcome.expect("bench: ack_batch failed");
            acked += 1;
        }
    };
    let mut record = Record::new();
    let pairs = interleave_with(ctx, &ctx.reliable_baseline, |len, measured| {
        let batches = single_slice(len, &mut cycle, measured.then_some(&mut record));
        Slice {
            ops: batches.ops * BATCH as u64,
            elapsed: batches.elapsed,
        }
    });
    assert_eq!(processed, acked, "bench: a job not acked exactly once");
    let left = queue.stats().expect("bench: queue stats failed");
    assert_eq!(
        left,
        redlease::queue::QueueStats::default(),
        "bench: jobs left over"
    );
    let mut m = Measurement::interleaved(&pairs);
    m.per_thread = vec![m.total.ops];
    m.latencies = record.latencies;
    m.extra.push(("batch", BATCH.to_string()));
    m.extra.push(("latency", "per_batch".to_string()));
    m
}
