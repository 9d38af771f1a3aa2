//! Owner-checked operations on a lease we hold: release, extend, inspect.
//!
//! They share one machine, [`LeaseOp`]: send the script; on a lost reply retry (the scripts
//! compare the token, so a retry is harmless) a few times before the deadline; decide the
//! outcome from the reply.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::{Lease, error_from_reply, int_pair, pttl, valid_until};
use crate::command::RequestIds;
use crate::error::{Error, LossReason};
use crate::protocol::{Batch, Protocol, Step, Wait};
use crate::reply::{FailureKind, Input, Reply, TransportFailure};
use crate::script::{Exchange, Progress, ScriptCall};

/// How many times an owner-checked operation is sent before it gives up.
pub const MAX_ATTEMPTS: u32 = 3;

/// The first pause before resending after a transport failure (doubles each time).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// What one owner-checked operation sends and how it reads the answer.
pub trait LeaseOpKind {
    /// What the operation yields.
    type Output;
    /// Names the step in error messages.
    const CONTEXT: &'static str;
    /// The script call for `lease`.
    fn call(&self, lease: &Lease) -> ScriptCall;
    /// The outcome, from a reply that is not an error reply.
    ///
    /// `sent_at` is when the answered attempt was sent; `released_in_time` is true when an
    /// earlier attempt was sent while the lease was valid and its reply was lost (so it may
    /// have done the work already).
    fn decide(
        &self,
        lease: &Lease,
        reply: &Reply,
        sent_at: Instant,
        released_in_time: bool,
    ) -> Option<Result<Self::Output, Error>>;
}

/// Release: delete the key if it is still ours, and announce it on the release channel.
///
/// Yields `Ok(())` when released, [`Error::NotOwner`] with [`LossReason::Expired`] when the
/// key was gone, with [`LossReason::Taken`] when another holder owns it. A retry after a
/// lost reply that finds the key gone (or re-taken) counts as released when the lost attempt
/// was sent while the lease was still valid: it was that attempt that deleted the key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Release;

/// Extend: set the lease to `ttl` from now if it is still ours. Yields the new
/// `valid_until`.
#[derive(Debug, Clone, Copy)]
pub struct Extend {
    ttl_ms: u64,
    ttl: Duration,
}

/// Inspect: who holds the lock, and for how long. Yields a [`LeaseState`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Inspect;

/// What [`Inspect`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// The lease is ours; Redis expires it after `remaining` (`None`: the key has no expiry).
    Held {
        /// Time left on the server.
        remaining: Option<Duration>,
    },
    /// The key is gone.
    Expired,
    /// Another holder owns the lock.
    Taken {
        /// Time left on the other holder's lease.
        remaining: Option<Duration>,
    },
}

fn owner_outcome(name: &str, code: i64, release_in_time: bool) -> Option<Result<(), Error>> {
    let reason = match code {
        1 => return Some(Ok(())),
        0 => LossReason::Expired,
        -1 => LossReason::Taken,
        _ => return None,
    };
    if release_in_time {
        return Some(Ok(()));
    }
    Some(Err(Error::NotOwner {
        name: name.to_owned(),
        reason,
    }))
}

impl LeaseOpKind for Release {
    type Output = ();
    const CONTEXT: &'static str = "lease release";

    fn call(&self, lease: &Lease) -> ScriptCall {
        lease.calls.release.clone()
    }

    fn decide(
        &self,
        lease: &Lease,
        reply: &Reply,
        _: Instant,
        in_time: bool,
    ) -> Option<Result<(), Error>> {
        owner_outcome(&lease.target.name, reply.as_int()?, in_time)
    }
}

impl LeaseOpKind for Extend {
    type Output = Instant;
    const CONTEXT: &'static str = "lease extension";

    fn call(&self, lease: &Lease) -> ScriptCall {
        lease.calls.extend.clone().arg(self.ttl_ms.to_string())
    }

    fn decide(
        &self,
        lease: &Lease,
        reply: &Reply,
        sent_at: Instant,
        _: bool,
    ) -> Option<Result<Instant, Error>> {
        let outcome = owner_outcome(&lease.target.name, reply.as_int()?, false)?;
        Some(outcome.map(|()| valid_until(sent_at, self.ttl)))
    }
}

impl LeaseOpKind for Inspect {
    type Output = LeaseState;
    const CONTEXT: &'static str = "lease inspection";

    fn call(&self, lease: &Lease) -> ScriptCall {
        lease.calls.inspect.clone()
    }

    fn decide(
        &self,
        _: &Lease,
        reply: &Reply,
        _: Instant,
        _: bool,
    ) -> Option<Result<LeaseState, Error>> {
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

/// One owner-checked operation on a lease, as a [`Protocol`].
#[derive(Debug)]
pub struct LeaseOp<K: LeaseOpKind> {
    kind: K,
    lease: Lease,
    deadline: Instant,
    ids: RequestIds,
    exchange: Exchange,
    attempts: u32,
    sent_at: Option<Instant>,
    in_time_lost_reply: bool,
    retry_at: Option<Instant>,
    pause: Duration,
    done: bool,
    _kind: PhantomData<K>,
}

impl LeaseOp<Release> {
    /// Releases `lease`, giving up at `deadline`.
    pub fn release(lease: &Lease, deadline: Instant) -> Self {
        Self::with_kind(Release, lease, deadline)
    }
}

impl LeaseOp<Extend> {
    /// Extends `lease` to `ttl` from the moment Redis runs the command, giving up at `deadline`.
    pub fn extend(lease: &Lease, ttl: Duration, deadline: Instant) -> Result<Self, Error> {
        let ttl_ms = super::validate_ttl("ttl", ttl)?;
        Ok(Self::with_kind(Extend { ttl_ms, ttl }, lease, deadline))
    }
}

impl LeaseOp<Inspect> {
    /// Asks whether `lease` is still ours and how long it has left, giving up at `deadline`.
    pub fn inspect(lease: &Lease, deadline: Instant) -> Self {
        Self::with_kind(Inspect, lease, deadline)
    }
}

impl<K: LeaseOpKind> LeaseOp<K> {
    fn with_kind(kind: K, lease: &Lease, deadline: Instant) -> Self {
        let mut exchange = Exchange::new(kind.call(lease));
        exchange.start();
        LeaseOp {
            kind,
            lease: lease.clone(),
            deadline,
            ids: RequestIds::default(),
            exchange,
            attempts: 0,
            sent_at: None,
            in_time_lost_reply: false,
            retry_at: None,
            pause: RETRY_PAUSE,
            done: false,
            _kind: PhantomData,
        }
    }

    fn finish(&mut self, result: Result<K::Output, Error>) -> Step<K::Output> {
        self.done = true;
        Step::Done(result)
    }

    fn on_failure(&mut self, failure: TransportFailure, now: Instant) -> Step<K::Output> {
        if failure.kind == FailureKind::NoReply
            && self.sent_at.is_some_and(|t| t < self.lease.valid_until)
        {
            self.in_time_lost_reply = true;
        }
        let at = now + self.pause;
        if self.attempts >= MAX_ATTEMPTS || at >= self.deadline {
            return self.finish(Err(Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            }));
        }
        self.pause *= 2;
        self.retry_at = Some(at);
        Step::Wait(Wait {
            until: at,
            wake_on: None,
        })
    }
}

impl<K: LeaseOpKind> Protocol for LeaseOp<K> {
    type Output = K::Output;

    fn poll(&mut self, now: Instant) -> Step<K::Output> {
        if self.done {
            return Step::Done(Err(Error::Finished));
        }
        if let Some(at) = self.retry_at {
            if now < at {
                return Step::Wait(Wait {
                    until: at,
                    wake_on: None,
                });
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
                Step::Send(Batch {
                    requests: vec![request],
                    deadline: self.deadline,
                })
            }
            Progress::Awaiting => Step::Awaiting,
            Progress::Answered(Err(failure)) => self.on_failure(failure, now),
            Progress::Answered(Ok(Reply::Error(e))) => {
                let err = error_from_reply(&self.lease.target, e);
                self.finish(Err(err))
            }
            Progress::Answered(Ok(reply)) => {
                let sent_at = self.sent_at.unwrap_or(now);
                let outcome = self
                    .kind
                    .decide(&self.lease, &reply, sent_at, self.in_time_lost_reply)
                    .unwrap_or_else(|| {
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

    fn handle(&mut self, input: Input, _now: Instant) {
        self.exchange.handle(input);
    }
}
