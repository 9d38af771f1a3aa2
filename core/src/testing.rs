//! A small scenario builder for driving machines with scripted replies on virtual time.

use std::time::Instant;

use crate::command::Request;
use crate::protocol::{Protocol, Step, Wait};
use crate::reply::{ErrorReply, Reply, Response, TransportFailure};

/// An arbitrary origin for virtual time (the only clock read in the core's tests).
#[allow(clippy::disallowed_methods)]
pub(crate) fn origin() -> Instant {
    Instant::now()
}

/// Drives one machine on virtual time.
pub(crate) struct Scenario<P: Protocol> {
    pub machine: P,
    pub now: Instant,
    /// Every request the machine sent, in order.
    pub sent: Vec<Request>,
}

impl<P: Protocol> Scenario<P>
where
    P::Output: std::fmt::Debug,
{
    pub fn new(machine: P, now: Instant) -> Self {
        Scenario {
            machine,
            now,
            sent: Vec::new(),
        }
    }

    /// Polls and expects a batch of exactly one request.
    pub fn expect_send(&mut self) -> Request {
        match self.machine.poll(self.now) {
            Step::Send(batch) => {
                assert_eq!(batch.requests.len(), 1, "{batch:?}");
                assert!(batch.deadline > self.now, "batch deadline in the past");
                let r = batch.requests[0].clone();
                self.sent.push(r.clone());
                r
            }
            other => panic!("expected a send, got {other:?}"),
        }
    }

    pub fn expect_wait(&mut self) -> Wait {
        match self.machine.poll(self.now) {
            Step::Wait(w) => w,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    pub fn expect_done(&mut self) -> Result<P::Output, crate::Error> {
        match self.machine.poll(self.now) {
            Step::Done(r) => r,
            other => panic!("expected done, got {other:?}"),
        }
    }

    /// Sends and answers one request.
    pub fn answer(&mut self, reply: Reply) -> Request {
        let r = self.expect_send();
        self.machine.handle(Response::reply(r.id, reply), self.now);
        r
    }

    pub fn fail(&mut self, failure: TransportFailure) -> Request {
        let r = self.expect_send();
        self.machine
            .handle(Response::failed(r.id, failure), self.now);
        r
    }

    /// Sleeps through a wait, returning it.
    pub fn sleep_through(&mut self) -> Wait {
        let w = self.expect_wait();
        assert!(w.until >= self.now);
        self.now = w.until;
        w
    }
}

pub(crate) fn ints(items: &[i64]) -> Reply {
    Reply::Array(items.iter().map(|n| Reply::Int(*n)).collect())
}

pub(crate) fn err(code: &str, msg: &str) -> Reply {
    Reply::Error(ErrorReply::new(code, msg))
}
