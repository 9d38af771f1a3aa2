//! Giving back what an abandoned acquisition may hold.
//!
//! An acquisition that ends by itself cleans up after itself ([`Acquire`](super::Acquire)
//! undoes a lost attempt, leaves a line it joined). One that is abandoned half-way cannot: a
//! driver drops the machine (an async future dropped by a `timeout` or a `select!`, an
//! aborted task, a shutdown) while a request it sent may already have run on the server.
//! [`Undo`] is the step such a driver runs instead.

use std::time::{Duration, Instant};

use super::{LockSpec, Target, error_from_reply};
use crate::command::RequestIds;
use crate::error::Error;
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{Reply, Response, TransportFailure};
use crate::script::{Exchange, Progress};

use super::ops::MAX_ATTEMPTS;

/// The first pause before resending a call whose reply was lost (doubles each time).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// The undo of an acquisition that was abandoned before it finished, as a [`Protocol`].
///
/// Made from the [`LockSpec`] the acquisition was made with (keep a clone, or rebuild it
/// with the same token). It sends, in one batch, the spec's owner-checked calls:
///
/// - [`LockSpec::undo`]: releases the hold this token may have been granted (for a
///   reentrant lock only the hold this very acquisition counted, never an outer one), and
///   records the token as undone for [`UNDONE_KEEP`](super::UNDONE_KEEP), so that an attempt
///   still in flight that reaches Redis afterwards takes nothing (an unfenced lease lock's
///   bare `SET NX PX` excepted: see [`LockSpec::fenced`]);
/// - [`LockSpec::cancel`]: leaves the line a waiting acquisition may have joined (fair
///   lock, waiting writers, semaphore waiters).
///
/// Both are idempotent and harmless when there is nothing to undo (an acquisition that
/// never sent anything, or was refused), so a lost reply is sent again, up to 3 times
/// per call before `deadline`.
///
/// Yields `Ok(())` once every call was answered: whatever the abandoned acquisition held is
/// given back, and the lock is free for the next holder now. `Err(Error::Unavailable)` when
/// a call could not be answered by `deadline`: what it may hold then ends with its ttl (a
/// place in a line with its waiter timeout), never later, and never with two holders.
/// An error reply (a key of the wrong type) yields its error.
///
/// ```
/// use std::time::{Duration, Instant};
/// use redlease_core::{Protocol, Reply, Response, Step};
/// use redlease_core::keys::Keyspace;
/// use redlease_core::lease::{Acquire, AcquireOptions, LockSpec, Token, Undo};
///
/// let spec = LockSpec::lease(&Keyspace::default(), "report", Token::from_random([7; 16]),
///     Duration::from_secs(30)).unwrap();
/// let now = Instant::now();
/// let mut acquire = Acquire::new(spec.clone(), &AcquireOptions::default(), 1, now).unwrap();
/// // The attempt is sent ...
/// let Step::Send(_attempt) = acquire.poll(now) else { unreachable!() };
/// // ... and the acquisition is abandoned before its reply: the undo gives back what the
/// // attempt may have taken.
/// drop(acquire);
/// let mut undo = Undo::new(&spec, now + Duration::from_secs(2));
/// let Step::Send(batch) = undo.poll(now) else { unreachable!() };
/// assert_eq!(batch.requests.len(), 1); // a lease lock has no line to leave
/// undo.handle(Response::reply(batch.requests[0].id, Reply::Int(1)), now); // released
/// assert!(matches!(undo.poll(now), Step::Done(Ok(()))));
/// ```
#[derive(Debug)]
pub struct Undo {
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    target: Target,
    calls: Vec<Call>,
    ids: RequestIds,
    deadline: Instant,
    /// When the calls whose reply was lost are sent again.
    retry_at: Option<Instant>,
    pause: Duration,
    /// The first error reply, or the last failure of a call that gave up.
    error: Option<Error>,
    done: bool,
}

#[derive(Debug)]
struct Call {
    exchange: Exchange,
    attempts: u32,
    /// Answered, or given up.
    settled: bool,
    /// Its last attempt failed; it goes again at `retry_at`.
    retry: bool,
}

impl Undo {
    /// The undo of an acquisition of `spec`, giving up at `deadline`.
    pub fn new(spec: &LockSpec, deadline: Instant) -> Self {
        let calls = spec
            .undo
            .iter()
            .chain(&spec.cancel)
            .map(|call| {
                let mut exchange = Exchange::new(call.clone());
                exchange.start();
                Call {
                    exchange,
                    attempts: 0,
                    settled: false,
                    retry: false,
                }
            })
            .collect();
        Undo {
            outstanding: Outstanding::default(),
            target: spec.target.clone(),
            calls,
            ids: RequestIds::default(),
            deadline,
            retry_at: None,
            pause: RETRY_PAUSE,
            error: None,
            done: false,
        }
    }

    /// A call failed to get an answer: send it again at the next retry, unless it ran out
    /// of attempts or of time.
    fn failed(&mut self, i: usize, failure: TransportFailure, now: Instant) {
        let Some(call) = self.calls.get_mut(i) else {
            return;
        };
        if call.attempts >= MAX_ATTEMPTS || now + self.pause >= self.deadline {
            call.settled = true;
            if self.error.is_none() {
                self.error = Some(Error::Unavailable {
                    attempts: call.attempts,
                    last: failure,
                });
            }
        } else {
            call.retry = true;
        }
    }

    fn next_step(&mut self, now: Instant) -> Step<()> {
        if self.done {
            return Step::Done(Err(Error::Finished));
        }
        if let Some(at) = self.retry_at {
            if now < at {
                return Step::Wait(Wait::until(at));
            }
            self.retry_at = None;
            for call in self.calls.iter_mut().filter(|c| c.retry) {
                call.retry = false;
                call.exchange.start();
            }
        }
        let mut requests = Vec::new();
        let mut awaiting = false;
        for i in 0..self.calls.len() {
            let Some(call) = self.calls.get_mut(i) else {
                break;
            };
            if call.settled || call.retry {
                continue;
            }
            match call.exchange.poll(&mut self.ids) {
                Progress::Send(request) => {
                    if request.command.is("EVALSHA") || call.attempts == 0 {
                        call.attempts += 1;
                    }
                    requests.push(request);
                }
                Progress::Awaiting => awaiting = true,
                // Refused for a passing reason (a failover): it did not run; try again.
                Progress::Answered(Ok(Reply::Error(e))) if e.is_transient() => {
                    self.failed(i, TransportFailure::not_sent(e.to_string()), now);
                }
                Progress::Answered(Ok(Reply::Error(e))) => {
                    call.settled = true;
                    if self.error.is_none() {
                        self.error = Some(error_from_reply(&self.target, e));
                    }
                }
                // Released, or nothing to release: either way nothing of ours is left.
                Progress::Answered(Ok(_)) | Progress::Idle => call.settled = true,
                Progress::Answered(Err(failure)) => self.failed(i, failure, now),
            }
        }
        if !requests.is_empty() {
            return Step::Send(Batch::new(requests, self.deadline));
        }
        if awaiting {
            return self.outstanding.step(now);
        }
        if self.calls.iter().any(|c| c.retry) {
            let at = now + self.pause;
            self.pause *= 2;
            self.retry_at = Some(at);
            return Step::Wait(Wait::until(at));
        }
        self.done = true;
        Step::Done(self.error.take().map_or(Ok(()), Err))
    }
}

impl Protocol for Undo {
    type Output = ();

    fn poll(&mut self, now: Instant) -> Step<()> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn handle(&mut self, response: Response, _now: Instant) {
        for call in &mut self.calls {
            if call.exchange.handle(response.clone()) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailureKind;
    use crate::keys::Keyspace;
    use crate::lease::{Acquire, AcquireOptions, Token};
    use crate::reply::ErrorReply;

    fn token() -> Token {
        Token::from_random([3; 16])
    }

    fn fair() -> LockSpec {
        let ttl = Duration::from_secs(30);
        LockSpec::fair(
            &Keyspace::default(),
            "f",
            token(),
            ttl,
            Duration::from_secs(5),
        )
        .unwrap()
    }

    fn send(undo: &mut Undo, now: Instant) -> Batch {
        match undo.poll(now) {
            Step::Send(batch) => batch,
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn sends_the_specs_undo_and_cancel_with_its_token() {
        let spec = fair();
        let now = crate::testing::origin();
        let mut undo = Undo::new(&spec, now + Duration::from_secs(1));
        let batch = send(&mut undo, now);
        let undo_call = spec.undo.as_ref().unwrap().evalsha();
        let cancel_call = spec.cancel.as_ref().unwrap().evalsha();
        let sent: Vec<_> = batch.requests.iter().map(|r| r.command.clone()).collect();
        assert_eq!(sent, [undo_call, cancel_call]);
        assert!(
            sent.iter()
                .all(|c| c.args().any(|a| a == token().as_str().as_bytes())),
            "{sent:?}"
        );
        for r in &batch.requests {
            undo.handle(Response::reply(r.id, Reply::Int(0)), now);
        }
        assert!(matches!(undo.poll(now), Step::Done(Ok(()))));
        assert!(matches!(undo.poll(now), Step::Done(Err(Error::Finished))));
    }

    #[test]
    fn a_lost_reply_is_sent_again_and_unanswered_calls_give_up_by_the_deadline() {
        let spec =
            LockSpec::lease(&Keyspace::default(), "l", token(), Duration::from_secs(9)).unwrap();
        let now = crate::testing::origin();
        let mut undo = Undo::new(&spec, now + Duration::from_secs(1));
        let first = send(&mut undo, now);
        let lost = TransportFailure::no_reply("timed out");
        undo.handle(Response::failed(first.requests[0].id, lost.clone()), now);
        let Step::Wait(wait) = undo.poll(now) else {
            panic!("a lost reply waits, then resends")
        };
        assert!(wait.until > now && wait.wake_on.is_none());
        let again = send(&mut undo, wait.until);
        assert_eq!(again.requests[0].command, first.requests[0].command);
        undo.handle(
            Response::reply(again.requests[0].id, Reply::Int(1)),
            wait.until,
        );
        assert!(matches!(undo.poll(wait.until), Step::Done(Ok(()))));

        // Never answered: at most MAX_ATTEMPTS sends, then Unavailable.
        let mut undo = Undo::new(&spec, now + Duration::from_secs(10));
        let mut t = now;
        let mut sends = 0;
        let result = loop {
            match undo.poll(t) {
                Step::Send(batch) => {
                    sends += 1;
                    for r in &batch.requests {
                        undo.handle(Response::failed(r.id, lost.clone()), t);
                    }
                }
                Step::Wait(w) => t = w.until,
                Step::Done(result) => break result,
            }
        };
        assert_eq!(sends, MAX_ATTEMPTS);
        assert!(
            matches!(&result, Err(Error::Unavailable { attempts, last })
                if *attempts == MAX_ATTEMPTS && last.kind == FailureKind::NoReply),
            "{result:?}"
        );
    }

    #[test]
    fn noscript_is_resent_as_eval_and_an_error_reply_is_reported() {
        let spec = fair();
        let now = crate::testing::origin();
        let mut undo = Undo::new(&spec, now + Duration::from_secs(1));
        let batch = send(&mut undo, now);
        let noscript = ErrorReply::new("NOSCRIPT", "No matching script.");
        undo.handle(
            Response::reply(batch.requests[0].id, Reply::Error(noscript)),
            now,
        );
        let wrongtype = ErrorReply::new("WRONGTYPE", "Operation against a key");
        undo.handle(
            Response::reply(batch.requests[1].id, Reply::Error(wrongtype)),
            now,
        );
        let eval = send(&mut undo, now);
        assert_eq!(eval.requests.len(), 1);
        assert!(eval.requests[0].command.is("EVAL"));
        undo.handle(Response::reply(eval.requests[0].id, Reply::Int(1)), now);
        let Step::Done(Err(e)) = undo.poll(now) else {
            panic!("the wrong type is reported")
        };
        assert!(matches!(e, Error::WrongType { .. }), "{e:?}");
    }

    /// The undo of an acquisition whose reply never came: the machine was dropped with its
    /// attempt in flight, so only the spec is left.
    #[test]
    fn undoes_a_dropped_acquisitions_attempt() {
        let spec = fair();
        let now = crate::testing::origin();
        let options = AcquireOptions {
            wait: Some(Duration::from_secs(5)),
            ..AcquireOptions::default()
        };
        let mut acquire = Acquire::new(spec.clone(), &options, 1, now).unwrap();
        let Step::Send(attempt) = acquire.poll(now) else {
            panic!("the first attempt")
        };
        drop(acquire);
        let mut undo = Undo::new(&spec, now + Duration::from_secs(1));
        let batch = send(&mut undo, now);
        // The same token as the attempt's.
        let token = token();
        let has_token = |c: &crate::Command| c.args().any(|a| a == token.as_str().as_bytes());
        assert!(has_token(&attempt.requests[0].command));
        assert!(batch.requests.iter().all(|r| has_token(&r.command)));
    }
}
