//! Scenarios of the lease lock, RedLock, the legacy lock and the lock family (reentrant, fair,
//! read-write, semaphore).

use std::hint::black_box;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use redlease_core::keys::Keyspace;
use redlease_suite::RedisServer;

/// The dedicated, continuous run of the baseline cycle (see [`RawCycle`]); it also warms up
/// the connection every scenario's interleaved baseline slices use.
pub fn raw_baseline(ctx: &Ctx) -> Measurement {
    dedicated_run(ctx, &ctx.baseline)
}

/// `try_acquire` (must succeed) + `release` of one key, one thread.
pub fn lock_uncontended(ctx: &Ctx) -> Measurement {
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

/// [`lock_uncontended`] with an unfenced lock (`fenced(false)`): the acquisition is a bare
/// `SET NX PX` (no script), the release as usual. Ratio to the same raw cycle.
pub fn lock_unfenced(ctx: &Ctx) -> Measurement {
    ctx.clear_lock("bench-unf");
    let lock = ctx.client.lock("bench-unf").fenced(false);
    let (m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: unfenced try_acquire failed")
            .expect("bench: unfenced lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: unfenced release failed");
    });
    m
}

/// The raw RedLock cycle over `n` nodes, no library in between: `SET key token NX PX 10000`
/// written to every node before any reply is read, then the compare-and-delete `EVALSHA`
/// the same way, on one plain connection per node. What a RedLock cycle costs at the least
/// on this machine (the ceiling of the `redlock*` scenarios, reported as `raw<n>_ratio`).
pub struct RawQuorumCycle {
    cons: Vec<redis::Connection>,
    sha: String,
    n: u64,
}

impl RawQuorumCycle {
    pub fn new(urls: &[String]) -> Self {
        let mut sha = String::new();
        let cons = urls
            .iter()
            .map(|url| {
                let mut con = connect(url);
                sha = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(RAW_RELEASE_SCRIPT)
                    .query(&mut con)
                    .expect("bench: SCRIPT LOAD failed");
                con
            })
            .collect();
        RawQuorumCycle { cons, sha, n: 0 }
    }

    /// Writes `packed` to every node, then reads every node's reply (in node order).
    fn round(&mut self, packed: &[u8]) -> Vec<redis::Value> {
        for con in &mut self.cons {
            con.send_packed_command(packed)
                .expect("bench: raw RedLock write failed");
        }
        self.cons
            .iter_mut()
            .map(|con| {
                con.recv_response()
                    .expect("bench: raw RedLock reply failed")
            })
            .collect()
    }

    pub fn op(&mut self) {
        self.n += 1;
        let token = format!("raw-quorum-{}", self.n);
        let set = redis::cmd("SET")
            .arg(RAW_KEY)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .get_packed_command();
        for reply in self.round(&set) {
            assert_eq!(
                reply,
                redis::Value::Okay,
                "bench: raw SET NX found the key taken"
            );
        }
        let del = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(RAW_KEY)
            .arg(&token)
            .get_packed_command();
        for reply in self.round(&del) {
            assert_eq!(
                reply,
                redis::Value::Int(1),
                "bench: raw compare-and-delete did not delete"
            );
        }
    }
}

/// RedLock acquire + release cycles over `n` extra local redis-servers (started here), one
/// thread. Its `ratio` is against the single-node raw baseline: every node is asked in the
/// same round, so the cost should stay near one round trip, not `n`. Each measured slice
/// also follows a slice of the raw `n`-node cycle ([`RawQuorumCycle`]) on the same servers:
/// `raw<n>_ratio` (with its `raw<n>_ratio_se`) is the scenario over that, the share of the
/// reachable that the library reaches.
fn redlock_cycle(ctx: &Ctx, n: usize) -> Measurement {
    let servers: Vec<RedisServer> = (0..n)
        .map(|_| RedisServer::start().expect("bench: cannot start a RedLock node"))
        .collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let red = redlease::lock::RedLock::builder(&urls)
        .node_timeout(Duration::from_millis(200))
        .build()
        .expect("bench: cannot build the RedLock client");
    let lock = red.lock("bench-red").ttl(Duration::from_secs(10));
    let mut op = || {
        let guard = lock
            .try_acquire()
            .expect("bench: RedLock try_acquire failed")
            .expect("bench: RedLock lock was busy");
        black_box(guard.granted());
        guard.release().expect("bench: RedLock release failed");
    };
    let mut raw = RawQuorumCycle::new(&urls);
    let mut raw_op = || raw.op();
    // The warm-up of both, then (single baseline, raw n-node, scenario) slice triples.
    single_slice(ctx.time.warmup, &mut op, None);
    single_slice(ctx.time.warmup, &mut raw_op, None);
    let mut baseline = ctx.baseline.lock().unwrap_or_else(PoisonError::into_inner);
    let mut base_op = || baseline.op();
    let mut record = Record::new();
    let (mut pairs, mut raw_pairs) = (Vec::new(), Vec::new());
    for _ in 0..ctx.time.slices {
        let b = single_slice(ctx.time.slice, &mut base_op, None);
        let r = single_slice(ctx.time.slice, &mut raw_op, None);
        let s = single_slice(ctx.time.slice, &mut op, Some(&mut record));
        pairs.push((b, s));
        raw_pairs.push((r, s));
    }
    let mut m = Measurement::interleaved(&pairs);
    m.per_thread = vec![m.total.ops];
    m.latencies = record.latencies;
    let against_raw = Measurement::interleaved(&raw_pairs);
    let (ratio_key, se_key, ops_key) = match n {
        3 => ("raw3_ratio", "raw3_ratio_se", "raw3_ops_per_s"),
        5 => ("raw5_ratio", "raw5_ratio_se", "raw5_ops_per_s"),
        _ => ("rawn_ratio", "rawn_ratio_se", "rawn_ops_per_s"),
    };
    m.extra.push(("nodes", n.to_string()));
    m.extra
        .push((ratio_key, format!("{:.3}", against_raw.ratio())));
    if let Some(se) = against_raw.ratio_se() {
        m.extra.push((se_key, format!("{se:.3}")));
    }
    m.extra
        .push((ops_key, format!("{:.0}", against_raw.baseline_ops_per_s())));
    drop(servers);
    m
}

pub fn redlock3(ctx: &Ctx) -> Measurement {
    redlock_cycle(ctx, 3)
}

pub fn redlock5(ctx: &Ctx) -> Measurement {
    redlock_cycle(ctx, 5)
}

/// `try_acquire` (must succeed) + `release` of one legacy lock (the default SETNX + GETSET
/// algorithm, no scripts), one thread: three round trips (SETNX; GET, DEL).
pub fn legacy_uncontended(ctx: &Ctx) -> Measurement {
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
fn family_uncontended(ctx: &Ctx, lock: redlease::lock::LockBuilder<'_>) -> Measurement {
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
pub fn reentrant_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.reentrant_lock(&fresh("bench-re")))
}

/// A fair lock's uncontended cycle (queue and timeouts checked on every acquisition).
pub fn fair_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.fair_lock(&fresh("bench-fair")))
}

/// The read side of a read-write lock, uncontended.
pub fn rwlock_read_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.read_lock(&fresh("bench-rw")))
}

/// One permit of a 2-permit semaphore, acquired and released by one thread.
pub fn semaphore_uncontended(ctx: &Ctx) -> Measurement {
    family_uncontended(ctx, ctx.client.semaphore(&fresh("bench-sem-u"), 2))
}

/// 8 threads sharing a 2-permit semaphore; one op is one permit held and released, its
/// latency the wait.
pub fn semaphore_contended(ctx: &Ctx) -> Measurement {
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
pub fn lock_contended(ctx: &Ctx) -> Measurement {
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
pub fn lock_8keys(ctx: &Ctx) -> Measurement {
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
pub fn cluster_8keys(ctx: &Ctx) -> Measurement {
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
pub fn lock_handoff(ctx: &Ctx) -> Measurement {
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

/// Scale: 1,000 threads wait on one lock (one client, woken by the release message; their
/// own retry pause is a minute, so only a wake-up makes them try again), then the lock is
/// handed from each to the next: every thread acquires once and releases at once.
/// `ops_per_s` is handoffs per second; no ratio. Extras: `wakeups_per_release` (attempts
/// after each thread's first, per release: 1.0 means each release woke exactly one waiter,
/// no herd), `handoff_p50_us`/`handoff_p99_us` (from a release to the next acquisition) and
/// `max_attempts` (of one thread).
pub fn lock_herd_1000(ctx: &Ctx) -> Measurement {
    const WAITERS: usize = 1_000;
    const NAME: &str = "bench-herd";
    ctx.clear_lock(NAME);
    let client = redlease::Client::builder(&ctx.url)
        .pool_size(32)
        .op_timeout(Duration::from_secs(30))
        .build()
        .expect("bench: cannot build the herd client");
    let mut conn = ctx.raw_connection();
    let first = client
        .lock(NAME)
        .try_acquire()
        .expect("bench: herd try_acquire failed")
        .expect("bench: the herd lock was busy");
    let calls_before = evalsha_calls(&mut conn);
    // (attempts, acquired, released) per thread.
    let (times, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WAITERS)
            .map(|_| {
                let client = &client;
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        let guard = client
                            .lock(NAME)
                            .wait(Duration::from_secs(120))
                            .retry(Duration::from_secs(60), Duration::from_secs(60))
                            .acquire()
                            .unwrap_or_else(|e| panic!("bench: herd acquire failed: {e}"));
                        let acquired = Instant::now();
                        let attempts = guard.attempts();
                        let released = Instant::now();
                        guard.release().expect("bench: herd release failed");
                        (attempts, acquired, released)
                    })
                    .expect("bench: cannot start a herd thread")
            })
            .collect();
        // Every thread has made its first attempt (found the lock busy) and waits.
        let start = Instant::now();
        while evalsha_calls(&mut conn) < calls_before + WAITERS as u64 {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "bench: the herd threads did not all try within 120 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let first_released = Instant::now();
        first.release().expect("bench: herd first release failed");
        let mut times: Vec<(u32, Instant, Instant)> = handles
            .into_iter()
            .map(|h| h.join().expect("bench: a herd thread panicked"))
            .collect();
        times.push((0, started, first_released));
        (times, started.elapsed())
    });
    let mut times = times;
    times.sort_by_key(|t| t.1);
    let attempts: u64 = times.iter().map(|t| u64::from(t.0)).sum();
    let max_attempts = times.iter().map(|t| t.0).max().unwrap_or(0);
    let mut handoffs: Vec<u32> = times
        .windows(2)
        .map(|w| micros(w[1].1.saturating_duration_since(w[0].2)))
        .collect();
    handoffs.sort_unstable();
    let releases = WAITERS as f64;
    let mut m = Measurement {
        total: Slice {
            ops: WAITERS as u64,
            elapsed,
        },
        against: Against::Nothing,
        ..Measurement::default()
    };
    m.per_thread = vec![m.total.ops];
    m.latencies = handoffs.clone();
    m.extra.push(("waiters", WAITERS.to_string()));
    m.extra.push((
        "wakeups_per_release",
        format!("{:.3}", (attempts - WAITERS as u64) as f64 / releases),
    ));
    m.extra.push(("max_attempts", max_attempts.to_string()));
    m.extra
        .push(("handoff_p50_us", percentile(&handoffs, 50.0).to_string()));
    m.extra
        .push(("handoff_p99_us", percentile(&handoffs, 99.0).to_string()));
    m
}

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

/// The raw fenced cycle: `EVALSHA` of [`RAW_FENCED_ACQUIRE_SCRIPT`], then the
/// compare-and-delete `EVALSHA`, on one plain connection: what the fence rule (a script on
/// every acquisition) costs at the least.
pub struct RawFencedCycle {
    con: redis::Connection,
    acquire: String,
    release: String,
    n: u64,
}

const RAW_FENCED_KEY: &str = "bench-raw-fenced";
const RAW_FENCED_COUNTER: &str = "bench-raw-fenced:fence";

impl RawFencedCycle {
    pub fn new(url: &str) -> Self {
        let mut con = connect(url);
        let mut load = |script: &str| -> String {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script)
                .query(&mut con)
                .expect("bench: SCRIPT LOAD failed")
        };
        let acquire = load(RAW_FENCED_ACQUIRE_SCRIPT);
        let release = load(RAW_RELEASE_SCRIPT);
        let _: i64 = redis::cmd("DEL")
            .arg(RAW_FENCED_KEY)
            .query(&mut con)
            .expect("bench: DEL failed");
        RawFencedCycle {
            con,
            acquire,
            release,
            n: 0,
        }
    }
}

impl Cycle for RawFencedCycle {
    const AGAINST: Against = Against::Nothing;

    fn op(&mut self) {
        self.n += 1;
        let token = format!("raw-fenced-{}", self.n);
        let fence: i64 = redis::cmd("EVALSHA")
            .arg(&self.acquire)
            .arg(2)
            .arg(RAW_FENCED_KEY)
            .arg(RAW_FENCED_COUNTER)
            .arg(&token)
            .arg(30_000)
            .query(&mut self.con)
            .expect("bench: raw fenced EVALSHA failed");
        assert!(fence > 0, "bench: the raw fenced key was taken");
        let deleted: i64 = redis::cmd("EVALSHA")
            .arg(&self.release)
            .arg(1)
            .arg(RAW_FENCED_KEY)
            .arg(&token)
            .query(&mut self.con)
            .expect("bench: raw compare-and-delete failed");
        assert_eq!(deleted, 1, "bench: raw compare-and-delete did not delete");
    }
}

/// [`lock_uncontended`]'s cycle (a fenced lock) interleaved with the raw fenced cycle
/// ([`RawFencedCycle`]) instead of the bare `SET NX PX` one: its ratio is over that
/// (`baseline=raw_fenced` on its line; not in the summary's ratios). Issue 28's goal: at
/// least 0.95.
pub fn lock_vs_fenced(ctx: &Ctx) -> Measurement {
    ctx.clear_lock("bench-vf");
    let lock = ctx.client.lock("bench-vf");
    let baseline = std::sync::Mutex::new(RawFencedCycle::new(&ctx.url));
    let (mut m, _) = measure_single_with(ctx, &baseline, || {
        let guard = lock
            .try_acquire()
            .expect("bench: uncontended try_acquire failed")
            .expect("bench: uncontended lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: uncontended release failed");
    });
    m.extra.push(("baseline", "raw_fenced".to_owned()));
    m
}
