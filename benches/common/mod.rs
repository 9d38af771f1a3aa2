//! The measurement framework of the Redis benchmarks (`benches/redis.rs`): the baselines, the
//! interleaved slices, the persistent scenario threads, the statistics, the report line and the
//! runner. A scenario is a `fn(&Ctx) -> Measurement`; see `benches/redis.rs` for how the numbers
//! are made and `benches/scenarios/` for the scenarios.

use std::hint::black_box;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redlease_core::keys::{Keyspace, LockKeys};
use redlease_suite::RedisServer;

pub mod crews;
pub use crews::*;

/// Measured time per scenario unless `BENCH_SECS` says otherwise.
pub const DEFAULT_SECS: f64 = 3.0;
/// Length of one interleaved slice unless `BENCH_SLICE_MS` says otherwise.
pub const DEFAULT_SLICE_MS: f64 = 200.0;
/// The longest warm-up before a measurement.
pub const MAX_WARMUP: Duration = Duration::from_secs(1);
/// The wait of a contended acquisition: failing to get the lock within it is a real failure.
pub const CONTENDED_WAIT: Duration = Duration::from_secs(30);
/// Threads of the multi-threaded scenarios.
pub const THREADS: usize = 8;
/// The compare-and-delete script of the baseline.
pub const RAW_RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
/// The key of the baseline.
pub const RAW_KEY: &str = "bench-raw";

/// The baseline's name; it always runs, first.
pub const BASELINE: &str = "raw_baseline";
/// The single-threaded lock scenario, which `lock_handoff` compares itself with.
pub const UNCONTENDED: &str = "lock_uncontended";
/// The queue baseline's name; it runs (after `raw_baseline`) whenever a `queue_*` scenario does.
pub const QUEUE_BASELINE: &str = "queue_baseline";
/// The list of the queue baseline.
pub const RAW_QUEUE_KEY: &str = "bench-raw-queue";
/// The name of the reliable-list baseline (`LPUSH` + `BLMOVE` + `LREM`).
pub const RELIABLE_BASELINE: &str = "reliable_baseline";
/// The processing list of the reliable-list baseline.
pub const RAW_PROCESSING_KEY: &str = "bench-raw-processing";
/// The payload of every job (and of the queue baseline's element).
pub const JOB_PAYLOAD: &[u8] = b"bench-job-payload-0123456789abcd";

/// A scenario: its name (matched by the filter) and what runs it.
pub type Scenario = (&'static str, fn(&Ctx) -> Measurement);

/// What every scenario gets.
pub struct Ctx {
    pub url: String,
    pub time: Timing,
    pub client: redlease::Client,
    /// The baseline cycle, run by the main thread between the slices of every scenario
    /// (except the queue scenarios).
    pub baseline: Mutex<RawCycle>,
    /// The queue baseline cycle, run between the slices of the queue batch push.
    pub queue_baseline: Mutex<QueueCycle>,
    /// The reliable-list baseline, run between the slices of the queue workers' scenarios.
    pub reliable_baseline: Mutex<ReliableCycle>,
}

impl Ctx {
    /// A plain connection to the server, for setup and non-lock work.
    pub fn raw_connection(&self) -> redis::Connection {
        connect(&self.url)
    }

    /// Deletes the lock key of `name` (left over by an aborted run on a shared server), keeping
    /// its fencing counter.
    pub fn clear_lock(&self, name: &str) {
        let keys = LockKeys::new(&Keyspace::default(), name).expect("bench: bad lock name");
        let _: i64 = redis::cmd("DEL")
            .arg(&keys.lock)
            .query(&mut self.raw_connection())
            .expect("bench: DEL of a leftover lock key failed");
    }
}

pub fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("bench: REDIS_URL is not a valid Redis URL")
        .get_connection()
        .expect("bench: cannot connect to Redis")
}

/// The baseline: `SET key token NX PX 30000` + `EVALSHA <compare-and-delete> 1 key token` on
/// one plain connection.
pub struct RawCycle {
    pub con: redis::Connection,
    pub sha: String,
    pub n: u64,
}

impl RawCycle {
    pub fn new(url: &str) -> Self {
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
pub enum Against {
    /// The lock baseline ([`RawCycle`]).
    #[default]
    Lock,
    /// The queue baseline ([`QueueCycle`]).
    Queue,
    /// The reliable-list baseline ([`ReliableCycle`]).
    Reliable,
    /// None: the scenario is not a throughput to compare (its ratio is 1 by definition).
    Nothing,
}

/// A baseline: one hand-written cycle on one plain connection, no library code.
pub trait Cycle {
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
pub struct QueueCycle {
    pub con: redis::Connection,
}

impl QueueCycle {
    pub fn new(url: &str) -> Self {
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

/// The reliable-list baseline: what a hand-written reliable queue does per job on one plain
/// connection: `LPUSH list payload`, `BLMOVE list processing RIGHT LEFT 1` (the job is kept
/// in a processing list while it runs, so a crashed worker's job is not lost) and
/// `LREM processing 1 payload` (the ack). Three round trips.
pub struct ReliableCycle {
    pub con: redis::Connection,
}

impl ReliableCycle {
    pub fn new(url: &str) -> Self {
        let mut con = connect(url);
        let _: i64 = redis::cmd("DEL")
            .arg(RAW_QUEUE_KEY)
            .arg(RAW_PROCESSING_KEY)
            .query(&mut con)
            .expect("bench: DEL failed");
        ReliableCycle { con }
    }
}

impl Cycle for ReliableCycle {
    const AGAINST: Against = Against::Reliable;

    fn op(&mut self) {
        let len: i64 = redis::cmd("LPUSH")
            .arg(RAW_QUEUE_KEY)
            .arg(JOB_PAYLOAD)
            .query(&mut self.con)
            .expect("bench: raw LPUSH failed");
        assert_eq!(len, 1, "bench: the raw queue was not empty");
        let moved: Option<Vec<u8>> = redis::cmd("BLMOVE")
            .arg(RAW_QUEUE_KEY)
            .arg(RAW_PROCESSING_KEY)
            .arg("RIGHT")
            .arg("LEFT")
            .arg(1)
            .query(&mut self.con)
            .expect("bench: raw BLMOVE failed");
        assert_eq!(
            moved.as_deref(),
            Some(JOB_PAYLOAD),
            "bench: raw BLMOVE returned something else"
        );
        let removed: i64 = redis::cmd("LREM")
            .arg(RAW_PROCESSING_KEY)
            .arg(1)
            .arg(JOB_PAYLOAD)
            .query(&mut self.con)
            .expect("bench: raw LREM failed");
        assert_eq!(removed, 1, "bench: raw LREM removed nothing");
    }
}

/// Warm-up and measured durations.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub warmup: Duration,
    /// The measured time of each scenario (and of the dedicated baseline run)...
    pub run: Duration,
    /// ...made of this many slices...
    pub slices: u32,
    /// ...of this length (`run / slices`).
    pub slice: Duration,
}

/// What one slice (or a sum of slices) did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Slice {
    pub ops: u64,
    pub elapsed: Duration,
}

impl Slice {
    pub fn ops_per_s(self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn add(self, other: Slice) -> Slice {
        Slice {
            ops: self.ops + other.ops,
            elapsed: self.elapsed + other.elapsed,
        }
    }
}

/// The result of one scenario.
#[derive(Debug, Default)]
pub struct Measurement {
    /// The measured slices of the scenario, summed.
    pub total: Slice,
    /// The baseline slices interleaved with them, summed (`None` for the baseline's own run).
    pub baseline: Option<Slice>,
    /// The ratio of each (baseline, scenario) slice pair.
    pub pair_ratios: Vec<f64>,
    /// Latency of every measured operation, in microseconds.
    pub latencies: Vec<u32>,
    /// Measured operations per thread (one entry for single-threaded scenarios).
    pub per_thread: Vec<u64>,
    /// Extra `key=value` fields for the report line.
    pub extra: Vec<(&'static str, String)>,
    /// `(key, scenario)`: when `scenario` ran before, also report `key=` this scenario's ops/s
    /// over that scenario's ops/s.
    pub relative_to: Option<(&'static str, &'static str)>,
    /// The baseline of the ratio (with `baseline: None`: this is that baseline's own run).
    pub against: Against,
}

impl Measurement {
    /// A scenario measured in slices interleaved with the baseline: `(baseline, scenario)` pairs.
    pub fn interleaved(pairs: &[(Slice, Slice)]) -> Self {
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

    pub fn ops_per_s(&self) -> f64 {
        self.total.ops_per_s()
    }

    pub fn baseline_ops_per_s(&self) -> f64 {
        self.baseline.unwrap_or(self.total).ops_per_s()
    }

    pub fn ratio(&self) -> f64 {
        self.ops_per_s() / self.baseline_ops_per_s().max(1e-9)
    }

    /// Standard error of the ratio, from the spread of the per-pair ratios.
    pub fn ratio_se(&self) -> Option<f64> {
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
    pub fn push_thread_spread(&mut self) {
        let min = self.per_thread.iter().min().copied().unwrap_or(0);
        let max = self.per_thread.iter().max().copied().unwrap_or(0);
        self.extra.push(("thread_ops_min", min.to_string()));
        self.extra.push(("thread_ops_max", max.to_string()));
    }
}

/// What an operation returns to say what its latency was.
pub trait Sample {
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
pub struct Waited {
    /// How long `acquire()` took.
    pub waited: Duration,
    /// `LockGuard::attempts()`.
    pub attempts: u32,
    /// When the previous critical section of the slice was another thread's: the time from
    /// just before that holder's `release()` to just after this `acquire()` returned.
    pub handoff: Option<Duration>,
}

impl Sample for Waited {
    fn latency(&self, _whole: Duration) -> Duration {
        self.waited
    }
}

pub fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// The measured operations of one thread.
pub struct Record<R> {
    pub latencies: Vec<u32>,
    pub samples: Vec<R>,
}

impl<R: Sample> Record<R> {
    pub fn new() -> Self {
        Record {
            latencies: Vec::with_capacity(1 << 16),
            samples: Vec::with_capacity(1 << 16),
        }
    }

    pub fn push(&mut self, sample: R, whole: Duration) {
        self.latencies.push(micros(sample.latency(whole)));
        self.samples.push(sample);
    }
}

/// Runs `op` on this thread until an operation ends at or after `len` from now; records every
/// operation in `record` if given.
pub fn single_slice<R: Sample>(
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
pub fn interleave(ctx: &Ctx, slice: impl FnMut(Duration, bool) -> Slice) -> Vec<(Slice, Slice)> {
    interleave_with(ctx, &ctx.baseline, slice)
}

/// [`interleave`] with the slices of another baseline cycle.
pub fn interleave_with<C: Cycle>(
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
pub fn measure_single<R: Sample>(ctx: &Ctx, op: impl FnMut() -> R) -> (Measurement, Vec<R>) {
    measure_single_with(ctx, &ctx.baseline, op)
}

/// [`measure_single`], interleaved with another baseline cycle.
pub fn measure_single_with<R: Sample, C: Cycle>(
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
pub struct SliceSpec {
    pub end: Instant,
    pub measured: bool,
}

/// Start and end of the slices of persistent scenario threads.
#[derive(Default)]
pub struct Gate {
    pub state: Mutex<GateState>,
    pub changed: Condvar,
}

#[derive(Default)]
pub struct GateState {
    /// Incremented at every slice start (and at the stop).
    pub generation: u64,
    /// The current slice; `None` once the threads must stop.
    pub spec: Option<SliceSpec>,
    /// Threads done with the current slice.
    pub done: usize,
    /// Measured operations they reported for it.
    pub ops: u64,
    /// A thread panicked.
    pub failed: bool,
}

impl Gate {
    pub fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Main thread: starts a slice (`Some`) or stops the threads (`None`).
    pub fn open(&self, spec: Option<SliceSpec>) {
        let mut s = self.lock();
        s.generation += 1;
        s.spec = spec;
        s.done = 0;
        s.ops = 0;
        self.changed.notify_all();
    }

    /// Main thread: waits until `threads` threads are done with the slice and returns their
    /// measured operations, or `None` if a thread panicked.
    pub fn wait_done(&self, threads: usize) -> Option<u64> {
        let s = self
            .changed
            .wait_while(self.lock(), |s| s.done < threads && !s.failed)
            .unwrap_or_else(PoisonError::into_inner);
        (!s.failed).then_some(s.ops)
    }

    /// Scenario thread: waits for the slice after `seen`; `None` means stop.
    pub fn next(&self, seen: &mut u64) -> Option<SliceSpec> {
        let s = self
            .changed
            .wait_while(self.lock(), |s| s.generation == *seen)
            .unwrap_or_else(PoisonError::into_inner);
        *seen = s.generation;
        s.spec
    }

    /// Scenario thread: done with the slice, having measured `ops` operations.
    pub fn finish(&self, ops: u64) {
        let mut s = self.lock();
        s.done += 1;
        s.ops += ops;
        self.changed.notify_all();
    }
}

/// Tells the main thread when a scenario thread panics (instead of leaving it waiting).
pub struct PanicAlarm<'a>(&'a Gate);

impl Drop for PanicAlarm<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().failed = true;
            self.0.changed.notify_all();
        }
    }
}

/// Stops the scenario threads when the main thread leaves (normally or by a panic).
pub struct StopOnDrop<'a>(&'a Gate);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open(None);
    }
}

/// Runs `threads` persistent threads, thread `i` looping on its operation `make(i)` (made on
/// that thread, before any slice), in slices interleaved with the baseline; `before_slice`
/// runs on the main thread before each slice starts.
pub fn measure_threads<R, O>(
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
pub fn measure_threads_with<R, O, C>(
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
pub fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean of `LockGuard::attempts()` (or of `attempts() - 1` when `failed_only`) over the critical
/// sections.
pub fn mean_attempts(samples: &[Waited], failed_only: bool) -> f64 {
    let skip = u64::from(failed_only);
    let sum: u64 = samples
        .iter()
        .map(|s| u64::from(s.attempts).saturating_sub(skip))
        .sum();
    sum as f64 / samples.len().max(1) as f64
}

/// A warm-up, then `BENCH_SECS` of continuous cycles of `baseline`.
pub fn dedicated_run<C: Cycle>(ctx: &Ctx, baseline: &Mutex<C>) -> Measurement {
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

/// A name unique to this run (no leftovers from an aborted run on a shared server).
pub fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", std::process::id())
}

/// `to - from` in microseconds, negative when `to` is earlier.
pub fn signed_micros(from: Instant, to: Instant) -> i64 {
    match to.checked_duration_since(from) {
        Some(d) => i64::from(micros(d)),
        None => -i64::from(micros(from - to)),
    }
}

/// Nearest-rank percentile of sorted signed values (0 when there are none).
pub fn percentile_signed(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A positive duration from the environment variable `var`, in `unit`s of seconds.
pub fn env_duration(var: &str, unit: f64, default: f64) -> Duration {
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
pub fn report(name: &str, m: &mut Measurement) {
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

/// Runs the selected `scenarios` (the arguments that are not flags filter their names: a
/// scenario runs if its name contains any of them; the baselines always run) and prints
/// their lines and the summary.
pub fn run(scenarios: &[Scenario]) {
    // cargo passes `--bench`; the arguments that are not flags filter scenario names.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();

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
    let reliable_baseline = Mutex::new(ReliableCycle::new(&url));
    let ctx = Ctx {
        url,
        time,
        client,
        baseline,
        queue_baseline,
        reliable_baseline,
    };

    let matches = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f));
    // The queue scenarios' ratios are over the queue baseline: give it its own line too.
    let queue_selected = scenarios
        .iter()
        .any(|(name, _)| name.starts_with("queue_") && matches(name));
    let selected: Vec<_> = scenarios
        .iter()
        .filter(|(name, _)| {
            *name == BASELINE
                || ((*name == QUEUE_BASELINE || *name == RELIABLE_BASELINE) && queue_selected)
                || matches(name)
        })
        .collect();
    if !filters.is_empty() && selected.len() == 1 {
        eprintln!("note: no scenario matches {filters:?}; running the baseline only");
    }

    let started = Instant::now();
    let mut dedicated = None;
    let mut interleaved_baselines = Vec::new();
    let mut queue_dedicated = None;
    let mut queue_interleaved = Vec::new();
    let mut reliable_dedicated = None;
    let mut reliable_interleaved = Vec::new();
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
            (Against::Reliable, None) => reliable_dedicated = Some(m.ops_per_s()),
            (Against::Reliable, Some(b)) => reliable_interleaved.push(b.ops_per_s()),
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
        + &drift("queue ", queue_dedicated, &queue_interleaved)
        + &drift("reliable-list ", reliable_dedicated, &reliable_interleaved);
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
