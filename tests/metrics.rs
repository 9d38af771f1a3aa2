//! What redlease reports through the `metrics` facade (cargo feature `metrics`, turned on
//! for the tests by the root package's dev-dependencies), against real redis-servers.
//!
//! A small hand-written recorder is installed once for this test binary (global, since the
//! watchdog and the worker pool report from their own threads); the tests take turns (one
//! lock) and each compares the values after its steps with those before, so the counts are
//! exact.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use redlease::metrics as m;
use redlease::{Error, LossReason, queue::JobError};
use redlease_suite::testkit::{await_condition, client, connection, server};

/// The samples of one histogram.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Every metric registered, by its name and sorted labels (`name{k=v,k=v}`).
#[derive(Default)]
struct Store {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
    units: Mutex<HashMap<String, Option<Unit>>>,
}

fn id(key: &Key) -> String {
    let labels: BTreeMap<&str, &str> = key.labels().map(|l| (l.key(), l.value())).collect();
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for &'static Store {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.units
            .lock()
            .unwrap()
            .insert(key.as_str().to_owned(), unit);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.units
            .lock()
            .unwrap()
            .insert(key.as_str().to_owned(), unit);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.units
            .lock()
            .unwrap()
            .insert(key.as_str().to_owned(), unit);
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut all = self.counters.lock().unwrap();
        Counter::from_arc(all.entry(id(key)).or_default().clone())
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut all = self.gauges.lock().unwrap();
        Gauge::from_arc(all.entry(id(key)).or_default().clone())
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut all = self.histograms.lock().unwrap();
        Histogram::from_arc(all.entry(id(key)).or_default().clone())
    }
}

/// What the store holds at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
struct Snapshot {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
}

impl Snapshot {
    fn take() -> Snapshot {
        let s = store();
        Snapshot {
            counters: (s.counters.lock().unwrap().iter())
                .map(|(k, v)| (k.clone(), v.load(Ordering::SeqCst)))
                .collect(),
            gauges: (s.gauges.lock().unwrap().iter())
                .map(|(k, v)| (k.clone(), f64::from_bits(v.load(Ordering::SeqCst))))
                .collect(),
            histograms: (s.histograms.lock().unwrap().iter())
                .map(|(k, v)| (k.clone(), v.0.lock().unwrap().clone()))
                .collect(),
        }
    }

    /// What changed since `before`: counters and gauges by their difference, histograms by
    /// their new samples (only what changed is listed).
    fn since(&self, before: &Snapshot) -> Snapshot {
        let mut out = Snapshot::default();
        for (k, v) in &self.counters {
            let d = v - before.counters.get(k).copied().unwrap_or(0);
            if d != 0 {
                out.counters.insert(k.clone(), d);
            }
        }
        for (k, v) in &self.gauges {
            let d = v - before.gauges.get(k).copied().unwrap_or(0.0);
            if d != 0.0 {
                out.gauges.insert(k.clone(), d);
            }
        }
        for (k, v) in &self.histograms {
            let old = before.histograms.get(k).map_or(0, Vec::len);
            if v.len() > old {
                out.histograms.insert(k.clone(), v[old..].to_vec());
            }
        }
        out
    }

    fn counter(&self, id: &str) -> u64 {
        self.counters.get(id).copied().unwrap_or(0)
    }

    fn samples(&self, id: &str) -> &[f64] {
        self.histograms.get(id).map_or(&[], Vec::as_slice)
    }

    /// The counters and histograms whose name is `name`, as `id -> count or samples`.
    fn named(&self, name: &str) -> BTreeMap<String, usize> {
        let prefix = format!("{name}{{");
        let counters = self.counters.iter().map(|(k, v)| (k, *v as usize));
        let histograms = self.histograms.iter().map(|(k, v)| (k, v.len()));
        counters
            .chain(histograms)
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, v)| (k.clone(), v))
            .collect()
    }
}

fn store() -> &'static Store {
    static STORE: OnceLock<&'static Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let store: &'static Store = Box::leak(Box::default());
        metrics::set_global_recorder(store).expect("the only recorder of this binary");
        store
    })
}

/// One test at a time (they share the recorder and its lock-kind labels).
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    store();
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

fn ids(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[test]
fn an_acquisition_a_hold_and_a_contended_timeout() {
    let _turn = turn();
    let server = server();
    let client = client(&server, Duration::from_millis(300));
    let before = Snapshot::take();

    let guard = client.lock("m-lock").acquire().unwrap();
    let during = Snapshot::take().since(&before);
    assert_eq!(
        during.gauges["redlease.lock.held{redlease.lock.kind=lease}"],
        1.0
    );
    let wait = Duration::from_millis(100);
    let refused = client.lock("m-lock").wait(wait).acquire().unwrap_err();
    assert!(matches!(refused, Error::Timeout { .. }), "{refused}");
    assert!(client.lock("m-lock").try_acquire().unwrap().is_none());
    guard.release().unwrap();
    let permit = client.semaphore("m-sem", 2).acquire().unwrap();
    drop(permit);
    client
        .legacy_lock("m-legacy")
        .acquire()
        .unwrap()
        .release()
        .unwrap();

    let after = Snapshot::take().since(&before);
    let acquire = "redlease.lock.acquire.duration{redlease.lock.kind=lease,redlease.outcome=";
    assert_eq!(
        after.named(m::LOCK_ACQUIRE_DURATION),
        ids(&[
            (&format!("{acquire}acquired}}"), 1),
            (&format!("{acquire}busy}}"), 1),
            (&format!("{acquire}timeout}}"), 1),
            (
                "redlease.lock.acquire.duration{redlease.lock.kind=permit,redlease.outcome=acquired}",
                1
            ),
            (
                "redlease.lock.acquire.duration{redlease.lock.kind=legacy,redlease.outcome=acquired}",
                1
            ),
        ])
    );
    // The timed-out acquisition waited its whole wait.
    let timed_out = after.samples(&format!("{acquire}timeout}}"))[0];
    assert!(timed_out >= wait.as_secs_f64(), "{timed_out}");
    // Every guard ended: nothing held, one hold each.
    assert_eq!(after.gauges, BTreeMap::new());
    assert_eq!(
        after.named(m::LOCK_HOLD_DURATION),
        ids(&[
            ("redlease.lock.hold.duration{redlease.lock.kind=lease}", 1),
            ("redlease.lock.hold.duration{redlease.lock.kind=permit}", 1),
            ("redlease.lock.hold.duration{redlease.lock.kind=legacy}", 1),
        ])
    );
    assert_eq!(after.named(m::LOCK_LOSSES), BTreeMap::new());
}

#[test]
fn a_lost_lease_counts_once_with_its_reason_and_renewals_by_outcome() {
    let _turn = turn();
    let server = server();
    let client = client(&server, Duration::from_millis(300));
    let before = Snapshot::take();

    // Watched: the watchdog renews it (a 300 ms lease renewed every 100 ms).
    let watched = client
        .lock("m-renewed")
        .ttl(Duration::from_millis(300))
        .acquire()
        .unwrap();
    let ok = "redlease.lock.renewals{redlease.lock.kind=lease,redlease.outcome=ok}";
    await_condition(Duration::from_secs(10), || {
        Snapshot::take().since(&before).counter(ok) >= 2
    });
    watched.release().unwrap();

    // Unwatched, its key deleted behind its back: the extension finds it gone.
    let mut guard = client
        .lock("m-lost")
        .watchdog(false)
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let _: () = redis::Commands::del(&mut connection(&server), "redlease:{m-lost}:lock").unwrap();
    let renewals_before = Snapshot::take();
    let err = guard.extend().unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotOwner {
                reason: LossReason::Expired,
                ..
            }
        ),
        "{err}"
    );
    // Known lost now: a second extension sends nothing and is no second loss.
    assert!(guard.extend().is_err());
    drop(guard);

    let after = Snapshot::take().since(&before);
    assert_eq!(
        after.named(m::LOCK_LOSSES),
        ids(&[(
            "redlease.lock.losses{redlease.lock.kind=lease,redlease.loss.reason=expired}",
            1
        )])
    );
    let renewals = Snapshot::take().since(&renewals_before);
    assert_eq!(
        renewals.named(m::LOCK_RENEWALS),
        ids(&[(
            "redlease.lock.renewals{redlease.lock.kind=lease,redlease.outcome=not_owner}",
            1
        )])
    );
    assert_eq!(after.gauges, BTreeMap::new(), "both guards ended");
    assert_eq!(
        after
            .samples("redlease.lock.hold.duration{redlease.lock.kind=lease}")
            .len(),
        2
    );
}

/// `name{messaging labels}` of queue `q`.
fn queue_id(name: &str, op: Option<(&str, Option<&str>)>, extra: &[(&str, &str)]) -> String {
    let mut labels: BTreeMap<&str, &str> = BTreeMap::new();
    labels.insert(m::MESSAGING_SYSTEM, m::SYSTEM);
    labels.insert(m::MESSAGING_DESTINATION_NAME, "m-queue");
    if let Some((op, op_type)) = op {
        labels.insert(m::MESSAGING_OPERATION_NAME, op);
        if let Some(t) = op_type {
            labels.insert(m::MESSAGING_OPERATION_TYPE, t);
        }
    }
    labels.extend(extra.iter().copied());
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

#[test]
fn queue_pushes_takes_acks_and_nacks_to_the_dead_list() {
    let _turn = turn();
    let server = server();
    let client = client(&server, Duration::from_millis(300));
    let queue = client
        .queue("m-queue")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let before = Snapshot::take();

    queue.push("a").unwrap();
    queue.push_many(["b", "c"]).unwrap();
    let wait = Duration::from_secs(5);
    queue.take(wait).unwrap().unwrap().ack().unwrap();
    // "b": nacked, retried at once (behind "c"), nacked again: dead after its 2 deliveries.
    queue.take(wait).unwrap().unwrap().nack().unwrap();
    let c = queue.take(wait).unwrap().unwrap();
    assert_eq!(c.payload(), b"c");
    c.ack().unwrap();
    let again = queue.take(wait).unwrap().unwrap();
    assert_eq!(again.payload(), b"b");
    again
        .fail("broken", redlease::queue::Retry::Backoff)
        .unwrap();
    // Nothing left: a take that waits and finds nothing is no error.
    assert!(queue.take(Duration::from_millis(20)).unwrap().is_none());
    assert_eq!(queue.stats().unwrap().dead, 1);

    let after = Snapshot::take().since(&before);
    let sent = queue_id(m::CLIENT_SENT_MESSAGES, Some(("push", None)), &[]);
    let consumed = queue_id(m::CLIENT_CONSUMED_MESSAGES, Some(("take", None)), &[]);
    assert_eq!(after.named(m::CLIENT_SENT_MESSAGES), ids(&[(&sent, 3)]));
    assert_eq!(
        after.named(m::CLIENT_CONSUMED_MESSAGES),
        ids(&[(&consumed, 4)])
    );
    let duration = |op, t| queue_id(m::CLIENT_OPERATION_DURATION, Some((op, Some(t))), &[]);
    assert_eq!(
        after.named(m::CLIENT_OPERATION_DURATION),
        ids(&[
            (&duration("push", "send"), 2),
            (&duration("take", "receive"), 5),
            (&duration("ack", "settle"), 2),
            (&duration("nack", "settle"), 2),
        ])
    );
    let settled = |o| queue_id(m::JOBS_SETTLED, None, &[(m::OUTCOME, o)]);
    assert_eq!(
        after.named(m::JOBS_SETTLED),
        ids(&[
            (&settled("acked"), 2),
            (&settled("retried"), 1),
            (&settled("dead"), 1)
        ])
    );
    // The empty take waited its 20 ms.
    let takes = after.samples(&duration("take", "receive"));
    assert!(takes.iter().any(|s| *s >= 0.02), "{takes:?}");
    // Each delivery held a job lease, ended with its settlement.
    assert_eq!(after.gauges, BTreeMap::new());
    assert_eq!(
        after.named(m::LOCK_HOLD_DURATION),
        ids(&[("redlease.lock.hold.duration{redlease.lock.kind=job}", 4)])
    );
}

#[test]
fn an_ack_refused_counts_as_not_owner_with_its_error_type() {
    let _turn = turn();
    let server = server();
    let client = client(&server, Duration::from_millis(300));
    let queue = client.queue("m-queue").unwrap();
    queue.push("x").unwrap();
    let job = queue.take(Duration::from_secs(5)).unwrap().unwrap();
    // Cancelled from elsewhere while in flight: its lease ends, its ack is refused.
    queue.cancel(job.id(), "stop").unwrap();
    let before = Snapshot::take();
    let refused = job.ack().unwrap_err();
    assert!(matches!(refused, Error::NotOwner { .. }), "{refused}");
    let after = Snapshot::take().since(&before);
    assert_eq!(
        after.named(m::JOBS_SETTLED),
        ids(&[(
            &queue_id(m::JOBS_SETTLED, None, &[(m::OUTCOME, "not_owner")]),
            1
        )])
    );
    let failed = queue_id(
        m::CLIENT_OPERATION_DURATION,
        Some(("ack", Some("settle"))),
        &[(m::ERROR_TYPE, "not_owner")],
    );
    assert_eq!(
        after.named(m::CLIENT_OPERATION_DURATION),
        ids(&[(&failed, 1)])
    );
}

#[test]
fn batch_takes_and_acks_count_every_job() {
    let _turn = turn();
    let server = server();
    let client = client(&server, Duration::from_millis(300));
    let queue = client.queue("m-queue").unwrap();
    let before = Snapshot::take();
    queue.push_many(["a", "b", "c"]).unwrap();
    let jobs = queue.take_batch(3, Duration::from_secs(5)).unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(queue.ack_batch(jobs).iter().all(Result::is_ok));
    let after = Snapshot::take().since(&before);
    let consumed = queue_id(m::CLIENT_CONSUMED_MESSAGES, Some(("take", None)), &[]);
    assert_eq!(after.counter(&consumed), 3);
    let acked = queue_id(m::JOBS_SETTLED, None, &[(m::OUTCOME, "acked")]);
    assert_eq!(after.named(m::JOBS_SETTLED), ids(&[(&acked, 3)]));
    assert_eq!(after.gauges, BTreeMap::new(), "every job lease ended");
}

#[test]
fn the_worker_pool_times_each_handler_run() {
    let _turn = turn();
    let server = server();
    let client = client(&server, Duration::from_millis(300));
    let queue = client
        .queue("m-queue")
        .unwrap()
        .max_deliveries(1)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let before = Snapshot::take();
    queue.push_many(["ok", "ok", "fail"]).unwrap();
    let workers = queue
        .work(1, |job| {
            std::thread::sleep(Duration::from_millis(5));
            if job.payload() == b"fail" {
                Err(JobError::new("no"))
            } else {
                Ok(())
            }
        })
        .unwrap();
    let settled = |o| queue_id(m::JOBS_SETTLED, None, &[(m::OUTCOME, o)]);
    await_condition(Duration::from_secs(10), || {
        let now = Snapshot::take().since(&before);
        now.counter(&settled("acked")) == 2 && now.counter(&settled("dead")) == 1
    });
    workers.stop();
    let after = Snapshot::take().since(&before);
    let ok = queue_id(m::PROCESS_DURATION, Some(("process", None)), &[]);
    let failed = queue_id(
        m::PROCESS_DURATION,
        Some(("process", None)),
        &[(m::ERROR_TYPE, "handler_error")],
    );
    assert_eq!(
        after.named(m::PROCESS_DURATION),
        ids(&[(&ok, 2), (&failed, 1)])
    );
    // Each run slept 5 ms.
    assert!(after.samples(&ok).iter().all(|s| *s >= 0.005), "{after:?}");
}

#[test]
fn describe_gives_units() {
    let _turn = turn();
    m::describe();
    let units = store().units.lock().unwrap();
    assert_eq!(units[m::CLIENT_OPERATION_DURATION], Some(Unit::Seconds));
    assert_eq!(units[m::LOCK_HELD], Some(Unit::Count));
    assert_eq!(units.len(), 10);
}
