//! [`Throttle`]: take units, waiting for them up to a deadline (see the
//! [module](super) for its graph).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Decision, RateLimiterSpec, Take, name_of};
use crate::backoff::saturating_add;
use crate::error::Error;
use crate::lease::ScriptOp;
use crate::protocol::{Protocol, Step, Wait};
use crate::reply::Response;
use crate::script::ScriptCall;

/// Takes `cost` units of a limiter, waiting for them: each denial says when the units are
/// due (`retry_after`), and the machine sleeps exactly until then before it asks again, or
/// fails at once with [`Error::Timeout`] when that is past its deadline. Yields the
/// allowing [`Decision`].
#[derive(Debug)]
pub struct Throttle {
    name: Arc<str>,
    call: ScriptCall,
    spec_target: crate::lease::Target,
    started: Instant,
    /// `None`: no deadline (the wait does not fit in an `Instant`).
    deadline: Option<Instant>,
    op_timeout: Duration,
    attempts: u32,
    state: State,
}

#[derive(Debug)]
enum State {
    Attempt(Box<ScriptOp<Take>>),
    Waiting(Instant),
    Done,
}

impl Throttle {
    /// Takes `cost` units (0 to the burst; more is refused here) of the limiter `spec`,
    /// waiting at most `wait` from `now` for them (a wait too long for an `Instant`, such as
    /// `Duration::MAX`, means no deadline). Each attempt's reply is awaited at most
    /// `op_timeout`.
    pub fn new(
        spec: &RateLimiterSpec,
        cost: u64,
        wait: Duration,
        op_timeout: Duration,
        now: Instant,
    ) -> Result<Self, Error> {
        spec.check_cost(cost)?;
        crate::limits::timeout("op timeout", op_timeout)?;
        let call = spec.decide(cost, false);
        let mut throttle = Throttle {
            name: name_of(spec),
            spec_target: spec.target.clone(),
            call,
            started: now,
            deadline: now.checked_add(wait),
            op_timeout,
            attempts: 0,
            state: State::Done,
        };
        throttle.state = throttle.attempt(now);
        Ok(throttle)
    }

    fn attempt(&mut self, now: Instant) -> State {
        self.attempts += 1;
        let reply_by = saturating_add(now, self.op_timeout);
        State::Attempt(Box::new(ScriptOp::new(
            Take,
            self.call.clone(),
            self.spec_target.clone(),
            None,
            reply_by,
        )))
    }

    fn denied(&mut self, decision: &Decision, now: Instant) -> Step<Decision> {
        let due = saturating_add(now, decision.retry_after);
        if self.deadline.is_some_and(|deadline| due > deadline) {
            self.state = State::Done;
            return Step::Done(Err(Error::Timeout {
                name: self.name.to_string(),
                waited: now.saturating_duration_since(self.started),
                attempts: self.attempts,
            }));
        }
        self.state = State::Waiting(due);
        Step::Wait(Wait::until(due))
    }
}

impl Protocol for Throttle {
    type Output = Decision;

    fn poll(&mut self, now: Instant) -> Step<Decision> {
        if let State::Waiting(until) = self.state {
            if now < until {
                return Step::Wait(Wait::until(until));
            }
            self.state = self.attempt(now);
        }
        let State::Attempt(op) = &mut self.state else {
            return Step::Done(Err(Error::Finished));
        };
        match op.poll(now) {
            Step::Done(Ok(decision)) if !decision.allowed => self.denied(&decision, now),
            Step::Done(result) => {
                self.state = State::Done;
                Step::Done(result)
            }
            step => step,
        }
    }

    fn handle(&mut self, response: Response, now: Instant) {
        if let State::Attempt(op) = &mut self.state {
            op.handle(response, now);
        }
    }
}
