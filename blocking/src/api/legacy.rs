//! The legacy lock (SETNX + GETSET, or SETNX + EXPIRE) for servers and proxies without
//! `SET ... NX PX` and without scripting: builder, guard, closure form.
//!
//! The protocols live in [`redlease_core::legacy`], whose documentation describes both
//! algorithms and what they cannot guarantee; this module only runs them.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlease_core::backoff::saturating_add;
use redlease_core::lease::Token;
use redlease_core::legacy::{
    LegacyAcquire, LegacyAcquisition, LegacyKeys, LegacyLease, LegacyOptions, LegacyRelease,
};
use redlease_core::{Error, InvalidArgument};

use crate::api::client::{Client, Shared, drive};
use crate::api::lock::WithLockError;

pub use redlease_core::legacy::LegacyAlgorithm;

impl Client {
    /// A legacy lock named `name`, for servers or proxies that support neither
    /// `SET ... NX PX` nor scripts; to configure and acquire.
    ///
    /// **Prefer [`lock`](Self::lock) wherever the server allows it.** The legacy algorithms use
    /// only `SETNX`, `GET`, `GETSET`, `DEL`, `PEXPIRE` and `PTTL`, and are weaker for it:
    ///
    /// - [`LegacyAlgorithm::GetSet`] (the default) judges expiry by the wall clocks of the
    ///   contending hosts: a host whose clock runs ahead takes the lock over early. Keep clocks
    ///   synchronised and the ttl far above their disagreement.
    /// - Release is `GET` then `DEL`, not one atomic step: a holder whose lock expires between
    ///   the two can delete the next holder's key. Release well before
    ///   [`valid_until`](LegacyGuard::valid_until).
    /// - When several waiters take over one expired GetSet lock, the losers overwrite the
    ///   winner's value (the GETSET flaw): the winner holds the lock, but its release then
    ///   reports [`NotOwner`](Error::NotOwner) (taken) and the key stays until the loser's
    ///   timestamp passes, at most one ttl later.
    /// - No fencing token (there is no atomic way to issue one with these commands) and no
    ///   watchdog: renewing would need a `GETSET` of a new timestamp (or an unchecked
    ///   `PEXPIRE`), which races with takeovers the same way. A legacy lock lasts one ttl;
    ///   choose it longer than the critical section.
    /// - Waiters poll with backoff (no release notifications: such servers may lack pub/sub).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease::lock::LegacyAlgorithm;
    ///
    /// # fn main() -> Result<(), redlease::Error> {
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let guard = client
    ///     .legacy_lock("nightly-report")
    ///     .algorithm(LegacyAlgorithm::SetNxExpire)
    ///     .ttl(Duration::from_secs(60))
    ///     .acquire()?;
    /// // ... work, well within the ttl ...
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn legacy_lock(&self, name: &str) -> LegacyLockBuilder<'_> {
        let defaults = LegacyOptions::default();
        LegacyLockBuilder {
            client: self,
            name: name.to_owned(),
            algorithm: defaults.algorithm,
            ttl: defaults.ttl,
            wait: Duration::from_secs(10),
            retry_initial: defaults.retry_initial,
            retry_max: defaults.retry_max,
        }
    }
}

/// Settings of one legacy lock acquisition; made by [`Client::legacy_lock`], whose
/// documentation says what these locks cannot guarantee.
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until try_acquire(), acquire() or with_lock()"]
pub struct LegacyLockBuilder<'c> {
    client: &'c Client,
    name: String,
    algorithm: LegacyAlgorithm,
    ttl: Duration,
    wait: Duration,
    retry_initial: Duration,
    retry_max: Duration,
}

impl LegacyLockBuilder<'_> {
    /// The lock's length: after it, another contender may take the lock (GetSet: by the
    /// timestamp in the value; SetNxExpire: Redis deletes the key).
    /// [`MIN_TTL`](crate::limits::MIN_TTL) (10 ms) to [`MAX_DURATION`](crate::limits::MAX_DURATION)
    /// (100 years). There is no renewal. Defaults to 30 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`acquire`](Self::acquire) and [`with_lock`](Self::with_lock) wait for a busy
    /// lock before failing with [`Error::Timeout`]. Any duration: one past
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION) (100 years), such as `Duration::MAX` for
    /// "as long as it takes", counts as that, never refused. Defaults to 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The retry pauses while waiting: the first, doubling with jitter up to the longest (and
    /// never beyond the holder's remaining time when it is known). Waiters poll: there are no
    /// release notifications. Each pause is [`MIN_PAUSE`](crate::limits::MIN_PAUSE) (1 ms) to
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION), the longest at least the first. Defaults to
    /// 5 ms and 200 ms.
    pub fn retry(mut self, initial: Duration, max: Duration) -> Self {
        self.retry_initial = initial;
        self.retry_max = max;
        self
    }

    /// The algorithm; every user of one lock name must use the same. Defaults to
    /// [`LegacyAlgorithm::GetSet`].
    pub fn algorithm(mut self, algorithm: LegacyAlgorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Tries once: `Ok(None)` when another holder has the lock.
    pub fn try_acquire(&self) -> Result<Option<LegacyGuard>, Error> {
        match self.run(None)? {
            LegacyAcquisition::Acquired(lease) => Ok(Some(self.guard(lease))),
            LegacyAcquisition::Busy { .. } => Ok(None),
        }
    }

    /// Waits for the lock until the [`wait`](Self::wait) time has passed ([`Error::Timeout`]
    /// then). Returns within the wait time plus a few reply timeouts (an attempt in flight).
    pub fn acquire(&self) -> Result<LegacyGuard, Error> {
        match self.run(Some(self.wait))? {
            LegacyAcquisition::Acquired(lease) => Ok(self.guard(lease)),
            // A waiting acquisition ends in Timeout rather than Busy; keep the promise anyway.
            LegacyAcquisition::Busy { .. } => Err(Error::Timeout {
                name: self.name.clone(),
                waited: self.wait,
                attempts: 0,
            }),
        }
    }

    /// Acquires (waiting as [`acquire`](Self::acquire) does), runs `f`, releases.
    ///
    /// If the release fails (the lock was no longer ours, [`Error::NotOwner`]: the critical
    /// section may not have been exclusive), [`WithLockError::Release`] carries the error
    /// and `f`'s value (its side effects happened); not acquired:
    /// [`WithLockError::Acquire`]. `?` turns either into an [`Error`].
    pub fn with_lock<R>(&self, f: impl FnOnce(&LegacyGuard) -> R) -> Result<R, WithLockError<R>> {
        let guard = self.acquire().map_err(WithLockError::Acquire)?;
        let value = f(&guard);
        match guard.release() {
            Ok(()) => Ok(value),
            Err(error) => Err(WithLockError::Release { value, error }),
        }
    }

    fn run(&self, wait: Option<Duration>) -> Result<LegacyAcquisition, Error> {
        let shared = self.client.shared();
        let keys = LegacyKeys::new(&shared.keyspace, &self.name)?;
        let random: [u8; 24] = shared.entropy.bytes()?;
        let mut token = [0u8; 16];
        token.copy_from_slice(&random[..16]);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&random[16..]);
        let options = LegacyOptions {
            algorithm: self.algorithm,
            ttl: self.ttl,
            wait,
            retry_initial: self.retry_initial,
            retry_max: self.retry_max,
            reply_timeout: shared.io_timeout,
        };
        let now = shared.time.now();
        let machine = LegacyAcquire::new(
            keys,
            Token::from_random(token),
            &options,
            u64::from_le_bytes(seed),
            now,
            unix_ms(&shared.time)?,
        )?;
        let span = crate::observe::events::span(&self.name, "legacy");
        let out = span.in_scope(|| self.client.run(machine));
        let waited = shared.time.now().saturating_duration_since(now);
        crate::observe::events::ended_as(&span, "legacy", waited, &out, |a| match a {
            LegacyAcquisition::Acquired(lease) => Some((lease.attempts, None)),
            LegacyAcquisition::Busy { .. } => None,
        });
        out
    }

    fn guard(&self, lease: LegacyLease) -> LegacyGuard {
        crate::observe::events::held_as("legacy");
        LegacyGuard {
            shared: self.client.shared().clone(),
            lease,
            done: false,
        }
    }
}

/// A held legacy lock. Dropping it releases the lock (blocking at most the client's op
/// timeout); [`release`](Self::release) does the same and says whether it was still ours.
///
/// Nothing renews it: it is ours until [`valid_until`](Self::valid_until) at most. There is no
/// fencing token (see [`Client::legacy_lock`]).
#[must_use = "if unused the lock is released at once"]
pub struct LegacyGuard {
    shared: Arc<Shared>,
    lease: LegacyLease,
    done: bool,
}

impl std::fmt::Debug for LegacyGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyGuard")
            .field("name", &self.lease.keys.name)
            .field("algorithm", &self.lease.algorithm)
            .field("valid_until", &self.lease.valid_until)
            .finish_non_exhaustive()
    }
}

impl LegacyGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.keys.name
    }

    /// The algorithm that acquired the lock.
    pub fn algorithm(&self) -> LegacyAlgorithm {
        self.lease.algorithm
    }

    /// Until when the lock is safely ours by the local clock (send time of the command that
    /// gave it to us + ttl - drift allowance). After it, another contender may take it.
    /// (GetSet: other hosts judge the expiry by their own clocks.)
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until
    }

    /// Time left before [`valid_until`](Self::valid_until).
    pub fn remaining(&self) -> Duration {
        self.lease.remaining(self.shared.time.now())
    }

    /// How many `SETNX` attempts it took (1 when the lock was free at once).
    pub fn attempts(&self) -> u32 {
        self.lease.attempts
    }

    /// The lock as the core sees it (for use with your own machines).
    pub fn lease(&self) -> &LegacyLease {
        &self.lease
    }

    /// Releases the lock. `Ok(())` when it was still ours; [`Error::NotOwner`] when the key
    /// was gone or its time had passed (expired: nothing is deleted) or another value was in
    /// it (taken: nothing is deleted); [`Error::Unavailable`] when Redis could not be reached
    /// (the lock then ends at its expiry).
    pub fn release(mut self) -> Result<(), Error> {
        self.done = true;
        self.release_now()
    }

    fn release_now(&self) -> Result<(), Error> {
        let now = self.shared.time.now();
        let deadline = saturating_add(now, self.shared.op_timeout);
        let machine = LegacyRelease::new(&self.lease, deadline, now, unix_ms(&self.shared.time)?);
        let out = drive(&self.shared, None, machine);
        crate::observe::events::released_as(&self.lease.keys.name, "legacy", &out);
        out
    }
}

impl Drop for LegacyGuard {
    fn drop(&mut self) {
        crate::observe::events::unheld_as("legacy", self.lease.acquired_at, || {
            self.shared.time.now()
        });
        if self.done {
            return;
        }
        // Errors cannot be returned from drop (they are logged); the lock ends at its expiry
        // at worst.
        let _ = self.release_now();
    }
}

/// The wall clock in Unix milliseconds.
fn unix_ms(time: &crate::driver::backend::Time) -> Result<u64, Error> {
    #[cfg(feature = "memory")]
    if let Some(clock) = time.memory() {
        return Ok(u64::try_from(clock.unix_ms()).unwrap_or(0));
    }
    let _ = time;
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| InvalidArgument::Setting("the system clock is set before 1970".to_owned()))?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}
