//! One object-safe face for every core machine the simulator drives, so that one driver
//! loop runs them all (as an embedder's driver would).

use std::time::Instant;

use redlease_core::lease::Acquisition;
use redlease_core::queue::schedule::{Advanced, Upserted};
use redlease_core::queue::{AckedAndTaken, DedupOutcome, Nacked, Pushed};
use redlease_core::redlock::{QuorumOutcome, RedLease};
use redlease_core::{Error, Protocol, Response, Step};

/// What a finished machine yielded.
#[derive(Debug)]
pub enum Outcome {
    /// A lock, permit or job acquisition.
    Acquired(Result<Acquisition, Error>),
    /// A RedLock acquisition.
    Red(Result<Box<RedLease>, Error>),
    /// A release or an ack.
    Unit(Result<(), Error>),
    /// An extension (the new validity).
    Extended(Result<Instant, Error>),
    /// A nack.
    Nacked(Result<Nacked, Error>),
    /// A push.
    Pushed(Result<Vec<Pushed>, Error>),
    /// A permit count change (the previous count).
    Permits(Result<Option<u64>, Error>),
    /// A RedLock release or extension.
    Quorum(Result<QuorumOutcome, Error>),
    /// An ack and the take of the next job in one call.
    AckTake(Result<AckedAndTaken, Error>),
    /// A schedule's upsert.
    Upserted(Result<Upserted, Error>),
    /// A schedule's advance past a taken occurrence.
    Advanced(Result<Advanced, Error>),
    /// A push with a dedup id.
    DedupPushed(Result<DedupOutcome, Error>),
    /// A queue's pause or resume (whether it changed anything).
    Toggled(Result<bool, Error>),
    /// A change of a queue's group limits.
    Limits(Result<(), Error>),
    /// A job's cancel.
    Cancelled(Result<redlease_core::queue::cancel::Cancelled, Error>),
    /// A dead job's requeue (whether it was dead).
    Requeued(Result<bool, Error>),
    /// A drain (whether nothing was in flight before its deadline).
    Drained(Result<bool, Error>),
}

impl Outcome {
    /// The machine's complaint that the driver broke the protocol contract, if that is how
    /// it ended (a bug of the simulator's driver, or of the machine's contract).
    pub fn contract_broken(&self) -> Option<String> {
        let e = match self {
            Outcome::Acquired(Err(e))
            | Outcome::Red(Err(e))
            | Outcome::Unit(Err(e))
            | Outcome::Extended(Err(e))
            | Outcome::Nacked(Err(e))
            | Outcome::Pushed(Err(e))
            | Outcome::Permits(Err(e))
            | Outcome::Quorum(Err(e))
            | Outcome::AckTake(Err(e))
            | Outcome::Upserted(Err(e))
            | Outcome::Advanced(Err(e))
            | Outcome::DedupPushed(Err(e)) => e,
            Outcome::Toggled(Err(e)) | Outcome::Requeued(Err(e)) | Outcome::Drained(Err(e)) => e,
            Outcome::Limits(Err(e)) => e,
            Outcome::Cancelled(Err(e)) => e,
            _ => return None,
        };
        matches!(e, Error::Driver(_)).then(|| e.to_string())
    }
}

/// A machine as the driver sees it.
pub trait Drive {
    /// [`Protocol::poll`], with the output wrapped.
    fn poll(&mut self, now: Instant) -> Step<Outcome>;
    /// [`Protocol::handle`].
    fn handle(&mut self, input: Response, now: Instant);
    /// [`Protocol::wake`].
    fn wake(&mut self, now: Instant);
}

/// A [`Protocol`] with the function that wraps its output.
pub struct Wrap<P: Protocol> {
    machine: P,
    wrap: fn(Result<P::Output, Error>) -> Outcome,
}

impl<P: Protocol> Wrap<P> {
    /// Wraps `machine`.
    pub fn boxed(machine: P, wrap: fn(Result<P::Output, Error>) -> Outcome) -> Box<dyn Drive>
    where
        P: 'static,
    {
        Box::new(Wrap { machine, wrap })
    }
}

impl<P: Protocol> Drive for Wrap<P> {
    fn poll(&mut self, now: Instant) -> Step<Outcome> {
        match self.machine.poll(now) {
            Step::Send(b) => Step::Send(b),
            Step::Wait(w) => Step::Wait(w),
            Step::Done(r) => Step::Done(Ok((self.wrap)(r))),
        }
    }

    fn handle(&mut self, input: Response, now: Instant) {
        self.machine.handle(input, now);
    }

    fn wake(&mut self, now: Instant) {
        self.machine.wake(now);
    }
}
