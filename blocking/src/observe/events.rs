//! What the driver tells `tracing`: one span per acquisition, events for releases, renewals,
//! lost leases, the listener, the pool and queue jobs. Call sites stay one line; the names
//! and fields are chosen here (see `docs/observability.md`).
//!
//! Span names are constant (`redlease.acquire`, `redlease.queue.take`): the lock or queue
//! name is a field, so the number of distinct span names stays small. Queue events carry
//! OpenTelemetry's messaging attributes (`messaging.system`, `messaging.operation.name`,
//! `messaging.operation.type`, `messaging.destination.name`, `messaging.message.id`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlease_core::lease::{Acquisition, Lease, LeaseKind, LockKind};
use redlease_core::{Error, LossReason};
use tracing::field::Empty;
use tracing::{Span, debug, info_span, warn};

use crate::observe::outcome::{Op, Settled};

/// How often a warning that can repeat on every command (a missing ACL right, an exhausted
/// pool) is logged at WARN; the repeats in between are DEBUG.
const REPEAT_EVERY: Duration = Duration::from_secs(10);

/// Whether a repeating warning is due: true at most once per [`REPEAT_EVERY`] per `slot`.
fn due(slot: &AtomicU64) -> bool {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let now = u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let last = slot.load(Ordering::Relaxed);
    let every = u64::try_from(REPEAT_EVERY.as_millis()).unwrap_or(u64::MAX);
    (last == 0 || now.saturating_sub(last) >= every)
        && slot
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// The `messaging.system` of queue events.
const SYSTEM: &str = "redlease";

/// A short, stable name for what a lease is held on (a field value).
pub(crate) fn kind(kind: LeaseKind) -> &'static str {
    match kind {
        LeaseKind::Lock(LockKind::Lease) => "lease",
        LeaseKind::Lock(LockKind::Reentrant) => "reentrant",
        LeaseKind::Lock(LockKind::Fair) => "fair",
        LeaseKind::Lock(LockKind::Read) => "read",
        LeaseKind::Lock(LockKind::Write) => "write",
        LeaseKind::Permit => "permit",
        LeaseKind::Job => "job",
    }
}

/// The span of one acquisition; [`acquired`] fills in how it ended.
pub(crate) fn acquire_span(name: &str, lock_kind: LeaseKind) -> Span {
    span(name, kind(lock_kind))
}

/// The span of one acquisition of a lock of kind `kind` (`redlock`, `legacy`, ...).
pub(crate) fn span(name: &str, kind: &'static str) -> Span {
    info_span!(
        "redlease.acquire",
        redlease.lock = name,
        redlease.kind = kind,
        redlease.attempts = Empty,
        redlease.waited_ms = Empty,
        redlease.outcome = Empty,
        redlease.fence = Empty,
    )
}

/// Whether the `metrics` feature is on: an acquisition's wait is then always measured (it is
/// a histogram), not only when its span is listened to.
pub(crate) const METRICS: bool = cfg!(feature = "metrics");

/// Whether an acquisition's wait is wanted (a clock read): its span is listened to, or the
/// metrics are on.
pub(crate) fn wants_wait(span: &Span) -> bool {
    METRICS || !span.is_disabled()
}

/// Records an acquisition's outcome on its span (and an event when it failed); `waited`:
/// how long it took, on the client's clock.
pub(crate) fn acquired(
    span: &Span,
    lock_kind: LeaseKind,
    waited: Duration,
    out: &Result<Acquisition, Error>,
) {
    ended_as(span, kind(lock_kind), waited, out, |a| match a {
        Acquisition::Acquired(lease) => Some((lease.attempts, Some(lease.fence))),
        Acquisition::Busy { .. } => None,
    });
}

/// [`ended`] for a lock of kind `k`, counted in the lock metrics as well.
pub(crate) fn ended_as<T>(
    span: &Span,
    k: &'static str,
    waited: Duration,
    out: &Result<T, Error>,
    granted: impl Fn(&T) -> Option<(u32, Option<u64>)>,
) {
    #[cfg(feature = "metrics")]
    crate::observe::metrics::acquired(k, waited, outcome(out, &granted));
    #[cfg(not(feature = "metrics"))]
    let _ = k;
    ended(span, waited, out, granted);
}

/// An acquisition's outcome: `acquired`, `busy`, `timeout` or `error`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn outcome<T>(
    out: &Result<T, Error>,
    granted: impl Fn(&T) -> Option<(u32, Option<u64>)>,
) -> &'static str {
    match out.as_ref().map(granted) {
        Ok(Some(_)) => "acquired",
        Ok(None) => "busy",
        Err(Error::Timeout { .. }) => "timeout",
        Err(_) => "error",
    }
}

/// Records how an acquisition ended: `granted` gives the attempts and fence of a success
/// (`None`: busy). `waited` is not looked at when the span is disabled (callers may skip
/// the clock read then).
pub(crate) fn ended<T>(
    span: &Span,
    waited: Duration,
    out: &Result<T, Error>,
    granted: impl Fn(&T) -> Option<(u32, Option<u64>)>,
) {
    if span.is_disabled() {
        // No subscriber listens to the span: only a failure's event may still be wanted.
        if let Err(e) = out
            && !matches!(e, Error::Timeout { .. })
        {
            warn!(error = %e, "acquisition failed");
        }
        return;
    }
    let waited = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    span.record("redlease.waited_ms", waited);
    match out.as_ref().map(granted) {
        Ok(Some((attempts, fence))) => {
            span.record("redlease.outcome", "acquired");
            span.record("redlease.attempts", attempts);
            if let Some(fence) = fence {
                span.record("redlease.fence", fence);
            }
        }
        Ok(None) => {
            span.record("redlease.outcome", "busy");
        }
        Err(Error::Timeout { attempts, .. }) => {
            span.record("redlease.outcome", "timeout");
            span.record("redlease.attempts", attempts);
        }
        Err(e) => {
            span.record("redlease.outcome", "error");
            span.in_scope(|| warn!(error = %e, "acquisition failed"));
        }
    }
}

/// A release's outcome (explicit, or from a guard's drop).
pub(crate) fn released(name: &str, lock_kind: LeaseKind, out: &Result<(), Error>) {
    released_as(name, kind(lock_kind), out);
}

/// [`released`] for a lock of kind `k` (`redlock`, `legacy`).
pub(crate) fn released_as(name: &str, k: &'static str, out: &Result<(), Error>) {
    match out {
        Ok(()) => debug!(redlease.lock = name, redlease.kind = k, "released"),
        Err(Error::NotOwner { reason, .. }) => warn!(
            redlease.lock = name,
            redlease.kind = k,
            redlease.reason = %reason,
            "release refused: the lease was no longer ours"
        ),
        Err(e) => warn!(redlease.lock = name, redlease.kind = k, error = %e, "release failed"),
    }
}

/// A renewal's outcome; returns the failures in a row. The first failure of a run is a
/// warning, the retries that follow (every tenth of the renewal interval) are DEBUG, so an
/// outage does not flood the log; a loss is reported by [`lost`].
pub(crate) fn renewal<T>(lease: &Lease, outcome: &Result<T, Error>, failures: u32) -> u32 {
    #[cfg(feature = "metrics")]
    crate::observe::metrics::renewal(kind(lease.kind), outcome);
    let name = &*lease.target.name;
    match outcome {
        Ok(_) => 0,
        Err(Error::NotOwner { .. }) => failures,
        Err(e) if failures == 0 => {
            warn!(redlease.lock = name, error = %e, "lease renewal failed; retrying");
            1
        }
        Err(e) => {
            debug!(redlease.lock = name, error = %e, redlease.failures = failures + 1, "lease renewal failed again; retrying");
            failures.saturating_add(1)
        }
    }
}

/// An explicit extension's outcome ([`crate::lock::LockGuard::extend_to`]): a renewal in the
/// metrics.
pub(crate) fn extended<T>(lock_kind: LeaseKind, outcome: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    crate::observe::metrics::renewal(kind(lock_kind), outcome);
    #[cfg(not(feature = "metrics"))]
    let _ = (lock_kind, outcome);
}

/// A guard of a lease of `lock_kind` was made.
pub(crate) fn held(lock_kind: LeaseKind) {
    held_as(kind(lock_kind));
}

/// A guard of a lock of kind `k` (`redlock`, `legacy`) was made.
pub(crate) fn held_as(k: &'static str) {
    #[cfg(feature = "metrics")]
    crate::observe::metrics::held(k);
    #[cfg(not(feature = "metrics"))]
    let _ = k;
}

/// A guard of `lease` ends (dropped, whichever way it was settled); `now` gives the time on
/// the client's clock (read only when the metrics are on).
pub(crate) fn unheld(lease: &Lease, now: impl FnOnce() -> Instant) {
    unheld_as(kind(lease.kind), lease.acquired_at, now);
}

/// [`unheld`] for a lock of kind `k` acquired at `acquired_at`.
pub(crate) fn unheld_as(k: &'static str, acquired_at: Instant, now: impl FnOnce() -> Instant) {
    #[cfg(feature = "metrics")]
    crate::observe::metrics::unheld(k, now().saturating_duration_since(acquired_at));
    #[cfg(not(feature = "metrics"))]
    let _ = (k, acquired_at, now);
}

/// A lease is lost (counted once per lease: the cell reports its loss once).
pub(crate) fn lost(lease: &Lease, reason: LossReason) {
    #[cfg(feature = "metrics")]
    crate::observe::metrics::lost(kind(lease.kind), reason);
    let name = &*lease.target.name;
    warn!(
        redlease.lock = name,
        redlease.reason = ?reason,
        "lease lost: {reason}"
    );
}

/// A queue event with the messaging attributes; `error` is the handler's (nack) or Redis's.
pub(crate) fn job<T>(
    queue: &str,
    id: &str,
    operation: &'static str,
    error: Option<&str>,
    outcome: &Result<T, Error>,
) {
    let op_type = if operation == "take" {
        "receive"
    } else {
        "settle"
    };
    match outcome {
        Ok(_) => debug!(
            messaging.system = SYSTEM,
            messaging.operation.name = operation,
            messaging.operation.type = op_type,
            messaging.destination.name = queue,
            messaging.message.id = id,
            error.message = error,
            "job {operation}"
        ),
        Err(e) => warn!(
            messaging.system = SYSTEM,
            messaging.operation.name = operation,
            messaging.operation.type = op_type,
            messaging.destination.name = queue,
            messaging.message.id = id,
            error.message = error,
            redlease.error = %e,
            "job {operation} failed"
        ),
    }
}

/// A job went to the dead list.
pub(crate) fn dead(queue: &str, id: &str, reason: Option<&str>) {
    warn!(
        messaging.system = SYSTEM,
        messaging.operation.name = "dead_letter",
        messaging.operation.type = "settle",
        messaging.destination.name = queue,
        messaging.message.id = id,
        error.message = reason,
        "job dead-lettered"
    );
}

/// When a queue call started: the time with the `metrics` feature, nothing (and no clock
/// read) without.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started(#[cfg(feature = "metrics")] Instant);

impl Started {
    /// Now.
    #[inline]
    pub(crate) fn now() -> Started {
        Started(
            #[cfg(feature = "metrics")]
            Instant::now(),
        )
    }

    /// The time since (zero without the `metrics` feature: no clock read).
    #[inline]
    pub(crate) fn elapsed(self) -> Duration {
        #[cfg(feature = "metrics")]
        return self.0.elapsed();
        #[cfg(not(feature = "metrics"))]
        Duration::ZERO
    }
}

/// A queue's metrics (see [`crate::metrics`]); without the `metrics` feature an empty
/// value whose calls do nothing.
#[cfg(feature = "metrics")]
pub(crate) use crate::observe::metrics::QueueMeter;

/// Without the `metrics` feature: nothing kept, nothing done.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Debug)]
pub(crate) struct QueueMeter;

#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
impl QueueMeter {
    #[inline]
    pub(crate) fn new(_: &str) -> Self {
        QueueMeter
    }
    #[inline]
    pub(crate) fn operation<T>(&self, _: Op, _: Duration, _: &Result<T, Error>) {}
    #[inline]
    pub(crate) fn sent<T>(&self, _: usize, _: &Result<T, Error>) {}
    #[inline]
    pub(crate) fn consumed(&self) {}
    #[inline]
    pub(crate) fn processed<T, E, P>(&self, _: Started, _: &Result<Result<T, E>, P>) {}
    #[inline]
    pub(crate) fn settled_by<T>(&self, _: &Result<T, Error>, _: impl FnOnce(&T) -> Settled) {}
    #[inline]
    pub(crate) fn acked(&self, _: Started, _: &Result<(), Error>) {}
    #[inline]
    pub(crate) fn nacked<T>(&self, _: Started, _: &Result<T, Error>, _: impl FnOnce(&T) -> bool) {}
}

#[cfg(feature = "metrics")]
impl QueueMeter {
    /// The worker pool's handler, started at `started`, ended with `handled` (a panic
    /// caught: `Err`).
    pub(crate) fn processed<T, E, P>(&self, started: Started, handled: &Result<Result<T, E>, P>) {
        let error = match handled {
            Ok(Ok(_)) => None,
            Ok(Err(_)) => Some("handler_error"),
            Err(_) => Some("panic"),
        };
        self.process_time(started.elapsed(), error);
    }

    /// An ack that started at `started` ended with `outcome`.
    pub(crate) fn acked(&self, started: Started, outcome: &Result<(), Error>) {
        self.operation(Op::Ack, started.elapsed(), outcome);
        self.settled_by(outcome, |_| Settled::Acked);
    }

    /// A nack that started at `started` ended with `outcome`; `dead` says whether a
    /// successful one put the job on the dead list.
    pub(crate) fn nacked<T>(
        &self,
        started: Started,
        outcome: &Result<T, Error>,
        dead: impl FnOnce(&T) -> bool,
    ) {
        self.operation(Op::Nack, started.elapsed(), outcome);
        self.settled_by(outcome, |n| {
            if dead(n) {
                Settled::Dead
            } else {
                Settled::Retried
            }
        });
    }

    /// A settlement's outcome: `how` says what a success did.
    pub(crate) fn settled_by<T>(
        &self,
        outcome: &Result<T, Error>,
        how: impl FnOnce(&T) -> Settled,
    ) {
        self.settled(match outcome {
            Ok(t) => how(t),
            Err(e) => Settled::failed(e),
        });
    }
}

/// An error reply from Redis: a `NOPERM` (the ACL user lacks a command, key or channel
/// right) is logged with how to grant it, since a guard's drop or a release notification
/// would otherwise show it nowhere.
pub(crate) fn error_reply(code: &str, details: Option<&str>) {
    // Redis 7.0 reports a refusal inside a script as `ERR The user executing the script
    // can't ...`, Valkey 9 as `ERR ACL failure in script: No permissions to access ...`;
    // elsewhere (and in later Redis versions) the code is NOPERM.
    let in_script = details.is_some_and(|d| {
        d.contains("The user executing the script can't") || d.contains("ACL failure in script")
    });
    static LAST: AtomicU64 = AtomicU64::new(0);
    if (code == "NOPERM" || in_script) && !due(&LAST) {
        debug!(
            error = details.unwrap_or_default(),
            "NOPERM again (see the last warning)"
        );
    } else if code == "NOPERM" || in_script {
        warn!(
            error = details.unwrap_or_default(),
            "Redis refused a command for lack of ACL permissions (NOPERM): grant the user the \
             commands, the keys `~<prefix>:*` and the channels `&<prefix>:*` listed in docs/acl.md"
        );
    }
}

/// No pooled connection could be had in time.
pub(crate) fn no_connection(state: r2d2::State, max: u32, error: &dyn std::fmt::Display) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    if !due(&LAST) {
        debug!(error = %error, "no pooled connection again (see the last warning)");
    } else if state.connections >= max && state.idle_connections == 0 {
        warn!(
            redlease.pool.max = max,
            "connection pool exhausted: all {max} connections busy past the connect timeout \
             (raise ClientBuilder::pool_size or shorten what holds connections)"
        );
    } else {
        warn!(error = %error, "no connection to Redis within the connect timeout");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// Listens to WARN and above only; counts the spans it is asked to make and the events.
    #[derive(Default)]
    struct WarnOnly {
        spans: AtomicUsize,
        events: AtomicUsize,
    }

    impl Subscriber for &'static WarnOnly {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() <= Level::WARN
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1 + self.spans.fetch_add(1, Ordering::Relaxed) as u64)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    /// Under a subscriber that does not listen to INFO, the acquisition span is never built
    /// and its fields are not recorded, yet a failed acquisition still reaches it as a
    /// warning (a busy or granted one sends nothing).
    #[test]
    fn a_span_nobody_listens_to_costs_nothing_but_failures_still_warn() {
        let warn_only: &'static WarnOnly = Box::leak(Box::default());
        tracing::subscriber::with_default(warn_only, || {
            let s = span("orders", "lease");
            assert!(s.is_disabled());
            let granted = |_: &()| Some((1, Some(7)));
            ended(&s, Duration::from_millis(3), &Ok(()), granted);
            ended(&s, Duration::ZERO, &Ok(()), |_: &()| None);
            assert_eq!(warn_only.events.load(Ordering::Relaxed), 0);
            ended::<()>(&s, Duration::ZERO, &Err(Error::Driver("boom")), granted);
            assert_eq!(warn_only.events.load(Ordering::Relaxed), 1);
        });
        assert_eq!(
            warn_only.spans.load(Ordering::Relaxed),
            0,
            "no span was built"
        );
    }
}
