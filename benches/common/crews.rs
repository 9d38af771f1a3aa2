//! Two crews of persistent threads measured side by side: a multi-threaded baseline (the raw
//! polling lock of `lock_contended_cs`) and the scenario, in interleaved slices of the same
//! length, with a probe around every slice (server and client CPU, commandstats).

use std::hint::black_box;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use super::{Gate, Measurement, PanicAlarm, Record, Sample, Slice, SliceSpec, StopOnDrop};

/// Which crew a slice belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Baseline,
    Scenario,
}

/// Starts `threads` persistent threads on `gate`, thread `i` looping on `make(i)` (made on
/// that thread, before any slice) during each slice the gate opens.
pub fn spawn_crew<'scope, 'env, R, O, M>(
    s: &'scope Scope<'scope, 'env>,
    gate: &'env Gate,
    threads: usize,
    make: &'env M,
) -> Vec<ScopedJoinHandle<'scope, Record<R>>>
where
    R: Sample + Send + 'scope,
    O: FnMut() -> R,
    M: Fn(usize) -> O + Sync,
{
    (0..threads)
        .map(|i| {
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
        .collect()
}

/// Runs one slice of `len` on a crew of `threads` and returns its measured operations.
pub fn crew_slice(gate: &Gate, threads: usize, len: Duration, measured: bool) -> Slice {
    gate.open(Some(SliceSpec {
        end: Instant::now() + len,
        measured,
    }));
    let Some(ops) = gate.wait_done(threads) else {
        panic!("bench: a benchmark thread panicked");
    };
    Slice { ops, elapsed: len }
}

/// What two crews measured side by side.
pub struct Crews<R> {
    /// The scenario, its ratio over the baseline crew.
    pub scenario: Measurement,
    /// The baseline crew's own measurement (its ratio is 1).
    pub baseline: Measurement,
    pub scenario_samples: Vec<R>,
    pub baseline_samples: Vec<R>,
}

/// Runs a baseline crew (`make_base`) and a scenario crew (`make`) of `threads` threads each:
/// a warm-up slice of each, then `slices` pairs of a baseline slice and a scenario slice of
/// `len`. `probe(side, measured, start)` runs on the main thread just before (`start`) and
/// just after every slice.
#[allow(clippy::too_many_arguments)]
pub fn measure_crews<R, B, O, MB, MO>(
    threads: usize,
    warmup: Duration,
    slices: u32,
    len: Duration,
    make_base: MB,
    make: MO,
    mut probe: impl FnMut(Side, bool, bool),
) -> Crews<R>
where
    R: Sample + Send,
    B: FnMut() -> R,
    O: FnMut() -> R,
    MB: Fn(usize) -> B + Sync,
    MO: Fn(usize) -> O + Sync,
{
    let (base_gate, gate) = (Gate::default(), Gate::default());
    let (pairs, base_records, records) = std::thread::scope(|s| {
        let base_handles = spawn_crew(s, &base_gate, threads, &make_base);
        let handles = spawn_crew(s, &gate, threads, &make);
        let stop_base = StopOnDrop(&base_gate);
        let stop = StopOnDrop(&gate);
        crew_slice(&base_gate, threads, warmup, false);
        crew_slice(&gate, threads, warmup, false);
        let mut pairs = Vec::new();
        for _ in 0..slices {
            probe(Side::Baseline, true, true);
            let b = crew_slice(&base_gate, threads, len, true);
            probe(Side::Baseline, true, false);
            probe(Side::Scenario, true, true);
            let o = crew_slice(&gate, threads, len, true);
            probe(Side::Scenario, true, false);
            pairs.push((b, o));
        }
        drop((stop_base, stop));
        let join = |hs: Vec<ScopedJoinHandle<'_, Record<R>>>| -> Vec<Record<R>> {
            hs.into_iter()
                .map(|h| h.join().expect("bench: a benchmark thread panicked"))
                .collect()
        };
        (pairs, join(base_handles), join(handles))
    });
    let collect = |m: &mut Measurement, records: Vec<Record<R>>| {
        let mut samples = Vec::new();
        for record in records {
            m.per_thread.push(record.latencies.len() as u64);
            m.latencies.extend(record.latencies);
            samples.extend(record.samples);
        }
        m.extra.push(("threads", threads.to_string()));
        samples
    };
    let mut scenario = Measurement::interleaved(&pairs);
    let scenario_samples = collect(&mut scenario, records);
    let base_total = pairs
        .iter()
        .fold(Slice::default(), |acc, (b, _)| acc.add(*b));
    let mut baseline = Measurement {
        total: base_total,
        ..Measurement::default()
    };
    let baseline_samples = collect(&mut baseline, base_records);
    Crews {
        scenario,
        baseline,
        scenario_samples,
        baseline_samples,
    }
}

/// CPU time (ns) every thread of this process has run so far (`/proc/self/task/*/schedstat`;
/// threads that ended are not counted: call it around slices of persistent threads).
pub fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
