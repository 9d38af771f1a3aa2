//! Metrics through the [`metrics`](https://docs.rs/metrics) crate's facade (cargo feature
//! `metrics`): counters and histograms for the queue under OpenTelemetry's messaging names,
//! and named lock metrics. The library installs no exporter: install any recorder
//! (`metrics-exporter-prometheus`, an OpenTelemetry bridge, ...) and these appear; without
//! one each call site costs a thread-local read and a call into the facade's no-op recorder.
//!
//! The names and label keys below are constants, for dashboards and alerts. Durations are
//! histograms in seconds. [`describe`] gives each metric its unit and description (call it
//! once after installing the recorder, if the exporter shows them).
//!
//! ```
//! use redlease::metrics;
//!
//! // After installing the application's recorder (e.g. a Prometheus exporter's):
//! metrics::describe();
//! // Dashboards and alerts name the metrics and labels through these constants, e.g. the
//! // dead letters of one queue: redlease.queue.jobs.settled{redlease.outcome="dead"}.
//! assert_eq!(metrics::JOBS_SETTLED, "redlease.queue.jobs.settled");
//! assert_eq!(metrics::OUTCOME, "redlease.outcome");
//! assert_eq!(metrics::MESSAGING_DESTINATION_NAME, "messaging.destination.name");
//! ```
//!
//! # Queue (OpenTelemetry messaging conventions)
//!
//! | Metric | Kind | Labels |
//! |---|---|---|
//! | [`CLIENT_OPERATION_DURATION`] `messaging.client.operation.duration` | histogram, s | [`MESSAGING_SYSTEM`], [`MESSAGING_OPERATION_NAME`] (`push`, `take`, `ack`, `nack`), [`MESSAGING_OPERATION_TYPE`] (`send`, `receive`, `settle`), [`MESSAGING_DESTINATION_NAME`], [`ERROR_TYPE`] when it failed |
//! | [`CLIENT_SENT_MESSAGES`] `messaging.client.sent.messages` | counter | [`MESSAGING_SYSTEM`], [`MESSAGING_OPERATION_NAME`] (`push`), [`MESSAGING_DESTINATION_NAME`], [`ERROR_TYPE`] when the push failed |
//! | [`CLIENT_CONSUMED_MESSAGES`] `messaging.client.consumed.messages` | counter | [`MESSAGING_SYSTEM`], [`MESSAGING_OPERATION_NAME`] (`take`), [`MESSAGING_DESTINATION_NAME`] |
//! | [`PROCESS_DURATION`] `messaging.process.duration` | histogram, s | [`MESSAGING_SYSTEM`], [`MESSAGING_OPERATION_NAME`] (`process`), [`MESSAGING_DESTINATION_NAME`], [`ERROR_TYPE`] (`handler_error`, `panic`) when the handler failed |
//! | [`JOBS_SETTLED`] `redlease.queue.jobs.settled` | counter | [`MESSAGING_SYSTEM`], [`MESSAGING_DESTINATION_NAME`], [`OUTCOME`] (`acked`, `retried`, `dead`, `rate_limited`, `not_owner`, `error`) |
//!
//! A take's duration includes its wait for a job (a blocking take that finds nothing for
//! its whole wait records the wait, with no error). Every job handed to the application
//! counts once in `consumed` (a take, a batch take, the next job of an ack-and-take), and
//! every settlement once in `settled` (an `ack_batch` too). A push of `n` jobs counts `n`
//! sent messages (a schedule's occurrences, pushed by the server's scripts, are not sent by
//! this client). A batch take and an `ack_batch` are not timed as operations. The worker pool
//! records `process.duration` (the handler's run) for [`Queue::work`](crate::queue::Queue::work);
//! the batched pool does not.
//!
//! # Locks
//!
//! | Metric | Kind | Labels |
//! |---|---|---|
//! | [`LOCK_ACQUIRE_DURATION`] `redlease.lock.acquire.duration` | histogram, s | [`LOCK_KIND`], [`OUTCOME`] (`acquired`, `busy`, `timeout`, `error`) |
//! | [`LOCK_HELD`] `redlease.lock.held` | gauge (up/down) | [`LOCK_KIND`] |
//! | [`LOCK_HOLD_DURATION`] `redlease.lock.hold.duration` | histogram, s | [`LOCK_KIND`] |
//! | [`LOCK_RENEWALS`] `redlease.lock.renewals` | counter | [`LOCK_KIND`], [`OUTCOME`] (`ok`, `not_owner`, `error`) |
//! | [`LOCK_LOSSES`] `redlease.lock.losses` | counter | [`LOCK_KIND`], [`LOSS_REASON`] |
//!
//! [`LOCK_KIND`] is one of `lease`, `reentrant`, `fair`, `read`, `write`, `permit` (a
//! semaphore), `job` (a queue job's lease), `redlock`, `legacy`. The acquire duration is the
//! whole acquisition, waiting included (the `redlease.acquire` span's). `held` counts live
//! guards ([`LockGuard`](crate::lock::LockGuard), [`RedLockGuard`](crate::lock::RedLockGuard),
//! [`LegacyGuard`](crate::lock::LegacyGuard), and the lease inside every queue
//! [`Job`](crate::queue::Job)): up when one is made, down when it is dropped (released, acked,
//! nacked, lost or not), and `hold.duration` records its life then, from the acquisition.
//! Renewals are the watchdog's and [`LockGuard::extend`](crate::lock::LockGuard::extend)'s.
//! A lease is counted lost once, when its loss is first known (the reason as
//! [`LossReason`]: `expired`, `taken`, `renewal_failed`,
//! `watchdog_stopped`, `max_hold_reached`, `validity_passed`, `cancelled`).
//!
//! # Cardinality
//!
//! Label values come from small fixed sets, plus the queue name
//! ([`MESSAGING_DESTINATION_NAME`], as the conventions ask when destinations are few). Lock
//! and semaphore names are never labels (an application may lock one name per order or
//! user), nor are job ids, tokens or error messages.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::metrics::{Key, Label, Level, Metadata, SharedString, Unit};
use redlease_core::{Error, LossReason};

use crate::observe::outcome::{Op, Settled};

/// `messaging.client.operation.duration`: how long a queue call took (push, take, ack, nack),
/// in seconds.
pub const CLIENT_OPERATION_DURATION: &str = "messaging.client.operation.duration";
/// `messaging.client.sent.messages`: jobs pushed.
pub const CLIENT_SENT_MESSAGES: &str = "messaging.client.sent.messages";
/// `messaging.client.consumed.messages`: jobs handed to the application.
pub const CLIENT_CONSUMED_MESSAGES: &str = "messaging.client.consumed.messages";
/// `messaging.process.duration`: how long the worker pool's handler ran, in seconds.
pub const PROCESS_DURATION: &str = "messaging.process.duration";
/// `redlease.queue.jobs.settled`: jobs settled by this client, by outcome.
pub const JOBS_SETTLED: &str = "redlease.queue.jobs.settled";
/// `redlease.lock.acquire.duration`: how long an acquisition took, waiting included, in
/// seconds.
pub const LOCK_ACQUIRE_DURATION: &str = "redlease.lock.acquire.duration";
/// `redlease.lock.held`: leases held by live guards of this process (a gauge).
pub const LOCK_HELD: &str = "redlease.lock.held";
/// `redlease.lock.hold.duration`: how long a guard lived, from its acquisition, in seconds.
pub const LOCK_HOLD_DURATION: &str = "redlease.lock.hold.duration";
/// `redlease.lock.renewals`: lease renewals (the watchdog's, and explicit extensions).
pub const LOCK_RENEWALS: &str = "redlease.lock.renewals";
/// `redlease.lock.losses`: leases lost, by reason.
pub const LOCK_LOSSES: &str = "redlease.lock.losses";

/// Label `messaging.system`: always [`SYSTEM`].
pub const MESSAGING_SYSTEM: &str = "messaging.system";
/// Label `messaging.operation.name`: `push`, `take`, `ack`, `nack`, `process`.
pub const MESSAGING_OPERATION_NAME: &str = "messaging.operation.name";
/// Label `messaging.operation.type`: `send`, `receive`, `settle`.
pub const MESSAGING_OPERATION_TYPE: &str = "messaging.operation.type";
/// Label `messaging.destination.name`: the queue's name.
pub const MESSAGING_DESTINATION_NAME: &str = "messaging.destination.name";
/// Label `error.type`: present only on failures; a variant of [`Error`] in snake case
/// (`timeout`, `not_owner`, `unavailable`, ...), or `handler_error` / `panic` for a handler.
pub const ERROR_TYPE: &str = "error.type";
/// Label `redlease.lock.kind`: what a lease is held on.
pub const LOCK_KIND: &str = "redlease.lock.kind";
/// Label `redlease.outcome`: how an acquisition, a renewal or a settlement ended.
pub const OUTCOME: &str = "redlease.outcome";
/// Label `redlease.loss.reason`: why a lease was lost.
pub const LOSS_REASON: &str = "redlease.loss.reason";
/// The value of [`MESSAGING_SYSTEM`].
pub const SYSTEM: &str = "redlease";

/// Gives every metric above its unit and description in the installed recorder (what an
/// exporter shows as `# HELP` and the unit). Optional; call it after installing the recorder.
pub fn describe() {
    ::metrics::with_recorder(|r| {
        let hist = |name: &'static str, what: &'static str| {
            r.describe_histogram(name.into(), Some(Unit::Seconds), what.into());
        };
        let count = |name: &'static str, what: &'static str| {
            r.describe_counter(name.into(), Some(Unit::Count), what.into());
        };
        hist(
            CLIENT_OPERATION_DURATION,
            "Duration of a queue operation (push, take, ack, nack)",
        );
        count(CLIENT_SENT_MESSAGES, "Jobs pushed");
        count(CLIENT_CONSUMED_MESSAGES, "Jobs handed to the application");
        hist(PROCESS_DURATION, "Duration of a worker pool handler's run");
        count(JOBS_SETTLED, "Jobs settled, by outcome");
        hist(
            LOCK_ACQUIRE_DURATION,
            "Duration of an acquisition, waiting included",
        );
        r.describe_gauge(
            LOCK_HELD.into(),
            Some(Unit::Count),
            "Leases held by live guards".into(),
        );
        hist(LOCK_HOLD_DURATION, "How long a guard lived");
        count(LOCK_RENEWALS, "Lease renewals, by outcome");
        count(LOCK_LOSSES, "Leases lost, by reason");
    });
}

/// Where the metrics come from (the facade's metadata; recorders may filter on it).
static META: Metadata<'static> = Metadata::new("redlease", Level::INFO, Some(module_path!()));

/// A metric key built once and kept (its labels are all `'static` or the queue's name).
type Slot = OnceLock<Key>;

fn cached(slot: &Slot, build: impl FnOnce() -> Key) -> &Key {
    slot.get_or_init(build)
}

fn label(key: &'static str, value: &'static str) -> Label {
    Label::from_static_parts(key, value)
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

// ---- locks ----

/// The lock kinds, in the order of the key tables.
const KINDS: [&str; 9] = [
    "lease",
    "reentrant",
    "fair",
    "read",
    "write",
    "permit",
    "job",
    "redlock",
    "legacy",
];

fn kind_index(kind: &str) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0)
}

const ACQUIRE_OUTCOMES: [&str; 4] = ["acquired", "busy", "timeout", "error"];
const RENEWAL_OUTCOMES: [&str; 3] = ["ok", "not_owner", "error"];
const REASONS: [&str; 8] = [
    "expired",
    "taken",
    "renewal_failed",
    "watchdog_stopped",
    "max_hold_reached",
    "validity_passed",
    "cancelled",
    "other",
];

static ACQUIRE: [Slot; 9 * 4] = [const { OnceLock::new() }; 9 * 4];
static RENEWALS: [Slot; 9 * 3] = [const { OnceLock::new() }; 9 * 3];
static LOSSES: [Slot; 9 * 8] = [const { OnceLock::new() }; 9 * 8];
static HELD: [Slot; 9] = [const { OnceLock::new() }; 9];
static HOLD: [Slot; 9] = [const { OnceLock::new() }; 9];

/// The key `name{kind, key=value}` of `table[kind * width + i]`.
fn lock_key<const N: usize>(
    table: &'static [Slot],
    name: &'static str,
    kind: &'static str,
    second: Option<(&'static str, &'static [&'static str; N], usize)>,
) -> &'static Key {
    let k = kind_index(kind);
    let (slot, extra) = match second {
        Some((key, values, i)) => (k * N + i, Some(Label::from_static_parts(key, values[i]))),
        None => (k, None),
    };
    cached(&table[slot], || {
        let mut labels = vec![Label::from_static_parts(LOCK_KIND, KINDS[k])];
        labels.extend(extra);
        Key::from_parts(name, labels)
    })
}

/// An acquisition of a lock of `kind` ended with `outcome` (one of `acquired`, `busy`,
/// `timeout`, `error`) after `waited`.
pub(crate) fn acquired(kind: &'static str, waited: Duration, outcome: &'static str) {
    let i = ACQUIRE_OUTCOMES
        .iter()
        .position(|o| *o == outcome)
        .unwrap_or(3);
    let key = lock_key(
        &ACQUIRE,
        LOCK_ACQUIRE_DURATION,
        kind,
        Some((OUTCOME, &ACQUIRE_OUTCOMES, i)),
    );
    ::metrics::with_recorder(|r| r.register_histogram(key, &META).record(seconds(waited)));
}

/// A guard of `kind` was made.
pub(crate) fn held(kind: &'static str) {
    let key = lock_key::<0>(&HELD, LOCK_HELD, kind, None);
    ::metrics::with_recorder(|r| r.register_gauge(key, &META).increment(1.0));
}

/// A guard of `kind` ended after `held` (from its acquisition).
pub(crate) fn unheld(kind: &'static str, held: Duration) {
    let gauge = lock_key::<0>(&HELD, LOCK_HELD, kind, None);
    let hold = lock_key::<0>(&HOLD, LOCK_HOLD_DURATION, kind, None);
    ::metrics::with_recorder(|r| {
        r.register_gauge(gauge, &META).decrement(1.0);
        r.register_histogram(hold, &META).record(seconds(held));
    });
}

/// A renewal (or an extension) of a lease of `kind` ended with `outcome`.
pub(crate) fn renewal<T>(kind: &'static str, outcome: &Result<T, Error>) {
    let i = match outcome {
        Ok(_) => 0,
        Err(Error::NotOwner { .. }) => 1,
        Err(_) => 2,
    };
    let key = lock_key(
        &RENEWALS,
        LOCK_RENEWALS,
        kind,
        Some((OUTCOME, &RENEWAL_OUTCOMES, i)),
    );
    ::metrics::with_recorder(|r| r.register_counter(key, &META).increment(1));
}

/// A lease of `kind` was lost.
pub(crate) fn lost(kind: &'static str, reason: LossReason) {
    let i = match reason {
        LossReason::Expired => 0,
        LossReason::Taken => 1,
        LossReason::RenewalFailed => 2,
        LossReason::WatchdogStopped => 3,
        LossReason::MaxHoldReached => 4,
        LossReason::ValidityPassed => 5,
        LossReason::Cancelled => 6,
        // `LossReason` may grow reasons; a newer one is "other" until named here.
        _ => 7,
    };
    let key = lock_key(&LOSSES, LOCK_LOSSES, kind, Some((LOSS_REASON, &REASONS, i)));
    ::metrics::with_recorder(|r| r.register_counter(key, &META).increment(1));
}

// ---- queues ----

/// The `error.type` of an error: its variant, in snake case.
pub(crate) fn error_type(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) => "invalid_argument",
        Error::Timeout { .. } => "timeout",
        Error::NotOwner { .. } => "not_owner",
        Error::WrongType { .. } => "wrong_type",
        Error::ReplicationFailed { .. } => "replication_failed",
        Error::NoQuorum { .. } => "no_quorum",
        Error::Redis { .. } => "redis",
        Error::Unavailable { .. } => "unavailable",
        Error::Configuration { .. } => "configuration",
        Error::UnexpectedReply { .. } => "unexpected_reply",
        Error::Random(_) => "random",
        Error::Driver(_) => "driver",
        Error::Finished => "finished",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

/// The metrics of one queue, held by its [`Queue`](crate::queue::Queue) (cheap to clone): its name
/// as a shared label value and the keys of the successful calls, built at first use.
#[derive(Clone)]
pub(crate) struct QueueMeter(Arc<QueueKeys>);

struct QueueKeys {
    name: SharedString,
    keys: [Slot; Hot::COUNT],
}

impl fmt::Debug for QueueMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("QueueMeter").field(&&*self.0.name).finish()
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Push => "push",
        Op::Take => "take",
        Op::Ack => "ack",
        Op::Nack => "nack",
    }
}

fn op_type(op: Op) -> &'static str {
    match op {
        Op::Push => "send",
        Op::Take => "receive",
        Op::Ack | Op::Nack => "settle",
    }
}

/// The settlements, in the order of the keys kept per queue.
const SETTLED: [Settled; 6] = [
    Settled::Acked,
    Settled::Retried,
    Settled::Dead,
    Settled::RateLimited,
    Settled::NotOwner,
    Settled::Error,
];

fn settled_name(how: Settled) -> &'static str {
    match how {
        Settled::Acked => "acked",
        Settled::Retried => "retried",
        Settled::Dead => "dead",
        Settled::RateLimited => "rate_limited",
        Settled::NotOwner => "not_owner",
        Settled::Error => "error",
    }
}

/// The keys kept per queue (the successful paths; failures build theirs).
enum Hot {}

impl Hot {
    const SENT: usize = 0;
    const CONSUMED: usize = 1;
    const PROCESS: usize = 2;
    /// Four operation durations from here, in [`Op`] order.
    const DURATION: usize = 3;
    /// Six settlements from here, in [`SETTLED`] order.
    const SETTLED: usize = 7;
    const COUNT: usize = 13;
}

impl QueueMeter {
    pub(crate) fn new(name: &str) -> Self {
        QueueMeter(Arc::new(QueueKeys {
            name: SharedString::from_shared(Arc::from(name)),
            keys: [const { OnceLock::new() }; Hot::COUNT],
        }))
    }

    fn destination(&self) -> Label {
        Label::new(MESSAGING_DESTINATION_NAME, self.0.name.clone())
    }

    /// `name{system, operation.name = op, [operation.type], destination, [error.type]}`.
    fn op_key(
        &self,
        name: &'static str,
        op: &'static str,
        op_type: Option<&'static str>,
        error: Option<&'static str>,
    ) -> Key {
        let mut labels = Vec::with_capacity(5);
        labels.push(label(MESSAGING_SYSTEM, SYSTEM));
        labels.push(label(MESSAGING_OPERATION_NAME, op));
        if let Some(t) = op_type {
            labels.push(label(MESSAGING_OPERATION_TYPE, t));
        }
        labels.push(self.destination());
        if let Some(e) = error {
            labels.push(label(ERROR_TYPE, e));
        }
        Key::from_parts(name, labels)
    }

    fn hot(&self, i: usize, build: impl FnOnce() -> Key) -> &Key {
        cached(&self.0.keys[i], build)
    }

    /// A queue call `op` ended with `outcome` after `took`.
    pub(crate) fn operation<T>(&self, op: Op, took: Duration, outcome: &Result<T, Error>) {
        let (name, kind) = (op_name(op), op_type(op));
        let failed = match outcome {
            Ok(_) => None,
            // A take that found nothing in its wait did not fail.
            Err(Error::Timeout { .. }) if op == Op::Take => None,
            Err(e) => Some(error_type(e)),
        };
        let record = |key: &Key| {
            ::metrics::with_recorder(|r| r.register_histogram(key, &META).record(seconds(took)));
        };
        match failed {
            None => {
                let i = Hot::DURATION + op as usize;
                record(self.hot(i, || {
                    self.op_key(CLIENT_OPERATION_DURATION, name, Some(kind), None)
                }));
            }
            Some(e) => record(&self.op_key(CLIENT_OPERATION_DURATION, name, Some(kind), Some(e))),
        }
    }

    /// A push of `n` jobs ended with `outcome`.
    pub(crate) fn sent<T>(&self, n: usize, outcome: &Result<T, Error>) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let add = |key: &Key| {
            ::metrics::with_recorder(|r| r.register_counter(key, &META).increment(n));
        };
        match outcome {
            Ok(_) => add(self.hot(Hot::SENT, || {
                self.op_key(CLIENT_SENT_MESSAGES, "push", None, None)
            })),
            Err(e) => add(&self.op_key(CLIENT_SENT_MESSAGES, "push", None, Some(error_type(e)))),
        }
    }

    /// A job was handed to the application.
    pub(crate) fn consumed(&self) {
        let key = self.hot(Hot::CONSUMED, || {
            self.op_key(CLIENT_CONSUMED_MESSAGES, "take", None, None)
        });
        ::metrics::with_recorder(|r| r.register_counter(key, &META).increment(1));
    }

    /// The worker pool's handler ran for `took`; `error`: how it failed.
    pub(crate) fn process_time(&self, took: Duration, error: Option<&'static str>) {
        let record = |key: &Key| {
            ::metrics::with_recorder(|r| r.register_histogram(key, &META).record(seconds(took)));
        };
        match error {
            None => record(self.hot(Hot::PROCESS, || {
                self.op_key(PROCESS_DURATION, "process", None, None)
            })),
            Some(e) => record(&self.op_key(PROCESS_DURATION, "process", None, Some(e))),
        }
    }

    /// A job was settled as `how`.
    pub(crate) fn settled(&self, how: Settled) {
        let i = SETTLED.iter().position(|s| *s == how).unwrap_or(5);
        let key = self.hot(Hot::SETTLED + i, || {
            let labels = vec![
                label(MESSAGING_SYSTEM, SYSTEM),
                self.destination(),
                label(OUTCOME, settled_name(how)),
            ];
            Key::from_parts(JOBS_SETTLED, labels)
        });
        ::metrics::with_recorder(|r| r.register_counter(key, &META).increment(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    use ::metrics::{Counter, Gauge, Histogram, KeyName, Recorder};

    /// Notes where each key a call registers lives (and its text).
    #[derive(Default)]
    struct Addresses(Mutex<Vec<(usize, String)>>);

    impl Addresses {
        fn note(&self, key: &Key) {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let text = format!("{}{{{}}}", key.name(), labels.join(","));
            self.0
                .lock()
                .unwrap()
                .push((std::ptr::from_ref(key) as usize, text));
        }
    }

    impl Recorder for Addresses {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.note(key);
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.note(key);
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            self.note(key);
            Histogram::noop()
        }
    }

    /// The successful calls reuse one key each (built at their first use, never per call),
    /// with the labels the docs list; a failure's key carries `error.type`.
    #[test]
    fn keys_of_successful_calls_are_built_once() {
        let seen = Addresses::default();
        let queue = QueueMeter::new("orders");
        ::metrics::with_local_recorder(&seen, || {
            for _ in 0..2 {
                acquired("fair", Duration::from_millis(1), "timeout");
                queue.operation(Op::Ack, Duration::ZERO, &Ok(()));
                queue.settled(Settled::Dead);
            }
            queue.operation::<()>(Op::Push, Duration::ZERO, &Err(Error::Driver("x")));
            // A take that waited in vain is no failure.
            let waited = Err::<(), _>(Error::Timeout {
                name: "orders".into(),
                waited: Duration::ZERO,
                attempts: 1,
            });
            queue.operation(Op::Take, Duration::ZERO, &waited);
        });
        let seen = seen.0.into_inner().unwrap();
        let texts: Vec<&str> = seen.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            [
                "redlease.lock.acquire.duration{redlease.lock.kind=fair,redlease.outcome=timeout}",
                "messaging.client.operation.duration{messaging.system=redlease,messaging.operation.name=ack,messaging.operation.type=settle,messaging.destination.name=orders}",
                "redlease.queue.jobs.settled{messaging.system=redlease,messaging.destination.name=orders,redlease.outcome=dead}",
                "redlease.lock.acquire.duration{redlease.lock.kind=fair,redlease.outcome=timeout}",
                "messaging.client.operation.duration{messaging.system=redlease,messaging.operation.name=ack,messaging.operation.type=settle,messaging.destination.name=orders}",
                "redlease.queue.jobs.settled{messaging.system=redlease,messaging.destination.name=orders,redlease.outcome=dead}",
                "messaging.client.operation.duration{messaging.system=redlease,messaging.operation.name=push,messaging.operation.type=send,messaging.destination.name=orders,error.type=driver}",
                "messaging.client.operation.duration{messaging.system=redlease,messaging.operation.name=take,messaging.operation.type=receive,messaging.destination.name=orders}",
            ]
        );
        for i in 0..3 {
            assert_eq!(seen[i].0, seen[i + 3].0, "{} was built again", seen[i].1);
        }
    }

    /// What a hook costs with the feature on and no recorder installed (prints ns per call):
    /// `cargo test -p redlease --features metrics --release -- --ignored --nocapture cost`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn cost_without_a_recorder() {
        let queue = QueueMeter::new("orders");
        let n = 1_000_000u32;
        let started = Instant::now();
        for _ in 0..n {
            acquired("lease", Duration::from_millis(1), "acquired");
        }
        let lock = started.elapsed() / n;
        let started = Instant::now();
        for _ in 0..n {
            queue.operation(Op::Ack, Duration::ZERO, &Ok(()));
            queue.settled(Settled::Acked);
        }
        let ack = started.elapsed() / n;
        println!("no recorder: acquisition hook {lock:?}, ack hooks (duration + settled) {ack:?}");
    }
}
