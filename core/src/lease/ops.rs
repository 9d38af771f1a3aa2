//! One-call operations: release, extend and inspect a held lease; set and read a
//! semaphore's permits.
//!
//! They share one machine, [`ScriptOp`]: send the script; on a lost reply retry (every such
//! script is idempotent: owner-checked, or a plain read or overwrite) a few times before the
//! deadline; decide the outcome from the reply.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Lease, Target, error_from_reply, int_pair, pttl, valid_until};
use crate::command::RequestIds;
use crate::error::{Error, LossReason};
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};
use crate::script::{Exchange, Progress, ScriptCall};

/// How many times a one-call operation is sent before it gives up.
pub const MAX_ATTEMPTS: u32 = 3;

/// The first pause before resending after a transport failure (doubles each time).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// What one operation sends and how it reads the answer.
pub trait OpKind {
    /// What the operation yields.
    type Output;
    /// Names the step in error messages.
    const CONTEXT: &'static str;
    /// Whether a call whose reply was lost may be sent again. True for owner-checked and
    /// read-only calls; false where a retry could repeat the effect after others acted on it.
    const RETRY_LOST_REPLY: bool = true;

    /// The outcome, from a reply that is not an error reply.
    ///
    /// `sent_at` is when the answered attempt was sent; `lost_in_time` is true when an
    /// earlier attempt was sent while the lease was valid and its reply was lost (so it may
    /// have done the work already).
    fn decide(
        &self,
        reply: &Reply,
        sent_at: Instant,
        lost_in_time: bool,
    ) -> Option<Result<Self::Output, Error>>;

    /// [`decide`](Self::decide) on a reply the operation may keep parts of (moving its bulk
    /// strings out rather than copying them); `Err` hands back a reply it does not
    /// understand (`decide`'s `None`), for the error that names it.
    fn decide_owned(
        &self,
        reply: Reply,
        sent_at: Instant,
        lost_in_time: bool,
    ) -> Result<Result<Self::Output, Error>, Reply> {
        self.decide(&reply, sent_at, lost_in_time).ok_or(reply)
    }
}

/// Release: end the hold if it is still ours, and announce it.
///
/// Yields `Ok(())` when released, [`Error::NotOwner`] with [`LossReason::Expired`] when the
/// hold was gone, with [`LossReason::Taken`] when another holder owns the lock. For a lock, a
/// retry after a lost reply that finds the hold gone (or re-taken) counts as released when
/// the lost attempt was sent while the lease was still valid: only that token could end it,
/// so it was that attempt (or the expiry) that ended it.
///
/// Not for a job's ack or nack: something else (the lease running out, then another
/// delivery's ack) may have removed the job. Their scripts remember the delivery they
/// settled, and a retry is `Ok` only when it finds that record.
#[derive(Debug, Clone)]
pub struct Release {
    /// The lock's name (shared with the lease).
    name: Arc<str>,
    /// Whether a lost reply sent in time means the retry's "gone" was our own doing.
    lost_reply_was_ours: bool,
}

/// Extend: set the lease to `ttl` from now if it is still ours. Yields the new
/// `valid_until`.
#[derive(Debug, Clone)]
pub struct Extend {
    /// The lock's name (shared with the lease).
    name: Arc<str>,
    ttl: Duration,
}

/// Inspect: who holds the lock, and for how long. Yields a [`LeaseState`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Inspect;

/// What [`Inspect`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// The lease is ours; Redis expires it after `remaining` (`None`: the key has no expiry).
    Held {
        /// Time left on the server.
        remaining: Option<Duration>,
    },
    /// The hold is gone.
    Expired,
    /// Another holder owns the lock.
    Taken {
        /// Time left on the other holder's lease.
        remaining: Option<Duration>,
    },
}

fn owner_outcome(name: &str, code: i64, lost_in_time: bool) -> Option<Result<(), Error>> {
    let reason = match code {
        1 => return Some(Ok(())),
        0 => LossReason::Expired,
        -1 => LossReason::Taken,
        // A queue job's renewal: its delivery was cancelled (`queue::cancel`).
        -3 => LossReason::Cancelled,
        _ => return None,
    };
    if lost_in_time {
        return Some(Ok(()));
    }
    Some(Err(Error::NotOwner {
        name: name.to_owned(),
        reason,
    }))
}

impl OpKind for Release {
    type Output = ();
    const CONTEXT: &'static str = "release";

    fn decide(&self, reply: &Reply, _: Instant, in_time: bool) -> Option<Result<(), Error>> {
        // 2: a queue nack that moved the job to the dead list; 3: a retried nack that found
        // its own earlier attempt recorded. Done all the same.
        let code = match reply.as_int()? {
            2 | 3 => 1,
            code => code,
        };
        owner_outcome(&self.name, code, in_time && self.lost_reply_was_ours)
    }
}

impl OpKind for Extend {
    type Output = Instant;
    const CONTEXT: &'static str = "lease extension";

    fn decide(&self, reply: &Reply, sent_at: Instant, _: bool) -> Option<Result<Instant, Error>> {
        let outcome = owner_outcome(&self.name, reply.as_int()?, false)?;
        Some(outcome.map(|()| valid_until(sent_at, self.ttl)))
    }
}

impl OpKind for Inspect {
    type Output = LeaseState;
    const CONTEXT: &'static str = "lease inspection";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<LeaseState, Error>> {
        let (code, ms) = int_pair(reply)?;
        Some(Ok(match code {
            1 => LeaseState::Held {
                remaining: pttl(ms),
            },
            0 => LeaseState::Expired,
            -1 => LeaseState::Taken {
                remaining: pttl(ms),
            },
            _ => return None,
        }))
    }
}

/// One idempotent script call, as a [`Protocol`].
#[derive(Debug)]
pub struct ScriptOp<K: OpKind> {
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    kind: K,
    target: Target,
    /// Until when the lease the call is about was valid (for [`Release`]'s lost-reply rule).
    valid_until: Option<Instant>,
    deadline: Instant,
    ids: RequestIds,
    exchange: Exchange,
    attempts: u32,
    sent_at: Option<Instant>,
    lost_in_time: bool,
    retry_at: Option<Instant>,
    pause: Duration,
    done: bool,
}

impl ScriptOp<Release> {
    /// Releases `lease`, giving up at `deadline`.
    pub fn release(lease: &Lease, deadline: Instant) -> Self {
        let kind = Release {
            name: lease.target.name.clone(),
            // A job's release is a nack: it answers for its own lost replies.
            lost_reply_was_ours: lease.kind != super::LeaseKind::Job,
        };
        Self::new(
            kind,
            lease.calls.release().clone(),
            lease.target.clone(),
            Some(lease.valid_until),
            deadline,
        )
    }
}

impl ScriptOp<Release> {
    /// Ends `lease` with another owner-checked `call` than its release (a queue's ack or
    /// nack), with the same outcomes as [`release`](Self::release); after a lost reply, the
    /// call's own answer decides (the ack and nack scripts recognise a delivery they already
    /// settled), never the lock's lost-reply rule.
    pub fn release_with(lease: &Lease, call: ScriptCall, deadline: Instant) -> Self {
        let kind = Release {
            name: lease.target.name.clone(),
            lost_reply_was_ours: false,
        };
        Self::new(
            kind,
            call,
            lease.target.clone(),
            Some(lease.valid_until),
            deadline,
        )
    }
}

impl ScriptOp<Extend> {
    /// Extends `lease` to `ttl` from the moment Redis runs the command, giving up at `deadline`.
    ///
    /// A `ttl` shorter than the lease's own shortens it (the last renewal before a hold limit
    /// ends the lease at the limit). For a reentrant lock, whose renewals otherwise never
    /// shorten the key (an outer hold of the same owner may want it longer), a shorter `ttl`
    /// is set exactly when the owner holds the lock once.
    ///
    /// Compares `ttl` with the ttl the lease was acquired with: for a lease renewed or
    /// extended to another ttl since, use [`extend_current`](Self::extend_current).
    pub fn extend(lease: &Lease, ttl: Duration, deadline: Instant) -> Result<Self, Error> {
        Self::extend_current(lease, lease.ttl, ttl, deadline)
    }

    /// [`extend`](Self::extend) of a lease whose ttl is now `current_ttl` (an earlier
    /// extension to another ttl): a reentrant lock is shortened when `ttl` is shorter than
    /// that, not than the ttl it was acquired with.
    pub fn extend_current(
        lease: &Lease,
        current_ttl: Duration,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Self, Error> {
        let ttl_ms = super::validate_ttl("ttl", ttl)?;
        let kind = Extend {
            name: lease.target.name.clone(),
            ttl,
        };
        let mut call = lease.calls.extend().arg(ttl_ms.to_string());
        if lease.kind == super::LeaseKind::Lock(super::LockKind::Reentrant) {
            call = call.arg(if ttl < current_ttl { "1" } else { "0" });
        }
        Ok(Self::new(
            kind,
            call,
            lease.target.clone(),
            Some(lease.valid_until),
            deadline,
        ))
    }
}

impl ScriptOp<Inspect> {
    /// Asks whether `lease` is still ours and how long it has left, giving up at `deadline`.
    pub fn inspect(lease: &Lease, deadline: Instant) -> Self {
        Self::new(
            Inspect,
            lease.calls.inspect(),
            lease.target.clone(),
            None,
            deadline,
        )
    }
}

impl<K: OpKind> ScriptOp<K> {
    pub(crate) fn new(
        kind: K,
        call: ScriptCall,
        target: Target,
        valid_until: Option<Instant>,
        deadline: Instant,
    ) -> Self {
        let mut exchange = Exchange::new(call);
        exchange.start();
        ScriptOp {
            kind,
            outstanding: Outstanding::default(),
            target,
            valid_until,
            deadline,
            ids: RequestIds::default(),
            exchange,
            attempts: 0,
            sent_at: None,
            lost_in_time: false,
            retry_at: None,
            pause: RETRY_PAUSE,
            done: false,
        }
    }

    /// Uses `valid_until` as the lease's validity for the lost-reply rule instead of the
    /// one it was acquired with: the validity now, after renewals or extensions. A retry
    /// after a lost reply that finds the lease gone counts as ours when the lost attempt
    /// was sent before this instant.
    pub fn with_valid_until(mut self, valid_until: Instant) -> Self {
        self.set_valid_until(valid_until);
        self
    }

    /// [`with_valid_until`](Self::with_valid_until) in place (kinds without the rule keep
    /// none).
    pub(crate) fn set_valid_until(&mut self, valid_until: Instant) {
        if self.valid_until.is_some() {
            self.valid_until = Some(valid_until);
        }
    }

    /// Notes that an earlier attempt of the same call, by other means (a native command
    /// instead of the script), was sent while the lease was valid and its reply was lost.
    pub(crate) fn note_lost_in_time(&mut self) {
        self.lost_in_time = true;
    }

    fn finish(&mut self, result: Result<K::Output, Error>) -> Step<K::Output> {
        self.done = true;
        Step::Done(result)
    }

    fn on_failure(&mut self, failure: TransportFailure, now: Instant) -> Step<K::Output> {
        if failure.kind == FailureKind::NoReply
            && let (Some(sent), Some(valid)) = (self.sent_at, self.valid_until)
            && sent < valid
        {
            self.lost_in_time = true;
        }
        let at = now + self.pause;
        let give_up = failure.kind == FailureKind::NoReply && !K::RETRY_LOST_REPLY;
        if give_up || self.attempts >= MAX_ATTEMPTS || at >= self.deadline {
            return self.finish(Err(Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            }));
        }
        self.pause *= 2;
        self.retry_at = Some(at);
        Step::Wait(Wait::until(at))
    }
}

impl<K: OpKind> ScriptOp<K> {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<K::Output> {
        if self.done {
            return Step::Done(Err(Error::Finished));
        }
        if let Some(at) = self.retry_at {
            if now < at {
                return Step::Wait(Wait::until(at));
            }
            self.retry_at = None;
            self.exchange.start();
        }
        match self.exchange.poll(&mut self.ids) {
            Progress::Send(request) => {
                if self.sent_at.is_none() || request.command.name() == "EVALSHA" {
                    self.attempts += 1;
                }
                self.sent_at = Some(now);
                Step::Send(Batch::new(vec![request], self.deadline))
            }
            Progress::Awaiting => self.outstanding.step(now),
            Progress::Answered(Err(failure)) => self.on_failure(failure, now),
            // Refused for a passing reason (a failover): it did not run; try again.
            Progress::Answered(Ok(Reply::Error(e))) if e.is_transient() => {
                self.on_failure(TransportFailure::not_sent(e.to_string()), now)
            }
            Progress::Answered(Ok(Reply::Error(e))) => {
                let err = error_from_reply(&self.target, e);
                self.finish(Err(err))
            }
            Progress::Answered(Ok(reply)) => {
                let sent_at = self.sent_at.unwrap_or(now);
                let outcome = self
                    .kind
                    .decide_owned(reply, sent_at, self.lost_in_time)
                    .unwrap_or_else(|reply| {
                        Err(Error::UnexpectedReply {
                            context: K::CONTEXT,
                            reply: reply.describe(),
                        })
                    });
                self.finish(outcome)
            }
            // Started in the constructor and restarted on every retry, so never idle while
            // not done; answer as if finished rather than spin.
            Progress::Idle => self.finish(Err(Error::Finished)),
        }
    }
}

impl<K: OpKind> Protocol for ScriptOp<K> {
    type Output = K::Output;

    fn poll(&mut self, now: Instant) -> Step<K::Output> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn handle(&mut self, input: Response, _now: Instant) {
        self.exchange.handle(input);
    }
}
