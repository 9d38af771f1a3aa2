//! Issue 31's contended lock: threads contending for one key, each critical section two
//! commands on the thread's own plain connection (`GET` then `SET` of a counter), against a
//! raw polling lock in the same run.
//!
//! The raw polling lock is what a user writes by hand with the `redis` crate: `SET key token
//! NX PX 30000`, and while it answers nil, sleep 10 ms and ask again; the release is the
//! compare-and-delete script (`EVALSHA`). It runs as a crew of as many threads, in slices
//! interleaved with the scenario's (see `benches/common/crews.rs`), so `ratio` is redlease's
//! critical sections per second over the polling lock's in the same run.
//!
//! Extra fields (`raw_` ones: the polling lock's):
//! - `handoff_p50_us`, `handoff_p99_us`: critical sections whose previous one (in the same
//!   slice) was another thread's: from just before that holder's release to just after this
//!   acquisition returned; `handoffs_per_cs` how many critical sections were such;
//! - `failed_attempts_per_cs`: the mean of attempts - 1 (`LockGuard::attempts()`; the polling
//!   lock's `SET NX` that answered nil);
//! - `wakeups_per_release`: attempts after each critical section's first, per release: every
//!   retry, whether a release message or a timer woke it (an upper bound on the wake-ups);
//!   1.0 or less means no release woke more than one waiter;
//! - `server_us_per_cs`: the server main thread's CPU time (`INFO cpu`) over the measured
//!   slices, per critical section; `server_calls_per_cs` the commands it ran (`INFO
//!   commandstats`, a script's inner calls counted too) and `server_commands` by name;
//! - `client_cpu_us_per_cs`: the CPU time of every thread of the bench process
//!   (`/proc/self/task/*/schedstat`: the crew, the client's listener and watchdog threads),
//!   per critical section. `scripts/cpu.sh` counts the instructions (`contended`,
//!   `contended_raw`).
//!
//! The counter is checked at the end: it must equal the critical sections run, or a lock let
//! two holders in.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;

/// How long the raw lock sleeps between two `SET NX` that found it taken.
pub const RAW_POLL: Duration = Duration::from_millis(10);

/// The `lock_contended_cs` scenario with 8 threads.
pub fn lock_contended_cs(ctx: &Ctx) -> Measurement {
    contended_cs(ctx, THREADS, "bench-cs8")
}

/// The `lock_contended_cs` scenario with 64 threads.
pub fn lock_contended_cs64(ctx: &Ctx) -> Measurement {
    contended_cs(ctx, 64, "bench-cs64")
}

/// The last holder and when it began releasing, for the handoff times of one crew.
struct Handoffs {
    origin: Instant,
    last_holder: AtomicU64,
    released_at: AtomicU64,
}

/// `last_holder` at the start of a slice: the first critical section is no handoff.
const NOBODY: u64 = u64::MAX;

impl Handoffs {
    fn new() -> Self {
        Handoffs {
            origin: Instant::now(),
            last_holder: AtomicU64::new(NOBODY),
            released_at: AtomicU64::new(0),
        }
    }

    fn stamp(&self, at: Instant) -> u64 {
        u64::try_from((at - self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Thread `me` acquired at `at`: the handoff time if the previous holder was another.
    fn acquired(&self, me: u64, at: Instant) -> Option<Duration> {
        let previous = self.last_holder.swap(me, Ordering::SeqCst);
        (previous != me && previous != NOBODY).then(|| {
            let released = self.released_at.load(Ordering::SeqCst);
            Duration::from_nanos(self.stamp(at).saturating_sub(released))
        })
    }

    fn releasing(&self) {
        self.released_at
            .store(self.stamp(Instant::now()), Ordering::SeqCst);
    }
}

/// The critical section: `GET` the counter, `SET` it one higher, on the thread's connection.
fn critical_section(con: &mut redis::Connection, counter: &str) {
    let n: Option<u64> = redis::cmd("GET")
        .arg(counter)
        .query(con)
        .expect("bench: GET of the counter failed");
    let _: () = redis::cmd("SET")
        .arg(counter)
        .arg(n.unwrap_or(0) + 1)
        .query(con)
        .expect("bench: SET of the counter failed");
}

/// What the probe adds up over the measured slices of one crew.
#[derive(Default)]
struct Costs {
    server_cpu_us: u64,
    client_cpu_ns: u64,
    calls: BTreeMap<String, u64>,
}

/// A snapshot taken at a slice's start.
struct Snapshot {
    server_cpu_us: u64,
    client_cpu_ns: u64,
    calls: BTreeMap<String, u64>,
}

fn snapshot(admin: &mut redis::Connection) -> Snapshot {
    Snapshot {
        server_cpu_us: server_cpu_usec(admin),
        client_cpu_ns: process_cpu_ns(),
        calls: command_calls(admin),
    }
}

impl Costs {
    fn add(&mut self, before: &Snapshot, after: &Snapshot) {
        self.server_cpu_us += after.server_cpu_us.saturating_sub(before.server_cpu_us);
        self.client_cpu_ns += after.client_cpu_ns.saturating_sub(before.client_cpu_ns);
        for (command, n) in &after.calls {
            let d = n.saturating_sub(before.calls.get(command).copied().unwrap_or(0));
            *self.calls.entry(command.clone()).or_default() += d;
        }
    }

    fn push(&self, m: &mut Measurement, prefix: bool, cs: u64) {
        let cs = cs.max(1) as f64;
        let key = |k: &'static str, raw: &'static str| if prefix { raw } else { k };
        m.extra.push((
            key("server_us_per_cs", "raw_server_us_per_cs"),
            format!("{:.1}", self.server_cpu_us as f64 / cs),
        ));
        m.extra.push((
            key("client_cpu_us_per_cs", "raw_client_cpu_us_per_cs"),
            format!("{:.1}", self.client_cpu_ns as f64 / 1e3 / cs),
        ));
        let calls: u64 = self.calls.values().sum();
        m.extra.push((
            key("server_calls_per_cs", "raw_server_calls_per_cs"),
            format!("{:.2}", calls as f64 / cs),
        ));
        let each: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, n)| **n as f64 / cs >= 0.01)
            .map(|(c, n)| format!("{c}:{:.2}", *n as f64 / cs))
            .collect();
        m.extra.push((
            key("server_commands", "raw_server_commands"),
            each.join(","),
        ));
    }
}

/// Every command's calls so far (`INFO commandstats`), the measurement's own left out.
fn command_calls(admin: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(admin)
        .expect("bench: INFO commandstats failed");
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(c, _)| *c != "info")
        .filter_map(|(c, stats)| {
            let n = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((c.to_owned(), n))
        })
        .collect()
}

/// The server main thread's CPU time (user + system), in microseconds.
fn server_cpu_usec(admin: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(admin)
        .expect("bench: INFO cpu failed");
    let seconds = |key: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let main = seconds("used_cpu_user_main_thread") + seconds("used_cpu_sys_main_thread");
    let process = seconds("used_cpu_user") + seconds("used_cpu_sys");
    let s = if main > 0.0 { main } else { process };
    (s * 1e6).round() as u64
}

fn contended_cs(ctx: &Ctx, threads: usize, name: &str) -> Measurement {
    ctx.clear_lock(name);
    let raw_key = format!("{name}-raw-lock");
    let counter = format!("{name}-counter");
    let raw_counter = format!("{name}-raw-counter");
    let mut admin = ctx.raw_connection();
    let _: i64 = redis::cmd("DEL")
        .arg(&raw_key)
        .arg(&counter)
        .arg(&raw_counter)
        .query(&mut admin)
        .expect("bench: DEL of the counters failed");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RAW_RELEASE_SCRIPT)
        .query(&mut admin)
        .expect("bench: SCRIPT LOAD failed");
    let (handoffs, raw_handoffs) = (Handoffs::new(), Handoffs::new());
    // Critical sections run in all, measured or not: the counters must end there.
    let (runs, raw_runs) = (AtomicU64::new(0), AtomicU64::new(0));
    let make_raw = |i: usize| {
        let mut lock_con = ctx.raw_connection();
        let mut con = ctx.raw_connection();
        let (raw_key, raw_counter, sha) = (&raw_key, &raw_counter, &sha);
        let (handoffs, runs) = (&raw_handoffs, &raw_runs);
        let mut n = 0u64;
        move || {
            n += 1;
            let token = format!("raw-{i}-{n}");
            let t = Instant::now();
            let mut attempts = 0;
            loop {
                attempts += 1;
                let set: Option<String> = redis::cmd("SET")
                    .arg(raw_key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query(&mut lock_con)
                    .expect("bench: raw SET NX failed");
                if set.is_some() {
                    break;
                }
                std::thread::sleep(RAW_POLL);
            }
            let acquired = Instant::now();
            let handoff = handoffs.acquired(i as u64, acquired);
            critical_section(&mut con, raw_counter);
            runs.fetch_add(1, Ordering::Relaxed);
            handoffs.releasing();
            let deleted: i64 = redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(raw_key)
                .arg(&token)
                .query(&mut lock_con)
                .expect("bench: raw EVALSHA failed");
            assert_eq!(
                deleted, 1,
                "bench: the raw lock was not ours at its release"
            );
            Waited {
                waited: acquired - t,
                attempts,
                handoff,
            }
        }
    };
    let make = |i: usize| {
        let mut con = ctx.raw_connection();
        let lock = ctx.client.lock(name).wait(CONTENDED_WAIT);
        let (handoffs, runs, counter) = (&handoffs, &runs, &counter);
        move || {
            let t = Instant::now();
            let guard = lock
                .acquire()
                .unwrap_or_else(|e| panic!("bench: contended acquire failed: {e}"));
            let acquired = Instant::now();
            let handoff = handoffs.acquired(i as u64, acquired);
            black_box(guard.fence());
            critical_section(&mut con, counter);
            runs.fetch_add(1, Ordering::Relaxed);
            let attempts = guard.attempts();
            handoffs.releasing();
            guard
                .release()
                .unwrap_or_else(|e| panic!("bench: contended release failed: {e}"));
            Waited {
                waited: acquired - t,
                attempts,
                handoff,
            }
        }
    };
    let (mut costs, mut raw_costs) = (Costs::default(), Costs::default());
    let mut before: Option<Snapshot> = None;
    let crews = measure_crews(
        threads,
        ctx.time.warmup,
        ctx.time.slices,
        ctx.time.slice,
        make_raw,
        make,
        |side, _measured, start| {
            let h = match side {
                Side::Baseline => &raw_handoffs,
                Side::Scenario => &handoffs,
            };
            if start {
                h.last_holder.store(NOBODY, Ordering::SeqCst);
                before = Some(snapshot(&mut admin));
            } else if let Some(b) = before.take() {
                let after = snapshot(&mut admin);
                match side {
                    Side::Baseline => raw_costs.add(&b, &after),
                    Side::Scenario => costs.add(&b, &after),
                }
            }
        },
    );
    for (key, runs) in [(&counter, &runs), (&raw_counter, &raw_runs)] {
        let value: Option<u64> = redis::cmd("GET")
            .arg(key)
            .query(&mut admin)
            .expect("bench: GET of a counter failed");
        assert_eq!(
            value.unwrap_or(0),
            runs.load(Ordering::SeqCst),
            "bench: {key} is not the critical sections run: two holders at once"
        );
    }
    let Crews {
        scenario: mut m,
        baseline: raw,
        scenario_samples: samples,
        baseline_samples: raw_samples,
    } = crews;
    m.against = Against::Nothing;
    m.extra.push((
        "baseline",
        format!("raw_polling_{}ms", RAW_POLL.as_millis()),
    ));
    m.extra
        .push(("raw_ops_per_s", format!("{:.0}", raw.ops_per_s())));
    for (samples, raw_side) in [(&samples, false), (&raw_samples, true)] {
        let mut hs: Vec<u32> = samples
            .iter()
            .filter_map(|s| s.handoff.map(micros))
            .collect();
        hs.sort_unstable();
        let failed = mean_attempts(samples, true);
        let k = |a: &'static str, b: &'static str| if raw_side { b } else { a };
        m.extra.push((
            k("handoff_p50_us", "raw_handoff_p50_us"),
            percentile(&hs, 50.0).to_string(),
        ));
        m.extra.push((
            k("handoff_p99_us", "raw_handoff_p99_us"),
            percentile(&hs, 99.0).to_string(),
        ));
        m.extra.push((
            k("handoffs_per_cs", "raw_handoffs_per_cs"),
            format!("{:.2}", hs.len() as f64 / samples.len().max(1) as f64),
        ));
        m.extra.push((
            k("failed_attempts_per_cs", "raw_failed_attempts_per_cs"),
            format!("{failed:.2}"),
        ));
        if !raw_side {
            m.extra
                .push(("wakeups_per_release", format!("{failed:.2}")));
        }
    }
    let ops = m.total.ops;
    costs.push(&mut m, false, ops);
    raw_costs.push(&mut m, true, raw.total.ops);
    m.push_thread_spread();
    m
}
