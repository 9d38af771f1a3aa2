//! One watchdog thread per client: keeps the leases of live guards alive.
//!
//! The schedule and every decision (when to renew, when a lease is lost) live in the core's
//! [`Renewals`]; this thread only sleeps until the next deadline, runs the extension machines
//! it is handed (pipelined in one batch), and tells guards what happened.
//!
//! Acquiring and releasing a watched lease costs no round trip to this thread:
//! - a registration is queued, and the thread is woken only when the new lease is due
//!   before the thread's next wake-up anyway;
//! - a release flips the lease's cell to `Released` (waiting only if a renewal of that very
//!   lease is in flight), and the thread skips and forgets released leases when they come
//!   due, or sooner once many have piled up. No renewal is ever sent after the flip.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, at, bounded, never, select_biased};
use redlease_core::lease::Lease;
use redlease_core::renewal::{Due, RenewalEvent, RenewalPolicy, Renewals, WatchId};
use redlease_core::{Error, LossReason, Step, TransportFailure};

use crate::transport::{Transport, run_together};

/// The most extensions sent in one pipelined batch.
const BATCH: usize = 512;

/// Released leases that may pile up before the thread is woken to forget them.
const COMPACT_AFTER: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Watched,
    Renewing,
    Released,
}

#[derive(Debug)]
struct CellState {
    valid_until: Instant,
    phase: Phase,
    /// Bumped when the lease is registered anew (a new ttl), so the old entry is skipped.
    generation: u64,
}

/// What a guard and the watchdog share about one lease.
#[derive(Debug)]
pub(crate) struct LeaseCell {
    state: Mutex<CellState>,
    renewal_done: Condvar,
    lost: OnceLock<LossReason>,
    signal: Sender<LossReason>,
}

impl LeaseCell {
    /// A cell and the receiver that fires (once) when the lease is lost.
    pub(crate) fn new(valid_until: Instant) -> (Arc<LeaseCell>, Receiver<LossReason>) {
        let (signal, rx) = bounded(1);
        let cell = LeaseCell {
            state: Mutex::new(CellState {
                valid_until,
                phase: Phase::Released,
                generation: 0,
            }),
            renewal_done: Condvar::new(),
            lost: OnceLock::new(),
            signal,
        };
        (Arc::new(cell), rx)
    }

    fn state(&self) -> MutexGuard<'_, CellState> {
        // Every update is a single assignment: a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    pub(crate) fn set_valid_until(&self, t: Instant) {
        self.state().valid_until = t;
    }

    pub(crate) fn lost(&self) -> Option<LossReason> {
        self.lost.get().copied()
    }

    pub(crate) fn mark_lost(&self, reason: LossReason) {
        if self.lost.set(reason).is_ok() {
            let _ = self.signal.try_send(reason);
        }
    }

    /// Waits (at most `limit`) for a renewal in flight to finish, then marks the lease
    /// released: from now on the watchdog sends nothing for it.
    pub(crate) fn release(&self, limit: Duration) {
        let state = self.state();
        let (mut state, _) = self
            .renewal_done
            .wait_timeout_while(state, limit, |s| s.phase == Phase::Renewing)
            .unwrap_or_else(|p| p.into_inner());
        state.phase = Phase::Released;
    }

    /// Marks the lease watched under a new generation (after [`release`](Self::release) or
    /// at first registration); returns the generation.
    fn arm(&self) -> u64 {
        let mut state = self.state();
        state.generation += 1;
        state.phase = Phase::Watched;
        state.generation
    }

    /// The watchdog takes the lease for a renewal; false when it was released (or
    /// re-registered under another generation).
    fn begin_renewal(&self, generation: u64) -> bool {
        let mut state = self.state();
        if state.phase == Phase::Watched && state.generation == generation {
            state.phase = Phase::Renewing;
            true
        } else {
            false
        }
    }

    /// Whether the registration of `generation` is the live one.
    fn is_current(&self, generation: u64) -> bool {
        let state = self.state();
        state.phase != Phase::Released && state.generation == generation
    }

    fn end_renewal(&self, valid_until: Option<Instant>) {
        let mut state = self.state();
        if state.phase == Phase::Renewing {
            state.phase = Phase::Watched;
        }
        if let Some(t) = valid_until {
            state.valid_until = t;
        }
        drop(state);
        self.renewal_done.notify_all();
    }
}

struct Registration {
    id: WatchId,
    generation: u64,
    lease: Box<Lease>,
    policy: RenewalPolicy,
    cell: Arc<LeaseCell>,
}

/// What the guards and the thread share.
struct Queue {
    pending: Mutex<Vec<Registration>>,
    released: AtomicUsize,
    /// The thread's next wake-up, in nanoseconds after `epoch` (`u64::MAX`: none).
    next_wakeup: AtomicU64,
    epoch: Instant,
    next_id: AtomicU64,
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
}

/// The watchdog thread's handle; dropping it stops and joins the thread.
pub(crate) struct Watchdog {
    queue: Arc<Queue>,
    wake: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub(crate) fn start(transport: Arc<Transport>, io_timeout: Duration) -> Result<Self, Error> {
        let queue = Arc::new(Queue {
            pending: Mutex::new(Vec::new()),
            released: AtomicUsize::new(0),
            next_wakeup: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            live: AtomicUsize::new(0),
        });
        let (wake, wakeups) = bounded(1);
        let thread = {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("redlease-watchdog".into())
                .spawn(move || run(&transport, io_timeout, &queue, &wakeups))
                .map_err(|_| Error::Driver("could not spawn the watchdog thread"))?
        };
        Ok(Watchdog {
            queue,
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    fn nudge(&self) {
        if let Some(wake) = &self.wake {
            // Full: a wake-up is already pending, which is all we need.
            if let Err(TrySendError::Disconnected(_)) = wake.try_send(()) {}
        }
    }

    /// Starts renewing `lease`, reporting to `cell` (which is armed here).
    pub(crate) fn watch(&self, lease: Lease, policy: RenewalPolicy, cell: Arc<LeaseCell>) {
        let generation = cell.arm();
        self.queue.live.fetch_add(1, Ordering::Relaxed);
        let first = Instant::now() + policy.every;
        let id = self.queue.next_id.fetch_add(1, Ordering::Relaxed);
        self.queue.pending().push(Registration {
            id,
            generation,
            lease: Box::new(lease),
            policy,
            cell,
        });
        if self.queue.encode(Some(first)) < self.queue.next_wakeup.load(Ordering::SeqCst) {
            self.nudge();
        }
    }

    /// Notes that a watched lease was released (its cell already says so).
    pub(crate) fn released(&self) {
        self.queue.live.fetch_sub(1, Ordering::Relaxed);
        if self.queue.released.fetch_add(1, Ordering::Relaxed) + 1 >= COMPACT_AFTER {
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

struct Watched {
    /// The lock's name, for logs.
    name: String,
    /// Renewals failed in a row (only the first is logged as a warning).
    failures: u32,
    generation: u64,
    cell: Arc<LeaseCell>,
}

fn run(transport: &Transport, io_timeout: Duration, queue: &Queue, wakeups: &Receiver<()>) {
    let mut renewals = Renewals::new();
    let mut cells: HashMap<WatchId, Watched> = HashMap::new();
    loop {
        let registrations = std::mem::take(&mut *queue.pending());
        let now = Instant::now();
        for r in registrations {
            let name = r.lease.target.name.clone();
            renewals.insert(r.id, *r.lease, r.policy, now);
            cells.insert(
                r.id,
                Watched {
                    name,
                    failures: 0,
                    generation: r.generation,
                    cell: r.cell,
                },
            );
        }
        let released = queue.released.load(Ordering::Relaxed);
        if released >= COMPACT_AFTER {
            queue.released.fetch_sub(released, Ordering::Relaxed);
            cells.retain(|id, w| {
                let keep = w.cell.state().phase != Phase::Released;
                if !keep {
                    renewals.remove(*id);
                }
                keep
            });
        }
        renew_due(transport, io_timeout, &mut renewals, &mut cells);

        let next = renewals.next_wakeup();
        queue
            .next_wakeup
            .store(queue.encode(next), Ordering::SeqCst);
        // A registration that raced the store may not have woken us: look again.
        if !queue.pending().is_empty() {
            continue;
        }
        let timer = next.map(at).unwrap_or_else(never);
        select_biased! {
            recv(wakeups) -> msg => if msg.is_err() {
                // The client is gone: the leases still watched (or still queued for
                // watching) will not be renewed.
                let queued = std::mem::take(&mut *queue.pending());
                let queued = queued.into_iter().map(|r| (r.generation, r.cell));
                let queued = queued.map(|(g, c)| (String::new(), g, c));
                let watched = cells.into_values().map(|w| (w.name, w.generation, w.cell));
                for (name, generation, cell) in watched.chain(queued) {
                    if cell.is_current(generation) {
                        crate::observe::lost(&name, LossReason::WatchdogStopped);
                        cell.mark_lost(LossReason::WatchdogStopped);
                    }
                }
                return;
            },
            recv(timer) -> _ => {}
        }
    }
}

fn renew_due(
    transport: &Transport,
    io_timeout: Duration,
    renewals: &mut Renewals,
    cells: &mut HashMap<WatchId, Watched>,
) {
    let now = Instant::now();
    let Due { renew, lost } = renewals.due(now, now + io_timeout, BATCH);
    for (id, reason) in lost {
        if let Some(w) = cells.remove(&id)
            && w.cell.is_current(w.generation)
        {
            crate::observe::lost(&w.name, reason);
            w.cell.mark_lost(reason);
        }
    }
    let mut ids = Vec::with_capacity(renew.len());
    let mut machines = Vec::with_capacity(renew.len());
    for (id, op) in renew {
        match cells.get(&id) {
            Some(w) if w.cell.begin_renewal(w.generation) => {
                ids.push(id);
                machines.push(op);
            }
            // Released (or registered anew): forget it, send nothing.
            _ => {
                renewals.remove(id);
                cells.remove(&id);
            }
        }
    }
    if machines.is_empty() {
        return;
    }
    let steps = run_together(transport, &mut machines);
    let now = Instant::now();
    for (id, step) in ids.into_iter().zip(steps) {
        let outcome = match step {
            Step::Done(result) => result,
            // The machine wants to retry after a transport failure: the schedule retries
            // instead, so one unreachable Redis never stalls the other leases.
            _ => Err(Error::Unavailable {
                attempts: 1,
                last: TransportFailure::no_reply("renewal not answered"),
            }),
        };
        if let Some(w) = cells.get_mut(&id) {
            w.failures = crate::observe::renewal(&w.name, &outcome, w.failures);
        }
        let event = renewals.renewed(id, outcome, now);
        let Some(w) = cells.get(&id) else { continue };
        // A guard that gave up waiting for this renewal (or registered anew) owns its
        // cell again: the outcome of this old renewal must not touch it.
        if !w.cell.is_current(w.generation) {
            w.cell.end_renewal(None);
            cells.remove(&id);
            renewals.remove(id);
            continue;
        }
        match event {
            RenewalEvent::Renewed { valid_until } => w.cell.end_renewal(Some(valid_until)),
            RenewalEvent::Pending => w.cell.end_renewal(None),
            RenewalEvent::Lost(reason) => {
                crate::observe::lost(&w.name, reason);
                w.cell.end_renewal(None);
                w.cell.mark_lost(reason);
                cells.remove(&id);
            }
        }
    }
}
