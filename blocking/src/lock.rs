//! The lease lock: builder, guard, closure form.

use std::time::{Duration, Instant};

use redlease_core::keys::LockKeys;
use redlease_core::lease::{
    Acquire, AcquireOptions, Acquisition, Lease, LeaseOp, LeaseState, Token,
};
use redlease_core::{Error, backoff::saturating_add};

use crate::client::{Client, random_bytes};

/// Settings of one lock acquisition; made by [`Client::lock`].
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until try_acquire(), acquire() or with_lock()"]
pub struct LockBuilder<'c> {
    client: &'c Client,
    name: String,
    ttl: Duration,
    wait: Duration,
    retry_initial: Duration,
    retry_max: Duration,
}

impl<'c> LockBuilder<'c> {
    pub(crate) fn new(client: &'c Client, name: &str) -> Self {
        let defaults = AcquireOptions::default();
        LockBuilder {
            client,
            name: name.to_owned(),
            ttl: defaults.ttl,
            wait: Duration::from_secs(10),
            retry_initial: defaults.retry_initial,
            retry_max: defaults.retry_max,
        }
    }

    /// The lease length: Redis frees the lock this long after the last acquisition or
    /// extension if the holder does nothing. At least 1 ms. Defaults to 30 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`acquire`](Self::acquire) and [`with_lock`](Self::with_lock) wait for a
    /// busy lock before failing with [`Error::Timeout`]. Defaults to 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The retry pauses while waiting: the first, doubling with jitter up to the longest
    /// (and never beyond the holder's remaining lease). Default 5 ms to 200 ms.
    pub fn retry(mut self, initial: Duration, max: Duration) -> Self {
        self.retry_initial = initial;
        self.retry_max = max;
        self
    }

    /// Tries once: `Ok(None)` when another holder has the lock.
    pub fn try_acquire(&self) -> Result<Option<LockGuard>, Error> {
        match self.run(None)? {
            Acquisition::Acquired(lease) => Ok(Some(self.guard(lease))),
            Acquisition::Busy { .. } => Ok(None),
        }
    }

    /// Waits for the lock until the [`wait`](Self::wait) time has passed
    /// ([`Error::Timeout`] then). Returns within the wait time plus one reply timeout.
    pub fn acquire(&self) -> Result<LockGuard, Error> {
        match self.run(Some(self.wait))? {
            Acquisition::Acquired(lease) => Ok(self.guard(lease)),
            // A waiting acquisition ends in Timeout rather than Busy; keep the promise anyway.
            Acquisition::Busy { .. } => Err(Error::Timeout {
                name: self.name.clone(),
                waited: self.wait,
                attempts: 0,
            }),
        }
    }

    /// Acquires (waiting as [`acquire`](Self::acquire) does), runs `f`, releases.
    ///
    /// If the release finds the lease gone ([`Error::NotOwner`]), that error is returned
    /// instead of `f`'s result: the critical section may not have been exclusive.
    pub fn with_lock<R>(&self, f: impl FnOnce(&LockGuard) -> R) -> Result<R, Error> {
        let guard = self.acquire()?;
        let out = f(&guard);
        guard.release()?;
        Ok(out)
    }

    fn run(&self, wait: Option<Duration>) -> Result<Acquisition, Error> {
        let keys = LockKeys::new(self.client.keyspace(), &self.name)?;
        let random: [u8; 24] = random_bytes()?;
        let mut token = [0u8; 16];
        token.copy_from_slice(&random[..16]);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&random[16..]);
        let options = AcquireOptions {
            ttl: self.ttl,
            wait,
            retry_initial: self.retry_initial,
            retry_max: self.retry_max,
            reply_timeout: self.client.io_timeout(),
        };
        let machine = Acquire::new(
            keys,
            Token::from_random(token),
            &options,
            u64::from_le_bytes(seed),
            Instant::now(),
        )?;
        self.client.run(machine)
    }

    fn guard(&self, lease: Lease) -> LockGuard {
        LockGuard {
            client: self.client.clone(),
            lease,
            done: false,
        }
    }
}

/// A held lease lock. Dropping it releases the lock (blocking at most the client's op
/// timeout); [`release`](Self::release) does the same and says whether we still owned it.
#[must_use = "if unused the lock is released at once"]
#[derive(Debug)]
pub struct LockGuard {
    client: Client,
    lease: Lease,
    done: bool,
}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.keys.name
    }

    /// The fencing token: greater than that of every earlier holder of this lock name.
    /// Pass it with every write to the protected resource, which keeps the highest token
    /// seen and rejects lower ones, so a holder whose lease ran out (a long pause, a lost
    /// network) cannot overwrite the work of the next holder.
    pub fn fence(&self) -> u64 {
        self.lease.fence
    }

    /// How many acquisition attempts it took (1 when the lock was free at once).
    pub fn attempts(&self) -> u32 {
        self.lease.attempts
    }

    /// Until when the lease is safely ours by the local clock (send time of the last
    /// acquisition or extension + ttl - drift allowance).
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until
    }

    /// Time left before [`valid_until`](Self::valid_until).
    pub fn remaining(&self) -> Duration {
        self.lease.remaining(Instant::now())
    }

    /// The lease as the core sees it (for use with your own machines).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Extends the lease to its ttl from now. [`Error::NotOwner`] when it was already lost.
    pub fn extend(&mut self) -> Result<(), Error> {
        self.extend_to(self.lease.ttl)
    }

    /// Extends the lease to `ttl` from now (later extensions use this ttl too).
    pub fn extend_to(&mut self, ttl: Duration) -> Result<(), Error> {
        let machine = LeaseOp::extend(&self.lease, ttl, self.deadline())?;
        let valid_until = self.client.run(machine)?;
        self.lease.ttl = ttl;
        self.lease.valid_until = valid_until;
        Ok(())
    }

    /// Asks Redis whether the lease is still ours and how long it has left.
    pub fn inspect(&self) -> Result<LeaseState, Error> {
        self.client
            .run(LeaseOp::inspect(&self.lease, self.deadline()))
    }

    /// Releases the lock. `Ok(())` when it was still ours; [`Error::NotOwner`] when it had
    /// expired or another holder had it (nothing is deleted then); [`Error::Unavailable`]
    /// when Redis could not be reached (the lease then ends at its expiry).
    pub fn release(mut self) -> Result<(), Error> {
        self.done = true;
        self.client
            .run(LeaseOp::release(&self.lease, self.deadline()))
    }

    fn deadline(&self) -> Instant {
        saturating_add(Instant::now(), self.client.op_timeout())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            // Errors cannot be reported from drop; the lease ends at its expiry at worst.
            let _ = self
                .client
                .run(LeaseOp::release(&self.lease, self.deadline()));
        }
    }
}
