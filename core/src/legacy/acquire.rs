//! Acquiring a legacy lock: try once, or wait with backoff until a deadline. What the two
//! algorithms do once `SETNX` found the key taken is in [`getset`] and [`setnx_expire`].

mod getset;
mod setnx_expire;

use std::time::{Duration, Instant};

use super::{
    InFlight, LegacyAlgorithm, LegacyKeys, LegacyLease, LegacyRelease, WallClock, error_from_reply,
    getset_value,
};
use crate::backoff::{Backoff, saturating_add};
use crate::command::{Command, Request};
use crate::error::Error;
use crate::lease::{Token, valid_until, validate_ttl};
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};

/// How many `SETNX` are sent in a row, without a pause, when the key keeps vanishing between
/// the `SETNX` that found it and the read that follows (a lock released at that moment).
const MAX_QUICK_ATTEMPTS: u32 = 3;

/// How a legacy acquisition behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyOptions {
    /// The algorithm. Defaults to [`LegacyAlgorithm::GetSet`].
    pub algorithm: LegacyAlgorithm,
    /// The lock's length. Defaults to 30 s.
    pub ttl: Duration,
    /// `None`: try once. `Some(w)`: retry until `w` has passed since the start. Defaults to `None`.
    pub wait: Option<Duration>,
    /// The first retry pause; it doubles (with jitter) up to `retry_max`. Defaults to 5 ms.
    pub retry_initial: Duration,
    /// The longest retry pause. Defaults to 200 ms.
    pub retry_max: Duration,
    /// How long one round trip may wait for its replies (the batch deadline). An attempt
    /// started before the wait deadline may end a few round trips after it. Defaults to 1 s.
    pub reply_timeout: Duration,
}

impl Default for LegacyOptions {
    fn default() -> Self {
        LegacyOptions {
            algorithm: LegacyAlgorithm::GetSet,
            ttl: Duration::from_secs(30),
            wait: None,
            retry_initial: Duration::from_millis(5),
            retry_max: Duration::from_millis(200),
            reply_timeout: Duration::from_secs(1),
        }
    }
}

/// What a legacy acquisition yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyAcquisition {
    /// The lock is ours.
    Acquired(LegacyLease),
    /// Another holder has it (only when trying once; a waiting acquisition ends with
    /// [`Error::Timeout`] instead).
    Busy {
        /// Time left on the holder's lock, by its timestamp (GetSet) or Redis's ttl
        /// (SetNxExpire); `None` when unknown (the key kept changing under us).
        holder_ttl: Option<Duration>,
    },
}

/// Where an acquisition stands. The phases with a request in flight keep what they need to
/// read its answer.
#[derive(Debug)]
enum Phase {
    /// The next thing to send is a `SETNX` (a new attempt).
    Start,
    /// `SETNX key value` is in flight.
    SetNx {
        value: String,
        sent_at: Instant,
    },
    /// GetSet: `GET key` is in flight. SetNxExpire: `GET key` and `PTTL key`.
    Inspect {
        sent_at: Instant,
    },
    /// GetSet: `GETSET key value` is in flight, to take over the expired value `read`.
    TakeOver {
        read: Vec<u8>,
        value: String,
        sent_at: Instant,
    },
    /// SetNxExpire: `PEXPIRE key ttl` on our own key, valid from `from`.
    Expire {
        from: Instant,
    },
    /// SetNxExpire: `PEXPIRE key ttl` on a holder's key that had none.
    Repair,
    /// Pausing before the next attempt.
    Waiting {
        until: Instant,
    },
    /// An attempt may have written our value and the acquisition failed: release what we may
    /// hold (owner-checked), then fail with `error`.
    CleaningUp {
        release: Box<LegacyRelease>,
        error: Error,
    },
    Done,
}

/// The acquisition of a legacy lock, as a [`Protocol`] (either algorithm; see the
/// [module docs](super) for both state graphs).
///
/// A `SETNX` whose reply was lost is resolved exactly: the next attempt reads the key and, when
/// it holds the value that `SETNX` carried, the lock is ours (`SETNX` only writes a free key).
/// A `GETSET` whose reply was lost is never claimed (it may have lost the takeover). When the
/// acquisition fails after a `SETNX` that may have written, it first releases that value
/// (owner-checked, best effort) so that it does not block the lock.
#[derive(Debug)]
pub struct LegacyAcquire {
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    keys: LegacyKeys,
    token: Token,
    algorithm: LegacyAlgorithm,
    ttl: Duration,
    ttl_ms: u64,
    clock: WallClock,
    started: Instant,
    deadline: Option<Instant>,
    reply_timeout: Duration,
    backoff: Backoff,
    inflight: InFlight,
    phase: Phase,
    attempts: u32,
    /// `SETNX` sent in a row without a pause.
    quick: u32,
    /// Transport failures retried at once (when trying once).
    retried: u32,
    /// GetSet: the values of `SETNX` whose reply was lost, with their send times.
    unconfirmed: Vec<(String, Instant)>,
    /// SetNxExpire: a `SETNX` of our token may have written (or did write) the key.
    wrote_token: bool,
}

impl LegacyAcquire {
    /// An acquisition of the lock `keys` by `token`, starting at `now`, when the Unix time
    /// is `unix_ms`; `seed` drives the retry jitter. Fails at once on bad options (nothing
    /// is sent).
    pub fn new(
        keys: LegacyKeys,
        token: Token,
        options: &LegacyOptions,
        seed: u64,
        now: Instant,
        unix_ms: u64,
    ) -> Result<Self, Error> {
        let ttl_ms = validate_ttl("ttl", options.ttl)?;
        crate::limits::timeout("reply timeout", options.reply_timeout)?;
        crate::limits::retry("retry", options.retry_initial, options.retry_max)?;
        Ok(LegacyAcquire {
            outstanding: Outstanding::default(),
            keys,
            token,
            algorithm: options.algorithm,
            ttl: options.ttl,
            ttl_ms,
            clock: WallClock::new(now, unix_ms),
            started: now,
            deadline: options
                .wait
                .map(|w| saturating_add(now, crate::limits::wait(w))),
            reply_timeout: options.reply_timeout,
            backoff: Backoff::new(options.retry_initial, options.retry_max, seed),
            inflight: InFlight::default(),
            phase: Phase::Start,
            attempts: 0,
            quick: 0,
            retried: 0,
            unconfirmed: Vec::new(),
            wrote_token: false,
        })
    }

    /// The lock's keys.
    pub fn keys(&self) -> &LegacyKeys {
        &self.keys
    }

    fn command(&self, name: &str) -> Command {
        Command::new(name).arg(&self.keys.lock)
    }

    fn pexpire(&self) -> Command {
        self.command("PEXPIRE").int_arg(self.ttl_ms)
    }

    /// Our value for a write sent at `now`.
    fn value_at(&self, now: Instant) -> String {
        match self.algorithm {
            LegacyAlgorithm::GetSet => getset_value(
                self.clock.unix_ms_at(now).saturating_add(self.ttl_ms),
                &self.token,
            ),
            LegacyAlgorithm::SetNxExpire => self.token.as_str().to_owned(),
        }
    }

    fn send(
        &mut self,
        phase: Phase,
        commands: Vec<Command>,
        now: Instant,
    ) -> Step<LegacyAcquisition> {
        let requests: Vec<Request> = self.inflight.start(commands);
        self.phase = phase;
        Step::Send(Batch::new(
            requests,
            saturating_add(now, self.reply_timeout),
        ))
    }

    fn finish(&mut self, result: Result<LegacyAcquisition, Error>) -> Step<LegacyAcquisition> {
        self.phase = Phase::Done;
        Step::Done(result)
    }

    fn acquired(
        &mut self,
        value: String,
        sent_at: Instant,
        valid: Instant,
    ) -> Step<LegacyAcquisition> {
        let lease = LegacyLease {
            keys: self.keys.clone(),
            algorithm: self.algorithm,
            token: self.token.clone(),
            value,
            ttl: self.ttl,
            acquired_at: sent_at,
            attempts: self.attempts,
            valid_until: valid,
        };
        self.finish(Ok(LegacyAcquisition::Acquired(lease)))
    }

    /// Whether an attempt may have left our value in the key.
    fn may_hold(&self) -> bool {
        match self.algorithm {
            LegacyAlgorithm::GetSet => !self.unconfirmed.is_empty(),
            LegacyAlgorithm::SetNxExpire => self.wrote_token,
        }
    }

    /// Fails, first releasing the values an attempt may have written.
    fn fail(&mut self, error: Error, now: Instant) -> Option<Step<LegacyAcquisition>> {
        if !self.may_hold() {
            return Some(self.finish(Err(error)));
        }
        let candidates = match self.algorithm {
            LegacyAlgorithm::GetSet => self.unconfirmed.iter().map(|(v, _)| v.clone()).collect(),
            LegacyAlgorithm::SetNxExpire => vec![self.token.as_str().to_owned()],
        };
        let release = LegacyRelease::cleanup(
            self.keys.clone(),
            self.algorithm,
            candidates,
            self.clock,
            saturating_add(now, self.reply_timeout),
            self.inflight.ids(),
        );
        self.phase = Phase::CleaningUp {
            release: Box::new(release),
            error,
        };
        None
    }

    fn unexpected(
        &mut self,
        context: &'static str,
        reply: &Reply,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        self.fail(
            Error::UnexpectedReply {
                context,
                reply: reply.describe(),
            },
            now,
        )
    }

    fn pause(&mut self, now: Instant, cap: Option<Duration>) -> Option<Step<LegacyAcquisition>> {
        let deadline = self.deadline?;
        let mut delay = self.backoff.next_delay();
        if let Some(cap) = cap {
            // The holder's lock ends by then at the latest.
            delay = delay.min(cap.max(Duration::from_millis(1)));
        }
        let until = saturating_add(now, delay).min(deadline);
        self.quick = 0;
        self.phase = Phase::Waiting { until };
        Some(Step::Wait(Wait::until(until)))
    }

    /// Another holder has the lock: report it, time out, or pause.
    fn busy(
        &mut self,
        holder_ttl: Option<Duration>,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        match self.deadline {
            None => Some(self.finish(Ok(LegacyAcquisition::Busy { holder_ttl }))),
            Some(deadline) if now >= deadline => {
                let error = Error::Timeout {
                    name: self.keys.name.clone(),
                    waited: now.saturating_duration_since(self.started),
                    attempts: self.attempts,
                };
                self.fail(error, now)
            }
            Some(_) => self.pause(now, holder_ttl),
        }
    }

    /// The key vanished under us: try again at once, a few times, then count it as busy.
    fn again(&mut self, now: Instant) -> Option<Step<LegacyAcquisition>> {
        if self.quick < MAX_QUICK_ATTEMPTS {
            self.phase = Phase::Start;
            None
        } else {
            self.busy(None, now)
        }
    }

    fn on_failure(
        &mut self,
        failure: TransportFailure,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        let lost = failure.kind == FailureKind::NoReply;
        let retry = match self.deadline {
            Some(deadline) => now < deadline,
            // Trying once: an unknown outcome is resolved by asking once more (the retry
            // recognises our own value); a command that surely never ran is not retried.
            None => (lost || self.may_hold()) && self.retried == 0,
        };
        if !retry {
            let error = Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            };
            return self.fail(error, now);
        }
        self.retried += 1;
        match self.pause(now, None) {
            Some(step) => Some(step),
            None => {
                self.phase = Phase::Start;
                None
            }
        }
    }

    /// Reads the answers of the step that was in flight in `phase`.
    fn on_outcome(
        &mut self,
        phase: Phase,
        mut results: Vec<Result<Reply, TransportFailure>>,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        // A transport failure of any request of the step decides it.
        if let Some(pos) = results.iter().position(Result::is_err)
            && let Err(failure) = results.swap_remove(pos)
        {
            if let (Phase::SetNx { value, sent_at }, FailureKind::NoReply) = (&phase, failure.kind)
            {
                match self.algorithm {
                    LegacyAlgorithm::GetSet => self.unconfirmed.push((value.clone(), *sent_at)),
                    LegacyAlgorithm::SetNxExpire => self.wrote_token = true,
                }
            }
            return self.on_failure(failure, now);
        }
        let mut replies = results.into_iter().filter_map(Result::ok);
        let first = replies.next();
        let second = replies.next();
        // An error reply to any request of the step decides it too.
        for reply in [&first, &second].into_iter().flatten() {
            if let Reply::Error(e) = reply {
                let error = error_from_reply(&self.keys, e.clone());
                return self.fail(error, now);
            }
        }
        let Some(reply) = first else {
            return self.fail(Error::Driver("a step was answered with no replies"), now);
        };
        match phase {
            Phase::SetNx { value, sent_at } => self.on_setnx(reply, value, sent_at, now),
            Phase::Inspect { sent_at } => match self.algorithm {
                LegacyAlgorithm::GetSet => self.on_get(reply, sent_at, now),
                LegacyAlgorithm::SetNxExpire => match second {
                    Some(pttl) => self.on_get_pttl(reply, pttl, sent_at, now),
                    None => self.fail(Error::Driver("PTTL was not answered"), now),
                },
            },
            Phase::TakeOver {
                read,
                value,
                sent_at,
            } => self.on_getset(reply, read, value, sent_at, now),
            Phase::Expire { from } => match reply.as_int() {
                Some(1) => Some(self.acquired(
                    self.token.as_str().to_owned(),
                    from,
                    valid_until(from, self.ttl),
                )),
                // The key vanished between SETNX and PEXPIRE: it is free again.
                Some(0) => self.again(now),
                _ => self.unexpected("legacy lock expiry (PEXPIRE)", &reply, now),
            },
            Phase::Repair => match reply.as_int() {
                // 1: repaired; 0: the key went away meanwhile. Busy either way.
                Some(0 | 1) => self.busy(Some(self.ttl), now),
                _ => self.unexpected("legacy lock repair (PEXPIRE)", &reply, now),
            },
            Phase::Start | Phase::Waiting { .. } | Phase::CleaningUp { .. } | Phase::Done => {
                Some(self.finish(Err(Error::Finished)))
            }
        }
    }

    fn on_setnx(
        &mut self,
        reply: Reply,
        value: String,
        sent_at: Instant,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        match (reply.as_int(), self.algorithm) {
            (Some(1), LegacyAlgorithm::GetSet) => {
                Some(self.acquired(value, sent_at, valid_until(sent_at, self.ttl)))
            }
            (Some(1), LegacyAlgorithm::SetNxExpire) => {
                // Ours, but without expiry until the PEXPIRE lands: a crash now leaves the
                // key for a contender to repair.
                self.wrote_token = true;
                let pexpire = self.pexpire();
                Some(self.send(Phase::Expire { from: sent_at }, vec![pexpire], now))
            }
            (Some(0), LegacyAlgorithm::GetSet) => {
                let get = self.command("GET");
                Some(self.send(Phase::Inspect { sent_at: now }, vec![get], now))
            }
            (Some(0), LegacyAlgorithm::SetNxExpire) => {
                let (get, pttl) = (self.command("GET"), self.command("PTTL"));
                Some(self.send(Phase::Inspect { sent_at: now }, vec![get, pttl], now))
            }
            _ => {
                // Not understood: the SETNX may have written our value; clean it up (only a
                // value of ours is deleted) before failing.
                match self.algorithm {
                    LegacyAlgorithm::GetSet => self.unconfirmed.push((value, sent_at)),
                    LegacyAlgorithm::SetNxExpire => self.wrote_token = true,
                }
                self.unexpected("legacy lock acquisition (SETNX)", &reply, now)
            }
        }
    }
}

impl LegacyAcquire {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<LegacyAcquisition> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return Step::Done(Err(Error::Finished)),
                Phase::Waiting { until } => {
                    if now < until {
                        self.phase = Phase::Waiting { until };
                        return Step::Wait(Wait::until(until));
                    }
                    self.phase = Phase::Start;
                }
                Phase::Start => {
                    self.attempts += 1;
                    self.quick += 1;
                    let value = self.value_at(now);
                    let setnx = self.command("SETNX").arg(&value);
                    return self.send(
                        Phase::SetNx {
                            value,
                            sent_at: now,
                        },
                        vec![setnx],
                        now,
                    );
                }
                Phase::CleaningUp { mut release, error } => match release.poll(now) {
                    // Whatever the cleanup's outcome, report the failure that caused it.
                    Step::Done(_) => return self.finish(Err(error)),
                    step => {
                        self.phase = Phase::CleaningUp { release, error };
                        return match step {
                            Step::Send(batch) => Step::Send(batch),
                            Step::Wait(wait) => Step::Wait(wait),
                            _ => self.outstanding.step(now),
                        };
                    }
                },
                phase => match self.inflight.take() {
                    None => {
                        self.phase = phase;
                        return self.outstanding.step(now);
                    }
                    Some(results) => {
                        if let Some(step) = self.on_outcome(phase, results, now) {
                            return step;
                        }
                    }
                },
            }
        }
    }
}

impl Protocol for LegacyAcquire {
    type Output = LegacyAcquisition;

    fn poll(&mut self, now: Instant) -> Step<LegacyAcquisition> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn handle(&mut self, input: Response, now: Instant) {
        match &mut self.phase {
            Phase::CleaningUp { release, .. } => release.handle(input, now),
            _ => self.inflight.handle(input),
        }
    }
}
