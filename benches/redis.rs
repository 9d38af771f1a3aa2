//! Redis benchmarks of the blocking driver, without criterion (`harness = false`).
//!
//! ```text
//! cargo bench --bench redis              # every scenario
//! cargo bench --bench redis -- 8keys     # the baseline plus scenarios whose name contains "8keys"
//! BENCH_SECS=5 cargo bench --bench redis # measure each scenario for 5 s (default 3 s)
//! BENCH_SLICE_MS=500 cargo bench --bench redis  # interleave in 500 ms slices (default 200 ms)
//! REDIS_URL=redis://127.0.0.1:6379/ cargo bench --bench redis  # use that server
//! ```
//!
//! Without `REDIS_URL` a throwaway `redis-server` is started with
//! [`redlease_suite::RedisServer`].
//!
//! Every scenario prints one line:
//!
//! ```text
//! bench <scenario> ops_per_s=<n> p50_us=<n> p99_us=<n> ratio=<r> baseline_ops_per_s=<n> [key=value ...]
//! ```
//!
//! # The baseline and the ratios
//!
//! The baseline, `raw_baseline`, is a hand-written `SET NX PX` + compare-and-delete `EVALSHA`
//! cycle on one plain connection: what the lock does, with no library in between. Its line
//! comes first and comes from a dedicated run (a warm-up, then `BENCH_SECS` of continuous
//! cycles); its ratio is 1 by definition.
//!
//! On a shared virtual machine a single-connection round trip drifts by tens of percent within
//! seconds, so a scenario is not compared with that dedicated run. Instead each scenario, after
//! a warm-up, runs `BENCH_SECS / BENCH_SLICE_MS` (rounded) short slices, `BENCH_SECS` in all,
//! and before each of them a slice of the baseline of the same length (on the main thread, the
//! scenario's threads idle). Then
//!
//! ```text
//! ratio = (Σ scenario ops / Σ scenario time) / (Σ baseline ops / Σ baseline time)
//! ```
//!
//! over those pairs only; the denominator is printed as `baseline_ops_per_s`.
//!
//! The queue scenarios (`queue_*`) have their own baseline, `queue_baseline`: `LPUSH` of one
//! payload + `RPOP` on one plain connection. It gets its own dedicated line (whenever a
//! `queue_*` scenario runs), and it is what their slices are interleaved with, in the same way.
//! `delayed_lateness` measures latency against the clock, not throughput: it runs without a
//! baseline and its ratio is 1. Drift slower than
//! a slice hits both sides alike and cancels. `ratio_se` is the standard error of the ratio
//! estimated from the spread of the per-pair ratios (their standard deviation over √pairs).
//!
//! Caveat: on a guest with the `haltpoll` cpuidle governor (as on the development VM), a
//! ping-pong's round trip depends on the adaptive idle-polling window, which what ran just
//! before grows or shrinks. A baseline slice thus partly inherits the state the scenario left,
//! and `ratio_se` (within one run) understates the spread between runs.
//!
//! How a slice counts: single-threaded, operations run until one ends at or after the slice's
//! end, and all of them count over the time to that last end. Multi-threaded, persistent
//! threads (started, connected and warmed up before any measured slice) are released together
//! at the slice's start; an operation counts if it ended by the slice's end, and the time is
//! the slice's length. Operations still in flight at the end (a waiter in `acquire`) are
//! finished unrecorded before the next baseline slice. Hence no wait can be seen that is longer
//! than about one slice: the latency tails of waiting scenarios are cut at the slice length
//! (raise `BENCH_SLICE_MS` to look at longer waits, at the cost of noisier ratios).
//!
//! To add a scenario, write a `fn(&Ctx) -> Measurement` (usually around a call to
//! [`measure_single`] or [`measure_threads`], or their `_with` forms to interleave another
//! baseline [`Cycle`]) and list it in [`SCENARIOS`].
//!
//! A one-line summary goes to stderr at the end, with the range of the interleaved baselines
//! against the dedicated run: how far the machine drifted, which the old single-shot ratios
//! suffered from and the interleaving cancels.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redlease_core::keys::{Keyspace, LockKeys};
use redlease_suite::RedisServer;

/// Measured time per scenario unless `BENCH_SECS` says otherwise.
const DEFAULT_SECS: f64 = 3.0;
/// Length of one interleaved slice unless `BENCH_SLICE_MS` says otherwise.
const DEFAULT_SLICE_MS: f64 = 200.0;
/// The longest warm-up before a measurement.
const MAX_WARMUP: Duration = Duration::from_secs(1);
/// The wait of a contended acquisition: failing to get the lock within it is a real failure.
const CONTENDED_WAIT: Duration = Duration::from_secs(30);
/// Threads of the multi-threaded scenarios.
const THREADS: usize = 8;
/// The compare-and-delete script of the baseline.
const RAW_RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
/// The key of the baseline.
const RAW_KEY: &str = "bench-raw";

/// The baseline's name; it always runs, first.
const BASELINE: &str = "raw_baseline";
/// The single-threaded lock scenario, which `lock_handoff` compares itself with.
const UNCONTENDED: &str = "lock_uncontended";
/// The queue baseline's name; it runs (after `raw_baseline`) whenever a `queue_*` scenario does.
const QUEUE_BASELINE: &str = "queue_baseline";
/// The list of the queue baseline.
const RAW_QUEUE_KEY: &str = "bench-raw-queue";
/// The payload of every job (and of the queue baseline's element).
const JOB_PAYLOAD: &[u8] = b"bench-job-payload-0123456789abcd";

/// A scenario: its name (matched by the filter) and what runs it.
type Scenario = (&'static str, fn(&Ctx) -> Measurement);

/// Every scenario, in run order (the first is the baseline).
const SCENARIOS: &[Scenario] = &[
    (BASELINE, raw_baseline),
    (UNCONTENDED, lock_uncontended),
    ("memory_lock_uncontended", memory_lock_uncontended),
    ("lock_contended", lock_contended),
    ("lock_8keys", lock_8keys),
    ("cluster_8keys", cluster_8keys),
    ("lock_handoff", lock_handoff),
    ("watchdog_10k", watchdog_10k),
    ("redlock3", redlock3),
    ("redlock5", redlock5),
    ("legacy_uncontended", legacy_uncontended),
    ("reentrant_uncontended", reentrant_uncontended),
    ("fair_uncontended", fair_uncontended),
    ("rwlock_read_uncontended", rwlock_read_uncontended),
    ("semaphore_uncontended", semaphore_uncontended),
    ("semaphore_contended", semaphore_contended),
    (QUEUE_BASELINE, queue_baseline),
    ("queue_1worker", queue_1worker),
    ("queue_4workers", queue_4workers),
    ("queue_batch_push", queue_batch_push),
    ("delayed_lateness", delayed_lateness),
];

/// What every scenario gets.
struct Ctx {
    url: String,
    time: Timing,
    client: redlease::Client,
    /// The baseline cycle, run by the main thread between the slices of every scenario
    /// (except the queue scenarios).
    baseline: Mutex<RawCycle>,
    /// The queue baseline cycle, run between the slices of the queue scenarios.
    queue_baseline: Mutex<QueueCycle>,
}

impl Ctx {
    /// A plain connection to the server, for setup and non-lock work.
    fn raw_connection(&self) -> redis::Connection {
        connect(&self.url)
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

fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("bench: REDIS_URL is not a valid Redis URL")
        .get_connection()
        .expect("bench: cannot connect to Redis")
}

/// The baseline: `SET key token NX PX 30000` + `EVALSHA <compare-and-delete> 1 key token` on
/// one plain connection.
struct RawCycle {
    con: redis::Connection,
    sha: String,
    n: u64,
}

impl RawCycle {
    fn new(url: &str) -> Self {
        let mut con = connect(url);
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RAW_RELEASE_SCRIPT)
            .query(&mut con)
            .expect("bench: SCRIPT LOAD failed");
        let _: i64 = redis::cmd("DEL")
            .arg(RAW_KEY)
            .query(&mut con)
            .expect("bench: DEL failed");
        RawCycle { con, sha, n: 0 }
    }
}

/// Which baseline a measurement's ratio is over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Against {
    /// The lock baseline ([`RawCycle`]).
    #[default]
    Lock,
    /// The queue baseline ([`QueueCycle`]).
    Queue,
    /// None: the scenario is not a throughput to compare (its ratio is 1 by definition).
    Nothing,
}

/// A baseline: one hand-written cycle on one plain connection, no library code.
trait Cycle {
    /// The measurements interleaved with this cycle have their ratio over it.
    const AGAINST: Against;

    /// One cycle.
    fn op(&mut self);
}

impl Cycle for RawCycle {
    const AGAINST: Against = Against::Lock;

    fn op(&mut self) {
        self.n += 1;
        let token = format!("raw-{}", self.n);
        let set: Option<String> = redis::cmd("SET")
            .arg(RAW_KEY)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut self.con)
            .expect("bench: raw SET NX failed");
        assert_eq!(
            set.as_deref(),
            Some("OK"),
            "bench: raw SET NX found the key taken"
        );
        let deleted: i64 = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(RAW_KEY)
            .arg(&token)
            .query(&mut self.con)
            .expect("bench: raw EVALSHA failed");
        assert_eq!(deleted, 1, "bench: raw compare-and-delete did not delete");
    }
}

/// The queue baseline: `LPUSH list payload` + `RPOP list` on one plain connection.
struct QueueCycle {
    con: redis::Connection,
}

impl QueueCycle {
    fn new(url: &str) -> Self {
        let mut con = connect(url);
        let _: i64 = redis::cmd("DEL")
            .arg(RAW_QUEUE_KEY)
            .query(&mut con)
            .expect("bench: DEL failed");
        QueueCycle { con }
    }
}

impl Cycle for QueueCycle {
    const AGAINST: Against = Against::Queue;

    fn op(&mut self) {
        let len: i64 = redis::cmd("LPUSH")
            .arg(RAW_QUEUE_KEY)
            .arg(JOB_PAYLOAD)
            .query(&mut self.con)
            .expect("bench: raw LPUSH failed");
        assert_eq!(len, 1, "bench: the raw queue was not empty");
        let popped: Option<Vec<u8>> = redis::cmd("RPOP")
            .arg(RAW_QUEUE_KEY)
            .query(&mut self.con)
            .expect("bench: raw RPOP failed");
        assert_eq!(
            popped.as_deref(),
            Some(JOB_PAYLOAD),
            "bench: raw RPOP returned something else"
        );
    }
}

/// Warm-up and measured durations.
#[derive(Debug, Clone, Copy)]
struct Timing {
    warmup: Duration,
    /// The measured time of each scenario (and of the dedicated baseline run)...
    run: Duration,
    /// ...made of this many slices...
    slices: u32,
    /// ...of this length (`run / slices`).
    slice: Duration,
}

/// What one slice (or a sum of slices) did.
#[derive(Debug, Default, Clone, Copy)]
struct Slice {
    ops: u64,
    elapsed: Duration,
}

impl Slice {
    fn ops_per_s(self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn add(self, other: Slice) -> Slice {
        Slice {
            ops: self.ops + other.ops,
            elapsed: self.elapsed + other.elapsed,
        }
    }
}

/// The result of one scenario.
#[derive(Debug, Default)]
struct Measurement {
    /// The measured slices of the scenario, summed.
    total: Slice,
    /// The baseline slices interleaved with them, summed (`None` for the baseline's own run).
    baseline: Option<Slice>,
    /// The ratio of each (baseline, scenario) slice pair.
    pair_ratios: Vec<f64>,
    /// Latency of every measured operation, in microseconds.
    latencies: Vec<u32>,
    /// Measured operations per thread (one entry for single-threaded scenarios).
    per_thread: Vec<u64>,
    /// Extra `key=value` fields for the report line.
    extra: Vec<(&'static str, String)>,
    /// `(key, scenario)`: when `scenario` ran before, also report `key=` this scenario's ops/s
    /// over that scenario's ops/s.
    relative_to: Option<(&'static str, &'static str)>,
    /// The baseline of the ratio (with `baseline: None`: this is that baseline's own run).
    against: Against,
}

impl Measurement {
    /// A scenario measured in slices interleaved with the baseline: `(baseline, scenario)` pairs.
    fn interleaved(pairs: &[(Slice, Slice)]) -> Self {
        let (baseline, total) = pairs
            .iter()
            .fold((Slice::default(), Slice::default()), |(b, s), &(pb, ps)| {
                (b.add(pb), s.add(ps))
            });
        Measurement {
            total,
            baseline: Some(baseline),
            pair_ratios: pairs
                .iter()
                .map(|(b, s)| s.ops_per_s() / b.ops_per_s().max(1e-9))
                .collect(),
            ..Measurement::default()
        }
    }

    fn ops_per_s(&self) -> f64 {
        self.total.ops_per_s()
    }

    fn baseline_ops_per_s(&self) -> f64 {
        self.baseline.unwrap_or(self.total).ops_per_s()
    }

    fn ratio(&self) -> f64 {
        self.ops_per_s() / self.baseline_ops_per_s().max(1e-9)
    }

    /// Standard error of the ratio, from the spread of the per-pair ratios.
    fn ratio_se(&self) -> Option<f64> {
        let n = self.pair_ratios.len();
        if n < 2 {
            return None;
        }
        let mean = self.pair_ratios.iter().sum::<f64>() / n as f64;
        let var = self
            .pair_ratios
            .iter()
            .map(|r| (r - mean).powi(2))
            .sum::<f64>()
            / (n - 1) as f64;
        Some((var / n as f64).sqrt())
    }

    /// Adds `thread_ops_min` and `thread_ops_max`.
    fn push_thread_spread(&mut self) {
        let min = self.per_thread.iter().min().copied().unwrap_or(0);
        let max = self.per_thread.iter().max().copied().unwrap_or(0);
        self.extra.push(("thread_ops_min", min.to_string()));
        self.extra.push(("thread_ops_max", max.to_string()));
    }
}

/// What an operation returns to say what its latency was.
trait Sample {
    /// The latency to record, given the duration of the whole operation.
    fn latency(&self, whole: Duration) -> Duration;
}

/// The whole operation is the latency.
impl Sample for () {
    fn latency(&self, whole: Duration) -> Duration {
        whole
    }
}

/// One critical section of a waiting lock; its latency is the wait in `acquire`.
#[derive(Debug, Clone, Copy)]
struct Waited {
    /// How long `acquire()` took.
    waited: Duration,
    /// `LockGuard::attempts()`.
    attempts: u32,
    /// When the previous critical section of the slice was another thread's: the time from
    /// just before that holder's `release()` to just after this `acquire()` returned.
    handoff: Option<Duration>,
}

impl Sample for Waited {
    fn latency(&self, _whole: Duration) -> Duration {
        self.waited
    }
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// The measured operations of one thread.
struct Record<R> {
    latencies: Vec<u32>,
    samples: Vec<R>,
}

impl<R: Sample> Record<R> {
    fn new() -> Self {
        Record {
            latencies: Vec::with_capacity(1 << 16),
            samples: Vec::with_capacity(1 << 16),
        }
    }

    fn push(&mut self, sample: R, whole: Duration) {
        self.latencies.push(micros(sample.latency(whole)));
        self.samples.push(sample);
    }
}

/// Runs `op` on this thread until an operation ends at or after `len` from now; records every
/// operation in `record` if given.
fn single_slice<R: Sample>(
    len: Duration,
    op: &mut impl FnMut() -> R,
    mut record: Option<&mut Record<R>>,
) -> Slice {
    let start = Instant::now();
    let end = start + len;
    let mut now = start;
    let mut ops = 0;
    while now < end {
        let t = now;
        let sample = op();
        now = Instant::now();
        match &mut record {
            Some(record) => record.push(sample, now - t),
            None => {
                black_box(sample);
            }
        }
        ops += 1;
    }
    Slice {
        ops,
        elapsed: now - start,
    }
}

/// Runs the scenario's warm-up (`slice(ctx.time.warmup, false)`), then `ctx.time.slices`
/// pairs of a baseline slice and a measured scenario slice (`slice(len, true)`). Returns the
/// `(baseline, scenario)` pairs.
fn interleave(ctx: &Ctx, slice: impl FnMut(Duration, bool) -> Slice) -> Vec<(Slice, Slice)> {
    interleave_with(ctx, &ctx.baseline, slice)
}

/// [`interleave`] with the slices of another baseline cycle.
fn interleave_with<C: Cycle>(
    ctx: &Ctx,
    baseline: &Mutex<C>,
    mut slice: impl FnMut(Duration, bool) -> Slice,
) -> Vec<(Slice, Slice)> {
    slice(ctx.time.warmup, false);
    let mut baseline = baseline.lock().unwrap_or_else(PoisonError::into_inner);
    let mut base_op = || baseline.op();
    (0..ctx.time.slices)
        .map(|_| {
            let b = single_slice(ctx.time.slice, &mut base_op, None);
            let s = slice(ctx.time.slice, true);
            (b, s)
        })
        .collect()
}

/// Runs `op` on this thread, in slices interleaved with the baseline.
fn measure_single<R: Sample>(ctx: &Ctx, op: impl FnMut() -> R) -> (Measurement, Vec<R>) {
    measure_single_with(ctx, &ctx.baseline, op)
}

/// [`measure_single`], interleaved with another baseline cycle.
fn measure_single_with<R: Sample, C: Cycle>(
    ctx: &Ctx,
    baseline: &Mutex<C>,
    mut op: impl FnMut() -> R,
) -> (Measurement, Vec<R>) {
    let mut record = Record::new();
    let pairs = interleave_with(ctx, baseline, |len, measured| {
        single_slice(len, &mut op, measured.then_some(&mut record))
    });
    let mut m = Measurement::interleaved(&pairs);
    m.against = C::AGAINST;
    m.per_thread = vec![m.total.ops];
    m.latencies = record.latencies;
    (m, record.samples)
}

/// What the main thread tells the scenario threads to do next.
#[derive(Debug, Clone, Copy)]
struct SliceSpec {
    end: Instant,
    measured: bool,
}

/// Start and end of the slices of persistent scenario threads.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Incremented at every slice start (and at the stop).
    generation: u64,
    /// The current slice; `None` once the threads must stop.
    spec: Option<SliceSpec>,
    /// Threads done with the current slice.
    done: usize,
    /// Measured operations they reported for it.
    ops: u64,
    /// A thread panicked.
    failed: bool,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Main thread: starts a slice (`Some`) or stops the threads (`None`).
    fn open(&self, spec: Option<SliceSpec>) {
        let mut s = self.lock();
        s.generation += 1;
        s.spec = spec;
        s.done = 0;
        s.ops = 0;
        self.changed.notify_all();
    }

    /// Main thread: waits until `threads` threads are done with the slice and returns their
    /// measured operations, or `None` if a thread panicked.
    fn wait_done(&self, threads: usize) -> Option<u64> {
        let s = self
            .changed
            .wait_while(self.lock(), |s| s.done < threads && !s.failed)
            .unwrap_or_else(PoisonError::into_inner);
        (!s.failed).then_some(s.ops)
    }

    /// Scenario thread: waits for the slice after `seen`; `None` means stop.
    fn next(&self, seen: &mut u64) -> Option<SliceSpec> {
        let s = self
            .changed
            .wait_while(self.lock(), |s| s.generation == *seen)
            .unwrap_or_else(PoisonError::into_inner);
        *seen = s.generation;
        s.spec
    }

    /// Scenario thread: done with the slice, having measured `ops` operations.
    fn finish(&self, ops: u64) {
        let mut s = self.lock();
        s.done += 1;
        s.ops += ops;
        self.changed.notify_all();
    }
}

/// Tells the main thread when a scenario thread panics (instead of leaving it waiting).
struct PanicAlarm<'a>(&'a Gate);

impl Drop for PanicAlarm<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().failed = true;
            self.0.changed.notify_all();
        }
    }
}

/// Stops the scenario threads when the main thread leaves (normally or by a panic).
struct StopOnDrop<'a>(&'a Gate);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open(None);
    }
}

/// Runs `threads` persistent threads, thread `i` looping on its operation `make(i)` (made on
/// that thread, before any slice), in slices interleaved with the baseline; `before_slice`
/// runs on the main thread before each slice starts.
fn measure_threads<R, O>(
    ctx: &Ctx,
    threads: usize,
    before_slice: impl Fn(),
    make: impl Fn(usize) -> O + Sync,
) -> (Measurement, Vec<R>)
where
    R: Sample + Send,
    O: FnMut() -> R,
{
    measure_threads_with(ctx, &ctx.baseline, threads, before_slice, make)
}

/// [`measure_threads`], interleaved with another baseline cycle.
fn measure_threads_with<R, O, C>(
    ctx: &Ctx,
    baseline: &Mutex<C>,
    threads: usize,
    before_slice: impl Fn(),
    make: impl Fn(usize) -> O + Sync,
) -> (Measurement, Vec<R>)
where
    R: Sample + Send,
    O: FnMut() -> R,
    C: Cycle,
{
    let gate = Gate::default();
    let (pairs, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (make, gate) = (&make, &gate);
                s.spawn(move || {
                    let _alarm = PanicAlarm(gate);
                    let mut op = make(i);
                    let mut record = Record::new();
                    let mut seen = 0;
                    while let Some(spec) = gate.next(&mut seen) {
                        let mut ops = 0;
                        loop {
                            let t = Instant::now();
                            if t >= spec.end {
                                break;
                            }
                            let sample = op();
                            let now = Instant::now();
                            if now > spec.end || !spec.measured {
                                black_box(sample);
                            } else {
                                record.push(sample, now - t);
                                ops += 1;
                            }
                        }
                        gate.finish(ops);
                    }
                    record
                })
            })
            .collect();
        let stop = StopOnDrop(&gate);
        let pairs = interleave_with(ctx, baseline, |len, measured| {
            before_slice();
            gate.open(Some(SliceSpec {
                end: Instant::now() + len,
                measured,
            }));
            let Some(ops) = gate.wait_done(threads) else {
                panic!("bench: a benchmark thread panicked");
            };
            Slice { ops, elapsed: len }
        });
        drop(stop);
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("bench: a benchmark thread panicked"))
            .collect();
        (pairs, results)
    });
    let mut m = Measurement::interleaved(&pairs);
    m.against = C::AGAINST;
    let mut samples = Vec::new();
    for record in results {
        m.per_thread.push(record.latencies.len() as u64);
        m.latencies.extend(record.latencies);
        samples.extend(record.samples);
    }
    m.extra.push(("threads", threads.to_string()));
    (m, samples)
}

/// Nearest-rank percentile of sorted latencies (0 when there are none).
fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean of `LockGuard::attempts()` (or of `attempts() - 1` when `failed_only`) over the critical
/// sections.
fn mean_attempts(samples: &[Waited], failed_only: bool) -> f64 {
    let skip = u64::from(failed_only);
    let sum: u64 = samples
        .iter()
        .map(|s| u64::from(s.attempts).saturating_sub(skip))
        .sum();
    sum as f64 / samples.len().max(1) as f64
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// The dedicated, continuous run of the baseline cycle (see [`RawCycle`]); it also warms up
/// the connection every scenario's interleaved baseline slices use.
fn raw_baseline(ctx: &Ctx) -> Measurement {
    dedicated_run(ctx, &ctx.baseline)
}

/// A warm-up, then `BENCH_SECS` of continuous cycles of `baseline`.
fn dedicated_run<C: Cycle>(ctx: &Ctx, baseline: &Mutex<C>) -> Measurement {
    let mut baseline = baseline.lock().unwrap_or_else(PoisonError::into_inner);
    let mut op = || baseline.op();
    single_slice(ctx.time.warmup, &mut op, None);
    let mut record = Record::new();
    let total = single_slice(ctx.time.run, &mut op, Some(&mut record));
    Measurement {
        total,
        latencies: record.latencies,
        per_thread: vec![total.ops],
        against: C::AGAINST,
        ..Measurement::default()
    }
}

/// `try_acquire` (must succeed) + `release` of one key, one thread.
fn lock_uncontended(ctx: &Ctx) -> Measurement {
    ctx.clear_lock("bench-u");
    let lock = ctx.client.lock("bench-u");
    let (m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: uncontended try_acquire failed")
            .expect("bench: uncontended lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: uncontended release failed");
    });
    m
}

/// `lock_uncontended` on the in-process server (feature `memory`): the same client, machines
/// and Lua scripts with no socket (the server runs on the caller's thread, on its own
/// clock). Its ratio is over the raw Redis baseline like the others: above 1 means a cycle
/// in-process is faster than one raw Redis round trip.
fn memory_lock_uncontended(ctx: &Ctx) -> Measurement {
    let server = redlease::memory::MemoryServer::new();
    let client = server.client();
    let lock = client.lock("bench-m");
    let (m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: in-process try_acquire failed")
            .expect("bench: in-process lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: in-process release failed");
    });
    m
}

/// RedLock acquire + release cycles over `n` extra local redis-servers (started here), one
/// thread. Its ratio is against the single-node raw baseline: every node is asked in the
/// same round, so the cost should stay near one round trip, not `n`.
fn redlock_cycle(ctx: &Ctx, n: usize) -> Measurement {
    let servers: Vec<RedisServer> = (0..n)
        .map(|_| RedisServer::start().expect("bench: cannot start a RedLock node"))
        .collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let red = redlease::RedLock::builder(&urls)
        .node_timeout(Duration::from_millis(200))
        .build()
        .expect("bench: cannot build the RedLock client");
    let lock = red.lock("bench-red").ttl(Duration::from_secs(10));
    let (mut m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: RedLock try_acquire failed")
            .expect("bench: RedLock lock was busy");
        black_box(guard.granted());
        guard.release().expect("bench: RedLock release failed");
    });
    m.extra.push(("nodes", n.to_string()));
    drop(servers);
    m
}

fn redlock3(ctx: &Ctx) -> Measurement {
    redlock_cycle(ctx, 3)
}

fn redlock5(ctx: &Ctx) -> Measurement {
    redlock_cycle(ctx, 5)
}

/// `try_acquire` (must succeed) + `release` of one legacy lock (the default SETNX + GETSET
/// algorithm, no scripts), one thread: three round trips (SETNX; GET, DEL).
fn legacy_uncontended(ctx: &Ctx) -> Measurement {
    const NAME: &str = "bench-legacy";
    let keys = redlease_core::legacy::LegacyKeys::new(&Keyspace::default(), NAME)
        .expect("bench: bad lock name");
    let _: i64 = redis::cmd("DEL")
        .arg(&keys.lock)
        .query(&mut ctx.raw_connection())
        .expect("bench: DEL of a leftover legacy lock key failed");
    let lock = ctx.client.legacy_lock(NAME);
    let (mut m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: legacy try_acquire failed")
            .expect("bench: legacy lock was busy");
        black_box(guard.valid_until());
        guard.release().expect("bench: legacy release failed");
    });
    m.extra.push(("algorithm", "getset".to_string()));
    m
}

/// `try_acquire` (must succeed) + `release` of one lock of the family, one thread; the name
/// is fresh per run (these kinds keep more than one key).
fn family_uncontended(ctx: &Ctx, lock: redlease::LockBuilder<'_>) -> Measurement {
    let (m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: uncontended try_acquire failed")
            .expect("bench: uncontended lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: uncontended release failed");
    });
    m
}

fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", std::process::id())
}

/// A reentrant lock's uncontended cycle (hash of owner -> count).
fn reentrant_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.reentrant_lock(&fresh("bench-re")))
}

/// A fair lock's uncontended cycle (queue and timeouts checked on every acquisition).
fn fair_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.fair_lock(&fresh("bench-fair")))
}

/// The read side of a read-write lock, uncontended.
fn rwlock_read_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.read_lock(&fresh("bench-rw")))
}

/// One permit of a 2-permit semaphore, acquired and released by one thread.
fn semaphore_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.semaphore(&fresh("bench-sem-u"), 2))
}

/// 8 threads sharing a 2-permit semaphore; one op is one permit held and released, its
/// latency the wait.
fn semaphore_contended(ctx: &Ctx) -> Measurement {
    let name = fresh("bench-sem-c");
    let (mut m, samples) = measure_threads(
        ctx,
        THREADS,
        || {},
        |_| {
            let permit = ctx.client.semaphore(&name, 2).wait(CONTENDED_WAIT);
            move || {
                let t = Instant::now();
                let guard = permit
                    .acquire()
                    .unwrap_or_else(|e| panic!("bench: semaphore acquire failed: {e}"));
                let waited = t.elapsed();
                let attempts = guard.attempts();
                guard
                    .release()
                    .unwrap_or_else(|e| panic!("bench: semaphore release failed: {e}"));
                Waited {
                    waited,
                    attempts,
                    handoff: None,
                }
            }
        },
    );
    m.extra.push((
        "attempts_per_permit",
        format!("{:.2}", mean_attempts(&samples, false)),
    ));
    m.extra.push(("permits", "2".to_string()));
    m.push_thread_spread();
    m
}

/// 8 threads waiting for one key; one op is one critical section, its latency the wait.
/// `attempts_per_cs` is the mean of `LockGuard::attempts()` (1 = got it at the first try).
fn lock_contended(ctx: &Ctx) -> Measurement {
    ctx.clear_lock("bench-c");
    let (mut m, samples) = measure_threads(
        ctx,
        THREADS,
        || {},
        |_| {
            let lock = ctx.client.lock("bench-c").wait(CONTENDED_WAIT);
            move || {
                let t = Instant::now();
                let guard = lock
                    .acquire()
                    .unwrap_or_else(|e| panic!("bench: contended acquire failed: {e}"));
                let waited = t.elapsed();
                black_box(guard.fence());
                let attempts = guard.attempts();
                guard
                    .release()
                    .unwrap_or_else(|e| panic!("bench: contended release failed: {e}"));
                Waited {
                    waited,
                    attempts,
                    handoff: None,
                }
            }
        },
    );
    m.extra.push((
        "attempts_per_cs",
        format!("{:.2}", mean_attempts(&samples, false)),
    ));
    m.push_thread_spread();
    m
}

/// 8 threads, thread `i` doing `try_acquire` + `release` cycles on its own key `bench-k{i}`.
fn lock_8keys(ctx: &Ctx) -> Measurement {
    let names: Vec<String> = (0..THREADS).map(|i| format!("bench-k{i}")).collect();
    for name in &names {
        ctx.clear_lock(name);
    }
    let (m, _) = measure_threads(
        ctx,
        THREADS,
        || {},
        |i| {
            let name = names[i].as_str();
            let lock = ctx.client.lock(name);
            move || {
                let guard = lock
                    .try_acquire()
                    .expect("bench: try_acquire failed")
                    .unwrap_or_else(|| panic!("bench: lock {name} was busy"));
                black_box(guard.fence());
                guard.release().expect("bench: release failed");
            }
        },
    );
    m
}

/// `lock_8keys` on a local 3-master Redis Cluster (started here): 8 threads, thread `i` on
/// lock `bench-k{i}` (the names spread over the masters), through one cluster client. Its
/// ratio is against the single-node raw baseline.
fn cluster_8keys(ctx: &Ctx) -> Measurement {
    let cluster = redlease_suite::RedisCluster::start().expect("bench: cannot start a cluster");
    let client = redlease::Client::cluster(&cluster.urls())
        .pool_size(THREADS as u32)
        .build()
        .expect("bench: cannot build the cluster client");
    let names: Vec<String> = (0..THREADS).map(|i| format!("bench-k{i}")).collect();
    let (mut m, _) = measure_threads(
        ctx,
        THREADS,
        || {},
        |i| {
            let name = names[i].as_str();
            let lock = client.lock(name);
            move || {
                let guard = lock
                    .try_acquire()
                    .expect("bench: cluster try_acquire failed")
                    .unwrap_or_else(|| panic!("bench: lock {name} was busy"));
                black_box(guard.fence());
                guard.release().expect("bench: cluster release failed");
            }
        },
    );
    m.extra.push(("masters", "3".to_string()));
    drop(cluster);
    m
}

/// 8 threads on one lock (one shared client), each looping: `acquire()`, `release()` (an
/// empty critical section), one `PING` on the thread's own plain connection (work outside the
/// lock). One op is one critical section, its latency the wait in `acquire()`.
///
/// Extra fields, over the measured critical sections of all slices:
/// - `handoffs`: critical sections whose previous one (in the same slice) was another thread's;
/// - `handoff_p50_us`, `handoff_p99_us`: for those, the time from just before the previous
///   holder called `release()` to just after this `acquire()` returned;
/// - `max_wait_us`: the longest `acquire()` (cut at about one slice, see the module docs);
/// - `failed_attempts_per_cs`: the mean of `LockGuard::attempts() - 1`;
/// - `vs_uncontended`: its ops/s over `lock_uncontended`'s ops/s in this run, when that ran.
///   (Not the quotient of the two ratios: the interleaved baseline picks up the state the
///   scenario leaves the machine in, which differs between one thread and eight.)
fn lock_handoff(ctx: &Ctx) -> Measurement {
    const NAME: &str = "bench-h";
    /// `last_holder` at the start of a slice: the first critical section is no handoff.
    const NOBODY: u64 = u64::MAX;
    ctx.clear_lock(NAME);
    let origin = Instant::now();
    let stamp = move |at: Instant| u64::try_from((at - origin).as_nanos()).unwrap_or(u64::MAX);
    // The thread that acquired last, and when (ns since `origin`) the holder began releasing.
    let last_holder = AtomicU64::new(NOBODY);
    let released_at = AtomicU64::new(0);
    let (mut m, samples) = measure_threads(
        ctx,
        THREADS,
        || last_holder.store(NOBODY, Ordering::SeqCst),
        |i| {
            let me = i as u64;
            let mut con = ctx.raw_connection();
            let lock = ctx.client.lock(NAME).wait(CONTENDED_WAIT);
            let (last_holder, released_at) = (&last_holder, &released_at);
            move || {
                let t = Instant::now();
                let guard = lock
                    .acquire()
                    .unwrap_or_else(|e| panic!("bench: handoff acquire failed: {e}"));
                let acquired = Instant::now();
                let previous = last_holder.swap(me, Ordering::SeqCst);
                let handoff = (previous != me && previous != NOBODY).then(|| {
                    let released = released_at.load(Ordering::SeqCst);
                    Duration::from_nanos(stamp(acquired).saturating_sub(released))
                });
                black_box(guard.fence());
                let attempts = guard.attempts();
                released_at.store(stamp(Instant::now()), Ordering::SeqCst);
                guard
                    .release()
                    .unwrap_or_else(|e| panic!("bench: handoff release failed: {e}"));
                let pong: String = redis::cmd("PING")
                    .query(&mut con)
                    .expect("bench: PING failed");
                black_box(pong);
                Waited {
                    waited: acquired - t,
                    attempts,
                    handoff,
                }
            }
        },
    );
    let mut handoffs: Vec<u32> = samples
        .iter()
        .filter_map(|s| s.handoff.map(micros))
        .collect();
    handoffs.sort_unstable();
    let max_wait = samples.iter().map(|s| s.waited).max().unwrap_or_default();
    m.extra.push(("handoffs", handoffs.len().to_string()));
    m.extra
        .push(("handoff_p50_us", percentile(&handoffs, 50.0).to_string()));
    m.extra
        .push(("handoff_p99_us", percentile(&handoffs, 99.0).to_string()));
    m.extra.push(("max_wait_us", micros(max_wait).to_string()));
    m.extra.push((
        "failed_attempts_per_cs",
        format!("{:.2}", mean_attempts(&samples, true)),
    ));
    m.push_thread_spread();
    m.relative_to = Some(("vs_uncontended", UNCONTENDED));
    m
}

// ---------------------------------------------------------------------------------------------

/// A positive duration from the environment variable `var`, in `unit`s of seconds.
/// How many leases `watchdog_10k` keeps alive.
const WATCHED: usize = 10_000;
/// Their ttl: renewed every second, so 10,000 renewals/s are needed.
const WATCHED_TTL: Duration = Duration::from_secs(3);

/// Calls of EVALSHA the server has served so far.
fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("bench: INFO commandstats failed");
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of this process, in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// One client holds 10,000 watched leases (3 s ttl, renewed every second by its one
/// watchdog thread). `ops_per_s` is renewals per second, counted by the server during the
/// scenario's slices (only the watchdog sends EVALSHA then); `ratio` is that over the
/// baseline's cycles per second (renewals are pipelined 512 to a batch). p50/p99 do not
/// apply (0). `lost=` must be 0; `bytes_per_lease=` is the process's resident memory growth
/// per held lease (guard, watchdog entry, lease copy).
fn watchdog_10k(ctx: &Ctx) -> Measurement {
    let client = redlease::Client::builder(&ctx.url)
        .pool_size(THREADS as u32)
        .build()
        .expect("bench: cannot build the watchdog client");
    let rss_before = rss_bytes();
    let guards: Vec<redlease::LockGuard> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let client = &client;
                s.spawn(move || {
                    (t..WATCHED)
                        .step_by(THREADS)
                        .map(|i| {
                            let name = format!("bench-w{i}");
                            client
                                .lock(&name)
                                .ttl(WATCHED_TTL)
                                .try_acquire()
                                .expect("bench: watched try_acquire failed")
                                .expect(
                                    "bench: watched lock was busy (leftover from an aborted run?)",
                                )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("bench: acquiring thread panicked"))
            .collect()
    });
    let bytes_per_lease = rss_bytes().saturating_sub(rss_before) / WATCHED as u64;
    let mut conn = ctx.raw_connection();
    let pairs = interleave(ctx, |length, _| {
        let before = evalsha_calls(&mut conn);
        let start = Instant::now();
        std::thread::sleep(length);
        let elapsed = start.elapsed();
        Slice {
            ops: evalsha_calls(&mut conn).saturating_sub(before),
            elapsed,
        }
    });
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let min_remaining = guards
        .iter()
        .map(|g| g.remaining())
        .min()
        .unwrap_or_default();
    let mut m = Measurement::interleaved(&pairs);
    m.extra.push(("leases", WATCHED.to_string()));
    m.extra
        .push(("ttl_ms", WATCHED_TTL.as_millis().to_string()));
    m.extra.push(("lost", lost.to_string()));
    m.extra
        .push(("min_remaining_ms", min_remaining.as_millis().to_string()));
    m.extra
        .push(("bytes_per_lease", bytes_per_lease.to_string()));
    m.extra.push(("watchdog_threads", "1".to_string()));
    drop(guards);
    m
}

// ---------------------------------------------------------------------------------------------
// Queue scenarios: their ratios are over the queue baseline (`LPUSH` + `RPOP`), not the lock's.
// ---------------------------------------------------------------------------------------------

/// The dedicated, continuous run of the queue baseline cycle (see [`QueueCycle`]); it also warms
/// up the connection the queue scenarios' interleaved baseline slices use.
fn queue_baseline(ctx: &Ctx) -> Measurement {
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
fn queue_1worker(ctx: &Ctx) -> Measurement {
    let queue = fresh_queue(ctx, "bench-q1");
    let (m, _) = measure_single_with(ctx, &ctx.queue_baseline, || push_take_ack(&queue));
    m
}

/// 4 threads, each looping push + take + ack on one shared queue (a thread may take another's
/// job; the queue is never empty when a thread takes, since every taker pushed first).
fn queue_4workers(ctx: &Ctx) -> Measurement {
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
fn queue_batch_push(ctx: &Ctx) -> Measurement {
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

/// `to - from` in microseconds, negative when `to` is earlier.
fn signed_micros(from: Instant, to: Instant) -> i64 {
    match to.checked_duration_since(from) {
        Some(d) => i64::from(micros(d)),
        None => -i64::from(micros(from - to)),
    }
}

/// Nearest-rank percentile of sorted signed values (0 when there are none).
fn percentile_signed(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
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
fn delayed_lateness(ctx: &Ctx) -> Measurement {
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

fn env_duration(var: &str, unit: f64, default: f64) -> Duration {
    let Ok(raw) = std::env::var(var) else {
        return Duration::from_secs_f64(default * unit);
    };
    let n: f64 = raw
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bench: {var}={raw:?} is not a number"));
    assert!(
        n.is_finite() && n > 0.0,
        "bench: {var} must be positive, got {raw:?}"
    );
    Duration::from_secs_f64(n * unit)
}

/// Prints the scenario's line.
fn report(name: &str, m: &mut Measurement) {
    m.latencies.sort_unstable();
    let mut line = format!(
        "bench {name} ops_per_s={:.0} p50_us={} p99_us={} ratio={:.3} baseline_ops_per_s={:.0}",
        m.ops_per_s(),
        percentile(&m.latencies, 50.0),
        percentile(&m.latencies, 99.0),
        m.ratio(),
        m.baseline_ops_per_s(),
    );
    if let Some(se) = m.ratio_se() {
        line.push_str(&format!(" ratio_se={se:.3}"));
    }
    for (k, v) in &m.extra {
        line.push_str(&format!(" {k}={v}"));
    }
    println!("{line}");
}

fn main() {
    // cargo passes `--bench`; the first argument that is not a flag filters scenario names.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));

    let run = env_duration("BENCH_SECS", 1.0, DEFAULT_SECS);
    let target_slice = env_duration("BENCH_SLICE_MS", 1e-3, DEFAULT_SLICE_MS);
    let slices = ((run.as_secs_f64() / target_slice.as_secs_f64()).round() as u32).max(1);
    let time = Timing {
        warmup: (run / 3).min(MAX_WARMUP),
        run,
        slices,
        slice: run / slices,
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
    let baseline = Mutex::new(RawCycle::new(&url));
    let queue_baseline = Mutex::new(QueueCycle::new(&url));
    let ctx = Ctx {
        url,
        time,
        client,
        baseline,
        queue_baseline,
    };

    let matches = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    // The queue scenarios' ratios are over the queue baseline: give it its own line too.
    let queue_selected = SCENARIOS
        .iter()
        .any(|(name, _)| name.starts_with("queue_") && matches(name));
    let selected: Vec<_> = SCENARIOS
        .iter()
        .filter(|(name, _)| {
            *name == BASELINE || (*name == QUEUE_BASELINE && queue_selected) || matches(name)
        })
        .collect();
    if let Some(f) = &filter
        && selected.len() == 1
    {
        eprintln!("note: no scenario matches {f:?}; running the baseline only");
    }

    let started = Instant::now();
    let mut dedicated = None;
    let mut interleaved_baselines = Vec::new();
    let mut queue_dedicated = None;
    let mut queue_interleaved = Vec::new();
    let mut ratios: Vec<(&str, f64)> = Vec::new();
    let mut throughputs: Vec<(&str, f64)> = Vec::new();
    for (name, scenario) in &selected {
        let mut m = scenario(&ctx);
        if let Some((key, other)) = m.relative_to
            && let Some((_, ops)) = throughputs.iter().find(|(n, _)| *n == other)
        {
            m.extra
                .push((key, format!("{:.3}", m.ops_per_s() / ops.max(1e-9))));
        }
        report(name, &mut m);
        match (m.against, m.baseline) {
            (Against::Lock, None) => dedicated = Some(m.ops_per_s()),
            (Against::Lock, Some(b)) => interleaved_baselines.push(b.ops_per_s()),
            (Against::Queue, None) => queue_dedicated = Some(m.ops_per_s()),
            (Against::Queue, Some(b)) => queue_interleaved.push(b.ops_per_s()),
            (Against::Nothing, _) => {}
        }
        if m.against != Against::Nothing {
            ratios.push((name, m.ratio()));
        }
        throughputs.push((name, m.ops_per_s()));
    }
    // How far the machine drifted: the interleaved baselines against the dedicated run.
    let drift = |what: &str, dedicated: Option<f64>, interleaved: &[f64]| match dedicated {
        Some(d) if !interleaved.is_empty() => {
            let min = interleaved.iter().copied().fold(f64::MAX, f64::min);
            let max = interleaved.iter().copied().fold(0.0, f64::max);
            let pct = |x: f64| (x / d.max(1e-9) - 1.0) * 100.0;
            format!(
                "; interleaved {what}baselines {min:.0}..{max:.0} ops/s ({:+.1}%..{:+.1}% vs the dedicated {what}run)",
                pct(min),
                pct(max)
            )
        }
        _ => String::new(),
    };
    let drift = drift("", dedicated, &interleaved_baselines)
        + &drift("queue ", queue_dedicated, &queue_interleaved);
    let summary: Vec<String> = ratios.iter().map(|(n, r)| format!("{n}={r:.3}")).collect();
    eprintln!(
        "bench summary: {} scenario(s) in {:.1} s ({:.1} s each, in {} slices of {} ms interleaved with as many baseline slices); ratios: {}{drift}",
        throughputs.len(),
        started.elapsed().as_secs_f64(),
        run.as_secs_f64(),
        time.slices,
        time.slice.as_millis(),
        summary.join(", ")
    );
}
