//! Timeouts and cancellation: a job's deadline, its cancellation signal, and
//! [`Queue::cancel`] from any process.
//!
//! Cancellation is cooperative (a thread cannot be stopped safely from outside), and the
//! lease makes it safe: a handler that ignores its timeout loses its lease at `timeout +
//! grace` (the watchdog stops renewing it, as a lock's `max_hold` does), so its ack is
//! refused ([`Error::NotOwner`]) and the job is redelivered, never before then. A cancel
//! ends the job's lease at once, so the handler's ack is refused as well.

use std::sync::{Mutex, OnceLock};

use crossbeam_channel::{Receiver, Select, bounded, never};
use redlease_core::queue::cancel as core_cancel;

pub use redlease_core::queue::cancel::{Cancelled, CancelledJobs};

use super::*;
use crate::transport::listener::{Waiter, Wake};

/// How long a handler may run past its timeout before the job's lease ends, unless set
/// with [`Queue::timeout_grace`]: 1 s.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(1);

/// Why a job's handler should stop ([`Job::cancel_reason`], [`Job::cancelled`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// Its timeout ([`Queue::timeout`]) passed: stop, and give the
    /// job back ([`Job::timed_out`]) or ack it within the grace.
    TimedOut,
    /// [`Queue::cancel`] was called for it, with this message: its lease ended then, so no
    /// ack or nack of it counts any more.
    Cancelled(String),
    /// Its lease was lost (it will be, or was, redelivered).
    LeaseLost(LossReason),
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CancelReason::TimedOut => f.write_str("timed out"),
            CancelReason::Cancelled(m) => write!(f, "cancelled: {m}"),
            CancelReason::LeaseLost(r) => write!(f, "lease lost: {r}"),
        }
    }
}

/// What happens to a job whose handler ran past its timeout ([`Queue::on_timeout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnTimeout {
    /// Retried after the queue's backoff (dead after max deliveries), the default.
    #[default]
    Retry,
    /// On the dead list at once, its reason `timed out`.
    Dead,
}

/// A queue's timeout settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lifetime {
    pub(super) timeout: Option<Duration>,
    pub(super) grace: Duration,
    pub(super) on_timeout: OnTimeout,
    pub(super) listen: bool,
    pub(super) cancelled_jobs: CancelledJobs,
}

impl Default for Lifetime {
    fn default() -> Self {
        Lifetime {
            timeout: None,
            grace: DEFAULT_GRACE,
            on_timeout: OnTimeout::Retry,
            listen: false,
            cancelled_jobs: CancelledJobs::Dead,
        }
    }
}

impl Lifetime {
    pub(super) fn check(&self) -> Result<(), Error> {
        if let Some(t) = self.timeout {
            limits::duration(
                "job timeout",
                t,
                Duration::from_millis(1),
                limits::MAX_DURATION,
            )?;
        }
        limits::span("timeout grace", self.grace)?;
        Ok(())
    }
}

impl Queue {
    /// Each job taken from this queue has `timeout` to run, counted from its take: after it,
    /// [`Job::is_cancelled`] is true and [`Job::cancelled`] fires with
    /// [`CancelReason::TimedOut`]; after it plus the [grace](Self::timeout_grace) the
    /// watchdog stops renewing the job's lease, so its ack is refused
    /// ([`Error::NotOwner`]) and the job is redelivered (never before then). 1 ms to
    /// [`MAX_DURATION`](limits::MAX_DURATION), checked when a job is taken. Defaults to
    /// none.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.lifetime.timeout = Some(timeout);
        self
    }

    /// How long a handler may run past its timeout and still ack or give the job back:
    /// 0 to [`MAX_DURATION`](limits::MAX_DURATION). Defaults to [`DEFAULT_GRACE`] (1 s).
    pub fn timeout_grace(mut self, grace: Duration) -> Self {
        self.lifetime.grace = grace;
        self
    }

    /// What [`Job::timed_out`] (and the worker pool, for a handler that returns an error
    /// after its timeout) does with the job: retry it (the default) or put it on the dead
    /// list with reason `timed out`. With [`OnTimeout::Dead`] the worker pool also puts the
    /// job of a handler that ignores its signal on the dead list, at timeout + half the grace
    /// (while the lease is still held), so it is not retried; with [`OnTimeout::Retry`] such
    /// a job is redelivered once its lease ends at timeout + grace.
    pub fn on_timeout(mut self, then: OnTimeout) -> Self {
        self.lifetime.on_timeout = then;
        self
    }

    /// Whether each job taken listens for its cancel message (one pub/sub subscription per
    /// client and queue, shared by its jobs), so that [`cancel`](Self::cancel) reaches its
    /// handler at once. Without it (the default), a cancel reaches the handler at the job's
    /// next lease renewal (a third of the [visibility](Self::visibility)). On the in-process
    /// server, always at the renewal.
    pub fn listen_for_cancel(mut self, on: bool) -> Self {
        self.lifetime.listen = on;
        self
    }

    /// What [`cancel`](Self::cancel) does with the job: the dead list (the default, its
    /// reason `cancelled: <message>`) or forget it.
    pub fn cancelled_jobs(mut self, jobs: CancelledJobs) -> Self {
        self.lifetime.cancelled_jobs = jobs;
        self
    }

    /// Cancels job `id` from any process: a ready or delayed job will not run; a job in
    /// flight loses its lease at once and its holder is told (at once if it
    /// [listens](Self::listen_for_cancel), at its next renewal otherwise): its
    /// [`Job::cancel_reason`] is [`CancelReason::Cancelled`] with `message`, and its ack is
    /// refused. Either way the job then goes to the dead list or is forgotten, as
    /// [`cancelled_jobs`](Self::cancelled_jobs) says. [`Cancelled::NotFound`] if no such job
    /// waits or runs. An empty or too long id (over 512 bytes), or a message over 4 KiB, is
    /// refused with [`Error::InvalidArgument`].
    ///
    /// A grouped job is named by [`cancel_grouped`](Self::cancel_grouped), or here by its
    /// composed id (`<group>\u{1f}<id>`, as the dead list shows it), through either handle.
    ///
    /// A schedule's occurrence (`sched:<name>:<due ms>`) cancelled is skipped: its schedule
    /// advances past it and pushes its next occurrence, as a take does. Should that advance
    /// fail, the error is returned after the cancel; calling again (answered
    /// [`Cancelled::NotFound`]) finishes it.
    pub fn cancel(&self, id: &str, message: &str) -> Result<Cancelled, Error> {
        let keys = self.keys_of(id)?;
        let op = core_cancel::cancel(
            &keys,
            id,
            message,
            self.lifetime.cancelled_jobs,
            self.deadline(),
        )?;
        let out = self.client.run(op)?;
        // A schedule's occurrence: the schedule goes on past it (also on NotFound, so a
        // call repeated after an error here finishes the advance; idempotent).
        self.skip_cancelled(id)?;
        Ok(out)
    }

    /// Cancels job `id` of group `group` (as pushed with [`PushOptions::group`]; its
    /// [`Job::id`] and [`Job::group`]), wherever it waits (delayed, or ready in its group)
    /// or runs, as [`cancel`](Self::cancel) does; through the queue or its
    /// [`groups`](Self::groups). A group id that no group can have is refused with
    /// [`Error::InvalidArgument`].
    pub fn cancel_grouped(&self, group: &str, id: &str, message: &str) -> Result<Cancelled, Error> {
        self.cancel(&super::compose(group, id)?, message)
    }

    /// The signal of a job taken on `lease` with `timeout` (its own, or its queue's) and,
    /// from the server, `hold_left` ([`TakenJob::hold_left`]): its deadline is the timeout
    /// from the take, or the grace before the hold limit if that is sooner (a take retried
    /// after a lost reply continues the hold its first attempt began).
    pub(super) fn signal_for(
        &self,
        lease: &redlease_core::lease::Lease,
        timeout: Option<Duration>,
        hold_left: Option<Duration>,
    ) -> Signal {
        let mut timeout = timeout;
        if let (Some(t), Some(left)) = (timeout, hold_left) {
            // The server's hold limit is the timeout plus the grace (rounded up) plus 2 ms,
            // and what is left of it is told 1 ms short: a fresh take's is t + grace + 1 ms,
            // so a fresh take's deadline is its timeout.
            timeout = Some(t.min(left.saturating_sub(self.lifetime.grace)));
        }
        let deadline = timeout.map(|t| saturating_add(lease.acquired_at, t));
        let waiter = if self.lifetime.listen {
            self.client
                .start_listeners()
                .and_then(|l| l.register(&self.keys.cancel_wake(lease.token.as_str()), None))
        } else {
            None
        };
        Signal {
            deadline,
            waiter: waiter.map(Arc::new),
            reason: Arc::new(OnceLock::new()),
            channel: OnceLock::new(),
            stop: Mutex::new(None),
        }
    }

    /// The queue's timeout plus its grace, if it has a timeout.
    /// Plus 1 ms: the server's clock is read in whole milliseconds (rounded down), so a lease
    /// of exactly that long could end up to 1 ms early.
    fn hold_limit(&self, timeout: Option<Duration>) -> Option<Duration> {
        timeout.map(|t| {
            t.saturating_add(self.lifetime.grace)
                .saturating_add(Duration::from_millis(1))
        })
    }

    /// The settings a job is taken with: with a timeout, its lease is at most the timeout
    /// plus the grace from the take (so that it ends then on the server even before its
    /// first renewal), and at least [`MIN_TTL`](limits::MIN_TTL).
    pub(super) fn lease_settings(&self) -> QueueSettings {
        let mut settings = self.settings;
        // The server keeps each timed delivery's hold limit from these: see
        // `QueueSettings::timeout`.
        settings.timeout = self.lifetime.timeout;
        settings.timeout_grace = self.lifetime.grace;
        if let Some(hold) = self.hold_limit(self.lifetime.timeout) {
            settings.visibility = settings.visibility.min(hold.max(limits::MIN_TTL));
        }
        settings
    }

    /// The renewal policy of a job taken now with `timeout` (its own, or its queue's): a
    /// hold limit of what is left to the server's (`hold_left`, [`TakenJob::hold_left`]),
    /// else of timeout + grace.
    pub(super) fn renewal_policy(
        &self,
        timeout: Option<Duration>,
        hold_left: Option<Duration>,
    ) -> RenewalPolicy {
        let mut policy = RenewalPolicy::for_ttl(self.lease_settings().visibility);
        policy.max_hold = hold_left.or_else(|| self.hold_limit(timeout));
        policy
    }
}

/// A job's cancellation signal: its deadline, its cancel message's doorbell, what was seen.
#[derive(Debug)]
pub(super) struct Signal {
    deadline: Option<Instant>,
    waiter: Option<Arc<Waiter>>,
    reason: Arc<OnceLock<CancelReason>>,
    /// The channel of [`Job::cancelled`], fed by a thread started on first use.
    channel: OnceLock<Receiver<CancelReason>>,
    /// Dropping it ends that thread.
    stop: Mutex<Option<crossbeam_channel::Sender<()>>>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").finish_non_exhaustive()
    }
}

/// What a ring of the cancel doorbell means: asks the server (a ring may be a confirmation,
/// or a message possibly missed while reconnecting).
fn verify(queue: &Queue, token: &str) -> Option<CancelReason> {
    let op = core_cancel::cancel_message(&queue.keys, token, queue.deadline());
    match queue.client.run(op) {
        Ok(Some(message)) => Some(CancelReason::Cancelled(message)),
        _ => None,
    }
}

/// The reason for a lease loss seen by the watchdog.
fn from_loss(queue: &Queue, token: &str, loss: LossReason) -> CancelReason {
    match loss {
        LossReason::Cancelled => {
            verify(queue, token).unwrap_or(CancelReason::Cancelled(String::new()))
        }
        LossReason::MaxHoldReached => CancelReason::TimedOut,
        other => CancelReason::LeaseLost(other),
    }
}

impl Job {
    /// Until when the handler may run ([`Queue::timeout`] after the take, by this process's
    /// clock; `None`: no timeout).
    pub fn deadline(&self) -> Option<Instant> {
        self.signal.deadline
    }

    /// Whether the handler should stop: the timeout passed, the job was cancelled, or its
    /// lease was lost. Cheap enough to poll in a loop (a clock read and a few atomics; one
    /// round trip the first time a cancel is seen, to read its message).
    pub fn is_cancelled(&self) -> bool {
        self.cancel_reason().is_some()
    }

    /// Why the handler should stop, if it should (see [`is_cancelled`](Self::is_cancelled)).
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        let s = &self.signal;
        if let Some(r) = s.reason.get() {
            return Some(r.clone());
        }
        let time = &self.queue.client.shared().time;
        if s.deadline.is_some_and(|d| time.now() >= d) {
            return Some(s.reason.get_or_init(|| CancelReason::TimedOut).clone());
        }
        if let Some(w) = &s.waiter
            && let Ok(rung) = w.doorbell().try_recv()
            && w.rung(rung) == Wake::Message
            && let Some(r) = verify(&self.queue, self.guard.lease().token.as_str())
        {
            return Some(s.reason.get_or_init(|| r).clone());
        }
        let loss = self.guard.lost_reason()?;
        let r = from_loss(&self.queue, self.guard.lease().token.as_str(), loss);
        Some(s.reason.get_or_init(|| r).clone())
    }

    /// Fires once with the reason the handler should stop (as
    /// [`cancel_reason`](Self::cancel_reason)): block on it, or `select!` over it next to
    /// your work. A thread watches for it from the first call until the job is settled.
    pub fn cancelled(&self) -> &Receiver<CancelReason> {
        self.signal.channel.get_or_init(|| self.watch())
    }

    /// Starts the thread that feeds [`cancelled`](Self::cancelled).
    fn watch(&self) -> Receiver<CancelReason> {
        let (tx, rx) = bounded(1);
        if let Some(r) = self.cancel_reason() {
            let _ = tx.try_send(r);
            return rx;
        }
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let queue = self.queue.clone();
        let token = self.guard.lease().token.as_str().to_owned();
        let deadline = self.signal.deadline;
        let waiter = self.signal.waiter.clone();
        let reason = self.signal.reason.clone();
        let lost = self.guard.lost().clone();
        let spawned = std::thread::Builder::new()
            .name("redlease-job-signal".into())
            .spawn(move || {
                let time = queue.client.shared().time.clone();
                let r = loop {
                    let timer = match deadline {
                        Some(d) => crossbeam_channel::at(d),
                        None => never(),
                    };
                    let idle = never();
                    let bell = waiter.as_ref().map_or(&idle, |w| w.doorbell());
                    let mut sel = Select::new();
                    let i_stop = sel.recv(&stop_rx);
                    let i_timer = sel.recv(&timer);
                    let i_bell = sel.recv(bell);
                    sel.recv(&lost);
                    let op = sel.select();
                    let i = op.index();
                    if i == i_stop {
                        let _ = op.recv(&stop_rx);
                        return;
                    } else if i == i_timer {
                        let _ = op.recv(&timer);
                        // The test clock's instants are not real time: check it.
                        if deadline.is_some_and(|d| time.now() >= d) {
                            break CancelReason::TimedOut;
                        }
                        if let Some(d) = deadline {
                            let _ = time.sleep_until(d);
                        }
                        break CancelReason::TimedOut;
                    } else if i == i_bell {
                        let Ok(rung) = op.recv(bell) else { continue };
                        if let Some(w) = &waiter
                            && w.rung(rung) == Wake::Message
                            && let Some(r) = verify(&queue, &token)
                        {
                            break r;
                        }
                    } else {
                        match op.recv(&lost) {
                            Ok(loss) => break from_loss(&queue, &token, loss),
                            // The lease's signal is gone: nothing more to learn from it.
                            Err(_) => {
                                let _ = stop_rx.recv();
                                return;
                            }
                        }
                    }
                };
                let r = reason.get_or_init(|| r).clone();
                let _ = tx.send(r);
            });
        if spawned.is_ok() {
            *self.signal.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop_tx);
        }
        rx
    }

    /// Settles a job whose timeout passed as [`Queue::on_timeout`] says: retried after the
    /// backoff, or on the dead list with reason `timed out`. Within the grace this works like
    /// [`fail`](Self::fail); after it the lease is gone and it is refused
    /// ([`Error::NotOwner`]): the job is redelivered anyway.
    pub fn timed_out(self) -> Result<(), Error> {
        self.timed_out_because("")
    }

    /// [`timed_out`](Self::timed_out), the handler's error (if not empty) kept after
    /// `timed out: ` in the reason.
    pub(super) fn timed_out_because(self, error: &str) -> Result<(), Error> {
        let retry = match self.queue.lifetime.on_timeout {
            OnTimeout::Retry => Retry::Backoff,
            OnTimeout::Dead => Retry::Never,
        };
        if error.is_empty() {
            self.fail("timed out", retry)
        } else {
            self.fail(&format!("timed out: {error}"), retry)
        }
    }
}

impl Job {
    /// The worker pool's reaper: settles this job as dead (`timed out`) while its handler
    /// still runs (the lease is still ours: this is before timeout + grace).
    fn reap(&self) -> Result<(), Error> {
        let lease = self.guard.lease();
        let call = queue::nack_because(
            &self.queue.keys,
            &self.id,
            lease.token.as_str(),
            Duration::ZERO,
            0,
            "timed out",
        );
        let call = self.queue.keys.settling(call, lease);
        let op = queue::nack_op(lease, call, self.queue.deadline())
            .with_valid_until(self.guard.valid_until());
        self.queue.client.run(op).map(|_| ())
    }
}

/// Runs `handler` for `job` (the worker pool). On a queue whose timed-out jobs go to the
/// dead list ([`OnTimeout::Dead`]), a helper thread puts the job there (reason `timed out`)
/// if the handler still runs at its timeout plus half the grace, while the lease is still
/// held: a handler that ignores its signal cannot have it retried, and its ack is then
/// refused. (On the in-process server's clock, no helper: the job is retried after the
/// lease ends.)
pub(super) fn run_handler<R>(job: &Job, handler: impl FnOnce() -> R) -> R {
    let at = match (job.signal.deadline, job.queue.lifetime.on_timeout) {
        (Some(d), OnTimeout::Dead) => saturating_add(d, job.queue.lifetime.grace / 2),
        _ => return handler(),
    };
    #[cfg(feature = "memory")]
    if job.queue.client.shared().time.memory().is_some() {
        return handler();
    }
    let (done_tx, done_rx) = bounded::<()>(0);
    std::thread::scope(|s| {
        let reaper = std::thread::Builder::new()
            .name("redlease-job-reaper".into())
            .spawn_scoped(s, move || {
                if done_rx.recv_deadline(at) == Err(crossbeam_channel::RecvTimeoutError::Timeout)
                    && let Err(e) = job.reap()
                {
                    tracing::debug!(error = %e, "could not put a timed-out job on the dead list");
                }
            });
        // Dropped when the handler returns or panics: the helper then ends at once.
        let _done = done_tx;
        let out = handler();
        drop(_done);
        drop(reaper);
        out
    })
}

impl Drop for Signal {
    fn drop(&mut self) {
        // Ends the watching thread (it returns on the stop channel's disconnection).
        drop(self.stop.get_mut().map(Option::take));
    }
}
