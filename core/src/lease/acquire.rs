//! Acquiring a lease lock: try once, or wait with backoff until a deadline.

use std::time::{Duration, Instant};

use super::{
    ACQUIRE, Lease, RELEASE, Token, error_from_reply, int_pair, pttl, valid_until, validate_ttl,
};
use crate::backoff::{Backoff, saturating_add};
use crate::command::RequestIds;
use crate::error::{Error, InvalidArgument};
use crate::keys::LockKeys;
use crate::protocol::{Batch, Protocol, Step, Wait, WakeOn};
use crate::reply::{FailureKind, Input, Reply, TransportFailure};
use crate::script::{Exchange, Progress, ScriptCall};

/// How an acquisition behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    /// The lease length. Defaults to 30 s.
    pub ttl: Duration,
    /// `None`: try once. `Some(w)`: retry until `w` has passed since the start. Defaults to `None`.
    pub wait: Option<Duration>,
    /// The first retry pause; it doubles (with jitter) up to `retry_max`. Defaults to 5 ms.
    pub retry_initial: Duration,
    /// The longest retry pause. Defaults to 200 ms.
    pub retry_max: Duration,
    /// How long one attempt may wait for its reply (passed to the driver as the batch
    /// deadline). An attempt started before the wait deadline may end up to this much after
    /// it. Defaults to 1 s.
    pub reply_timeout: Duration,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            ttl: Duration::from_secs(30),
            wait: None,
            retry_initial: Duration::from_millis(5),
            retry_max: Duration::from_millis(200),
            reply_timeout: Duration::from_secs(1),
        }
    }
}

/// What an acquisition yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// The lock is ours.
    Acquired(Lease),
    /// Another holder has it (only when trying once; a waiting acquisition ends with
    /// [`Error::Timeout`] instead).
    Busy {
        /// Time left on the holder's lease (`None`: the key has no expiry).
        holder_ttl: Option<Duration>,
    },
}

#[derive(Debug)]
enum State {
    /// The acquisition call is ready or in flight.
    Trying,
    /// Pausing before the next attempt.
    Waiting {
        until: Instant,
    },
    /// A reply was lost and the acquisition failed: release what we may hold, then fail.
    CleaningUp {
        error: Error,
    },
    Done,
}

/// The acquisition of a lease lock, as a [`Protocol`].
///
/// Sends one script that, atomically, sets the key to our token with the ttl when it is free
/// and increments the fencing counter; when the key already holds our token (a retry after
/// a lost reply) it refreshes the ttl and returns the fence issued before.
#[derive(Debug)]
pub struct Acquire {
    keys: LockKeys,
    token: Token,
    ttl: Duration,
    started: Instant,
    deadline: Option<Instant>,
    reply_timeout: Duration,
    backoff: Backoff,
    ids: RequestIds,
    exchange: Exchange,
    cleanup: Exchange,
    state: State,
    attempts: u32,
    sent_at: Instant,
    lost_reply: bool,
}

impl Acquire {
    /// An acquisition of the lock `keys` by `token`, starting at `now`; `seed` drives the
    /// retry jitter. Fails at once on bad options (nothing is sent).
    pub fn new(
        keys: LockKeys,
        token: Token,
        options: &AcquireOptions,
        seed: u64,
        now: Instant,
    ) -> Result<Self, Error> {
        let ttl_ms = validate_ttl("ttl", options.ttl)?;
        if options.reply_timeout.is_zero() {
            return Err(InvalidArgument::DurationTooShort {
                what: "reply timeout",
                got: options.reply_timeout,
            }
            .into());
        }
        let call = ScriptCall::new(&ACQUIRE)
            .key(&keys.lock)
            .key(&keys.fence)
            .arg(token.as_str())
            .arg(ttl_ms.to_string());
        let cleanup = ScriptCall::new(&RELEASE)
            .key(&keys.lock)
            .arg(token.as_str())
            .arg(&keys.channel);
        let mut exchange = Exchange::new(call);
        exchange.start();
        Ok(Acquire {
            deadline: options.wait.map(|w| saturating_add(now, w)),
            keys,
            token,
            ttl: options.ttl,
            started: now,
            reply_timeout: options.reply_timeout,
            backoff: Backoff::new(options.retry_initial, options.retry_max, seed),
            ids: RequestIds::default(),
            exchange,
            cleanup: Exchange::new(cleanup),
            state: State::Trying,
            attempts: 0,
            sent_at: now,
            lost_reply: false,
        })
    }

    /// The channel a release of this lock is announced on.
    pub fn channel(&self) -> &str {
        &self.keys.channel
    }

    fn batch(&self, request: crate::command::Request, now: Instant) -> Step<Acquisition> {
        Step::Send(Batch {
            requests: vec![request],
            deadline: saturating_add(now, self.reply_timeout),
        })
    }

    fn finish(&mut self, result: Result<Acquisition, Error>) -> Step<Acquisition> {
        self.state = State::Done;
        Step::Done(result)
    }

    /// Fails, first releasing the key if an attempt may have set it.
    fn fail(&mut self, error: Error) -> Option<Step<Acquisition>> {
        if self.lost_reply {
            self.cleanup.start();
            self.state = State::CleaningUp { error };
            None
        } else {
            Some(self.finish(Err(error)))
        }
    }

    fn pause(&mut self, now: Instant, cap: Option<Duration>) -> Option<Step<Acquisition>> {
        let deadline = self.deadline?;
        let mut delay = self.backoff.next_delay();
        if let Some(cap) = cap {
            // The holder's lease ends by then at the latest.
            delay = delay.min(cap.max(Duration::from_millis(1)));
        }
        let until = saturating_add(now, delay).min(deadline);
        self.state = State::Waiting { until };
        Some(Step::Wait(Wait {
            until,
            wake_on: Some(WakeOn::any(&self.keys.channel)),
        }))
    }

    fn on_reply(&mut self, reply: Reply, now: Instant) -> Option<Step<Acquisition>> {
        if let Reply::Error(e) = reply {
            let err = error_from_reply(&self.keys, e);
            return self.fail(err);
        }
        match int_pair(&reply) {
            Some((1, fence)) if fence > 0 => {
                let lease = Lease {
                    keys: self.keys.clone(),
                    token: self.token.clone(),
                    fence: fence as u64,
                    ttl: self.ttl,
                    acquired_at: self.sent_at,
                    attempts: self.attempts,
                    valid_until: valid_until(self.sent_at, self.ttl),
                };
                Some(self.finish(Ok(Acquisition::Acquired(lease))))
            }
            Some((0, ms)) => {
                let holder_ttl = pttl(ms);
                match self.deadline {
                    None => Some(self.finish(Ok(Acquisition::Busy { holder_ttl }))),
                    Some(deadline) if now >= deadline => {
                        let err = Error::Timeout {
                            name: self.keys.name.clone(),
                            waited: now.saturating_duration_since(self.started),
                            attempts: self.attempts,
                        };
                        self.fail(err)
                    }
                    Some(_) => self.pause(now, holder_ttl),
                }
            }
            _ => self.fail(Error::UnexpectedReply {
                context: "lease acquisition",
                reply: reply.describe(),
            }),
        }
    }

    fn on_failure(&mut self, failure: TransportFailure, now: Instant) -> Option<Step<Acquisition>> {
        let lost = failure.kind == FailureKind::NoReply;
        self.lost_reply |= lost;
        let retry = match self.deadline {
            Some(deadline) => now < deadline,
            // Trying once: a lost reply is resolved by asking once more (the script knows
            // our token); a command that never left is not retried.
            None => lost && self.attempts < 2,
        };
        if !retry {
            return self.fail(Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            });
        }
        match self.pause(now, None) {
            Some(step) => Some(step),
            None => {
                self.exchange.start();
                None
            }
        }
    }
}

impl Protocol for Acquire {
    type Output = Acquisition;

    fn poll(&mut self, now: Instant) -> Step<Acquisition> {
        loop {
            match &self.state {
                State::Done => return Step::Done(Err(Error::Finished)),
                State::Waiting { until } => {
                    if now < *until {
                        return Step::Wait(Wait {
                            until: *until,
                            wake_on: Some(WakeOn::any(&self.keys.channel)),
                        });
                    }
                    self.state = State::Trying;
                    self.exchange.start();
                }
                State::CleaningUp { .. } => match self.cleanup.poll(&mut self.ids) {
                    Progress::Send(request) => return self.batch(request, now),
                    Progress::Awaiting => return Step::Awaiting,
                    // Whatever the cleanup's outcome, report the failure that caused it.
                    Progress::Answered(_) | Progress::Idle => {
                        let state = std::mem::replace(&mut self.state, State::Done);
                        let error = match state {
                            State::CleaningUp { error } => error,
                            _ => Error::Finished,
                        };
                        return Step::Done(Err(error));
                    }
                },
                State::Trying => {
                    let step = match self.exchange.poll(&mut self.ids) {
                        Progress::Send(request) => {
                            if request.command.name() == "EVALSHA" {
                                self.attempts += 1;
                            }
                            self.sent_at = now;
                            return self.batch(request, now);
                        }
                        Progress::Awaiting => return Step::Awaiting,
                        Progress::Answered(Ok(reply)) => self.on_reply(reply, now),
                        Progress::Answered(Err(failure)) => self.on_failure(failure, now),
                        Progress::Idle => Some(self.finish(Err(Error::Finished))),
                    };
                    if let Some(step) = step {
                        return step;
                    }
                }
            }
        }
    }

    fn wake(&mut self, _now: Instant) {
        if let State::Waiting { .. } = self.state {
            self.state = State::Trying;
            self.exchange.start();
        }
    }

    fn handle(&mut self, input: Input, _now: Instant) {
        match self.state {
            State::CleaningUp { .. } => self.cleanup.handle(input),
            _ => self.exchange.handle(input),
        };
    }
}
