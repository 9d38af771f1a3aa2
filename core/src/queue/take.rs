//! Taking a job, and what a take yields: [`TakeJob`] runs the shared acquisition machine
//! ([`Acquire`]) on the queue's take script and names its outcome: [`Take::Taken`] with a
//! [`TakenJob`] (id, payload, delivery number, lease) or [`Take::Empty`] with the time until
//! the next job is due. A [`TakenJob`] builds its own calls: [`ack`](TakenJob::ack),
//! [`nack`](TakenJob::nack), [`give_back`](TakenJob::give_back),
//! [`extend`](TakenJob::extend).
//!
//! ```text
//!   TakeJob ──EVALSHA dequeue──► {1, delivery, id, payload} ──► Done(Taken(job))
//!     ▲  │                       {0, ms | -2}: trying once ────► Done(Empty { next_due_in })
//!     │  │                       {0, ms | -2}: waiting ─► Wait(until due, wake on a push)
//!     └──┴──────────── (the retries, deadlines and cleanups of [`Acquire`]) ◄──┘
//! ```

use std::time::{Duration, Instant};

use super::{Nack, QueueKeys, QueueSettings, ack_lease_call, nack_because, nack_op, take};
use crate::error::Error;
use crate::lease::{Acquire, AcquireOptions, Acquisition, Extend, Lease, Release, ScriptOp, Token};
use crate::protocol::{Protocol, Step};
use crate::reply::Response;

/// What a take found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Take {
    /// A job, leased to the taker until its visibility timeout runs out (renew it with
    /// [`TakenJob::extend`]).
    Taken(Box<TakenJob>),
    /// Nothing is ready (only from a take that tries once: a waiting take that runs out of
    /// time ends with [`Error::Timeout`]).
    Empty {
        /// Time until the next delayed job is due or the next in-flight lease runs out,
        /// whichever comes first (`None`: nothing at all is scheduled).
        next_due_in: Option<Duration>,
    },
}

/// A job leased to a taker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakenJob {
    /// The job id, as pushed.
    pub id: String,
    /// The payload, as pushed (any bytes).
    pub payload: Vec<u8>,
    /// Which delivery this is: 1 the first time, one more on each redelivery (after a nack,
    /// or a lease that ran out). Pass it on like a lock's fence, so that a redelivered job's
    /// writes win over a stale worker's.
    pub delivery: u64,
    /// Which attempt this is since the job was pushed or last requeued from the dead list
    /// (1 the first time): the count that [`QueueSettings::max_deliveries`](super::QueueSettings::max_deliveries)
    /// is checked against and that a retry backoff grows with. Equal to
    /// [`delivery`](Self::delivery) until the job is requeued; after a requeue it starts
    /// again at 1 while the delivery number keeps increasing.
    pub attempt: u64,
    /// The job's own timeout, if it was pushed with one (see [`push_with_timeout`](super::push_with_timeout)),
    /// for the taker to apply from the take.
    pub timeout: Option<Duration>,
    /// From when the server ran the take to the delivery's hold limit (its timeout, its own
    /// or the queue's, plus the grace), when it has one: the server leases it no longer,
    /// whatever renews it, and the lease's validity ends by then. Counted from the take's
    /// send, it is a hold limit for the watchdog (`RenewalPolicy::max_hold`) that ends no
    /// later than the server's (a take retried after a lost reply is told what is left of
    /// the hold its first attempt began).
    pub hold_left: Option<Duration>,
    /// When the job was pushed, on the server's clock (`None`: pushed by a version that did
    /// not record it).
    pub enqueued_at: Option<std::time::SystemTime>,
    /// How long before this take it was pushed, on the server's clock: the time it waited in
    /// the queue for its first delivery (for a later delivery it includes the earlier
    /// attempts and their backoffs). `None` as for [`enqueued_at`](Self::enqueued_at).
    pub waited: Option<Duration>,
    /// For a grouped job whose take booked its group's next rate slot ahead of time: from
    /// when the server ran the take to that slot. The job must not start before it (the
    /// blocking driver's take waits it out, at most
    /// [`GROUP_RESERVE`](super::groups::GROUP_RESERVE)). Counted from when the reply came,
    /// the wait never ends before the slot.
    pub start_in: Option<Duration>,
    /// The lease (the visibility timeout): its fence is [`delivery`](Self::delivery), its
    /// token proves the delivery; renew it like a lock's. Its `data` is left empty (the id
    /// and payload are the fields above).
    pub lease: Lease,
}

impl TakenJob {
    /// Names the outcome of a take's acquisition: the job's id and payload (the lease's
    /// data) and its delivery (the lease's fence).
    pub(crate) fn from_lease(mut lease: Lease) -> Result<Self, Error> {
        let data = std::mem::take(&mut lease.data);
        let tail = super::job_tail_of(&data, lease.fence).ok_or_else(|| {
            unexpected("a job attempt, timeout, hold limit or enqueue time that is not a number")
        })?;
        let mut data = data.into_iter();
        let (Some(id), Some(payload)) = (data.next(), data.next()) else {
            return Err(unexpected("no job id and payload"));
        };
        let id = String::from_utf8(id).map_err(|_| unexpected("a job id that is not UTF-8"))?;
        Ok(TakenJob {
            id,
            payload,
            delivery: lease.fence,
            attempt: tail.attempt,
            timeout: tail.timeout,
            hold_left: tail.hold_left,
            enqueued_at: tail.enqueued.map(|(at, _)| at),
            waited: tail.enqueued.map(|(_, waited)| waited),
            start_in: tail.start_in,
            lease,
        })
    }

    /// Done: the job is forgotten. [`Error::NotOwner`] if its lease had run out (it goes, or
    /// went, to another worker, so this worker's work must not count). The server remembers
    /// the settled delivery for [`SETTLED_KEEP`](super::SETTLED_KEEP): an ack retried after a
    /// lost reply is `Ok` only if this delivery's own ack removed the job.
    pub fn ack(&self, keys: &QueueKeys, deadline: Instant) -> ScriptOp<Release> {
        let call = keys.settling(
            ack_lease_call(keys, &self.id, &self.lease.token),
            &self.lease,
        );
        ScriptOp::release_with(&self.lease, call, deadline)
    }

    /// Failed: retry after `backoff` (zero: at once), or move to the dead list, keeping
    /// `reason` (empty: none), once the job has had `max_deliveries` deliveries (0: now).
    pub fn nack(
        &self,
        keys: &QueueKeys,
        backoff: Duration,
        max_deliveries: u32,
        reason: &str,
        deadline: Instant,
    ) -> ScriptOp<Nack> {
        let token = self.lease.token.as_str();
        let call = nack_because(keys, &self.id, token, backoff, max_deliveries, reason);
        nack_op(&self.lease, keys.settling(call, &self.lease), deadline)
    }

    /// Gives the job back at once: a nack without backoff and without a reason (the dead list
    /// after max deliveries). It is what the lease's plain release does.
    pub fn give_back(&self, deadline: Instant) -> ScriptOp<Release> {
        ScriptOp::release(&self.lease, deadline)
    }

    /// Renews the lease to `visibility` from when Redis runs the call.
    pub fn extend(
        &self,
        visibility: Duration,
        deadline: Instant,
    ) -> Result<ScriptOp<Extend>, Error> {
        ScriptOp::extend(&self.lease, visibility, deadline)
    }
}

fn unexpected(what: &str) -> Error {
    Error::UnexpectedReply {
        context: "queue take",
        reply: what.into(),
    }
}

/// Taking one job, as a [`Protocol`] yielding a [`Take`].
///
/// It is the shared acquisition machine ([`Acquire`]) on the take script: it tries once
/// (`options.wait` `None`) or waits until a push wakes it or a delayed job is due (never
/// polling faster than that), retries after a lost reply (the script hands the same job to
/// the same token), and gives back the job a lost attempt may have leased when it finally
/// fails.
#[derive(Debug)]
pub struct TakeJob {
    /// Boxed: the machine is large, and moves (into the driver, through its loop) then
    /// copy a pointer.
    acquire: Box<Acquire>,
}

impl TakeJob {
    /// A take from `keys` with the owner `token` (random bytes from the driver), starting at
    /// `now`; `seed` drives the retry jitter. Fails at once on bad settings or options.
    pub fn new(
        keys: &QueueKeys,
        token: Token,
        settings: &QueueSettings,
        options: &AcquireOptions,
        seed: u64,
        now: Instant,
    ) -> Result<Self, Error> {
        let spec = take(keys, token, settings)?;
        Ok(TakeJob {
            acquire: Box::new(Acquire::new(spec, options, seed, now)?),
        })
    }
}

impl Protocol for TakeJob {
    type Output = Take;

    fn poll(&mut self, now: Instant) -> Step<Take> {
        match self.acquire.poll(now) {
            Step::Done(Ok(Acquisition::Acquired(lease))) => {
                Step::Done(TakenJob::from_lease(*lease).map(|job| Take::Taken(Box::new(job))))
            }
            Step::Done(Ok(Acquisition::Busy { holder_ttl })) => Step::Done(Ok(Take::Empty {
                next_due_in: holder_ttl,
            })),
            Step::Done(Err(e)) => Step::Done(Err(e)),
            Step::Send(batch) => Step::Send(batch),
            Step::Wait(wait) => Step::Wait(wait),
            // No other step is ever returned.
            #[allow(unreachable_patterns)]
            _ => Step::Done(Err(Error::Finished)),
        }
    }

    fn handle(&mut self, input: Response, now: Instant) {
        self.acquire.handle(input, now);
    }

    fn wake(&mut self, now: Instant) {
        self.acquire.wake(now);
    }
}
