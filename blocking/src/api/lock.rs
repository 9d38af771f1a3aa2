//! Every kind of lock (lease, reentrant, fair, read, write): one builder, one guard, the
//! closure form, and run-once. What differs between kinds is the core's [`LockSpec`].

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use redlease_core::lease::{
    Acquire, AcquireOptions, Acquisition, Lease, LeaseKind, LeaseState, LockKind, LockSpec,
    NativeRelease, ScriptOp, Token,
};
use redlease_core::limits;
use redlease_core::renewal::RenewalPolicy;
use redlease_core::semaphore::{self, SemaphoreKeys, SemaphoreState};
use redlease_core::{Error, InvalidArgument, LossReason, backoff::saturating_add};

use crate::api::client::{Client, Inner, Shared, drive};
use crate::runtime::watchdog::{LeaseCell, Policy};

/// Settings of one lock acquisition; made by [`Client::lock`], [`Client::reentrant_lock`],
/// [`Client::fair_lock`], [`Client::read_lock`] or [`Client::write_lock`].
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until try_acquire(), acquire() or with_lock()"]
pub struct LockBuilder<'c> {
    client: &'c Client,
    name: String,
    kind: Acquires,
    waiter_timeout: Duration,
    permits: u64,
    ttl: Duration,
    wait: Duration,
    retry_initial: Duration,
    retry_max: Duration,
    watchdog: bool,
    min_replicas: Option<(u32, Duration)>,
    renew_every: Option<Duration>,
    max_hold: Option<Duration>,
    /// Whether the acquisition issues a fencing token (see [`LockBuilder::fenced`]).
    fenced: bool,
    /// The spec of the first acquisition, waiting ([0]) and trying once ([1]): later
    /// acquisitions bind their token to it ([`LockSpec::with_token`]) instead of building
    /// the keys and script calls again. Reset by every setting that changes the spec.
    specs: [OnceLock<LockSpec>; 2],
    /// The release channel a lease lock's guards tell the listener about (one allocation
    /// per builder; each guard keeps a pointer to it). The name and keyspace fix it.
    held_channel: OnceLock<Arc<String>>,
}

/// What a [`LockBuilder`] acquires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acquires {
    /// A lock of this kind.
    Lock(LockKind),
    /// A permit of a semaphore.
    Permit,
}

impl From<Acquires> for LeaseKind {
    fn from(kind: Acquires) -> Self {
        match kind {
            Acquires::Lock(kind) => LeaseKind::Lock(kind),
            Acquires::Permit => LeaseKind::Permit,
        }
    }
}

impl Acquires {
    /// What it is, for messages.
    fn describe(self) -> &'static str {
        match self {
            Acquires::Lock(LockKind::Lease) => "a lease lock",
            Acquires::Lock(LockKind::Reentrant) => "a reentrant lock",
            Acquires::Lock(LockKind::Fair) => "a fair lock",
            Acquires::Lock(LockKind::Read) => "a read lock",
            Acquires::Lock(LockKind::Write) => "a write lock",
            Acquires::Permit => "a semaphore",
        }
    }

    /// Whether a waiter takes a place in a line (and so needs a waiter timeout).
    fn queues(self) -> bool {
        matches!(
            self,
            Acquires::Lock(LockKind::Fair | LockKind::Write) | Acquires::Permit
        )
    }
}

impl<'c> LockBuilder<'c> {
    fn new(client: &'c Client, name: &str, kind: Acquires) -> Self {
        let defaults = AcquireOptions::default();
        LockBuilder {
            client,
            name: name.to_owned(),
            kind,
            waiter_timeout: Duration::from_secs(5),
            permits: 1,
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            // The core's defaults (`DEFAULT_RETRY_INITIAL`, `DEFAULT_RETRY_MAX`): waiters are
            // woken by release messages; the backoff only re-checks in case a message was
            // missed (or the listener is down).
            retry_initial: defaults.retry_initial,
            retry_max: defaults.retry_max,
            watchdog: true,
            min_replicas: None,
            renew_every: None,
            max_hold: None,
            fenced: true,
            specs: Default::default(),
            held_channel: OnceLock::new(),
        }
    }

    /// The lease length: Redis frees the lock this long after the last acquisition or
    /// renewal if the holder stops renewing (it died, or the watchdog is off).
    /// [`MIN_TTL`](limits::MIN_TTL) (10 ms) to [`MAX_DURATION`](limits::MAX_DURATION)
    /// (100 years): a shorter lease would be mostly drift allowance. Defaults to 30 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.specs = Default::default();
        self
    }

    /// How long [`acquire`](Self::acquire) and [`with_lock`](Self::with_lock) wait for a
    /// busy lock (or permit) before failing with [`Error::Timeout`]. Any duration: one past
    /// [`MAX_DURATION`](limits::MAX_DURATION) (100 years), such as `Duration::MAX` for "as
    /// long as it takes", counts as that, never refused. Defaults to 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The retry pauses while waiting: the first, doubling with jitter up to the longest
    /// (and never beyond the holder's remaining lease). A release notification ends a pause
    /// early, so the pauses only bound how late a waiter notices a missed message or a
    /// listener outage. Each pause is [`MIN_PAUSE`](limits::MIN_PAUSE) (1 ms) to
    /// [`MAX_DURATION`](limits::MAX_DURATION), the longest at least the first (a shorter floor
    /// would make every waiter a busy loop). Default 5 ms to 1 s (the core's
    /// [`DEFAULT_RETRY_INITIAL`](redlease_core::lease::DEFAULT_RETRY_INITIAL) and
    /// [`DEFAULT_RETRY_MAX`](redlease_core::lease::DEFAULT_RETRY_MAX), the defaults of
    /// an [`AcquireOptions`] too).
    pub fn retry(mut self, initial: Duration, max: Duration) -> Self {
        self.retry_initial = initial;
        self.retry_max = max;
        self
    }

    /// Whether the client's watchdog renews the lease while the guard lives. Defaults to on.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// How often the watchdog renews the lease: at least 1 ms and shorter than the lease's
    /// validity (the ttl less its drift allowance, 1 % + 2 ms). Defaults to a third of the ttl.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// The longest the lock is held: the watchdog stops renewing so that the lease ends this
    /// long after acquisition, and the guard then reports it lost. 1 ms to
    /// [`MAX_DURATION`](limits::MAX_DURATION). Defaults to no limit.
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Replication safety (the failover hole): after acquiring, wait up to `timeout` until
    /// `count` replicas acknowledged the write (`WAIT`); if fewer did, release and fail with
    /// [`Error::ReplicationFailed`] saying how many did. `count` at least 1; `timeout` 1 ms to
    /// 1 h and under half the ttl (checked at acquisition). Off by default.
    pub fn min_replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.min_replicas = Some((count, timeout));
        self
    }

    /// Fair locks and writers: how long a waiter keeps its place in line after its last
    /// attempt. A waiting thread refreshes it with every attempt (at least every retry
    /// maximum), so only a waiter that died loses its place, after this long. Must exceed the
    /// retry maximum plus the client's io timeout, and at most
    /// [`MAX_DURATION`](limits::MAX_DURATION). Defaults to 5 s.
    pub fn waiter_timeout(mut self, timeout: Duration) -> Self {
        self.waiter_timeout = timeout;
        self.specs = Default::default();
        self
    }

    /// Whether the lock issues a fencing token ([`LockGuard::fence`]). Defaults to `true`.
    ///
    /// `fenced(false)`, for a lease lock ([`Client::lock`]) only, makes the uncontended
    /// acquisition a bare `SET <lock> <token> NX PX <ttl>`: no script, about the server work
    /// of the plain `redis` pattern. Any other answer (busy, an error, a lost reply) goes on
    /// with the usual acquire script, which reports the holder's time left for waiting (so
    /// trying a busy lock once costs two round trips), a wrong type, or recognises our own
    /// token after a lost reply. Release, extension, inspection and the watchdog are the
    /// same as for a fenced lock, and fenced and unfenced holders of one name exclude each
    /// other. On any other kind of lock, `fenced(false)` fails the acquisition with
    /// [`InvalidArgument::Setting`].
    ///
    /// What it gives up:
    /// - **No fence**: [`LockGuard::fence`] is 0, whoever granted the lock (fenced holders
    ///   of the name still get increasing fences among themselves; a grant by the script
    ///   advances the counter they share, a grant by `SET` does not).
    /// - **A delayed first attempt may leave the lock taken by nobody.** When the reply to
    ///   that `SET` is lost, the lock is later freed by us (the acquisition gives up and
    ///   undoes it, or a retry is granted and the guard released: both record the token as
    ///   undone), and the `SET` was only delayed and reaches Redis after that, it takes the
    ///   lock for an owner who has gone: the `SET` reads no undone record. The lock is then
    ///   free only when its ttl ends. That costs liveness, never safety: there are never two
    ///   holders. A fenced lock's every attempt reads the record, and takes nothing then.
    pub fn fenced(mut self, on: bool) -> Self {
        self.fenced = on;
        self.specs = Default::default();
        self
    }

    /// Tries once: `Ok(None)` when another holder has the lock.
    pub fn try_acquire(&self) -> Result<Option<LockGuard>, Error> {
        let policy = self.policy()?;
        match self.run(None)? {
            (Acquisition::Acquired(lease), held) => Ok(Some(self.guard(*lease, policy, held))),
            (Acquisition::Busy { .. }, _) => Ok(None),
        }
    }

    /// Waits for the lock until the [`wait`](Self::wait) time has passed
    /// ([`Error::Timeout`] then). Returns within the wait time plus one reply timeout.
    pub fn acquire(&self) -> Result<LockGuard, Error> {
        let policy = self.policy()?;
        match self.run(Some(self.wait))? {
            (Acquisition::Acquired(lease), held) => Ok(self.guard(*lease, policy, held)),
            // A waiting acquisition ends in Timeout rather than Busy; keep the promise anyway.
            (Acquisition::Busy { .. }, _) => Err(Error::Timeout {
                name: self.name.clone(),
                waited: self.wait,
                attempts: 0,
            }),
        }
    }

    /// For a semaphore: [`with_lock`](Self::with_lock) by its usual name.
    pub fn with_permit<R>(&self, f: impl FnOnce(&LockGuard) -> R) -> Result<R, WithLockError<R>> {
        self.with_lock(f)
    }

    /// Acquires (waiting as [`acquire`](Self::acquire) does), runs `f`, releases.
    ///
    /// Not acquired: [`WithLockError::Acquire`], and `f` did not run. If the release fails
    /// (the lease was lost meanwhile, [`Error::NotOwner`], or Redis could not be reached),
    /// [`WithLockError::Release`] carries both the error and `f`'s value: `f` ran and its
    /// side effects happened, but the critical section may not have been exclusive. `?`
    /// turns either into an [`Error`] (dropping the value).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// # let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// match client.lock("report").with_lock(|guard| guard.fence()) {
    ///     Ok(fence) => println!("written under fence {fence}"),
    ///     Err(redlease::lock::WithLockError::Release { value: fence, error }) => {
    ///         eprintln!("written under fence {fence}, but maybe not alone: {error}")
    ///     }
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn with_lock<R>(&self, f: impl FnOnce(&LockGuard) -> R) -> Result<R, WithLockError<R>> {
        let guard = self.acquire().map_err(WithLockError::Acquire)?;
        let value = f(&guard);
        match guard.release() {
            Ok(()) => Ok(value),
            Err(error) => Err(WithLockError::Release { value, error }),
        }
    }

    /// Every setting within its range (see [`limits`]), before anything is sent.
    fn check(&self) -> Result<(), Error> {
        let ttl_name = match self.kind {
            Acquires::Permit => "permit timeout",
            Acquires::Lock(_) => "ttl",
        };
        limits::ttl(ttl_name, self.ttl)?;
        limits::retry("retry", self.retry_initial, self.retry_max)?;
        if self.kind.queues() {
            limits::ttl("waiter timeout", self.waiter_timeout)?;
        }
        if self.kind == Acquires::Permit {
            limits::permits(self.permits)?;
        }
        if !self.fenced && self.kind != Acquires::Lock(LockKind::Lease) {
            return Err(InvalidArgument::Setting(format!(
                "fenced(false) is for lease locks (Client::lock) only, not {}",
                self.kind.describe()
            ))
            .into());
        }
        Ok(())
    }

    fn policy(&self) -> Result<Option<RenewalPolicy>, Error> {
        self.check()?;
        if !self.watchdog {
            if self.max_hold.is_some() || self.renew_every.is_some() {
                return Err(InvalidArgument::Setting(
                    "renew_every and max_hold need the watchdog".into(),
                )
                .into());
            }
            return Ok(None);
        }
        let mut policy = RenewalPolicy::for_ttl(self.ttl);
        if let Some(every) = self.renew_every {
            policy.every = every;
        }
        policy.max_hold = self.max_hold;
        policy.validate(self.ttl)?;
        Ok(Some(policy))
    }

    /// The spec of one acquisition with `token`: the cached one rebound to it, or built (and
    /// cached) on the first acquisition. A reentrant lock's spec names the calling thread,
    /// so it is built every time.
    fn spec(&self, token: Token, waiting: bool) -> Result<LockSpec, Error> {
        self.check_waiter_timeout()?;
        let cache = &self.specs[usize::from(!waiting)];
        if let Some(spec) = cache.get().and_then(|s| s.with_token(token.clone())) {
            return Ok(spec);
        }
        let spec = self.build_spec(token)?;
        // Trying once never takes a place in a line: cache it in that form.
        let spec = if waiting { spec } else { spec.trying_once() }.compact();
        if spec.with_token(spec.token.clone()).is_some() {
            let _ = cache.set(spec.clone());
        }
        Ok(spec)
    }

    /// A waiter refreshes its place with every attempt: at least once per retry maximum
    /// plus one reply. A shorter waiter timeout would drop live waiters from the line.
    fn check_waiter_timeout(&self) -> Result<(), Error> {
        let refresh = self
            .retry_max
            .saturating_add(self.client.shared().io_timeout);
        if self.kind.queues() && self.waiter_timeout <= refresh {
            return Err(InvalidArgument::Setting(format!(
                "the waiter timeout ({:?}) must exceed the retry maximum plus the io timeout ({refresh:?}): waiters refresh their place once per retry",
                self.waiter_timeout
            ))
            .into());
        }
        Ok(())
    }

    fn build_spec(&self, token: Token) -> Result<LockSpec, Error> {
        let shared = self.client.shared();
        let ks = &shared.keyspace;
        let (name, ttl) = (self.name.as_str(), self.ttl);
        let kind = match self.kind {
            Acquires::Lock(kind) => kind,
            Acquires::Permit => {
                return SemaphoreKeys::new(ks, name)?.permit(
                    token,
                    ttl,
                    self.permits,
                    self.waiter_timeout,
                );
            }
        };
        match kind {
            LockKind::Lease => LockSpec::lease(ks, name, token, ttl)?.fenced(self.fenced),
            LockKind::Reentrant => {
                let owner = format!("{}:{}", shared.owner_id, thread_number());
                LockSpec::reentrant(ks, name, &owner, token, ttl)
            }
            LockKind::Fair => LockSpec::fair(ks, name, token, ttl, self.waiter_timeout),
            LockKind::Read => LockSpec::read(ks, name, token, ttl),
            LockKind::Write => LockSpec::write(ks, name, token, ttl, self.waiter_timeout),
        }
    }

    fn run(&self, wait: Option<Duration>) -> Result<(Acquisition, bool), Error> {
        let random: [u8; 24] = self.client.shared().entropy.bytes()?;
        // The client's id, then 96 random bits: the prefix names the holder (lock_info).
        let mut token = [0u8; 12];
        token.copy_from_slice(&random[..12]);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&random[16..]);
        let tag = self.client.shared().tag_bytes;
        let spec = self.spec(Token::of_client(tag, token), wait.is_some())?;
        let options = AcquireOptions {
            wait,
            retry_initial: self.retry_initial,
            retry_max: self.retry_max,
            reply_timeout: self.client.shared().io_timeout,
            min_replicas: self.min_replicas,
        };
        let now = self.client.shared().time.now();
        let channel = (self.kind == Acquires::Lock(LockKind::Lease)).then(|| {
            let channel = self
                .held_channel
                .get_or_init(|| Arc::new(spec.wake.channel.clone()));
            Arc::clone(channel)
        });
        let machine = Acquire::new(spec, &options, u64::from_le_bytes(seed), now)?;
        let span = crate::observe::events::acquire_span(&self.name, self.kind.into());
        // A lease lock's first attempt counts as held here while in flight (see
        // `redlease_core::wake`, *An attempt in flight counts as held*); nothing can fail
        // between this and the check below, which ends it unless it was granted.
        let attempting = match (channel, self.client.listeners()) {
            (Some(channel), Some(Some(listeners))) => {
                if listeners.attempt(&channel, thread_number()) {
                    crate::transport::listener::attempt_begun(Arc::clone(&channel));
                    Some((listeners, channel))
                } else {
                    None
                }
            }
            _ => None,
        };
        let out = span.in_scope(|| self.client.run(machine));
        // Not ended by a wait: granted, it is the guard's hold; else it ends here.
        let mut held = false;
        if let Some((listeners, channel)) = attempting
            && crate::transport::listener::attempt_take().is_some()
        {
            match &out {
                Ok(Acquisition::Acquired(_)) => held = true,
                _ => listeners.attempt_failed(&channel),
            }
        }
        // Only a span someone listens to (or the metrics) records the wait (no clock read
        // otherwise).
        let waited = if !crate::observe::events::wants_wait(&span) {
            Duration::ZERO
        } else {
            self.client
                .shared()
                .time
                .now()
                .saturating_duration_since(now)
        };
        crate::observe::events::acquired(&span, self.kind.into(), waited, &out);
        out.map(|a| (a, held))
    }

    /// `held`: the listener counts it as held here already (its attempt was).
    fn guard(&self, lease: Lease, policy: Option<RenewalPolicy>, held: bool) -> LockGuard {
        let mut guard = LockGuard::new(self.client, lease, policy);
        // A lease lock held here: the listener wakes no waiter of this client for a release
        // its own holder took (see `redlease_core::wake`, *Held here*).
        if self.kind == Acquires::Lock(LockKind::Lease)
            && let Some(Some(listeners)) = self.client.listeners()
            && let Some(spec) = self.specs.iter().find_map(OnceLock::get)
        {
            if !held {
                listeners.hold(&spec.wake.channel, thread_number());
            }
            let channel = self
                .held_channel
                .get_or_init(|| Arc::new(spec.wake.channel.clone()));
            guard.held = Some(Arc::clone(channel));
        }
        guard
    }
}

/// Why [`LockBuilder::with_lock`] (or [`with_permit`](LockBuilder::with_permit), or the
/// legacy lock's `with_lock`) did not return `f`'s value alone.
///
/// `?` converts it into an [`Error`], dropping the value; match on it to keep the value of
/// a critical section that ran but may not have been exclusive.
#[derive(Debug)]
#[non_exhaustive]
pub enum WithLockError<R> {
    /// The lock was not acquired (a timeout, Redis unavailable, a bad setting): `f` did not
    /// run.
    Acquire(Error),
    /// `f` ran (its side effects happened) and returned `value`, but the release failed:
    /// the lease was lost meanwhile ([`Error::NotOwner`]: the critical section may not have
    /// been exclusive), or the release could not be sent or answered.
    Release {
        /// What `f` returned.
        value: R,
        /// Why the release failed.
        error: Error,
    },
}

impl<R> WithLockError<R> {
    /// The error (of the acquisition or of the release).
    pub fn error(&self) -> &Error {
        match self {
            WithLockError::Acquire(e) | WithLockError::Release { error: e, .. } => e,
        }
    }

    /// The error, dropping `f`'s value if it ran.
    pub fn into_error(self) -> Error {
        match self {
            WithLockError::Acquire(e) | WithLockError::Release { error: e, .. } => e,
        }
    }

    /// `f`'s value, if it ran (the release failed); `None` if the lock was not acquired.
    pub fn into_value(self) -> Option<R> {
        match self {
            WithLockError::Acquire(_) => None,
            WithLockError::Release { value, .. } => Some(value),
        }
    }
}

impl<R> std::fmt::Display for WithLockError<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WithLockError::Acquire(e) => write!(f, "{e}"),
            WithLockError::Release { error, .. } => {
                write!(
                    f,
                    "the critical section ran, but its release failed: {error}"
                )
            }
        }
    }
}

impl<R: std::fmt::Debug> std::error::Error for WithLockError<R> {
    /// The inner error's source: its text is this error's text already.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(self.error())
    }
}

impl<R> From<WithLockError<R>> for Error {
    /// The error, dropping `f`'s value if it ran.
    fn from(e: WithLockError<R>) -> Error {
        e.into_error()
    }
}

/// A held lease lock. Dropping it releases the lock (blocking at most the client's op
/// timeout); [`release`](Self::release) does the same and says whether we still owned it.
///
/// While the guard lives, the client's watchdog renews the lease (unless turned off); if the
/// lease is lost anyway (deleted or taken behind our back, or Redis unreachable until it must
/// have expired), [`is_lost`](Self::is_lost) turns true and [`lost`](Self::lost) fires, no
/// later than [`valid_until`](Self::valid_until) when no renewal was confirmed by then.
///
/// **A guard outlives its client's threads, not its pool.** When every handle of the
/// [`Client`] is dropped (`Client::open(url)?.lock("x").acquire()?` drops its temporary
/// client at the end of the statement), the watchdog stops: the guard's lease is no longer
/// renewed and reports [`LossReason::WatchdogStopped`] at once. The guard keeps its share
/// of the connection pool, though: [`release`](Self::release) and drop still send the
/// owner-checked release, so the lock is freed at once instead of at its expiry. Keep a
/// client alive for as long as its guards should be renewed.
#[must_use = "if unused the lock is released at once"]
pub struct LockGuard {
    shared: Arc<Shared>,
    /// The client's threads; a guard does not keep them alive.
    owner: Weak<Inner>,
    /// The lease and its state, shared with the watchdog while it renews the lease.
    cell: Arc<LeaseCell>,
    /// The renewal policy while the watchdog renews the lease (16 bytes: in every guard).
    watched: Option<Policy>,
    /// The release channel of a lease lock the client's listener counts as held here (a
    /// thin pointer: the guard stays at 48 bytes).
    held: Option<Arc<String>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.cell.lease().target.name)
            .field("fence", &self.cell.lease().fence)
            .field("valid_until", &self.cell.valid_until())
            .field("lost", &self.cell.lost(&self.shared.time))
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// A guard for a lease acquired by any machine of the lock family (`policy`: renewed by
    /// the client's watchdog).
    pub(crate) fn from_lease(client: &Client, lease: Lease, policy: Option<RenewalPolicy>) -> Self {
        Self::new(client, lease, policy)
    }

    fn new(client: &Client, lease: Lease, policy: Option<RenewalPolicy>) -> Self {
        crate::observe::events::held(lease.kind);
        let cell = LeaseCell::new(lease);
        // The watchdog thread starts with the first lease that needs it, not before.
        let watched = match policy.map(|p| (p, client.watchdog())) {
            Some((policy, Some(watchdog))) => {
                let policy = Policy::from(policy);
                watchdog.watch(policy, cell.clone());
                Some(policy)
            }
            // Renewal was asked for, but no watchdog thread could be started: say so
            // rather than let the lease run out silently.
            Some((_, None)) => {
                cell.mark_lost(LossReason::WatchdogStopped);
                None
            }
            None => None,
        };
        LockGuard {
            shared: client.shared().clone(),
            owner: client.owner(),
            cell,
            watched,
            held: None,
        }
    }

    /// Tells the listener the lease is no longer held here: before the release is sent, so
    /// that its message wakes a waiter.
    fn unhold(&mut self) {
        if let Some(channel) = self.held.take()
            && let Some(owner) = self.owner.upgrade()
            && let Some(Some(listeners)) = owner.listener.get()
        {
            listeners.unhold(&channel, thread_number());
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.cell.lease().target.name
    }

    /// The fencing token: greater than that of every earlier holder of this lock name.
    /// Pass it with every write to the protected resource, which keeps the highest token
    /// seen and rejects lower ones, so a holder whose lease ran out (a long pause, a lost
    /// network) cannot overwrite the work of the next holder.
    ///
    /// Only exclusive holders get one: the lease, reentrant, fair and write locks (which
    /// share one counter per name). **Semaphore permits and read locks always return 0**:
    /// several of them are held at once, so no order among them could fence anything. A
    /// lease lock acquired with [`fenced(false)`](LockBuilder::fenced) returns 0 too.
    pub fn fence(&self) -> u64 {
        self.cell.lease().fence
    }

    /// How many acquisition attempts it took (1 when the lock was free at once).
    pub fn attempts(&self) -> u32 {
        self.cell.lease().attempts
    }

    /// Until when the lease is safely ours by the local clock (send time of the last
    /// acquisition, renewal or extension + ttl - drift allowance).
    pub fn valid_until(&self) -> Instant {
        self.cell.valid_until()
    }

    /// Time left before [`valid_until`](Self::valid_until).
    pub fn remaining(&self) -> Duration {
        self.valid_until()
            .saturating_duration_since(self.shared.time.now())
    }

    /// Whether the lease is known to be lost. A renewed lease whose
    /// [`valid_until`](Self::valid_until) has passed without a confirmed renewal is lost
    /// ([`LossReason::RenewalFailed`]), even if a renewal is still in flight; a lease the
    /// watchdog does not renew ([`LockBuilder::watchdog`]`(false)`) is lost once its
    /// `valid_until` has passed without an [`extend`](Self::extend)
    /// ([`LossReason::ValidityPassed`]).
    pub fn is_lost(&self) -> bool {
        self.cell.lost(&self.shared.time).is_some()
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.cell.lost(&self.shared.time)
    }

    /// A receiver that yields the loss reason once the lease is lost: block on it, or
    /// `select!` over it next to your work (`crossbeam_channel`). For a lease the watchdog
    /// does not renew, nothing watches the clock: the passing of its validity is seen (and
    /// sent here) when [`is_lost`](Self::is_lost) or [`lost_reason`](Self::lost_reason) is
    /// asked, or an extension or release is tried.
    pub fn lost(&self) -> &Receiver<LossReason> {
        self.cell.signal()
    }

    /// Whether the watchdog renews this lease.
    pub fn is_watched(&self) -> bool {
        self.watched.is_some()
    }

    /// The lease as the core sees it (for use with your own machines), as it was acquired:
    /// its `valid_until` and `ttl` are the acquisition's. The current ones are
    /// [`valid_until`](Self::valid_until) and [`ttl`](Self::ttl) (renewals and
    /// [`extend_to`](Self::extend_to) change them).
    pub fn lease(&self) -> &Lease {
        self.cell.lease()
    }

    /// The ttl [`extend`](Self::extend) and the watchdog's renewals extend the lease to: the
    /// acquisition's, or the last [`extend_to`](Self::extend_to)'s.
    pub fn ttl(&self) -> Duration {
        self.cell.ttl()
    }

    fn not_owner(&self, reason: LossReason) -> Error {
        Error::NotOwner {
            name: self.cell.lease().target.name.to_string(),
            reason,
        }
    }

    /// Extends the lease to its ttl from now. [`Error::NotOwner`] when it was already lost.
    pub fn extend(&mut self) -> Result<(), Error> {
        self.extend_to(self.cell.ttl())
    }

    /// Extends the lease to `ttl` from now (the watchdog renews with this ttl from now on);
    /// `ttl` as for [`LockBuilder::ttl`] (10 ms to 100 years).
    ///
    /// Renewals are paused while the extension is in flight: a renewal landing after it
    /// would put back the old ttl on the server or the old validity here, so `remaining()`
    /// could over-report after a shortening.
    pub fn extend_to(&mut self, ttl: Duration) -> Result<(), Error> {
        let current = self.cell.ttl();
        let machine = ScriptOp::extend_current(self.cell.lease(), current, ttl, self.deadline())?;
        if let Some(reason) = self.cell.lost(&self.shared.time) {
            return Err(self.not_owner(reason));
        }
        let paused = self.pause_watching();
        let outcome = drive(&self.shared, None, machine);
        match &outcome {
            Ok(valid_until) => {
                self.cell.set_valid_until(*valid_until);
                self.cell.set_ttl(ttl);
            }
            Err(Error::NotOwner { reason, .. }) => self.cell.mark_lost(*reason),
            Err(_) => {}
        }
        crate::observe::events::extended(self.cell.lease().kind, &outcome);
        if paused && self.cell.lost(&self.shared.time).is_none() {
            self.resume_watching();
        }
        outcome.map(|_| ())
    }

    /// Stops renewals until [`resume_watching`](Self::resume_watching); once this returns,
    /// none is in flight. False when the lease is not watched.
    fn pause_watching(&mut self) -> bool {
        if self.watched.is_none() {
            return false;
        }
        if let Some(scheduled) = self.cell.release(|| self.shared.op_timeout)
            && let Some(owner) = self.owner.upgrade()
            && let Some(Some(watchdog)) = owner.watchdog.get()
        {
            watchdog.released(scheduled);
        }
        true
    }

    /// Watches the lease again, with its current ttl and validity.
    fn resume_watching(&mut self) {
        let Some(policy) = self.watched else {
            return;
        };
        let mut policy = policy.get();
        let ttl = self.cell.ttl();
        if policy.every >= ttl {
            policy.every = ttl / 3;
        }
        let policy = Policy::from(policy);
        self.watched = Some(policy);
        if let Some(owner) = self.owner.upgrade()
            && let Some(Some(watchdog)) = owner.watchdog.get()
        {
            watchdog.watch(policy, self.cell.clone());
        }
    }

    /// Asks Redis whether the lease is still ours and how long it has left.
    pub fn inspect(&self) -> Result<LeaseState, Error> {
        drive(
            &self.shared,
            None,
            ScriptOp::inspect(self.cell.lease(), self.deadline()),
        )
    }

    /// Releases the lock. `Ok(())` when it was still ours; [`Error::NotOwner`] when it had
    /// expired or another holder had it (nothing is deleted then, and nothing is sent when
    /// Redis already said so); [`Error::Unavailable`] when Redis could not be reached (the
    /// lease then ends at its expiry).
    ///
    /// A lease lost only because nothing renewed it ([`LossReason::WatchdogStopped`]: its
    /// client was dropped) or because renewals went unanswered
    /// ([`LossReason::RenewalFailed`]) may still be ours on the server: the owner-checked
    /// release is sent anyway (it deletes only a key holding our token) and its answer is
    /// returned.
    pub fn release(mut self) -> Result<(), Error> {
        self.cell.set_ended();
        let owed = self.unhold_releasing();
        let deadline = self.deadline();
        self.stop_watching(deadline);
        if let Some(reason) = self.known_not_ours() {
            self.record_unanswered(deadline);
            self.release_ended(owed, false);
            return Err(self.not_owner(reason));
        }
        let out = self.send_release(deadline);
        // Released, its own message wakes a waiter (see `Registry::release_begun`).
        self.release_ended(owed, out.is_ok());
        out
    }

    /// [`unhold`](Self::unhold) before a release that announces itself: the channel when a
    /// release message came while held (see `redlease_core::wake::Registry::release_begun`).
    fn unhold_releasing(&mut self) -> Option<Arc<String>> {
        let channel = self.held.take()?;
        let owner = self.owner.upgrade()?;
        let Some(Some(listeners)) = owner.listener.get() else {
            return None;
        };
        listeners
            .release_begun(&channel, thread_number())
            .then_some(channel)
    }

    /// The outcome of a release that [`unhold_releasing`](Self::unhold_releasing) owed a
    /// message.
    fn release_ended(&self, owed: Option<Arc<String>>, announced: bool) {
        if let Some(channel) = owed
            && let Some(owner) = self.owner.upgrade()
            && let Some(Some(listeners)) = owner.listener.get()
        {
            listeners.release_ended(&channel, announced);
        }
    }

    /// A lease known not ours whose acquisition had an attempt that went unanswered
    /// ([`Lease::unanswered`]): its release is sent all the same (it changes nothing of
    /// another holder's), because it records the token as undone, so that the attempt, if
    /// it was only delayed, takes nothing when it arrives. Its answer is not needed.
    fn record_unanswered(&self, deadline: Instant) {
        let lease = self.cell.lease();
        if lease.unanswered {
            let machine = ScriptOp::release(lease, deadline);
            let _ = drive(&self.shared, None, machine);
        }
    }

    /// Sends the owner-checked release, judged by the lease's current validity, and logs it.
    fn send_release(&self, deadline: Instant) -> Result<(), Error> {
        let lease = self.cell.lease();
        let out = release_lease(&self.shared, lease, self.cell.valid_until(), deadline);
        crate::observe::events::released(&lease.target.name, lease.kind, &out);
        out
    }

    /// The loss reason when the key is not ours any more: Redis said so (expired, taken), or
    /// the last renewal ended it at the hold limit (it expires on the server then, a drift
    /// allowance later). A release would find nothing of ours, so none is sent.
    fn known_not_ours(&self) -> Option<LossReason> {
        self.cell.lost(&self.shared.time).filter(|r| {
            matches!(
                r,
                LossReason::Expired | LossReason::Taken | LossReason::MaxHoldReached
            )
        })
    }

    /// Ends the lease with another owner-checked call than the release (a queue's ack or
    /// nack); the same outcomes as [`release`](Self::release).
    pub(crate) fn finish_with(self, call: redlease_core::script::ScriptCall) -> Result<(), Error> {
        self.finish_op(|lease, valid_until, deadline| {
            ScriptOp::release_with(lease, call, deadline).with_valid_until(valid_until)
        })
    }

    /// [`finish_with`](Self::finish_with) for any owner-checked operation (a queue's nack,
    /// which says whether the job went to the dead list). `op` gets the lease, its validity
    /// now (for the lost-reply rule: see [`ScriptOp::with_valid_until`]) and the deadline.
    pub(crate) fn finish_op<P: redlease_core::Protocol>(
        mut self,
        op: impl FnOnce(&Lease, Instant, Instant) -> P,
    ) -> Result<P::Output, Error> {
        self.cell.set_ended();
        self.unhold();
        let deadline = self.deadline();
        if let Some(reason) = self.cell.lost(&self.shared.time) {
            self.stop_watching(deadline);
            self.record_unanswered(deadline);
            return Err(self.not_owner(reason));
        }
        // Renewals go on until the answer is in: a job's lease must not run out while its ack
        // is retried after a lost reply (the retry would then find it redelivered). A renewal
        // racing the ack finds the job gone and changes nothing.
        let machine = op(self.cell.lease(), self.cell.valid_until(), deadline);
        let outcome = drive(&self.shared, None, machine);
        self.stop_watching(deadline);
        outcome
    }

    /// Ends the guard without releasing: the key stays until its expiry.
    pub(crate) fn disarm(mut self) {
        self.cell.set_ended();
        self.unhold();
        let deadline = self.deadline();
        self.stop_watching(deadline);
    }

    /// Stops renewals; once this returns, no renewal for this lease is in flight or will be
    /// sent.
    fn stop_watching(&mut self, deadline: Instant) {
        if self.watched.take().is_none() {
            return;
        }
        // Counted once: a pause whose extension failed already released it.
        if let Some(scheduled) = self
            .cell
            .release(|| deadline.saturating_duration_since(self.shared.time.now()))
            && let Some(owner) = self.owner.upgrade()
            && let Some(Some(watchdog)) = owner.watchdog.get()
        {
            watchdog.released(scheduled);
        }
    }

    fn deadline(&self) -> Instant {
        saturating_add(self.shared.time.now(), self.shared.op_timeout)
    }
}

/// A small number naming the calling thread, for reentrant owners (`ThreadId` has no stable
/// numeric form).
fn thread_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

impl Client {
    /// A lease lock named `name`, to configure and acquire: exclusive, with a fencing token.
    ///
    /// It is not fair: waiters are not served in order, and a thread that releases and asks
    /// again keeps the lock, as with a polling lock. A waiter of the same client leaves it
    /// to such a loop for at most 100 ms (`redlease_core::wake::PATIENCE`) before it
    /// tries again anyway. Use [`fair_lock`](Client::fair_lock) when waiters must be served
    /// first come, first served.
    pub fn lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder::new(self, name, Acquires::Lock(LockKind::Lease))
    }

    /// A reentrant lock: the same owner (this client and the calling thread) may acquire it
    /// again while holding it, and must release as often; another thread of the same client
    /// is another owner. Each nested acquisition is its own guard.
    pub fn reentrant_lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder::new(self, name, Acquires::Lock(LockKind::Reentrant))
    }

    /// A fair lock: waiters get it in the order they started waiting, and a release wakes
    /// only the next one. A waiter that dies loses its place after the
    /// [waiter timeout](LockBuilder::waiter_timeout).
    pub fn fair_lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder::new(self, name, Acquires::Lock(LockKind::Fair))
    }

    /// The shared side of the read-write lock `name`: many readers at once, never with a
    /// writer. New readers wait while a writer waits, so writers are not starved.
    pub fn read_lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder::new(self, name, Acquires::Lock(LockKind::Read))
    }

    /// The exclusive side of the read-write lock `name`: no readers, no other writer.
    pub fn write_lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder::new(self, name, Acquires::Lock(LockKind::Write))
    }

    /// A fair counting semaphore: at most `permits` holders at once, across every process.
    ///
    /// The builder's [`ttl`](LockBuilder::ttl) is the permit timeout: a holder that dies loses
    /// its permit after it, and a live guard's permit is renewed by the watchdog. Every step
    /// runs in one script on the server's clock, so hosts with skewed clocks can neither steal
    /// nor extend permits. Waiters get permits in the order they started waiting, woken by
    /// releases (no polling).
    ///
    /// **`permits` (1 to [`MAX_PERMITS`](limits::MAX_PERMITS), 2^32 - 1) sets the count only
    /// if the semaphore has none yet**: a count stored earlier is kept, silently
    /// (`semaphore(name, 5)` over a stored 2 allows 2 holders). See the stored count with
    /// [`semaphore_state`](Client::semaphore_state), check it at start-up with
    /// [`declare_semaphore`](Client::declare_semaphore) (an error on a mismatch), change it with
    /// [`set_permits`](Client::set_permits). The count key never expires.
    pub fn semaphore(&self, name: &str, permits: u64) -> LockBuilder<'_> {
        let mut b = LockBuilder::new(self, name, Acquires::Permit);
        b.permits = permits;
        b
    }

    fn semaphore_keys(&self, name: &str) -> Result<SemaphoreKeys, Error> {
        SemaphoreKeys::new(&self.shared().keyspace, name)
    }

    /// Sets the permit count of semaphore `name` (1 to [`MAX_PERMITS`](limits::MAX_PERMITS);
    /// anything else is refused before anything is sent); returns the previous count
    /// (`None`: none was set). Growing wakes the waiters that may now proceed; after shrinking, holders
    /// beyond the count keep their permits until they release, and no new permit is granted
    /// until the holders are under the count.
    pub fn set_permits(&self, name: &str, permits: u64) -> Result<Option<u64>, Error> {
        let keys = self.semaphore_keys(name)?;
        let deadline = saturating_add(self.shared().time.now(), self.shared().op_timeout);
        self.run(semaphore::set_permits(&keys, permits, deadline)?)
    }

    /// Makes sure semaphore `name` has `permits` permits: sets the count when none is stored
    /// yet, and fails with [`InvalidArgument::Setting`] (naming both counts) when a different
    /// count is stored. [`semaphore(name, permits)`](Client::semaphore) keeps a count stored
    /// earlier (by another process, or an earlier version of this one) and says nothing; call
    /// this once at start-up to see such a mismatch, and [`set_permits`](Client::set_permits)
    /// to change the count deliberately.
    ///
    /// Two processes declaring different counts at the same moment: one of them sets its
    /// count and the other gets the error (or both do).
    pub fn declare_semaphore(&self, name: &str, permits: u64) -> Result<(), Error> {
        let mismatch = |stored: u64| -> Error {
            InvalidArgument::Setting(format!(
                "semaphore {name:?} has {stored} permit(s) stored in Redis, not {permits}: \
                 the count stored first is kept; call set_permits({name:?}, {permits}) to \
                 change it"
            ))
            .into()
        };
        match self.semaphore_state(name)?.permits {
            Some(stored) if stored == permits => Ok(()),
            Some(stored) => Err(mismatch(stored)),
            None => match self.set_permits(name, permits)? {
                Some(stored) if stored != permits => Err(mismatch(stored)),
                _ => Ok(()),
            },
        }
    }

    /// The permit count, live holders and live waiters of semaphore `name`.
    pub fn semaphore_state(&self, name: &str) -> Result<SemaphoreState, Error> {
        let keys = self.semaphore_keys(name)?;
        let deadline = saturating_add(self.shared().time.now(), self.shared().op_timeout);
        self.run(semaphore::read(&keys, deadline))
    }

    /// Runs `job` on at most one of the hosts that trigger it at about the same time (a cron
    /// job scheduled on a whole fleet). Returns `Ok(Some(result))` on the host that ran it,
    /// `Ok(None)` on the others. The same as `self.lock(name).run_once(at_most_for,
    /// at_least_for, job)`; see [`LockBuilder::run_once`] (which also takes
    /// [`min_replicas`](LockBuilder::min_replicas)).
    pub fn run_once<R>(
        &self,
        name: &str,
        at_most_for: Duration,
        at_least_for: Duration,
        job: impl FnOnce() -> R,
    ) -> Result<Option<R>, Error> {
        self.lock(name).run_once(at_most_for, at_least_for, job)
    }
}

impl LockBuilder<'_> {
    /// Runs `job` on at most one of the hosts that trigger it at about the same time (a cron
    /// job scheduled on a whole fleet), under this lease lock's name and settings (its
    /// [`min_replicas`](Self::min_replicas) and retry settings; the ttl is `at_most_for`, and
    /// the lock is tried once, not waited for, and not renewed). Returns `Ok(Some(result))`
    /// on the host that ran it, `Ok(None)` on the others.
    ///
    /// The lock is held from the start for at least `at_least_for` (so hosts whose clocks or
    /// schedulers lag by less than that do not run the job again) and at most `at_most_for`
    /// (so a runner that crashed does not block the next period). After a short job the key
    /// is left to expire at `start + at_least_for`; after a longer one it is deleted. A job
    /// that outlives `at_most_for` may have overlapped another run: that is reported as
    /// [`Error::NotOwner`] (the result is dropped).
    ///
    /// A job that panics consumes its period exactly like one that returns (the key is kept
    /// until `start + at_least_for`), then the panic goes on to the caller.
    ///
    /// `at_most_for` is a lease length ([`MIN_TTL`](limits::MIN_TTL) to
    /// [`MAX_DURATION`](limits::MAX_DURATION)); `at_least_for` must not exceed it (a
    /// remainder shorter than `MIN_TTL` is kept for `MIN_TTL`).
    pub fn run_once<R>(
        &self,
        at_most_for: Duration,
        at_least_for: Duration,
        job: impl FnOnce() -> R,
    ) -> Result<Option<R>, Error> {
        limits::ttl("at_most_for", at_most_for)?;
        if at_least_for > at_most_for {
            return Err(InvalidArgument::Setting(format!(
                "at_least_for ({at_least_for:?}) must not exceed at_most_for ({at_most_for:?})"
            ))
            .into());
        }
        let Some(guard) = self
            .clone()
            .ttl(at_most_for)
            .watchdog(false)
            .try_acquire()?
        else {
            return Ok(None);
        };
        let started = guard.lease().acquired_at;
        // The job's outcome, panic included, does not change how the period is consumed.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        let finished = finish_period(guard, started, at_least_for);
        match out {
            Ok(out) => finished.map(|()| Some(out)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Ends a run-once period: keeps the key until `started + at_least_for`, or deletes it
/// when that has passed.
fn finish_period(
    mut guard: LockGuard,
    started: Instant,
    at_least_for: Duration,
) -> Result<(), Error> {
    let ran = guard.shared.time.now().saturating_duration_since(started);
    let keep = at_least_for.saturating_sub(ran);
    if keep < Duration::from_millis(1) {
        return guard.release();
    }
    // A lease is at least MIN_TTL: keep the key that much longer rather than refuse.
    match guard.extend_to(keep.max(limits::MIN_TTL)) {
        Ok(()) => guard.disarm(),
        // The job outlived at_most_for: another host may have run it too.
        Err(e @ Error::NotOwner { .. }) => return Err(e),
        // Redis unreachable: leave the key to expire (at at_most_for, which is at least
        // at_least_for), never delete it early; the job did run here.
        Err(_) => guard.disarm(),
    }
    Ok(())
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        crate::observe::events::unheld(self.cell.lease(), || self.shared.time.now());
        self.unhold();
        if self.cell.ended() {
            return;
        }
        // One deadline for the whole drop: waiting out a renewal in flight and the release.
        let deadline = self.deadline();
        self.stop_watching(deadline);
        // A lease Redis said is not ours: leave the key alone. Any other (even one whose
        // client is gone) gets the owner-checked release.
        if self.known_not_ours().is_none() {
            // Errors cannot be returned from drop (they are logged); the lease ends at its
            // expiry at worst.
            let _ = self.send_release(deadline);
        } else {
            self.record_unanswered(deadline);
        }
    }
}

/// Releases `lease` by the server's native compare-and-delete where the server has one and
/// the lease is a plain lock ([`NativeRelease`]), else by its release script. `valid_until`
/// is the lease's validity now (after renewals or extensions), for the lost-reply rule.
fn release_lease(
    shared: &Shared,
    lease: &Lease,
    valid_until: Instant,
    deadline: Instant,
) -> Result<(), Error> {
    let transport = match &shared.node {
        crate::driver::backend::Node::Redis(transport) => Some(transport),
        #[allow(unreachable_patterns)]
        _ => None,
    };
    let native = transport
        .and_then(|t| t.server_kind())
        .and_then(crate::wire::server::ServerKind::compare_and_delete)
        .and_then(|how| NativeRelease::new(lease, how, deadline))
        .map(|m| m.with_valid_until(valid_until));
    match (native, transport) {
        (Some(machine), Some(transport)) => drive(shared, None, Noting { machine, transport }),
        _ => {
            let machine = ScriptOp::release(lease, deadline).with_valid_until(valid_until);
            drive(shared, None, machine)
        }
    }
}

/// A [`NativeRelease`] that, when the server refuses the native command (not granted, or
/// gone after a failover), tells the transport to stop choosing it until the next connection
/// set-up learns the server again.
struct Noting<'a> {
    machine: NativeRelease,
    transport: &'a crate::transport::pool::Transport,
}

impl redlease_core::Protocol for Noting<'_> {
    type Output = ();

    fn poll(&mut self, now: Instant) -> redlease_core::Step<()> {
        self.machine.poll(now)
    }

    fn handle(&mut self, response: redlease_core::Response, now: Instant) {
        self.machine.handle(response, now);
        if self.machine.refused_natively() {
            self.transport.forget_server_kind();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard per held lease stays small.
    #[test]
    fn a_guard_takes_at_most_48_bytes() {
        // A guard per held lease: 72 bytes with the policy as the core writes it, 56 with
        // its own handle on the lease beside the cell's; the listener's channel is a thin
        // pointer and the ended flag lives in the cell.
        assert!(std::mem::size_of::<LockGuard>() <= 48);
    }

    /// A lock's retry pauses default to the core's `AcquireOptions::default()`: one source
    /// of the default, so an embedder of the core and a user of this driver wait alike.
    #[test]
    fn retry_defaults_are_the_cores() {
        // `build` opens nothing: connections open on first use.
        let client = Client::builder("redis://127.0.0.1:1/").build().unwrap();
        let builder = client.lock("x");
        let core = AcquireOptions::default();
        assert_eq!(
            (builder.retry_initial, builder.retry_max),
            (core.retry_initial, core.retry_max)
        );
        assert_eq!(core.retry_max, redlease_core::lease::DEFAULT_RETRY_MAX);
    }
}
