//! Redis benchmarks of the blocking driver, without criterion (`harness = false`).
//!
//! ```text
//! cargo bench --bench redis              # every scenario
//! cargo bench --bench redis -- 8keys     # the baseline plus scenarios whose name contains "8keys"
//! cargo bench --bench redis -- lock_unfenced lock_uncontended  # ... either of those
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
//! The queue scenarios (`queue_*`) have their own baselines: `queue_baseline`, `LPUSH` of one
//! payload + `RPOP` on one plain connection (for `queue_batch_push`), and `reliable_baseline`,
//! a hand-written reliable list (`LPUSH` + `BLMOVE` to a processing list + `LREM`: a job is
//! not lost when its worker dies), for the workers (`queue_1worker`, `queue_4workers`). Each
//! gets its own dedicated line whenever a `queue_*` scenario runs, and is what those slices
//! are interleaved with, in the same way. `queue_commands` counts the commands per job inside
//! Redis and `queue_1m` the cost at a million jobs held; neither has a ratio.
//! `rate_try_acquire` (a rate limiter's `try_acquire`) is interleaved with a hand-written GCRA
//! script of its own (`EVALSHA` on a plain connection) and its ratio is over that
//! (`baseline=raw_gcra` on its line; not in the summary's ratios).
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
//! The measurement framework is `benches/common/mod.rs`; the scenarios are in `benches/scenarios/`.
//! To add a scenario, write a `fn(&Ctx) -> Measurement` in the file of its area (usually around
//! a call to `measure_single` or `measure_threads`, or their `_with` forms to interleave another
//! baseline `Cycle`) and list it in [`SCENARIOS`].
//!
//! A one-line summary goes to stderr at the end, with the range of the interleaved baselines
//! against the dedicated run: how far the machine drifted, which the old single-shot ratios
//! suffered from and the interleaving cancels.

mod common;
mod scenarios;

use common::{BASELINE, QUEUE_BASELINE, RELIABLE_BASELINE, Scenario, UNCONTENDED};
use scenarios::{
    bounded::*, contended::*, flash_sale::*, lock::*, memory::*, queue::*, rate::*, watchdog::*,
};

/// Every scenario, in run order (the first is the baseline).
const SCENARIOS: &[Scenario] = &[
    (BASELINE, raw_baseline),
    (UNCONTENDED, lock_uncontended),
    ("lock_unfenced", lock_unfenced),
    ("lock_vs_fenced", lock_vs_fenced),
    ("memory_lock_uncontended", memory_lock_uncontended),
    ("lock_contended", lock_contended),
    ("lock_8keys", lock_8keys),
    ("cluster_8keys", cluster_8keys),
    ("lock_handoff", lock_handoff),
    ("lock_contended_cs", lock_contended_cs),
    ("lock_contended_cs64", lock_contended_cs64),
    ("lock_herd_1000", lock_herd_1000),
    ("watchdog_10k", watchdog_10k),
    ("watchdog_100k", watchdog_100k),
    ("redlock3", redlock3),
    ("redlock5", redlock5),
    ("legacy_uncontended", legacy_uncontended),
    ("reentrant_uncontended", reentrant_uncontended),
    ("fair_uncontended", fair_uncontended),
    ("rwlock_read_uncontended", rwlock_read_uncontended),
    ("semaphore_uncontended", semaphore_uncontended),
    ("semaphore_contended", semaphore_contended),
    (QUEUE_BASELINE, queue_baseline),
    (RELIABLE_BASELINE, reliable_baseline),
    ("queue_1worker", queue_1worker),
    ("queue_4workers", queue_4workers),
    ("queue_commands", queue_commands),
    ("queue_1m", queue_1m),
    ("queue_bounded", queue_bounded),
    ("queue_batch_push", queue_batch_push),
    ("queue_batch50", queue_batch50),
    ("delayed_lateness", delayed_lateness),
    ("rate_try_acquire", rate_try_acquire),
    ("flash_sale_script", flash_sale_script),
    ("flash_sale_global_lock", flash_sale_global_lock),
    ("flash_sale_striped", flash_sale_striped),
];

fn main() {
    common::run(SCENARIOS);
}
