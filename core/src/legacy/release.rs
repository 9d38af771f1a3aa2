//! Releasing a legacy lock: `GET`, then `DEL` while the key still holds our value.

use std::time::{Duration, Instant};

use super::{
    InFlight, LegacyAlgorithm, LegacyKeys, LegacyLease, WallClock, error_from_reply, getset_expiry,
};
use crate::backoff::saturating_add;
use crate::command::{Command, RequestIds};
use crate::error::{Error, LossReason};
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};

/// How many times the `GET` of a release is sent before it gives up.
pub(crate) const MAX_ATTEMPTS: u32 = 3;

/// The first pause before retrying after a transport failure (doubles each time).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

#[derive(Debug)]
enum Phase {
    /// Send `GET key` next.
    Start,
    /// `GET key` is in flight.
    Get,
    /// `DEL key` is in flight.
    Del,
    /// Pausing before a retry.
    Waiting {
        until: Instant,
    },
    Done,
}

/// The release of a legacy lock, as a [`Protocol`]: `GET key`; when it holds our value (and,
/// GetSet, that value's expiry has not passed by the local wall clock) `DEL key`.
///
/// Yields `Ok(())` when released; [`Error::NotOwner`] with [`LossReason::Expired`] when the key
/// was gone, or (GetSet) still holds our value but its time has passed (the key is then left
/// alone: a contender may be taking it over); with [`LossReason::Taken`] when it holds another
/// value. A GetSet key holding something that is not a lock value is
/// [`Error::UnexpectedReply`].
///
/// `GET` and `DEL` are two round trips, not one atomic step: if the lock expires between them
/// and another contender takes it, the `DEL` deletes that contender's key (see the
/// [module docs](super)). A retry after a `DEL` whose reply was lost counts the key gone (or
/// re-taken) as released: that `DEL` was sent while the key held our live value.
#[derive(Debug)]
pub struct LegacyRelease {
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    keys: LegacyKeys,
    algorithm: LegacyAlgorithm,
    /// The values that are ours (one for a lease; the unconfirmed writes for a cleanup).
    ours: Vec<String>,
    clock: WallClock,
    deadline: Instant,
    inflight: InFlight,
    phase: Phase,
    attempts: u32,
    lost_del: bool,
    pause: Duration,
}

impl LegacyRelease {
    /// Releases `lease`, giving up at `deadline`; `now` and `unix_ms` are the current time by
    /// the monotonic and the wall clock (the expiry of a GetSet value is judged by the latter).
    pub fn new(lease: &LegacyLease, deadline: Instant, now: Instant, unix_ms: u64) -> Self {
        Self::cleanup(
            lease.keys.clone(),
            lease.algorithm,
            vec![lease.value.clone()],
            WallClock::new(now, unix_ms),
            deadline,
            RequestIds::default(),
        )
    }

    /// A release of whichever of the values `ours` the key holds, numbering its requests on
    /// from `ids` (so that a late reply to the caller's earlier requests is never taken for
    /// one of ours).
    pub(super) fn cleanup(
        keys: LegacyKeys,
        algorithm: LegacyAlgorithm,
        ours: Vec<String>,
        clock: WallClock,
        deadline: Instant,
        ids: RequestIds,
    ) -> Self {
        LegacyRelease {
            keys,
            outstanding: Outstanding::default(),
            algorithm,
            ours,
            clock,
            deadline,
            inflight: InFlight::continuing(ids),
            phase: Phase::Start,
            attempts: 0,
            lost_del: false,
            pause: RETRY_PAUSE,
        }
    }

    fn send(&mut self, phase: Phase, name: &str) -> Step<()> {
        let requests = self
            .inflight
            .start(vec![Command::new(name).arg(&self.keys.lock)]);
        self.phase = phase;
        Step::Send(Batch::new(requests, self.deadline))
    }

    fn finish(&mut self, result: Result<(), Error>) -> Step<()> {
        self.phase = Phase::Done;
        Step::Done(result)
    }

    /// Not ours any more, unless a lost `DEL` of ours is why.
    fn not_owner(&mut self, reason: LossReason) -> Step<()> {
        if self.lost_del {
            return self.finish(Ok(()));
        }
        let name = self.keys.name.clone();
        self.finish(Err(Error::NotOwner { name, reason }))
    }

    fn unexpected(&mut self, context: &'static str, reply: &Reply) -> Step<()> {
        self.finish(Err(Error::UnexpectedReply {
            context,
            reply: reply.describe(),
        }))
    }

    fn on_failure(&mut self, failure: TransportFailure, was_del: bool, now: Instant) -> Step<()> {
        if was_del && failure.kind == FailureKind::NoReply {
            self.lost_del = true;
        }
        let at = saturating_add(now, self.pause);
        if self.attempts >= MAX_ATTEMPTS || at >= self.deadline {
            return self.finish(Err(Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            }));
        }
        self.pause *= 2;
        self.phase = Phase::Waiting { until: at };
        Step::Wait(Wait::until(at))
    }

    fn on_get(&mut self, reply: Reply, now: Instant) -> Step<()> {
        let value = match reply {
            Reply::Nil => return self.not_owner(LossReason::Expired),
            Reply::Bulk(value) => value,
            other => return self.unexpected("legacy lock release (GET)", &other),
        };
        let ours = self.ours.iter().any(|v| v.as_bytes() == value.as_slice());
        match self.algorithm {
            LegacyAlgorithm::SetNxExpire if ours => self.send(Phase::Del, "DEL"),
            LegacyAlgorithm::SetNxExpire => self.not_owner(LossReason::Taken),
            LegacyAlgorithm::GetSet => match getset_expiry(&value) {
                None => self.unexpected("legacy lock value (GET)", &Reply::Bulk(value)),
                Some(expiry) if ours => {
                    if expiry > self.clock.unix_ms_at(now) {
                        self.send(Phase::Del, "DEL")
                    } else {
                        // Ours, but its time has passed: a contender may be taking it over
                        // right now, so deleting could delete its lock.
                        self.not_owner(LossReason::Expired)
                    }
                }
                Some(_) => self.not_owner(LossReason::Taken),
            },
        }
    }
}

impl LegacyRelease {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<()> {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Done => Step::Done(Err(Error::Finished)),
            Phase::Waiting { until } if now < until => {
                self.phase = Phase::Waiting { until };
                Step::Wait(Wait::until(until))
            }
            Phase::Start | Phase::Waiting { .. } => {
                self.attempts += 1;
                self.send(Phase::Get, "GET")
            }
            phase @ (Phase::Get | Phase::Del) => {
                let Some(mut results) = self.inflight.take() else {
                    self.phase = phase;
                    return self.outstanding.step(now);
                };
                let was_del = matches!(phase, Phase::Del);
                match results.pop() {
                    None => self.finish(Err(Error::Driver("a step was answered with no replies"))),
                    Some(Err(failure)) => self.on_failure(failure, was_del, now),
                    Some(Ok(Reply::Error(e))) => {
                        let error = error_from_reply(&self.keys, e);
                        self.finish(Err(error))
                    }
                    Some(Ok(reply)) if was_del => match reply.as_int() {
                        Some(1) => self.finish(Ok(())),
                        // Gone between our GET and DEL (expired or deleted by someone else).
                        Some(0) => self.not_owner(LossReason::Expired),
                        _ => self.unexpected("legacy lock release (DEL)", &reply),
                    },
                    Some(Ok(reply)) => self.on_get(reply, now),
                }
            }
        }
    }
}

impl Protocol for LegacyRelease {
    type Output = ();

    fn poll(&mut self, now: Instant) -> Step<()> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn handle(&mut self, input: Response, _now: Instant) {
        self.inflight.handle(input);
    }
}
