//! Running seeds: one run, its report, and many runs over threads.

use std::fmt::Write as _;

use redlease_core::keys::Keyspace;

use crate::check::{Judged, Violation, check_counted};
use crate::faults::{FaultSet, Plan};
use crate::history::History;
use crate::mutation::Mutation;
use crate::scenario::{Primitive, RunSpec, build};
use redlease::memory::MemoryServer;

/// One finished run.
pub struct RunOutcome {
    /// What ran.
    pub spec: RunSpec,
    /// The fault plan.
    pub plan: Plan,
    /// How many injections struck.
    pub injected: u64,
    /// What was recorded.
    pub history: History,
    /// What the checker found.
    pub violations: Vec<Violation>,
    /// How many events each property judged.
    pub judged: Judged,
}

/// Runs one seed; a failing seed is run again with its log on, for the report.
pub fn run(spec: RunSpec) -> RunOutcome {
    let o = run_logged(spec, false);
    if o.violations.is_empty() {
        o
    } else {
        run_logged(spec, true)
    }
}

/// Runs one seed, recording a readable log if `log`.
pub fn run_logged(spec: RunSpec, log: bool) -> RunOutcome {
    let (mut world, plan) = build(&spec);
    world.log(log);
    let (mut history, injected, server) = world.run_keep();
    // The parts of the queue's keys the run uses: plain (`q:`), grouped (`q:g:`), or both.
    let parts: &[&str] = match spec.primitive {
        Primitive::Queue => &["q:"],
        Primitive::Groups => &["q:g:"],
        Primitive::Mixed => &["q:", "q:g:"],
        _ => &[],
    };
    let stem = Keyspace::default().stem("q").unwrap_or_default();
    for part in parts {
        let dead_key = format!("{stem}:{part}dead");
        if let Ok(redlease_core::Reply::Array(items)) =
            server.call(&["LRANGE", &dead_key, "0", "-1"])
        {
            history.dead.extend(items.iter().filter_map(|r| match r {
                redlease_core::Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            }));
        }
    }
    if !parts.is_empty() {
        let mut totals = std::collections::BTreeMap::new();
        for part in parts {
            for (event, n) in counters(&server, &format!("{part}counts")) {
                *totals.entry(event).or_insert(0) += n;
            }
        }
        history.counted = Some(totals);
        // (The groups runs too: their schedule on the grouped keys is refused by the core,
        // so no occurrence is left behind with no group to lease it.)
        history.final_jobs = Some(final_jobs(&server, &stem, parts));
        history.parked_at_end = parked(&server, &stem);
    }
    let (violations, judged) = check_counted(&history, plan.faults);
    RunOutcome {
        spec,
        plan,
        injected,
        history,
        violations,
        judged,
    }
}

/// A queue's per-minute counters (`<stem>:<part>:<minute>:<event>`; part `q:counts`, or
/// `q:g:counts` for the grouped keys) summed by event, `acked_taken` read as one `acked`
/// and one `taken` (as `Queue::counts` does).
fn counters(server: &MemoryServer, part: &str) -> std::collections::BTreeMap<String, i64> {
    let mut totals = std::collections::BTreeMap::new();
    let pattern = Keyspace::default()
        .stem("q")
        .map(|s| format!("{s}:{part}:*"))
        .unwrap_or_default();
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    while let Ok(redlease_core::Reply::Array(page)) =
        server.call(&["SCAN", &cursor, "MATCH", &pattern, "COUNT", "1000"])
    {
        let mut page = page.into_iter();
        let (Some(redlease_core::Reply::Bulk(next)), Some(redlease_core::Reply::Array(found))) =
            (page.next(), page.next())
        else {
            break;
        };
        keys.extend(found);
        cursor = String::from_utf8_lossy(&next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    for key in keys {
        let redlease_core::Reply::Bulk(key) = key else {
            continue;
        };
        let key = String::from_utf8_lossy(&key).into_owned();
        let n = match server.call(&["GET", &key]) {
            Ok(redlease_core::Reply::Bulk(v)) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
            _ => 0,
        };
        let event = key.rsplit(':').next().unwrap_or_default();
        if event == "acked_taken" {
            *totals.entry("acked".to_owned()).or_insert(0) += n;
            *totals.entry("taken".to_owned()).or_insert(0) += n;
        } else {
            *totals.entry(event.to_owned()).or_insert(0) += n;
        }
    }
    totals
}

/// Where each job of the queue is on `server` (see [`History::final_jobs`]): the ready,
/// delayed and in-flight sets, the leases, the dead list and the payloads of each part of
/// the queue's keys, and each group's ready set.
fn final_jobs(
    server: &MemoryServer,
    stem: &str,
    parts: &[&str],
) -> std::collections::BTreeMap<String, Vec<&'static str>> {
    use redlease_core::Reply;
    let mut out: std::collections::BTreeMap<String, Vec<&'static str>> = Default::default();
    let bulk = |r: &Reply| match r {
        Reply::Bulk(b) => Some(b.to_vec()),
        _ => None,
    };
    let mut add = |items: Vec<Vec<u8>>, place: &'static str| {
        for b in items {
            // The enqueue times (`<id>\xff`) and death records (`<id>\xfe`) beside the
            // payloads: the job's own, noted as such.
            let (id, place) = match b.split_last() {
                Some((255, id)) if place == "payload" => (id, "enqueued-at"),
                Some((254, id)) if place == "payload" => (id, "death-record"),
                _ => (&b[..], place),
            };
            out.entry(String::from_utf8_lossy(id).into_owned())
                .or_default()
                .push(place);
        }
    };
    let read = |args: &[&str]| -> Vec<Reply> {
        match server.call(args) {
            Ok(Reply::Array(items)) => items,
            _ => Vec::new(),
        }
    };
    for part in parts {
        let k = |name: &str| format!("{stem}:{part}{name}");
        for (name, place) in [
            ("ready", "ready"),
            ("delayed", "delayed"),
            ("inflight", "in-flight"),
        ] {
            add(
                read(&["ZRANGE", &k(name), "0", "-1"])
                    .iter()
                    .filter_map(bulk)
                    .collect(),
                place,
            );
        }
        add(
            read(&["LRANGE", &k("dead"), "0", "-1"])
                .iter()
                .filter_map(bulk)
                .collect(),
            "dead",
        );
        // (The in-process server has no HKEYS: the fields are HGETALL's even items.)
        for (name, place) in [("leases", "leased"), ("payloads", "payload")] {
            add(
                read(&["HGETALL", &k(name)])
                    .iter()
                    .step_by(2)
                    .filter_map(bulk)
                    .collect(),
                place,
            );
        }
        if part.ends_with("g:") {
            for key in server.keys() {
                let key = String::from_utf8_lossy(&key).into_owned();
                if key.starts_with(&k("r:")) {
                    add(
                        read(&["ZRANGE", &key, "0", "-1"])
                            .iter()
                            .filter_map(bulk)
                            .collect(),
                        "group-ready",
                    );
                }
            }
        }
    }
    out
}

/// The keep-latest follow-ups parked on `server` (fields `>` + dedup id of the plain keys'
/// `dedup_of` hash: `<priority>|<id length>|<id><payload>`), each with the job holding its
/// dedup id.
fn parked(server: &MemoryServer, stem: &str) -> Vec<(String, Option<String>)> {
    use redlease_core::Reply;
    let text = |r: &Reply| match r {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let Ok(Reply::Array(items)) = server.call(&["HGETALL", &format!("{stem}:q:dedup_of")]) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for pair in items.chunks(2) {
        let (Some(field), Some(value)) = (pair.first().and_then(text), pair.get(1).and_then(text))
        else {
            continue;
        };
        let Some(dedup_id) = field.strip_prefix('>') else {
            continue;
        };
        let mut parts = value.splitn(3, '|');
        let (Some(_), Some(len), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Some(id) = len.parse::<usize>().ok().and_then(|n| rest.get(..n)) else {
            continue;
        };
        let holder = match server.call(&["HGET", &format!("{stem}:q:dedup"), dedup_id]) {
            Ok(r) => text(&r),
            Err(_) => None,
        };
        out.push((id.to_owned(), holder));
    }
    out
}

/// The command that replays `spec`.
pub fn replay_command(spec: &RunSpec) -> String {
    let mut cmd = format!(
        "SIM_SEED={} SIM_PRIMITIVE={}",
        spec.seed,
        spec.primitive.name()
    );
    if spec.mutation != Mutation::None {
        let _ = write!(cmd, " SIM_MUTATION={:?}", spec.mutation);
    }
    if spec.allowed != spec.primitive.faults() {
        let names: Vec<_> = spec.allowed.iter().map(|f| f.name()).collect();
        let _ = write!(cmd, " SIM_FAULTS={}", names.join(","));
    }
    cmd.push_str(" cargo test -p redlease-sim --test sim replay -- --nocapture");
    cmd
}

/// A failure report: the seed, the fault schedule, the history around the first violation
/// and the replay command.
pub fn report(o: &RunOutcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "simulation {} seed {} violated {} propert{}",
        o.spec.primitive.name(),
        o.spec.seed,
        o.violations.len(),
        if o.violations.len() == 1 { "y" } else { "ies" }
    );
    for v in o.violations.iter().take(5) {
        let _ = writeln!(s, "  [{}] at {} µs: {}", v.property.name(), v.at, v.what);
    }
    let _ = writeln!(s, "faults: {:?}", o.plan.faults);
    for i in &o.plan.injections {
        let _ = writeln!(s, "  at {:>9} µs: {:?}", i.at, i.what);
    }
    for c in &o.plan.clocks {
        let _ = writeln!(s, "  client {} clock: {:?}", c.client, c.clock);
    }
    if let Some(v) = o.violations.first() {
        let _ = writeln!(s, "history around {} µs:", v.at);
        let log = &o.history.log;
        let centre = log.partition_point(|(t, _)| *t < v.at);
        let from = centre.saturating_sub(40);
        let to = (centre + 15).min(log.len());
        for (t, line) in &log[from..to] {
            let _ = writeln!(s, "  {t:>9} {line}");
        }
    }
    let _ = writeln!(s, "replay: {}", replay_command(&o.spec));
    s
}

/// Totals of many runs of one primitive.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Seeds run.
    pub seeds: u64,
    /// Injections that struck.
    pub faults: u64,
    /// Runs with violations, with their reports (the first few).
    pub failures: Vec<String>,
    /// Number of runs with violations.
    pub violations: u64,
    /// Events judged, per property.
    pub judged: Judged,
}

/// Runs `seeds` (from `first`) of `primitive` on `threads` threads.
pub fn run_many(
    primitive: Primitive,
    first: u64,
    seeds: u64,
    mutation: Mutation,
    allowed: FaultSet,
    threads: usize,
) -> Totals {
    let threads = threads.max(1) as u64;
    let parts: Vec<Totals> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn(move || {
                    let mut t = Totals::default();
                    let mut seed = first + k;
                    while seed < first + seeds {
                        let o = run(RunSpec {
                            primitive,
                            seed,
                            mutation,
                            allowed,
                        });
                        t.seeds += 1;
                        t.faults += o.injected;
                        t.judged.add(&o.judged);
                        if !o.violations.is_empty() {
                            t.violations += 1;
                            if t.failures.len() < 3 {
                                t.failures.push(report(&o));
                            }
                        }
                        seed += threads;
                    }
                    t
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut total = Totals::default();
    for p in parts {
        total.seeds += p.seeds;
        total.faults += p.faults;
        total.violations += p.violations;
        total.judged.add(&p.judged);
        total.failures.extend(p.failures);
    }
    total
}
