//! Redis benchmarks of the blocking driver, without criterion (`harness = false`).
//!
//! ```text
//! cargo bench --bench redis              # every scenario
//! cargo bench --bench redis -- 8keys     # the baseline plus scenarios whose name contains "8keys"
//! BENCH_SECS=5 cargo bench --bench redis # measure each scenario for 5 s (default 3 s)
//! REDIS_URL=redis://127.0.0.1:6379/ cargo bench --bench redis  # use that server
//! ```
//!
//! Without `REDIS_URL` a throwaway `redis-server` is started with
//! [`redlease_suite::RedisServer`].
//!
//! Every scenario warms up briefly, then runs for a fixed wall-clock time and records the
//! latency of each operation. It prints one line:
//!
//! ```text
//! bench <scenario> ops_per_s=<n> p50_us=<n> p99_us=<n> ratio=<r> [key=value ...]
//! ```
//!
//! where `ratio` is the scenario's throughput divided by that of `raw_baseline` (a hand-written
//! `SET NX PX` + compare-and-delete `EVALSHA` cycle on one plain connection) in the same run,
//! which therefore always runs first. To add a scenario, write a `fn(&Ctx) -> Measurement`
//! (usually a call to [`measure_single`] or [`measure_threads`]) and list it in [`SCENARIOS`].
//!
//! A one-line summary goes to stderr at the end. When other scenarios ran, the baseline is
//! measured once more first, and the summary says how far it drifted: on a shared virtual
//! machine a single-connection round trip varies by tens of percent from one run to the next,
//! and the ratios are no more precise than that.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use redlease_core::keys::{Keyspace, LockKeys};
use redlease_suite::RedisServer;

/// Measured time per scenario unless `BENCH_SECS` says otherwise.
const DEFAULT_SECS: f64 = 3.0;
/// The longest warm-up before a measurement.
const MAX_WARMUP: Duration = Duration::from_secs(1);
/// The wait of a contended acquisition: failing to get the lock within it is a real failure.
const CONTENDED_WAIT: Duration = Duration::from_secs(30);
/// Threads of the multi-threaded scenarios.
const THREADS: usize = 8;
/// The compare-and-delete script of the baseline.
const RAW_RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The baseline's name; it always runs, first.
const BASELINE: &str = "raw_baseline";

/// A scenario: its name (matched by the filter) and what runs it.
type Scenario = (&'static str, fn(&Ctx) -> Measurement);

/// Every scenario, in run order (the first is the baseline).
const SCENARIOS: &[Scenario] = &[
    (BASELINE, raw_baseline),
    ("lock_uncontended", lock_uncontended),
    ("lock_contended", lock_contended),
    ("lock_8keys", lock_8keys),
];

/// What every scenario gets.
struct Ctx {
    url: String,
    time: Timing,
    client: redlease::Client,
}

impl Ctx {
    /// A plain connection to the server, for setup and the raw baseline.
    fn raw_connection(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .expect("bench: REDIS_URL is not a valid Redis URL")
            .get_connection()
            .expect("bench: cannot connect to Redis")
    }

    /// Deletes the lock key of `name` (left over by an aborted run on a shared server), keeping
    /// its fencing counter.
    fn clear_lock(&self, name: &str) {
        let keys = LockKeys::new(&Keyspace::default(), name).expect("bench: bad lock name");
        let _: i64 = redis::cmd("DEL")
            .arg(&keys.lock)
            .query(&mut self.raw_connection())
            .expect("bench: DEL of a leftover lock key failed");
    }
}

/// Warm-up and measured durations of one scenario.
#[derive(Debug, Clone, Copy)]
struct Timing {
    warmup: Duration,
    run: Duration,
}

/// The result of one scenario.
#[derive(Debug, Default)]
struct Measurement {
    /// Operations completed in the measured phase.
    ops: u64,
    /// Operations completed during the warm-up.
    warmup_ops: u64,
    /// Length of the measured phase.
    elapsed: Duration,
    /// Latency of every measured operation, in microseconds.
    latencies: Vec<u32>,
    /// Measured operations per thread (one entry for single-threaded scenarios).
    per_thread: Vec<u64>,
    /// Extra `key=value` fields for the report line.
    extra: Vec<(&'static str, String)>,
}

impl Measurement {
    fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What an operation returns to say what its latency was.
trait Sample {
    /// The latency to record, given the duration of the whole operation.
    fn latency(self, whole: Duration) -> Duration;
}

/// The whole operation is the latency.
impl Sample for () {
    fn latency(self, whole: Duration) -> Duration {
        whole
    }
}

/// The operation timed the part that counts (e.g. waiting for a contended lock).
impl Sample for Duration {
    fn latency(self, _whole: Duration) -> Duration {
        self
    }
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Runs `op` in a loop on this thread: warm-up, then `time.run` of recorded operations.
fn measure_single<R: Sample>(time: Timing, mut op: impl FnMut() -> R) -> Measurement {
    let warm_end = Instant::now() + time.warmup;
    let mut warmup_ops = 0;
    while Instant::now() < warm_end {
        black_box(op());
        warmup_ops += 1;
    }
    let mut latencies = Vec::with_capacity(1 << 20);
    let start = Instant::now();
    let end = start + time.run;
    let mut now = start;
    while now < end {
        let t = now;
        let sample = op();
        now = Instant::now();
        latencies.push(micros(sample.latency(now - t)));
    }
    let ops = latencies.len() as u64;
    Measurement {
        ops,
        warmup_ops,
        elapsed: now - start,
        latencies,
        per_thread: vec![ops],
        extra: Vec::new(),
    }
}

/// Runs `op(thread_idx)` in a loop on `threads` threads: warm-up, then (all threads starting
/// together) `time.run` of recorded operations. An operation started before the end is
/// completed and counted; the elapsed time runs until the last thread has finished.
fn measure_threads<R: Sample>(
    threads: usize,
    time: Timing,
    op: impl Fn(usize) -> R + Sync,
) -> Measurement {
    let barrier = Barrier::new(threads + 1);
    let warm_end = Instant::now() + time.warmup;
    let (start, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (op, barrier) = (&op, &barrier);
                s.spawn(move || {
                    let mut warmup_ops = 0u64;
                    while Instant::now() < warm_end {
                        black_box(op(i));
                        warmup_ops += 1;
                    }
                    let mut latencies = Vec::with_capacity(1 << 18);
                    barrier.wait();
                    let end = Instant::now() + time.run;
                    loop {
                        let t = Instant::now();
                        if t >= end {
                            break;
                        }
                        let sample = op(i);
                        latencies.push(micros(sample.latency(t.elapsed())));
                    }
                    (warmup_ops, latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("bench: a benchmark thread panicked"))
            .collect();
        (start, results)
    });
    let elapsed = start.elapsed();
    let mut m = Measurement {
        elapsed,
        ..Measurement::default()
    };
    for (warmup_ops, latencies) in results {
        m.warmup_ops += warmup_ops;
        m.ops += latencies.len() as u64;
        m.per_thread.push(latencies.len() as u64);
        m.latencies.extend(latencies);
    }
    m.extra.push(("threads", threads.to_string()));
    m
}

/// Nearest-rank percentile of sorted latencies (0 when there are none).
fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Calls of `EVALSHA` and `EVAL` the server has counted (`INFO commandstats`).
fn script_calls(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("bench: INFO commandstats failed");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split_once(':')?
                .1
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// `SET key token NX PX 30000` + `EVALSHA <compare-and-delete> 1 key token` on one plain
/// connection: what the lock does, with no library in between.
fn raw_baseline(ctx: &Ctx) -> Measurement {
    let mut con = ctx.raw_connection();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RAW_RELEASE_SCRIPT)
        .query(&mut con)
        .expect("bench: SCRIPT LOAD failed");
    let key = "bench-raw";
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut con)
        .expect("bench: DEL failed");
    let mut n = 0u64;
    measure_single(ctx.time, || {
        n += 1;
        let token = format!("raw-{n}");
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut con)
            .expect("bench: raw SET NX failed");
        assert_eq!(
            set.as_deref(),
            Some("OK"),
            "bench: raw SET NX found the key taken"
        );
        let deleted: i64 = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(key)
            .arg(&token)
            .query(&mut con)
            .expect("bench: raw EVALSHA failed");
        assert_eq!(deleted, 1, "bench: raw compare-and-delete did not delete");
    })
}

/// `try_acquire` (must succeed) + `release` of one key, one thread.
fn lock_uncontended(ctx: &Ctx) -> Measurement {
    ctx.clear_lock("bench-u");
    let lock = ctx.client.lock("bench-u");
    measure_single(ctx.time, || {
        let guard = lock
            .try_acquire()
            .expect("bench: uncontended try_acquire failed")
            .expect("bench: uncontended lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: uncontended release failed");
    })
}

/// 8 threads waiting for one key; one op is one critical section, its latency the wait.
fn lock_contended(ctx: &Ctx) -> Measurement {
    ctx.clear_lock("bench-c");
    let mut con = ctx.raw_connection();
    let calls_before = script_calls(&mut con);
    let mut m = measure_threads(THREADS, ctx.time, |_| {
        let t = Instant::now();
        let guard = ctx
            .client
            .lock("bench-c")
            .wait(CONTENDED_WAIT)
            .acquire()
            .unwrap_or_else(|e| panic!("bench: contended acquire failed: {e}"));
        let waited = t.elapsed();
        black_box(guard.fence());
        guard
            .release()
            .unwrap_or_else(|e| panic!("bench: contended release failed: {e}"));
        waited
    });
    // Every critical section is one release script plus its acquisition attempts. Counted by
    // the server, so other clients of a shared REDIS_URL would inflate it.
    let sections = m.ops + m.warmup_ops;
    let calls = script_calls(&mut con).saturating_sub(calls_before);
    if sections > 0 && calls >= sections {
        let attempts = (calls - sections) as f64 / sections as f64;
        m.extra.push(("attempts_per_cs", format!("{attempts:.2}")));
    }
    let min = m.per_thread.iter().min().copied().unwrap_or(0);
    let max = m.per_thread.iter().max().copied().unwrap_or(0);
    m.extra.push(("thread_ops_min", min.to_string()));
    m.extra.push(("thread_ops_max", max.to_string()));
    m
}

/// 8 threads, thread `i` doing `try_acquire` + `release` cycles on its own key `bench-k{i}`.
fn lock_8keys(ctx: &Ctx) -> Measurement {
    let names: Vec<String> = (0..THREADS).map(|i| format!("bench-k{i}")).collect();
    for name in &names {
        ctx.clear_lock(name);
    }
    let locks: Vec<_> = names.iter().map(|n| ctx.client.lock(n)).collect();
    measure_threads(THREADS, ctx.time, |i| {
        let guard = locks[i]
            .try_acquire()
            .expect("bench: try_acquire failed")
            .unwrap_or_else(|| panic!("bench: lock {} was busy", names[i]));
        black_box(guard.fence());
        guard.release().expect("bench: release failed");
    })
}

// ---------------------------------------------------------------------------------------------

fn bench_secs() -> Duration {
    let Ok(raw) = std::env::var("BENCH_SECS") else {
        return Duration::from_secs_f64(DEFAULT_SECS);
    };
    let secs: f64 = raw
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bench: BENCH_SECS={raw:?} is not a number of seconds"));
    assert!(
        secs.is_finite() && secs > 0.0,
        "bench: BENCH_SECS must be positive, got {raw:?}"
    );
    Duration::from_secs_f64(secs)
}

/// Prints the scenario's line; `baseline` is `None` for the baseline itself (ratio 1).
fn report(name: &str, m: &mut Measurement, baseline: Option<f64>) -> f64 {
    m.latencies.sort_unstable();
    let ops_per_s = m.ops_per_s();
    let ratio = baseline.map_or(1.0, |b| ops_per_s / b.max(1e-9));
    let mut line = format!(
        "bench {name} ops_per_s={:.0} p50_us={} p99_us={} ratio={ratio:.3}",
        ops_per_s,
        percentile(&m.latencies, 50.0),
        percentile(&m.latencies, 99.0),
    );
    for (k, v) in &m.extra {
        line.push_str(&format!(" {k}={v}"));
    }
    println!("{line}");
    ratio
}

fn main() {
    // cargo passes `--bench`; the first argument that is not a flag filters scenario names.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));

    let run = bench_secs();
    let time = Timing {
        warmup: (run / 3).min(MAX_WARMUP),
        run,
    };

    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => {
            println!("using REDIS_URL={url}");
            (None, url)
        }
        _ => {
            let server = RedisServer::start().expect("bench: cannot start redis-server");
            let url = server.url();
            println!("using a throwaway redis-server at {url} (set REDIS_URL to use another)");
            (Some(server), url)
        }
    };
    let client = redlease::Client::builder(&url)
        .build()
        .expect("bench: cannot build the redlease client");
    let ctx = Ctx { url, time, client };

    let selected: Vec<_> = SCENARIOS
        .iter()
        .filter(|(name, _)| *name == BASELINE || filter.as_deref().is_none_or(|f| name.contains(f)))
        .collect();
    if let Some(f) = &filter
        && selected.len() == 1
    {
        eprintln!("note: no scenario matches {f:?}; running the baseline only");
    }

    let started = Instant::now();
    let mut baseline = None;
    let mut summary = Vec::new();
    for (name, scenario) in &selected {
        let mut m = scenario(&ctx);
        let ratio = report(name, &mut m, baseline);
        if baseline.is_none() {
            baseline = Some(m.ops_per_s());
        }
        summary.push(format!("{name}={ratio:.3}"));
    }
    // The machine's speed drifts (shared, virtualised): measure the baseline again to show how
    // far the ratios can be trusted.
    let drift = match (baseline, selected.len() > 1) {
        (Some(start), true) => {
            let end = raw_baseline(&ctx).ops_per_s();
            format!(
                "; baseline re-run at the end: {end:.0} ops/s ({:+.1}% vs the start)",
                (end / start.max(1e-9) - 1.0) * 100.0
            )
        }
        _ => String::new(),
    };
    eprintln!(
        "bench summary: {} scenario(s) in {:.1} s ({:.1} s each); ratios: {}{drift}",
        summary.len(),
        started.elapsed().as_secs_f64(),
        run.as_secs_f64(),
        summary.join(", ")
    );
}
