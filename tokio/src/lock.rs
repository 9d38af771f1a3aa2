//! The lease lock's handle and guard.

use std::sync::Arc;
use std::time::Duration;

use redlease_core::LossReason;
use redlease_core::lease::{Acquire, AcquireOptions, LockSpec, Token};
use redlease_core::renewal::WatchId;
use tokio::sync::{mpsc, oneshot, watch};

use crate::Error;
use crate::client::Shared;
use crate::driver::{Command, Granted, OpId};

/// A fenced lease lock of one [`Client`](crate::Client); made by
/// [`Client::lock`](crate::Client::lock). Cheap to clone.
#[derive(Clone)]
pub struct Lock {
    shared: Arc<Shared>,
    name: String,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, name: &str) -> Result<Lock, Error> {
        // Checks the name (and the ttl) as every acquisition will.
        LockSpec::lease(
            &shared.keyspace,
            name,
            Token::from_random([0; 16]),
            shared.lock_ttl,
        )?;
        Ok(Lock {
            shared,
            name: name.to_owned(),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Tries once: `Some(guard)` if the lock was free, `None` if someone holds it.
    ///
    /// **Cancel safety:** dropping the future before it completes leaves nothing held: the
    /// driver finishes the attempt and gives back a grant nobody will take.
    ///
    /// # Errors
    ///
    /// [`Error::Core`] when Redis did not answer within the io timeout or answered an error;
    /// [`Error::DriverGone`] when the runtime shut down.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, Error> {
        self.run(None).await
    }

    /// Waits up to `wait` for the lock. A release of the lock wakes the waiter through the
    /// client's pub/sub subscription; the core's retry pause (with jitter) is the fallback
    /// when a message is lost.
    ///
    /// **Cancel safety:** dropping the future (a `timeout`, a `select!`) at any point leaves
    /// nothing held: the driver finishes or undoes the attempt in flight.
    ///
    /// # Errors
    ///
    /// [`Error::Core`] with a timeout when the lock stayed busy for `wait`, or as
    /// [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self, wait: Duration) -> Result<LockGuard, Error> {
        match self.run(Some(wait)).await? {
            Some(guard) => Ok(guard),
            // A waiting acquisition ends with a timeout rather than busy; should a machine
            // ever answer busy, it is that timeout.
            None => Err(redlease_core::Error::Timeout {
                name: self.name.clone(),
                waited: wait,
                attempts: 0,
            }
            .into()),
        }
    }

    async fn run(&self, wait: Option<Duration>) -> Result<Option<LockGuard>, Error> {
        let shared = &self.shared;
        let spec = LockSpec::lease(
            &shared.keyspace,
            &self.name,
            Token::from_random(random()?),
            shared.lock_ttl,
        )?;
        let options = AcquireOptions {
            wait,
            reply_timeout: shared.io_timeout,
            ..AcquireOptions::default()
        };
        let machine = Acquire::new(
            spec,
            &options,
            u64::from_le_bytes(random()?),
            shared.runtime.now(),
        )?;
        let op = OpId::next();
        let (reply, rx) = oneshot::channel();
        let cancel = CancelOnDrop {
            tx: shared.tx.clone(),
            op: Some(op),
        };
        shared
            .tx
            .send(Command::Acquire {
                op,
                machine: Box::new(machine),
                reply,
            })
            .map_err(|_| Error::DriverGone)?;
        let outcome = rx.await.map_err(|_| Error::DriverGone);
        cancel.disarm();
        outcome?
    }
}

/// Tells the driver that an acquisition's future was dropped before its outcome was taken.
struct CancelOnDrop {
    tx: mpsc::UnboundedSender<Command>,
    op: Option<OpId>,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.op = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            // The driver gone: nothing it ran is renewed, a grant ends with its ttl.
            let _ = self.tx.send(Command::Cancel(op));
        }
    }
}

/// A held lease lock, renewed by the client's driver while it lives.
///
/// Dropping it queues a release to the driver and returns at once: it needs no runtime
/// context and never blocks or panics. If the runtime has already shut down (the driver is
/// gone), nothing renews the lease any more and it ends at its ttl.
#[must_use = "if unused the lock is released at once"]
pub struct LockGuard {
    tx: mpsc::UnboundedSender<Command>,
    id: WatchId,
    name: Arc<str>,
    fence: u64,
    lost: watch::Receiver<Option<LossReason>>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(tx: mpsc::UnboundedSender<Command>, granted: Granted) -> LockGuard {
        LockGuard {
            tx,
            id: granted.id,
            name: granted.name,
            fence: granted.fence,
            lost: granted.lost,
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token: strictly greater than that of every earlier holder of this lock.
    /// Pass it to the storage you write to, and have it refuse a smaller one.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Whether the lease is known lost (a renewal found it gone or taken, or none succeeded
    /// before its validity ended), or the driver has ended. Cheap: no call to Redis.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some() || self.lost.has_changed().is_err()
    }

    /// Completes when the lease is lost, with why: [`Error::Core`] with `NotOwner` and the
    /// loss reason, or [`Error::DriverGone`] when the driver ended (nothing renews the
    /// lease any more). Pending for as long as the lease is held. Cancel-safe.
    pub async fn lost(&self) -> Error {
        let mut rx = self.lost.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(reason) => match *reason {
                Some(reason) => redlease_core::Error::NotOwner {
                    name: self.name.to_string(),
                    reason,
                }
                .into(),
                None => Error::DriverGone,
            },
            Err(_) => Error::DriverGone,
        }
    }

    /// Releases the lock (owner-checked), stopping its renewal.
    ///
    /// **Cancel safety:** dropped before it completes, the release still happens (it is
    /// queued to the driver first).
    ///
    /// # Errors
    ///
    /// [`Error::Core`] with `NotOwner` when the lease was lost before (it expired, or another
    /// holder has the lock), or when Redis did not answer within the io timeout;
    /// [`Error::DriverGone`] when the runtime shut down.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Release {
                id: self.id,
                reply: Some(reply),
            })
            .map_err(|_| Error::DriverGone)?;
        rx.await.map_err(|_| Error::DriverGone)?
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            // Fails only when the driver is gone: the lease then ends at its ttl.
            let _ = self.tx.send(Command::Release {
                id: self.id,
                reply: None,
            });
        }
    }
}

/// `N` random bytes from the OS: owner tokens (unguessable, unique among all clients)
/// and retry jitter seeds.
fn random<const N: usize>() -> Result<[u8; N], Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)?;
    Ok(bytes)
}
