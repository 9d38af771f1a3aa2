//! A taken job's handle: its lease, ack, nack, fail and abandon.

use super::*;

/// A job taken from a queue, on a lease renewed by the watchdog while this handle lives.
/// [`ack`](Self::ack) when done, [`nack`](Self::nack) to retry later; dropping it without
/// either returns the job to the queue at once.
#[must_use = "a job dropped without ack goes back to the queue"]
#[derive(Debug)]
pub struct Job {
    pub(super) guard: LockGuard,
    pub(super) queue: Queue,
    pub(super) id: String,
    pub(super) payload: Vec<u8>,
    pub(super) attempt: u64,
    /// Its deadline and cancellation signal (see `cancel.rs`).
    pub(super) signal: super::cancel::Signal,
    /// When it was pushed and how long before this take (server clock), if recorded.
    pub(super) enqueued: (Option<std::time::SystemTime>, Option<Duration>),
}

impl Job {
    /// The job id (as pushed: for a grouped job, without its group, [`Job::group`]).
    pub fn id(&self) -> &str {
        redlease_core::queue::groups::split_id(&self.id).1
    }

    /// The payload, as pushed (any bytes).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Which delivery this is (1 the first time): strictly increasing per job while Redis
    /// keeps its data, so it can fence off a stale worker's writes. After Redis loses data
    /// (a restart from an older snapshot, a failover to a lagging replica) it can repeat:
    /// see `docs/guarantees.md`.
    pub fn delivery(&self) -> u64 {
        self.guard.fence()
    }

    /// Which attempt this is since the job was pushed, or last requeued from the dead list
    /// ([`Queue::requeue_dead`]): 1 the first time. It is what
    /// [`max_deliveries`](Queue::max_deliveries) counts and what the retry backoff grows
    /// with. Equal to [`delivery`](Self::delivery) until the job is requeued; after that it
    /// starts again at 1, while the delivery number keeps increasing.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The deliveries of this job that were not attempts ([`delivery`](Self::delivery)
    /// less [`attempt`](Self::attempt)): a grouped job's rate-limited answers
    /// ([`JobError::rate_limited`], given back without counting), and after a requeue from
    /// the dead list the deliveries before it too. 0 for a job that ran only as attempts.
    pub fn deferrals(&self) -> u64 {
        self.delivery().saturating_sub(self.attempt)
    }

    /// When the job was pushed, on the server's clock (`None`: pushed by a version of
    /// redlease that did not record it).
    pub fn enqueued_at(&self) -> Option<std::time::SystemTime> {
        self.enqueued.0
    }

    /// How long the job waited: the time from its push to this take, on the server's
    /// clock (for a redelivery it includes the earlier attempts and their backoffs).
    /// `None` as for [`enqueued_at`](Self::enqueued_at).
    pub fn waited(&self) -> Option<Duration> {
        self.enqueued.1
    }

    /// Whether the lease is known lost (the job will be, or was, redelivered).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Fires once the lease is lost.
    pub fn lost(&self) -> &crossbeam_channel::Receiver<LossReason> {
        self.guard.lost()
    }

    /// Done: the job is forgotten. [`Error::NotOwner`] if its lease had run out (it is
    /// redelivered to another worker, so this worker's ack must not count). An ack retried
    /// after a lost reply is `Ok` only if this delivery's own ack removed the job (the server
    /// remembers settled deliveries for [`SETTLED_KEEP`](redlease_core::queue::SETTLED_KEEP)),
    /// never a second success for the same job; the same holds for the nacks.
    pub fn ack(self) -> Result<(), Error> {
        let started = crate::observe::events::Started::now();
        let (keys, lease) = (&self.queue.keys, self.guard.lease());
        let call = keys.settling(queue::ack_lease_call(keys, &self.id, &lease.token), lease);
        let out = self.guard.finish_with(call);
        crate::observe::events::job(&self.queue.keys.name, &self.id, "ack", None, &out);
        self.queue.meter.acked(started, &out);
        out
    }

    /// Done, and the next job if one is ready, in one round trip: [`ack`](Self::ack) then
    /// [`Queue::try_take`] with the same promises. The ack's outcome is
    /// [`AckedAndNext::ack`] (as [`ack`](Self::ack) would say); the next job, leased from
    /// the moment it is handed over, is [`AckedAndNext::next`] (`None`: nothing ready now, or
    /// the call failed: see `ack`). A lost reply is retried: the server recognises both the
    /// settled ack and the job handed to this call, so nothing happens twice; when no attempt
    /// is answered, whatever job it may have been handed is given back at once (its delivery
    /// not counted).
    pub fn ack_and_take(self) -> AckedAndNext {
        let started = crate::observe::events::Started::now();
        let queue = self.queue.clone();
        if queue.keys.is_grouped() {
            // A grouped queue's takes are fair across groups: the ack, then a take.
            let ack = self.ack();
            let next = queue.try_take().ok().flatten();
            return AckedAndNext { ack, next };
        }
        let (keys, settings) = (&queue.keys, &queue.lease_settings());
        let machine = queue
            .check()
            .and_then(|()| random_token(&queue.client))
            .and_then(|token| {
                let lease = self.guard.lease();
                queue::ack_and_take(keys, &self.id, lease, token, settings, queue.deadline())
            });
        let machine = match machine {
            Ok(machine) => machine,
            // No token (the OS refused randomness): the plain ack still settles this job.
            Err(_) => {
                return AckedAndNext {
                    ack: self.ack(),
                    next: None,
                };
            }
        };
        let id = self.id;
        let out = self
            .guard
            .finish_op(|_, valid_until, _| machine.with_valid_until(valid_until));
        let (ack, next) = match out {
            Ok(AckedAndTaken { ack, next, .. }) => (ack, next),
            Err(e) => (Err(e), Take::Empty { next_due_in: None }),
        };
        crate::observe::events::job(&keys.name, &id, "ack", None, &ack);
        queue.meter.acked(started, &ack);
        let next = match next {
            // A schedule's occurrence once its next exists (a failed advance gives it back).
            Take::Taken(job) => Queue::admit(queue.into_job(*job)).ok().flatten(),
            _ => None,
        };
        AckedAndNext { ack, next }
    }

    /// Failed: retry after the queue's backoff for this delivery (or go to the dead list
    /// after max deliveries).
    pub fn nack(self) -> Result<(), Error> {
        self.fail("", Retry::Backoff)
    }

    /// Failed: retry after `backoff` (zero: at once; beyond
    /// [`MAX_DURATION`](limits::MAX_DURATION), 100 years, it counts as that), or go to the
    /// dead list after max deliveries.
    pub fn nack_after(self, backoff: Duration) -> Result<(), Error> {
        self.fail("", Retry::After(backoff.min(limits::MAX_DURATION)))
    }

    /// Failed because of `reason` (the handler's error): retried as `retry` says, or on the
    /// dead list after max deliveries ([`Retry::Never`]: at once), where it keeps `reason`
    /// ([`DeadJob::reason`]; empty: none).
    pub fn fail(self, reason: &str, retry: Retry) -> Result<(), Error> {
        let started = crate::observe::events::Started::now();
        let max = self.queue.settings.max_deliveries;
        let (backoff, max) = match retry {
            Retry::Backoff => (self.backoff(), max),
            Retry::After(backoff) => (backoff, max),
            Retry::Never => (Duration::ZERO, 0),
            Retry::RateLimited(wait) if self.queue.keys.is_grouped() => {
                return self.rate_limit_group(wait);
            }
            Retry::RateLimited(wait) => (wait, max),
        };
        let token = self.guard.lease().token.as_str().to_owned();
        let call = queue::nack_because(&self.queue.keys, &self.id, &token, backoff, max, reason);
        let call = self.queue.keys.settling(call, self.guard.lease());
        let out = self.guard.finish_op(|lease, valid_until, deadline| {
            queue::nack_op(lease, call, deadline).with_valid_until(valid_until)
        });
        let (name, id) = (&self.queue.keys.name, &self.id);
        let why = Some(reason).filter(|r| !r.is_empty());
        crate::observe::events::job(name, id, "nack", why, &out);
        if let Ok(Nacked::Dead) = out {
            crate::observe::events::dead(name, id, why);
        }
        self.queue
            .meter
            .nacked(started, &out, |n| matches!(n, Nacked::Dead));
        out.map(|_| ())
    }

    /// The queue's backoff for this attempt: `base * 2^(attempt - 1)`, at most the maximum.
    fn backoff(&self) -> Duration {
        let shift = self.attempt.saturating_sub(1).min(30) as u32;
        self.queue
            .retry_base
            .saturating_mul(1 << shift)
            .min(self.queue.retry_max)
    }

    /// Abandons the handle without acking: the lease is no longer renewed, and the job is
    /// redelivered once it runs out (what happens when a worker dies).
    pub fn abandon(self) {
        self.guard.disarm();
    }
}

/// What [`Job::ack_and_take`] did.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "the next job goes back to the queue if dropped"]
pub struct AckedAndNext {
    /// The ack: `Ok`, or [`Error::NotOwner`] if the job's lease had run out (it is
    /// redelivered to another worker, so this worker's ack must not count), or another
    /// error when Redis could not be reached (the job is then redelivered once its lease
    /// runs out, as after a failed [`Job::ack`]).
    pub ack: Result<(), Error>,
    /// The next job, already leased to this worker (`None`: none was ready).
    pub next: Option<Job>,
}

/// What to do with a job whose handler failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retry {
    /// Retry after the queue's backoff for this delivery ([`Queue::retry_backoff`]); dead
    /// after max deliveries.
    Backoff,
    /// Retry after this long (zero: at once); dead after max deliveries.
    After(Duration),
    /// No retry: the job goes to the dead list now.
    Never,
    /// Rate limited ("429, try later"): a grouped job goes back to the head of its group
    /// without counting the delivery, and its group takes nothing for this long
    /// ([`Job::rate_limit_group`]); a job without a group is retried after this long, as
    /// [`Retry::After`] (counted).
    RateLimited(Duration),
}
