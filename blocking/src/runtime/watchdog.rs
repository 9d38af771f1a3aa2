//! One watchdog per client: keeps the leases of live guards alive.
//!
//! The schedule and every decision (when to renew, when a lease is lost) live in the core's
//! [`Renewals`]. The watchdog thread (`redlease-watchdog`) only keeps that schedule: it never
//! waits on Redis, so it reports every loss at the lease's validity at the latest. The
//! extensions it hands out go to one renewal thread per Redis node (`redlease-renew`; one
//! for a single server, one per master of a Cluster that holds watched leases), each
//! sending its node's batch pipelined and answering by the batch's deadline (never past
//! the validities it renews): a frozen or slow node delays the renewals of no other node.
//! A batch goes through the driver loop every primitive uses ([`crate::driver::backend`]), so an
//! extension's own retries (a connection not available at once, `NOSCRIPT`) run within
//! that deadline.
//!
//! On a test clock (a client of an in-process server, feature `memory`) there are no
//! threads: a registration runs a round at once, and each round sets a timer on the clock
//! for the next, so renewals and losses happen as the test moves the clock, each at its
//! own instant.
//!
//! If the watchdog thread ends for any reason (the client was dropped, or something inside
//! it panicked), every lease it watched, and every lease registered afterwards, is reported
//! lost ([`LossReason::WatchdogStopped`]); a panic inside one round is caught, its leases
//! reported lost, and the thread goes on for the leases registered after it.
//!
//! Acquiring and releasing a watched lease costs no round trip to this thread, and the
//! guard and the thread share the lease (one `Arc`, nothing copied):
//! - a registration is queued, and the thread is woken only when the new lease is due
//!   before the thread's next wake-up anyway;
//! - the thread takes a lease into its schedule only when its first renewal is due: one
//!   released before (a short hold) is dropped from the queue unseen;
//! - a release flips the lease's cell to `Released` (waiting only if a renewal of that very
//!   lease is in flight), and the thread skips and forgets released leases when they come
//!   due, or sooner once many have piled up. No renewal is ever sent after the flip.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    Receiver, Sender, TrySendError, at, bounded, never, select_biased, unbounded,
};
use redlease_core::lease::Lease;
use redlease_core::renewal::{
    Due, Extension, RenewalEvent, RenewalPolicy, Renewals, WatchId, WatchedLease,
};
use redlease_core::{Error, LossReason, TransportFailure};

use crate::driver::backend::{Node, Route, Time, drive_set};
use crate::runtime::registry::RegistryEntry;
use crate::transport::pool::Pooled;
use redlease_core::inspect::registry::{self, Beat};
use redlease_core::lease::ScriptOp;

/// The most extensions sent in one pipelined batch.
const BATCH: usize = 512;

/// Released leases that may pile up before the thread is woken to forget them.
const COMPACT_AFTER: usize = 1024;

/// The room the nursery keeps once emptied (more is given back).
const NURSERY_KEEP: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Watched,
    Renewing,
    Released,
}

#[derive(Debug)]
struct CellState {
    /// Until when the lease is safely ours, in nanoseconds after its acquisition (see
    /// [`LeaseCell::valid_until`]): 8 bytes where an `Instant` takes 16, so that a cell fits
    /// in 72 bytes (one allocator size class below 80, in every held lease).
    valid_ns: u64,
    phase: Phase,
    /// The id of the lease's live registration (each registration has its own, so the entry
    /// of an older one, before a new ttl, is skipped).
    generation: WatchId,
    /// The last renewal ended the lease at its hold limit: reaching `valid_until` is then
    /// an expiry, not a failure.
    final_stretch: bool,
    /// The watchdog thread took this registration into its schedule (a lease released
    /// before never was).
    scheduled: bool,
    /// Never watched (a guard with the watchdog off): reaching `valid_until` is then a
    /// loss too ([`LossReason::ValidityPassed`]), though the phase is `Released`.
    unwatched: bool,
    /// Renewals failed in a row (only the first is logged as a warning); written by the
    /// watchdog thread only. Kept here, in room the cell has anyway, rather than in the
    /// schedule's table beside it (8 bytes a lease there).
    failures: u32,
}

/// `t` as nanoseconds after `lease` was acquired (0 for an earlier `t`; cut at `u64::MAX`,
/// 584 years, beyond any valid ttl).
fn offset(lease: &Lease, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(lease.acquired_at).as_nanos()).unwrap_or(u64::MAX)
}

/// What a guard and the watchdog share about one lease: the lease itself (as acquired) and
/// its state since, in one allocation.
#[derive(Debug)]
pub(crate) struct LeaseCell {
    /// The lease as acquired.
    lease: Lease,
    /// The ttl extensions and renewals extend it to (the lease's, until
    /// [`LockGuard::extend_to`](crate::lock::LockGuard::extend_to) changes it), in nanoseconds.
    ttl_ns: AtomicU64,
    state: Mutex<CellState>,
    renewal_done: Condvar,
    lost: OnceLock<LossReason>,
    /// The loss signal, made when the guard first asks for it (most guards never do): it
    /// fires once the lease is lost and the signal exists, whichever came first. Boxed: a
    /// held lease without one keeps a pointer, not the channel's two ends.
    #[allow(clippy::type_complexity)]
    signal: OnceLock<Box<(Sender<LossReason>, Receiver<LossReason>)>>,
    /// The signal has fired.
    signalled: AtomicBool,
    /// The guard has ended the lease itself (released, acked, disarmed): its drop sends
    /// nothing.
    ended: AtomicBool,
}

impl LeaseCell {
    /// Marks the lease ended by its guard; the guard's drop then sends nothing.
    pub(crate) fn set_ended(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    /// Whether the guard ended the lease itself.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// A cell for `lease`, not lost.
    pub(crate) fn new(lease: Lease) -> Arc<LeaseCell> {
        let cell = LeaseCell {
            ttl_ns: AtomicU64::new(Policy::nanos(lease.ttl)),
            state: Mutex::new(CellState {
                valid_ns: offset(&lease, lease.valid_until),
                phase: Phase::Released,
                generation: 0,
                final_stretch: false,
                scheduled: false,
                unwatched: true,
                failures: 0,
            }),
            renewal_done: Condvar::new(),
            lost: OnceLock::new(),
            signal: OnceLock::new(),
            signalled: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            lease,
        };
        Arc::new(cell)
    }

    /// The receiver that yields the loss reason once the lease is lost (made on first use).
    pub(crate) fn signal(&self) -> &Receiver<LossReason> {
        let (_, rx) = &**self.signal.get_or_init(|| Box::new(bounded(1)));
        // Made after the loss was marked: send it now (see `fire`).
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(reason) = self.lost.get() {
            self.fire(*reason);
        }
        rx
    }

    /// Sends the loss reason on the signal, if the signal exists, once. The loss is marked
    /// and the signal made on two threads at once at worst: each side writes its part, then
    /// (after a SeqCst fence) looks for the other's, so at least one of them sees both and
    /// fires; `signalled` keeps it to one message.
    fn fire(&self, reason: LossReason) {
        if let Some((tx, _)) = self.signal.get().map(|pair| &**pair)
            && !self.signalled.swap(true, Ordering::SeqCst)
        {
            let _ = tx.try_send(reason);
        }
    }

    fn state(&self) -> MutexGuard<'_, CellState> {
        // Every update is a single assignment: a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.instant(self.state().valid_ns)
    }

    /// The lease as acquired (its `ttl` and `valid_until` are the acquisition's: see
    /// [`ttl`](Self::ttl) and [`valid_until`](Self::valid_until) for the current ones).
    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The ttl extensions and renewals extend the lease to.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl_ns.load(Ordering::Relaxed))
    }

    /// Extensions and renewals extend the lease to `ttl` from now on.
    pub(crate) fn set_ttl(&self, ttl: Duration) {
        self.ttl_ns.store(Policy::nanos(ttl), Ordering::Relaxed);
    }

    pub(crate) fn set_valid_until(&self, t: Instant) {
        let ns = offset(&self.lease, t);
        self.state().valid_ns = ns;
    }

    /// The instant `ns` after the lease's acquisition.
    fn instant(&self, ns: u64) -> Instant {
        redlease_core::backoff::saturating_add(self.lease.acquired_at, Duration::from_nanos(ns))
    }

    /// Why the lease is lost, if it is. A watched lease whose validity has passed without a
    /// confirmed renewal is lost from that instant by `time` (the client's clock), whatever
    /// the watchdog is doing: this marks it so (firing the signal) when the watchdog has not
    /// yet. So is a lease that was never watched, once its validity has passed
    /// ([`LossReason::ValidityPassed`]).
    pub(crate) fn lost(&self, time: &Time) -> Option<LossReason> {
        if let Some(reason) = self.lost.get() {
            return Some(*reason);
        }
        let expired = {
            let state = self.state();
            let valid_until = self.instant(state.valid_ns);
            ((state.phase != Phase::Released || state.unwatched) && time.now() >= valid_until)
                .then_some(if state.unwatched {
                    LossReason::ValidityPassed
                } else if state.final_stretch {
                    LossReason::MaxHoldReached
                } else {
                    LossReason::RenewalFailed
                })
        };
        if let Some(reason) = expired {
            self.mark_lost(reason);
        }
        self.lost.get().copied()
    }

    pub(crate) fn mark_lost(&self, reason: LossReason) {
        if self.lost.set(reason).is_ok() {
            crate::observe::events::lost(&self.lease, reason);
            std::sync::atomic::fence(Ordering::SeqCst);
            self.fire(reason);
        }
    }

    /// Waits (at most `limit()`) for a renewal in flight to finish, then marks the lease
    /// released: from now on the watchdog sends nothing for it. What it ended: `None` when
    /// it was released already, else whether the watchdog thread had taken it into its
    /// schedule (see [`Watchdog::released`]). `limit` is asked only when a renewal is in
    /// flight (the common release reads no clock).
    pub(crate) fn release(&self, limit: impl FnOnce() -> Duration) -> Option<bool> {
        let mut state = self.state();
        if state.phase == Phase::Renewing {
            state = self
                .renewal_done
                .wait_timeout_while(state, limit(), |s| s.phase == Phase::Renewing)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if state.phase == Phase::Released {
            return None;
        }
        state.phase = Phase::Released;
        Some(state.scheduled)
    }

    /// Marks the lease watched under the registration `id` (after
    /// [`release`](Self::release) or at first registration).
    fn arm(&self, id: WatchId) {
        let mut state = self.state();
        state.generation = id;
        state.phase = Phase::Watched;
        state.unwatched = false;
        state.final_stretch = false;
        state.scheduled = false;
        state.failures = 0;
    }

    /// The watchdog takes the lease for a renewal; false when it was released (or
    /// re-registered under another id).
    fn begin_renewal(&self, generation: WatchId) -> bool {
        let mut state = self.state();
        if state.phase == Phase::Watched && state.generation == generation {
            state.phase = Phase::Renewing;
            true
        } else {
            false
        }
    }

    /// The thread takes the registration `generation` into its schedule; false when it
    /// is not the live one any more.
    fn enter_schedule(&self, generation: WatchId) -> bool {
        let mut state = self.state();
        let current = state.phase != Phase::Released && state.generation == generation;
        state.scheduled |= current;
        current
    }

    /// Whether the registration `generation` is the live one.
    fn is_current(&self, generation: WatchId) -> bool {
        let state = self.state();
        state.phase != Phase::Released && state.generation == generation
    }

    /// Counts a renewal's outcome among the failures in a row (logging the first).
    fn note_outcome<T>(&self, outcome: &Result<T, Error>) {
        let before = self.state().failures;
        let after = crate::observe::events::renewal(&self.lease, outcome, before);
        if after != before {
            self.state().failures = after;
        }
    }

    fn end_renewal(&self, renewed: Option<(Instant, bool)>) {
        let renewed = renewed.map(|(t, last)| (offset(&self.lease, t), last));
        let mut state = self.state();
        if state.phase == Phase::Renewing {
            state.phase = Phase::Watched;
        }
        if let Some((ns, last)) = renewed {
            state.valid_ns = ns;
            state.final_stretch = last;
        }
        drop(state);
        self.renewal_done.notify_all();
    }
}

impl WatchedLease for LeaseCell {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn ttl(&self) -> Duration {
        LeaseCell::ttl(self)
    }

    fn valid_until(&self) -> Instant {
        LeaseCell::valid_until(self)
    }
}

/// A [`RenewalPolicy`] in 16 bytes where it takes 32 (every held guard and every queued
/// registration keeps one): its times in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// The renewal interval (at least 1 ns).
    every_ns: NonZeroU64,
    /// The hold limit (`u64::MAX`: none).
    hold_ns: u64,
}

impl Policy {
    /// Cuts a time at 584 years (`u64::MAX - 1` ns), far beyond any valid ttl or hold limit.
    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1))
    }

    /// The renewal interval.
    pub(crate) fn every(self) -> Duration {
        Duration::from_nanos(self.every_ns.get())
    }

    /// The policy as the core takes it.
    pub(crate) fn get(self) -> RenewalPolicy {
        RenewalPolicy {
            every: self.every(),
            max_hold: (self.hold_ns != u64::MAX).then(|| Duration::from_nanos(self.hold_ns)),
        }
    }
}

impl From<RenewalPolicy> for Policy {
    /// A zero interval (never valid: [`RenewalPolicy::validate`] asks for 1 ms) is kept as
    /// 1 ns.
    fn from(p: RenewalPolicy) -> Policy {
        Policy {
            every_ns: NonZeroU64::new(Policy::nanos(p.every)).unwrap_or(NonZeroU64::MIN),
            hold_ns: p.max_hold.map_or(u64::MAX, Policy::nanos),
        }
    }
}

/// A lease queued for the watchdog thread: 32 bytes (the queue and the nursery hold one per
/// lease acquired within a renewal interval).
struct Registration {
    /// Its own (the cell's generation while it is the live registration).
    id: WatchId,
    policy: Policy,
    /// Shared with the guard (the lease is inside): registering copies nothing.
    cell: Arc<LeaseCell>,
}

impl Registration {
    /// When the first renewal is due: an interval after the acquisition, within its
    /// validity.
    fn first(&self) -> Instant {
        first_renewal(&self.cell, self.policy)
    }

    /// Reports the lease lost if this registration is still the live one: nothing will
    /// renew it.
    fn fail(self) {
        if self.cell.is_current(self.id) {
            self.cell.mark_lost(LossReason::WatchdogStopped);
        }
    }
}

/// When the first renewal of the lease of `cell` under `policy` is due: an interval after
/// its acquisition, within its current validity.
fn first_renewal(cell: &LeaseCell, policy: Policy) -> Instant {
    redlease_core::backoff::saturating_add(cell.lease.acquired_at, policy.every())
        .min(cell.valid_until())
}

/// The first key of `lease`: it names the node its renewals go to.
fn key_of(lease: &Lease) -> &str {
    lease.target.keys.first().unwrap_or("")
}

/// What the guards and the thread share.
struct Queue {
    pending: Mutex<Vec<Registration>>,
    /// Leases released after they entered the schedule, not yet forgotten by it.
    released: AtomicUsize,
    /// Leases released before they entered the schedule (waiting in the queue or the
    /// nursery), not yet forgotten.
    released_early: AtomicUsize,
    /// The thread's next wake-up, in nanoseconds after `epoch` (`u64::MAX`: none).
    next_wakeup: AtomicU64,
    epoch: Instant,
    next_id: AtomicU64,
    /// The thread has ended: registrations are reported lost at once.
    stopped: AtomicBool,
    /// Leases of live guards (watched, not yet released), for `Client::status`.
    live: AtomicUsize,
}

impl Queue {
    fn pending(&self) -> MutexGuard<'_, Vec<Registration>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn encode(&self, t: Option<Instant>) -> u64 {
        t.map_or(u64::MAX, |t| {
            u64::try_from(t.saturating_duration_since(self.epoch).as_nanos())
                .unwrap_or(u64::MAX - 1)
        })
    }

    /// Queues the lease of `cell` for the thread, arming `cell`; returns when its first
    /// renewal is due.
    fn register(&self, policy: Policy, cell: Arc<LeaseCell>) -> Instant {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        cell.arm(id);
        self.live.fetch_add(1, Ordering::Relaxed);
        let first = first_renewal(&cell, policy);
        self.pending().push(Registration { id, policy, cell });
        first
    }

    /// Reports every queued registration lost: nothing will renew it.
    fn fail_pending(&self) {
        let queued = std::mem::take(&mut *self.pending());
        queued.into_iter().for_each(Registration::fail);
    }
}

/// The watchdog thread's handle; dropping it stops and joins the thread (and its renewal
/// threads).
pub(crate) struct Watchdog {
    queue: Arc<Queue>,
    wake: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// On a test clock: no threads; the rounds run on the clock's timers.
    #[cfg(feature = "memory")]
    inline: Option<Arc<Inline>>,
}

impl Watchdog {
    pub(crate) fn start(
        node: Node,
        time: Time,
        io_timeout: Duration,
        registration: Option<Arc<RegistryEntry>>,
    ) -> Result<Self, Error> {
        let queue = Arc::new(Queue {
            pending: Mutex::new(Vec::new()),
            released: AtomicUsize::new(0),
            released_early: AtomicUsize::new(0),
            next_wakeup: AtomicU64::new(u64::MAX),
            epoch: time.now(),
            next_id: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            live: AtomicUsize::new(0),
        });
        #[cfg(feature = "memory")]
        if let Some(clock) = time.memory().cloned() {
            let mut scheduler = Scheduler::new(node, time, io_timeout, queue.clone(), true);
            scheduler.set_registration(registration);
            return Ok(Watchdog {
                queue,
                wake: None,
                thread: None,
                inline: Some(Arc::new(Inline {
                    scheduler: Mutex::new(scheduler),
                    clock,
                    armed: Mutex::new(None),
                })),
            });
        }
        let (wake, wakeups) = bounded(1);
        let thread = {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("redlease-watchdog".into())
                .spawn(move || run(node, time, io_timeout, queue, registration, &wakeups))
                .map_err(|_| Error::Driver("could not spawn the watchdog thread"))?
        };
        Ok(Watchdog {
            queue,
            wake: Some(wake),
            thread: Some(thread),
            #[cfg(feature = "memory")]
            inline: None,
        })
    }

    /// Runs a round now (the first heartbeat of a registered client).
    pub(crate) fn kick(&self) {
        #[cfg(feature = "memory")]
        if let Some(inline) = &self.inline {
            Inline::round(inline);
            return;
        }
        self.nudge();
    }

    fn nudge(&self) {
        if let Some(wake) = &self.wake {
            // Full: a wake-up is already pending, which is all we need.
            if let Err(TrySendError::Disconnected(_)) = wake.try_send(()) {}
        }
    }

    /// Starts renewing the lease of `cell` (shared with its guard; armed here). The first
    /// renewal is due `policy.every` after the lease's acquisition.
    ///
    /// This only queues the lease: the thread takes it into its schedule when its first
    /// renewal comes due, and forgets it unseen if it was released by then.
    pub(crate) fn watch(&self, policy: Policy, cell: Arc<LeaseCell>) {
        let first = self.queue.register(policy, cell);
        if self.queue.stopped.load(Ordering::SeqCst) {
            // The thread is gone (it sets the flag before failing what is queued).
            self.queue.fail_pending();
            return;
        }
        #[cfg(feature = "memory")]
        if let Some(inline) = &self.inline {
            Inline::round(inline);
            return;
        }
        if self.queue.encode(Some(first)) < self.queue.next_wakeup.load(Ordering::SeqCst) {
            self.nudge();
        }
    }

    /// Notes that a watched lease was released (its cell already says so; `scheduled`:
    /// what [`LeaseCell::release`] answered). Only leases the schedule holds count towards
    /// scanning the schedule, so a stream of short holds costs nothing per long-held lease.
    pub(crate) fn released(&self, scheduled: bool) {
        self.queue.live.fetch_sub(1, Ordering::Relaxed);
        let counter = if scheduled {
            &self.queue.released
        } else {
            &self.queue.released_early
        };
        if counter.fetch_add(1, Ordering::Relaxed) + 1 >= COMPACT_AFTER {
            self.nudge();
        }
    }
}

impl Watchdog {
    /// How many leases of live guards are watched.
    pub(crate) fn watched(&self) -> usize {
        self.queue.live.load(Ordering::Relaxed)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One extension handed to a renewal thread.
struct Item {
    id: WatchId,
    cell: Arc<LeaseCell>,
    op: Extension<LeaseCell>,
}

/// One extension's outcome, back from a renewal thread.
struct Outcome {
    id: WatchId,
    cell: Arc<LeaseCell>,
    result: Result<Instant, Error>,
}

/// A batch for one node's renewal thread.
struct Job {
    items: Vec<Item>,
    /// A key on that node: a Cluster's slot table is fetched from the master owning it.
    key: String,
    /// A heartbeat of the client in the registry of live clients (sent alone).
    beat: Option<ScriptOp<Beat>>,
}

/// A renewal thread: sends its node's batches one after another.
struct Worker {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// Disconnected when the thread ends.
    exited: Receiver<()>,
    /// Until when dropping waits for the thread to end (`None`: [`WORKER_EXIT_WAIT`] from
    /// the drop).
    exit_by: Option<Instant>,
}

/// How long dropping a renewal thread's handle waits for the thread to end: an idle one
/// ends at once when its channel closes. One with a batch in flight (a frozen server) is
/// not waited for: it ends on its own when that batch's I/O times out (by its deadline,
/// at most the io timeout), holding only its node's connection pool meanwhile, and its
/// leases are handed back then ([`Unsettled`]). Dropping the last client so returns
/// within a second whatever the io timeout.
const WORKER_EXIT_WAIT: Duration = Duration::from_millis(100);

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        let until = self.exit_by.unwrap_or_else(|| {
            redlease_core::backoff::saturating_add(Instant::now(), WORKER_EXIT_WAIT)
        });
        // Ended (its channel disconnected): join it; still busy: let it end on its own.
        if let Err(crossbeam_channel::RecvTimeoutError::Disconnected) =
            self.exited.recv_deadline(until)
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// A renewal batch's outcomes on their way back to the watchdog thread. Dropped unsettled
/// (the watchdog thread is gone, or going), it hands every lease back (`Renewing` ends), so
/// that no guard waits for a renewal nobody will settle.
struct Unsettled(Vec<Outcome>);

impl Unsettled {
    fn take(mut self) -> Vec<Outcome> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        for o in self.0.drain(..) {
            o.cell.end_renewal(None);
        }
    }
}

/// What a failed or skipped renewal reports: retried by the schedule until the validity.
fn not_answered(why: &'static str) -> Result<Instant, Error> {
    Err(Error::Unavailable {
        attempts: 1,
        last: TransportFailure::no_reply(why),
    })
}

fn failed(items: Vec<Item>, why: &'static str) -> Vec<Outcome> {
    items
        .into_iter()
        .map(|i| Outcome {
            id: i.id,
            cell: i.cell,
            result: not_answered(why),
        })
        .collect()
}

/// Sends one batch of extensions through the driver loop (each extension's own retries
/// run, within its deadline) and collects their outcomes.
fn renew_batch(
    node: &Node,
    time: &Time,
    items: Vec<Item>,
    kept: &mut Option<Pooled>,
) -> Vec<Outcome> {
    let (meta, mut machines): (Vec<_>, Vec<_>) =
        items.into_iter().map(|i| ((i.id, i.cell), i.op)).unzip();
    let mut results: Vec<Option<Result<Instant, Error>>> = machines.iter().map(|_| None).collect();
    let route = Route {
        nodes: std::slice::from_ref(node),
        time,
        listening: None,
        counters: None,
        checked: false,
        hold: true,
        at: None,
    };
    // Nothing that happens in one batch may end the thread (its leases would be left
    // Renewing for ever): a panic counts as no reply.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        drive_set(&route, &mut machines, &mut results, kept)
    }));
    // A server that refused `SET ... IFEQ` (a failover to an older one): scripts only until
    // the next connection set-up learns the server again.
    if let Node::Redis(t) = node
        && machines.iter().any(Extension::refused_natively)
    {
        t.forget_server_kind();
    }
    meta.into_iter()
        .zip(results)
        .map(|((id, cell), result)| Outcome {
            id,
            cell,
            result: result.unwrap_or_else(|| not_answered("renewal not answered")),
        })
        .collect()
}

/// The renewal thread of one node.
fn work(
    node: &Node,
    time: &Time,
    jobs: &Receiver<Job>,
    done: &Sender<Unsettled>,
    stopping: &AtomicBool,
) {
    // On a Cluster, this node's own connection between batches (see `run_together`).
    let mut kept = None;
    for Job { items, key, beat } in jobs.iter() {
        if let Some(beat) = beat {
            if !stopping.load(Ordering::SeqCst) {
                heartbeat(node, time, beat);
            }
            continue;
        }
        if items.is_empty() {
            // Only asked to learn the slot table (before the first renewals are due).
            if !stopping.load(Ordering::SeqCst) {
                let _ = catch_unwind(AssertUnwindSafe(|| node.refresh_nodes(&key)));
            }
            continue;
        }
        if stopping.load(Ordering::SeqCst) {
            // The client is gone: send nothing more, but hand every lease back.
            if done
                .send(Unsettled(failed(items, "the watchdog stopped")))
                .is_err()
            {
                return; // the leases were handed back as the unsent outcomes dropped
            }
            continue;
        }
        let outcomes = Unsettled(renew_batch(node, time, items, &mut kept));
        if done.send(outcomes).is_err() {
            return;
        }
        // A Cluster client learns which master owns which slot (to batch by node).
        if !stopping.load(Ordering::SeqCst) {
            let _ = catch_unwind(AssertUnwindSafe(|| node.refresh_nodes(&key)));
        }
    }
}

/// Sends a heartbeat of the registry of live clients through the driver loop (its retries
/// within its deadline). Its outcome changes nothing here: a heartbeat that fails is
/// followed by the next one, and an entry outlives several of them.
fn heartbeat(node: &Node, time: &Time, beat: ScriptOp<Beat>) {
    let route = Route {
        nodes: std::slice::from_ref(node),
        time,
        listening: None,
        counters: None,
        checked: false,
        hold: false,
        at: None,
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let outcome = crate::driver::backend::drive(&route, beat);
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "redlease: registry heartbeat failed");
        }
    }));
}

/// The registry part of the watchdog's tick: when the next heartbeat is due.
struct Heartbeat {
    registration: Arc<RegistryEntry>,
    next: Instant,
}

/// The watchdog thread's state. However the thread ends, dropping this reports every lease
/// it watched (and every one still queued) lost, then stops the renewal threads.
struct Scheduler {
    node: Node,
    time: Time,
    io_timeout: Duration,
    queue: Arc<Queue>,
    /// Renewals run on the calling thread (a test clock's timer), not on renewal threads.
    inline: bool,
    /// The schedule, under each registration's id: it keeps the lease's cell (no table of
    /// the cells beside it).
    renewals: Renewals<LeaseCell>,
    /// Registrations taken from the queue whose first renewal is not due yet: they enter
    /// the schedule only when it is (a lease released before costs the schedule nothing).
    nursery: Vec<Registration>,
    /// When the nursery enters the schedule: the earliest first renewal of the
    /// registrations taken since it last did, released ones included. Keeping a released
    /// lease's time costs one spurious round at most, and spares a client that acquires and
    /// releases in a loop a wake-up of this thread for each lease (each new lease's first
    /// renewal then comes after this time, so it need not wake the thread).
    nursery_due: Option<Instant>,
    workers: HashMap<String, Worker>,
    done_tx: Sender<Unsettled>,
    done_rx: Receiver<Unsettled>,
    stopping: Arc<AtomicBool>,
    /// When the slot table was last asked for outside a renewal batch.
    table_asked: Option<Instant>,
    /// The client's heartbeats in the registry of live clients, if it keeps an entry.
    heartbeat: Option<Heartbeat>,
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.leave_registry();
        self.queue.stopped.store(true, Ordering::SeqCst);
        self.queue.fail_pending();
        self.fail_all();
        // Queued batches are handed back unsent; the ones in flight end by their deadline,
        // on threads that are not waited for (see WORKER_EXIT_WAIT): every thread is told
        // at once, then all are given one short wait together.
        self.stopping.store(true, Ordering::SeqCst);
        let until = redlease_core::backoff::saturating_add(Instant::now(), WORKER_EXIT_WAIT);
        for worker in self.workers.values_mut() {
            drop(worker.jobs.take());
            worker.exit_by = Some(until);
        }
        self.workers.clear();
        // The leases of outcomes not settled yet are handed back (see `Unsettled`): those
        // here now, and those a busy thread sends later, dropped with the channel.
        for outcomes in self.done_rx.try_iter() {
            drop(outcomes);
        }
    }
}

impl Scheduler {
    /// Keeps the client's entry in the registry of live clients (`Some`), the first
    /// heartbeat due at once.
    fn set_registration(&mut self, registration: Option<Arc<RegistryEntry>>) {
        let next = self.time.now();
        self.heartbeat = registration.map(|registration| Heartbeat { registration, next });
    }

    /// Sends the heartbeat if it is due (one script on the registry's node; nothing when
    /// the client keeps no entry), and sets the next one an interval later.
    fn beat_if_due(&mut self, now: Instant) {
        let Some(h) = &mut self.heartbeat else { return };
        if now < h.next {
            return;
        }
        h.next = redlease_core::backoff::saturating_add(now, h.registration.every);
        let leases = self.queue.live.load(Ordering::Relaxed) as u64;
        let deadline = redlease_core::backoff::saturating_add(now, self.io_timeout);
        let r = &h.registration;
        let Ok(beat) = registry::beat(&r.keyspace, &r.id, r.keep, &r.record(leases), deadline)
        else {
            return;
        };
        if self.inline {
            heartbeat(&self.node, &self.time, beat);
            return;
        }
        let key = r.key();
        let node = self.node.node_of(&key);
        let job = Job {
            items: Vec::new(),
            key,
            beat: Some(beat),
        };
        let _ = self.send_to(node, job);
    }

    /// The client is gone: its entry leaves the registry (one script, bounded by the io
    /// timeout, on this thread: the client's drop waits for it).
    fn leave_registry(&mut self) {
        let Some(h) = self.heartbeat.take() else {
            return;
        };
        let r = &h.registration;
        let deadline = redlease_core::backoff::saturating_add(self.time.now(), self.io_timeout);
        let route = Route {
            nodes: std::slice::from_ref(&self.node),
            time: &self.time,
            listening: None,
            counters: None,
            checked: false,
            hold: false,
            at: None,
        };
        let leave = registry::leave(&r.keyspace, &r.id, deadline);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            crate::driver::backend::drive(&route, leave)
        }));
    }

    /// Reports every watched lease lost and forgets them all.
    fn fail_all(&mut self) {
        for (id, cell) in self.renewals.iter() {
            if cell.is_current(id) {
                cell.mark_lost(LossReason::WatchdogStopped);
            }
        }
        self.nursery.drain(..).for_each(Registration::fail);
        self.nursery_due = None;
        self.renewals = Renewals::default();
    }

    /// When the thread must next run a round: the schedule's next renewal or loss, or the
    /// first renewal of a lease not yet in it.
    fn next_wakeup(&mut self) -> Option<Instant> {
        let beat = self.heartbeat.as_ref().map(|h| h.next);
        [self.renewals.next_wakeup(), self.nursery_due, beat]
            .into_iter()
            .flatten()
            .min()
    }

    /// Takes the queued registrations: released ones are forgotten, the others wait in the
    /// nursery until the first of them is due, then all enter the schedule (which renews
    /// each at its own time).
    fn admit(&mut self) {
        let registrations = std::mem::take(&mut *self.queue.pending());
        let now = self.time.now();
        // A Cluster client learns its slot table before the first renewals are due, so
        // that they already go out in per-node batches.
        if let Some(r) = registrations.first()
            && self.node.nodes_stale()
            && self
                .table_asked
                .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
        {
            self.table_asked = Some(now);
            let key = key_of(&r.cell.lease).to_owned();
            let node = self.node.node_of(&key);
            let _ = self.send_to(
                node,
                Job {
                    items: Vec::new(),
                    key,
                    beat: None,
                },
            );
        }
        for r in registrations {
            let first = r.first();
            self.nursery_due = Some(self.nursery_due.map_or(first, |t| t.min(first)));
            // Released (or registered anew) before its first renewal: nothing to do.
            if r.cell.is_current(r.id) {
                self.nursery.push(r);
            }
        }
        let early = self.queue.released_early.load(Ordering::Relaxed);
        if early >= COMPACT_AFTER {
            self.queue
                .released_early
                .fetch_sub(early, Ordering::Relaxed);
            self.nursery.retain(|r| r.cell.is_current(r.id));
        }
        if self.nursery_due.is_some_and(|t| t <= now) {
            self.nursery_due = None;
            // Room for them all at once, rather than doubling the tables as they enter.
            self.renewals.reserve(self.nursery.len());
            for r in self.nursery.drain(..) {
                if !r.cell.enter_schedule(r.id) {
                    continue;
                }
                self.renewals.insert(r.id, r.cell, r.policy.get(), now);
            }
            // Many leases acquired within one renewal interval passed through here at once:
            // do not keep their room.
            if self.nursery.capacity() > NURSERY_KEEP {
                self.nursery = Vec::new();
            }
        }
        let released = self.queue.released.load(Ordering::Relaxed);
        if released >= COMPACT_AFTER {
            self.queue.released.fetch_sub(released, Ordering::Relaxed);
            self.renewals
                .retain(|_, cell| cell.state().phase != Phase::Released);
        }
    }

    /// Hands out what is due, by node, and reports what the clock says is lost.
    fn dispatch(&mut self) {
        let now = self.time.now();
        let deadline = redlease_core::backoff::saturating_add(now, self.io_timeout);
        // Plain locks are extended by `SET ... IFEQ` where the server has it.
        let native = match &self.node {
            Node::Redis(t) => t
                .server_kind()
                .is_some_and(crate::wire::server::ServerKind::compare_and_set),
            #[allow(unreachable_patterns)]
            _ => false,
        };
        self.renewals.set_native_extend(native);
        let Due { renew, lost } = self.renewals.due(now, deadline, BATCH);
        for (id, reason, cell) in lost {
            if cell.is_current(id) {
                cell.mark_lost(reason);
            }
        }
        let mut by_node: HashMap<String, Vec<Item>> = HashMap::new();
        for (id, op) in renew {
            let taken = self
                .renewals
                .get(id)
                .filter(|cell| cell.lost.get().is_none() && cell.begin_renewal(id))
                .cloned();
            match taken {
                Some(cell) => {
                    let node = self.node.node_of(key_of(&cell.lease));
                    by_node.entry(node).or_default().push(Item { id, cell, op });
                }
                // Released, lost or registered anew: forget it, send nothing.
                None => {
                    self.renewals.remove(id);
                }
            }
        }
        self.beat_if_due(now);
        for (node, items) in by_node {
            if self.inline {
                let outcomes = renew_batch(&self.node, &self.time, items, &mut None);
                self.settle(outcomes);
                continue;
            }
            let key = items
                .first()
                .map(|i| key_of(&i.cell.lease).to_owned())
                .unwrap_or_default();
            if let Err(items) = self.send_to(
                node,
                Job {
                    items,
                    key,
                    beat: None,
                },
            ) {
                let outcomes = failed(items, "no renewal thread");
                self.settle(outcomes);
            }
        }
    }

    /// Queues `job` on `node`'s renewal thread (started on first use); gives its items back
    /// if it cannot.
    fn send_to(&mut self, node: String, job: Job) -> Result<(), Vec<Item>> {
        if !self.workers.contains_key(&node) {
            let (jobs, queued) = unbounded();
            let (backend, time, done, stopping) = (
                self.node.clone(),
                self.time.clone(),
                self.done_tx.clone(),
                self.stopping.clone(),
            );
            let (exiting, exited) = bounded::<()>(0);
            let thread = std::thread::Builder::new()
                .name("redlease-renew".into())
                .spawn(move || {
                    let _exiting = exiting;
                    work(&backend, &time, &queued, &done, &stopping);
                })
                .map_err(|_| ())
                .ok();
            let Some(thread) = thread else {
                return Err(job.items);
            };
            self.workers.insert(
                node.clone(),
                Worker {
                    jobs: Some(jobs),
                    thread: Some(thread),
                    exited,
                    exit_by: None,
                },
            );
        }
        let jobs = self.workers.get(&node).and_then(|w| w.jobs.as_ref());
        match jobs {
            Some(jobs) => jobs.send(job).map_err(|e| {
                // The thread is gone: start another next time.
                self.workers.remove(&node);
                e.into_inner().items
            }),
            None => Err(job.items),
        }
    }

    /// Takes the outcomes of a batch.
    fn settle(&mut self, outcomes: Vec<Outcome>) {
        let now = self.time.now();
        for o in outcomes {
            let current = self.renewals.get(o.id).is_some();
            // A guard that gave up waiting for this renewal (or registered anew), or a
            // lease already reported lost: the outcome of this old renewal must not touch
            // it, and it is not renewed any more.
            if !current || !o.cell.is_current(o.id) || o.cell.lost.get().is_some() {
                o.cell.end_renewal(None);
                if current {
                    self.renewals.remove(o.id);
                }
                continue;
            }
            o.cell.note_outcome(&o.result);
            match self.renewals.renewed(o.id, o.result, now) {
                RenewalEvent::Renewed { valid_until } => {
                    let last = self.renewals.is_final(o.id);
                    o.cell.end_renewal(Some((valid_until, last)));
                }
                RenewalEvent::Pending => o.cell.end_renewal(None),
                RenewalEvent::Lost(reason) => {
                    o.cell.end_renewal(None);
                    o.cell.mark_lost(reason);
                }
            }
        }
    }
}

/// What ended a wait of the watchdog thread.
enum Woken {
    Timer,
    Nudged,
    Outcomes(Unsettled),
    Stop,
}

impl Scheduler {
    fn new(node: Node, time: Time, io_timeout: Duration, queue: Arc<Queue>, inline: bool) -> Self {
        let (done_tx, done_rx) = unbounded();
        Scheduler {
            node,
            time,
            io_timeout,
            queue,
            inline,
            renewals: Renewals::default(),
            nursery: Vec::new(),
            nursery_due: None,
            workers: HashMap::new(),
            done_tx,
            done_rx,
            stopping: Arc::new(AtomicBool::new(false)),
            table_asked: None,
            heartbeat: None,
        }
    }
}

/// The watchdog of a client on a test clock: no threads. A registration runs a round at
/// once; each round sets a timer on the clock for the next one, so renewals (and losses)
/// happen as the clock moves, each at its own instant, on the thread that moves it.
#[cfg(feature = "memory")]
struct Inline {
    scheduler: Mutex<Scheduler>,
    clock: crate::memory::MemoryClock,
    /// The earliest round a timer is set for.
    armed: Mutex<Option<Instant>>,
}

#[cfg(feature = "memory")]
impl Inline {
    fn round(this: &Arc<Inline>) {
        let next = this.clock.without_timers(|| {
            let mut s = this.scheduler.lock().unwrap_or_else(|p| p.into_inner());
            s.admit();
            s.dispatch();
            let next = s.next_wakeup();
            s.queue
                .next_wakeup
                .store(s.queue.encode(next), Ordering::SeqCst);
            next
        });
        let Some(next) = next else { return };
        // A round due now or earlier (one that could not make progress at this instant)
        // runs when the clock next moves: a timer due now would run at once, and a round
        // that keeps finding itself due would call itself until the stack overflows.
        let next = next.max(this.clock.instant() + Duration::from_micros(1));
        let mut armed = this.armed.lock().unwrap_or_else(|p| p.into_inner());
        if armed.is_some_and(|a| a <= next && a > this.clock.instant()) {
            return; // a timer fires by then anyway
        }
        *armed = Some(next);
        drop(armed);
        let weak = Arc::downgrade(this);
        this.clock.at(next, move || {
            if let Some(inline) = weak.upgrade() {
                {
                    let mut armed = inline.armed.lock().unwrap_or_else(|p| p.into_inner());
                    if *armed == Some(next) {
                        *armed = None;
                    }
                }
                Inline::round(&inline);
            }
        });
    }
}

fn run(
    node: Node,
    time: Time,
    io_timeout: Duration,
    queue: Arc<Queue>,
    registration: Option<Arc<RegistryEntry>>,
    wakeups: &Receiver<()>,
) {
    let mut s = Scheduler::new(node, time, io_timeout, queue, false);
    s.set_registration(registration);
    loop {
        // Nothing that happens in one round may end the thread silently: a panic reports
        // every lease watched so far lost (its state may be torn), and the thread goes on.
        let round = catch_unwind(AssertUnwindSafe(|| round(&mut s, wakeups)));
        match round {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => s.fail_all(),
        }
    }
}

/// One round of the watchdog thread: admit, dispatch, wait. False when the client is gone.
fn round(s: &mut Scheduler, wakeups: &Receiver<()>) -> bool {
    #[cfg(test)]
    tests::maybe_panic();
    s.admit();
    s.dispatch();
    let next = s.next_wakeup();
    s.queue
        .next_wakeup
        .store(s.queue.encode(next), Ordering::SeqCst);
    // A registration that raced the store may not have woken us: look again.
    if !s.queue.pending().is_empty() {
        return true;
    }
    let timer = next.map(at).unwrap_or_else(never);
    let woken = select_biased! {
        recv(wakeups) -> msg => if msg.is_err() { Woken::Stop } else { Woken::Nudged },
        recv(s.done_rx) -> outcomes => outcomes.map_or(Woken::Timer, Woken::Outcomes),
        recv(timer) -> _ => Woken::Timer,
    };
    match woken {
        Woken::Stop => false,
        Woken::Outcomes(outcomes) => {
            s.settle(outcomes.take());
            true
        }
        Woken::Timer | Woken::Nudged => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlease_core::keys::Keyspace;
    use redlease_core::lease::{LockSpec, Token, valid_until};

    /// Makes the watchdog thread's next round panic (a fault injected by the test below).
    static PANIC_NEXT: AtomicBool = AtomicBool::new(false);

    pub(super) fn maybe_panic() {
        if PANIC_NEXT.swap(false, Ordering::SeqCst) {
            panic!("injected fault in the watchdog thread");
        }
    }

    fn lease(name: &str, ttl: Duration) -> Lease {
        let spec =
            LockSpec::lease(&Keyspace::default(), name, Token::from_random([3; 16]), ttl).unwrap();
        let now = Instant::now();
        Lease {
            kind: spec.kind,
            target: spec.target,
            token: spec.token,
            fence: 1,
            ttl,
            acquired_at: now,
            valid_until: valid_until(now, ttl),
            attempts: 1,
            unanswered: false,
            calls: spec.calls,
            data: Vec::new(),
        }
    }

    /// A transport to a port nothing listens on, with 100 ms timeouts (renewals fail, which
    /// the tests using it do not need), and those timeouts.
    fn unanswered_transport() -> (Arc<crate::transport::pool::Transport>, Duration) {
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let source = Arc::new(crate::transport::pool::Source::Direct(client));
        let ms = Duration::from_millis(100);
        let transport = Arc::new(crate::transport::pool::Transport::with_settings(
            source,
            &crate::transport::pool::PoolSettings::sized(1),
            ms,
            ms,
            true,
        ));
        (transport, ms)
    }

    /// A watchdog's state without its thread (rounds run by the test), on a server that
    /// does not answer.
    fn scheduler() -> (Scheduler, Arc<Queue>) {
        let (transport, ms) = unanswered_transport();
        let queue = Arc::new(Queue {
            pending: Mutex::new(Vec::new()),
            released: AtomicUsize::new(0),
            released_early: AtomicUsize::new(0),
            next_wakeup: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            live: AtomicUsize::new(0),
        });
        let s = Scheduler::new(Node::Redis(transport), Time::Real, ms, queue.clone(), false);
        (s, queue)
    }

    /// A lease released before its first renewal is due never enters the schedule (a short
    /// hold costs the watchdog thread nothing but the queue), and does not wake the thread
    /// for a round of its own; a lease still held then enters it on time.
    #[test]
    fn a_lease_released_before_its_first_renewal_never_enters_the_schedule() {
        let (mut s, queue) = scheduler();
        let ttl = Duration::from_secs(3);
        let policy = Policy::from(RenewalPolicy::for_ttl(ttl));
        let held_cell = LeaseCell::new(lease("held", ttl));
        let first = queue.register(policy, held_cell.clone());
        let mut released = Vec::new();
        for i in 0..100 {
            let cell = LeaseCell::new(lease(&format!("short-{i}"), ttl));
            queue.register(policy, cell.clone());
            assert_eq!(
                cell.release(|| panic!("no renewal in flight: nothing to wait for")),
                Some(false),
                "never scheduled"
            );
            released.push(cell);
        }
        s.admit();
        assert_eq!(s.renewals.len(), 0, "nothing is due yet: nothing scheduled");
        assert_eq!(s.nursery.len(), 1, "only the held lease is kept");
        assert_eq!(s.next_wakeup(), Some(first));

        // Its first renewal comes due: it enters the schedule, due at once.
        while Instant::now() < first {
            std::thread::sleep(first.saturating_duration_since(Instant::now()));
        }
        s.admit();
        assert_eq!(s.renewals.len(), 1);
        assert!(s.nursery.is_empty());
        assert!(s.next_wakeup().is_some_and(|t| t <= Instant::now()));
        // The schedule keeps the guard's cell itself, lease inside, and no other copy of it
        // (a table of cells beside the schedule, or the lease in an allocation of its own,
        // took 16-48 bytes a lease more).
        assert!(
            s.renewals
                .get(0)
                .is_some_and(|c| Arc::ptr_eq(c, &held_cell))
        );
        assert_eq!(
            Arc::strong_count(&held_cell),
            2,
            "the test's and the schedule's"
        );
        for cell in released {
            assert_eq!(cell.lost(&Time::Real), None);
            assert!(cell.signal().try_recv().is_err());
        }
        assert_eq!(
            held_cell.release(|| Duration::ZERO),
            Some(true),
            "scheduled"
        );
        assert_eq!(held_cell.release(|| Duration::ZERO), None, "released once");
    }

    /// A held lease's cell is its lease and 72 bytes more (one allocation: the lease was
    /// a second one, shared through its own `Arc`, with its counts and the allocator's
    /// header), and its validity and ttl read back exactly, for the schedule too.
    #[test]
    fn a_cell_is_its_lease_and_72_bytes_and_keeps_its_validity_exactly() {
        let over = std::mem::size_of::<LeaseCell>() - std::mem::size_of::<Lease>();
        assert!(over <= 72, "{over}");
        let l = lease("exact", Duration::from_secs(30));
        let cell = LeaseCell::new(l.clone());
        assert_eq!(cell.valid_until(), l.valid_until);
        assert_eq!(WatchedLease::valid_until(&*cell), l.valid_until);
        assert_eq!(WatchedLease::ttl(&*cell), l.ttl);
        cell.set_ttl(Duration::from_millis(1234));
        assert_eq!(WatchedLease::ttl(&*cell), Duration::from_millis(1234));
        assert_eq!(cell.lease().ttl, l.ttl, "the lease as acquired");
        let later = l.valid_until + Duration::from_nanos(123_456_789);
        cell.set_valid_until(later);
        assert_eq!(cell.valid_until(), later);
        assert_eq!(WatchedLease::valid_until(&*cell), later);
        cell.end_renewal(Some((later + Duration::from_secs(1), false)));
        assert_eq!(cell.valid_until(), later + Duration::from_secs(1));
    }

    /// A guard and a queued registration keep a renewal policy in 16 bytes, and read it back
    /// exactly (a hold limit or none).
    #[test]
    fn a_policy_takes_16_bytes_and_reads_back_exactly() {
        assert_eq!(std::mem::size_of::<Option<Policy>>(), 16);
        assert!(std::mem::size_of::<Registration>() <= 32);
        for p in [
            RenewalPolicy::for_ttl(Duration::from_secs(30)),
            RenewalPolicy {
                every: Duration::from_millis(7),
                max_hold: Some(Duration::from_secs(3 * 86_400)),
            },
            RenewalPolicy {
                every: Duration::from_nanos(1),
                max_hold: Some(Duration::ZERO),
            },
        ] {
            assert_eq!(Policy::from(p).get(), p);
        }
    }

    /// A held lease's cell stays small: the loss channel is made only when asked for.
    #[test]
    fn a_cell_keeps_no_channel_until_asked() {
        let cell = LeaseCell::new(lease("small", Duration::from_secs(30)));
        // The signal's slot is a pointer and a flag (the channel's two ends were 32 bytes
        // inline, in every held lease).
        let slot = std::mem::size_of_val(&cell.signal);
        assert!(slot <= 2 * std::mem::size_of::<usize>(), "{slot} bytes");
        assert!(cell.signal.get().is_none());
        let _ = cell.signal();
        assert!(cell.signal.get().is_some(), "made when asked for");
    }

    /// The loss signal fires exactly once, whether it is made before the loss, after it,
    /// or at the same moment on another thread.
    #[test]
    fn the_loss_signal_fires_once_whenever_it_is_made() {
        let ttl = Duration::from_secs(30);
        let before = LeaseCell::new(lease("before", ttl));
        let rx = before.signal().clone();
        assert!(rx.try_recv().is_err());
        before.mark_lost(LossReason::Taken);
        before.mark_lost(LossReason::Expired);
        assert_eq!(rx.try_recv(), Ok(LossReason::Taken));
        assert!(before.signal().try_recv().is_err(), "fired once");

        let after = LeaseCell::new(lease("after", ttl));
        after.mark_lost(LossReason::Expired);
        assert_eq!(after.signal().try_recv(), Ok(LossReason::Expired));
        assert!(after.signal().try_recv().is_err(), "fired once");

        for _ in 0..200 {
            let cell = LeaseCell::new(lease("race", ttl));
            let marker = {
                let cell = cell.clone();
                std::thread::spawn(move || cell.mark_lost(LossReason::Taken))
            };
            let rx = cell.signal().clone();
            marker.join().unwrap();
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)),
                Ok(LossReason::Taken)
            );
            assert!(rx.try_recv().is_err(), "fired once");
        }
    }

    fn await_lost(cell: &LeaseCell, limit: Duration) -> Option<LossReason> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(reason) = cell.lost.get() {
                return Some(*reason);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    /// A panic inside the watchdog thread reports the leases it watched lost (they will not
    /// be renewed by the torn state), and the thread goes on serving later leases.
    #[test]
    fn a_panic_in_the_watchdog_reports_its_leases_lost_and_the_thread_goes_on() {
        let (transport, ms) = unanswered_transport();
        let watchdog = Watchdog::start(Node::Redis(transport), Time::Real, ms, None).unwrap();
        let policy = Policy::from(RenewalPolicy::for_ttl(Duration::from_secs(30)));

        let a = LeaseCell::new(lease("a", Duration::from_secs(30)));
        watchdog.watch(policy, a.clone());
        // The thread admits `a`, then sleeps until its first renewal (10 s away).
        let start = Instant::now();
        while watchdog.queue.next_wakeup.load(Ordering::SeqCst) == u64::MAX {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "a was never admitted"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        PANIC_NEXT.store(true, Ordering::SeqCst);
        watchdog.nudge();
        assert_eq!(
            await_lost(&a, Duration::from_secs(5)),
            Some(LossReason::WatchdogStopped)
        );

        // Still running: a lease registered now is watched (its renewals fail, Redis is
        // unreachable, so it is reported lost at its validity, not before).
        let ttl = Duration::from_millis(300);
        let b = LeaseCell::new(lease("b", ttl));
        let b_valid = b.lease().valid_until;
        watchdog.watch(RenewalPolicy::for_ttl(ttl).into(), b.clone());
        assert_eq!(
            await_lost(&b, Duration::from_secs(5)),
            Some(LossReason::RenewalFailed)
        );
        assert!(Instant::now() >= b_valid);
        assert!(!PANIC_NEXT.load(Ordering::SeqCst));
    }
}
