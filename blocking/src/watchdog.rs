//! One watchdog thread per client: keeps the leases of live guards alive.
//!
//! The schedule and every decision (when to renew, when a lease is lost) live in the core's
//! [`Renewals`]; this thread only sleeps until the next deadline or a message, runs the
//! extension machines it is handed (pipelined in one batch), and tells guards what happened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, at, bounded, never, select_biased, unbounded};
use redlease_core::lease::Lease;
use redlease_core::renewal::{Due, RenewalEvent, RenewalPolicy, Renewals, WatchId};
use redlease_core::{Error, LossReason, Step, TransportFailure};

use crate::transport::{Transport, run_together};

/// The most extensions sent in one pipelined batch.
const BATCH: usize = 512;

/// What a guard and the watchdog share about one lease.
#[derive(Debug)]
pub(crate) struct LeaseCell {
    valid_until: Mutex<Instant>,
    lost: OnceLock<LossReason>,
    signal: Sender<LossReason>,
}

impl LeaseCell {
    /// A cell and the receiver that fires (once) when the lease is lost.
    pub(crate) fn new(valid_until: Instant) -> (Arc<LeaseCell>, Receiver<LossReason>) {
        let (signal, rx) = bounded(1);
        let cell = LeaseCell {
            valid_until: Mutex::new(valid_until),
            lost: OnceLock::new(),
            signal,
        };
        (Arc::new(cell), rx)
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_valid_until(&self, t: Instant) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    pub(crate) fn lost(&self) -> Option<LossReason> {
        self.lost.get().copied()
    }

    pub(crate) fn mark_lost(&self, reason: LossReason) {
        if self.lost.set(reason).is_ok() {
            let _ = self.signal.try_send(reason);
        }
    }
}

enum Msg {
    Watch {
        id: WatchId,
        lease: Box<Lease>,
        policy: RenewalPolicy,
        cell: Arc<LeaseCell>,
    },
    Unwatch {
        id: WatchId,
        done: Sender<()>,
    },
}

/// The watchdog thread's handle; dropping it stops and joins the thread.
pub(crate) struct Watchdog {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Watchdog {
    pub(crate) fn start(transport: Arc<Transport>, io_timeout: Duration) -> Result<Self, Error> {
        let (tx, rx) = unbounded();
        let thread = std::thread::Builder::new()
            .name("redlease-watchdog".into())
            .spawn(move || run(&transport, io_timeout, &rx))
            .map_err(|_| Error::Driver("could not spawn the watchdog thread"))?;
        Ok(Watchdog {
            tx: Some(tx),
            thread: Some(thread),
            next_id: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Starts renewing `lease`; returns its id.
    pub(crate) fn watch(
        &self,
        lease: Lease,
        policy: RenewalPolicy,
        cell: Arc<LeaseCell>,
    ) -> WatchId {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Watch {
                id,
                lease: Box::new(lease),
                policy,
                cell,
            });
        }
        id
    }

    /// Stops renewing a lease, waiting (at most `limit`) until the watchdog confirms: after
    /// that no extension for it is in flight or will ever be sent.
    pub(crate) fn unwatch(&self, id: WatchId, limit: Duration) {
        let (done, confirmed) = bounded(1);
        if let Some(tx) = &self.tx
            && tx.send(Msg::Unwatch { id, done }).is_ok()
        {
            let _ = confirmed.recv_timeout(limit);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(transport: &Transport, io_timeout: Duration, rx: &Receiver<Msg>) {
    let mut renewals = Renewals::new();
    let mut cells: HashMap<WatchId, Arc<LeaseCell>> = HashMap::new();
    loop {
        let timer = renewals.next_wakeup().map(at).unwrap_or_else(never);
        select_biased! {
            recv(rx) -> msg => match msg {
                Ok(Msg::Watch { id, lease, policy, cell }) => {
                    renewals.insert(id, *lease, policy, Instant::now());
                    cells.insert(id, cell);
                }
                Ok(Msg::Unwatch { id, done }) => {
                    renewals.remove(id);
                    cells.remove(&id);
                    let _ = done.send(());
                }
                // The client is gone: the leases still watched will not be renewed.
                Err(_) => {
                    for cell in cells.values() {
                        cell.mark_lost(LossReason::WatchdogStopped);
                    }
                    return;
                }
            },
            recv(timer) -> _ => renew_due(transport, io_timeout, &mut renewals, &mut cells),
        }
    }
}

fn renew_due(
    transport: &Transport,
    io_timeout: Duration,
    renewals: &mut Renewals,
    cells: &mut HashMap<WatchId, Arc<LeaseCell>>,
) {
    let now = Instant::now();
    let Due { renew, lost } = renewals.due(now, now + io_timeout, BATCH);
    for (id, reason) in lost {
        if let Some(cell) = cells.remove(&id) {
            cell.mark_lost(reason);
        }
    }
    if renew.is_empty() {
        return;
    }
    let (ids, mut machines): (Vec<WatchId>, Vec<_>) = renew.into_iter().unzip();
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
        match renewals.renewed(id, outcome, now) {
            RenewalEvent::Renewed { valid_until } => {
                if let Some(cell) = cells.get(&id) {
                    cell.set_valid_until(valid_until);
                }
            }
            RenewalEvent::Lost(reason) => {
                if let Some(cell) = cells.remove(&id) {
                    cell.mark_lost(reason);
                }
            }
            RenewalEvent::Pending => {}
        }
    }
}
