//! Acquiring a RedLock: one round on every node, counted against the quorum.

use std::time::{Duration, Instant};

use crate::backoff::{SplitMix64, saturating_add};
use crate::command::{Command, NodeId, Request, RequestId, RequestIds};
use crate::error::{Error, InvalidArgument};
use crate::lease::{Lease, LeaseKind, LockKind, LockSpec, drift};
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{Reply, Response, TransportFailure};
use crate::script::Exchange;

use super::{Answer, MAX_NODES, RedLease, RedLockOptions, node_calls, poll_all};

#[derive(Debug)]
enum State {
    Trying,
    Releasing { then: Box<Result<(), Error>> },
    Waiting { until: Instant },
    Done,
}

/// The acquisition of a RedLock, as a [`Protocol`].
#[derive(Debug)]
pub struct RedLockAcquire {
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    spec: LockSpec,
    options: RedLockOptions,
    started: Instant,
    deadline: Option<Instant>,
    rng: SplitMix64,
    ids: RequestIds,
    exchanges: Vec<Exchange>,
    /// The acquisition round: the request sent to each node and its answer.
    round: Vec<(RequestId, Option<Result<Reply, TransportFailure>>)>,
    state: State,
    sent_at: Instant,
    attempts: u32,
    last: Option<Error>,
    base_token: crate::lease::Token,
}

impl RedLockAcquire {
    /// An acquisition of the lease lock `spec` (of [`LockKind::Lease`]) on
    /// `options.nodes` nodes; `seed` drives the random retry delay.
    pub fn new(
        spec: LockSpec,
        options: RedLockOptions,
        seed: u64,
        now: Instant,
    ) -> Result<Self, Error> {
        if spec.kind != LeaseKind::Lock(LockKind::Lease) {
            return Err(InvalidArgument::Setting("RedLock spans lease locks only".into()).into());
        }
        if options.nodes == 0 || options.nodes > MAX_NODES {
            return Err(InvalidArgument::Setting(format!(
                "RedLock needs 1 to {MAX_NODES} nodes, got {}",
                options.nodes
            ))
            .into());
        }
        crate::limits::timeout("node timeout", options.node_timeout)?;
        crate::limits::duration(
            "RedLock retry maximum",
            options.retry_max,
            crate::limits::MIN_PAUSE,
            crate::limits::MAX_DURATION,
        )?;
        if let Some(wait) = options.wait {
            crate::limits::span("wait", wait)?;
        }
        if options.node_timeout.saturating_mul(2) >= spec.ttl {
            return Err(InvalidArgument::Setting(format!(
                "the node timeout ({:?}) must be under half the ttl ({:?})",
                options.node_timeout, spec.ttl
            ))
            .into());
        }
        let mut machine = RedLockAcquire {
            outstanding: Outstanding::default(),
            deadline: options.wait.map(|w| saturating_add(now, w)),
            exchanges: Vec::new(),
            round: Vec::new(),
            started: now,
            rng: SplitMix64::new(seed),
            ids: RequestIds::default(),
            state: State::Trying,
            sent_at: now,
            attempts: 0,
            last: None,
            base_token: spec.token.clone(),
            spec,
            options,
        };
        machine.start();
        Ok(machine)
    }

    fn start(&mut self) {
        if self.attempts > 0 {
            // A new attempt after a full release gets a new token: a release of the previous
            // attempt still queued on a broken connection must not match the new grant.
            // (Derived from the secret random token, so still unguessable.)
            let base = self.base_token.as_str();
            if let Ok(token) = crate::lease::Token::new(format!("{base}.{}", self.attempts)) {
                let t = token.as_str();
                self.spec.acquire = self.spec.acquire.clone().with_arg(0, t);
                self.spec.calls.release = self.spec.calls.release.clone().with_arg(0, t);
                self.spec.calls.extend = self.spec.calls.extend.clone().with_arg(0, t);
                self.spec.calls.inspect = self.spec.calls.inspect.clone().with_arg(0, t);
                self.spec.token = token;
            }
        }
        // The acquisition is a plain SET NX PX on every node: RedLock has no fence to issue,
        // and a node whose reply is lost counts as failed (released everywhere afterwards), so
        // no script is needed to recognise a retry.
        self.round.clear();
    }

    /// The acquisition requests, one per node: one command, built once, copied to each.
    fn acquisition_round(&mut self) -> Vec<Request> {
        let key = self.spec.target.keys.first().unwrap_or("");
        let ttl_ms = u64::try_from(self.spec.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut set = Some(
            Command::with_capacity("SET", 5)
                .arg(key)
                .arg(self.spec.token.as_str())
                .arg("NX")
                .arg("PX")
                .int_arg(ttl_ms),
        );
        let nodes = self.options.nodes;
        self.round.reserve(usize::from(nodes));
        let mut requests = Vec::with_capacity(usize::from(nodes));
        for i in 0..nodes {
            let id = self.ids.next();
            self.round.push((id, None));
            // The last node takes the original.
            let command = if i + 1 == nodes {
                set.take()
            } else {
                set.clone()
            };
            if let Some(command) = command {
                requests.push(Request {
                    id,
                    command: command.on(NodeId(i)),
                });
            }
        }
        requests
    }

    fn release_everywhere(&mut self, then: Result<(), Error>) {
        self.exchanges = node_calls(&self.spec.calls.release, self.options.nodes);
        for e in &mut self.exchanges {
            e.start();
        }
        self.state = State::Releasing {
            then: Box::new(then),
        };
    }

    fn batch(&self, requests: Vec<Request>, now: Instant) -> Step<RedLease> {
        Step::Send(Batch::new(
            requests,
            saturating_add(now, self.options.node_timeout),
        ))
    }

    fn decide(
        &mut self,
        answers: Vec<Result<Reply, TransportFailure>>,
        now: Instant,
    ) -> Option<Step<RedLease>> {
        let answers: Vec<Answer> = answers
            .iter()
            .map(|a| match a {
                Ok(Reply::Status(ok)) if ok == "OK" => Answer::Granted,
                Ok(Reply::Nil) => Answer::Busy,
                _ => Answer::Failed,
            })
            .collect();
        let count = |want: Answer| answers.iter().filter(|a| **a == want).count() as u16;
        let (granted, busy, failed) = (
            count(Answer::Granted),
            count(Answer::Busy),
            count(Answer::Failed),
        );
        let ttl = self.spec.ttl;
        let elapsed = now.saturating_duration_since(self.sent_at);
        let validity = ttl.saturating_sub(elapsed).saturating_sub(drift(ttl));
        if granted >= self.options.quorum() && !validity.is_zero() {
            // Shared, not copied (an empty stand-in would cost two allocations).
            let target = self.spec.target.clone();
            let lease = Lease {
                kind: LeaseKind::Lock(LockKind::Lease),
                target,
                token: self.spec.token.clone(),
                fence: 0,
                ttl,
                acquired_at: self.sent_at,
                valid_until: saturating_add(now, validity),
                attempts: self.attempts,
                calls: self.spec.calls.clone(),
                data: Vec::new(),
            };
            self.state = State::Done;
            return Some(Step::Done(Ok(RedLease {
                lease,
                nodes: self.options.nodes,
                granted,
            })));
        }
        let name = self.spec.target.name.to_string();
        self.last = Some(if granted >= self.options.quorum() {
            // A majority granted it, but so slowly that no validity was left.
            Error::Unavailable {
                attempts: self.attempts,
                last: TransportFailure::no_reply(format!(
                    "{name}: a quorum answered after {elapsed:?}, leaving no validity of the {ttl:?} ttl"
                )),
            }
        } else if busy >= self.options.quorum() {
            Error::Timeout {
                name,
                waited: now.saturating_duration_since(self.started),
                attempts: self.attempts,
            }
        } else {
            Error::NoQuorum {
                name,
                nodes: self.options.nodes,
                needed: self.options.quorum(),
                granted,
                busy,
                unreachable: failed,
            }
        });
        // Undo the partial acquisition on every node (a lost reply may have granted it too).
        self.release_everywhere(Ok(()));
        None
    }

    fn after_release(&mut self, then: Result<(), Error>, now: Instant) -> Step<RedLease> {
        let error = match (then, self.last.take()) {
            (Err(e), _) => e,
            (Ok(()), Some(e)) => e,
            (Ok(()), None) => Error::Finished,
        };
        match self.deadline {
            Some(deadline) if now < deadline => {
                let max = u64::try_from(self.options.retry_max.as_micros()).unwrap_or(u64::MAX);
                let delay = Duration::from_micros(self.rng.below_or_eq(max));
                let until = saturating_add(now, delay).min(deadline);
                self.last = Some(error);
                self.state = State::Waiting { until };
                Step::Wait(Wait {
                    until,
                    wake_on: None,
                })
            }
            _ => {
                self.state = State::Done;
                // Trying once and finding it held: say so as a timeout of zero wait.
                Step::Done(Err(error))
            }
        }
    }
}

impl RedLockAcquire {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<RedLease> {
        loop {
            match &self.state {
                State::Done => return Step::Done(Err(Error::Finished)),
                State::Waiting { until } => {
                    if now < *until {
                        return Step::Wait(Wait {
                            until: *until,
                            wake_on: None,
                        });
                    }
                    self.state = State::Trying;
                    self.start();
                }
                State::Trying => {
                    if self.round.is_empty() {
                        self.attempts += 1;
                        self.sent_at = now;
                        let requests = self.acquisition_round();
                        return self.batch(requests, now);
                    }
                    if self.round.iter().any(|(_, a)| a.is_none()) {
                        return self.outstanding.step(now);
                    }
                    let answers = std::mem::take(&mut self.round)
                        .into_iter()
                        .filter_map(|(_, a)| a)
                        .collect();
                    if let Some(step) = self.decide(answers, now) {
                        return step;
                    }
                }
                State::Releasing { .. } => match poll_all(&mut self.exchanges, &mut self.ids) {
                    Err(Some(requests)) => return self.batch(requests, now),
                    Err(None) => return self.outstanding.step(now),
                    Ok(_) => {
                        let State::Releasing { then } =
                            std::mem::replace(&mut self.state, State::Done)
                        else {
                            return Step::Done(Err(Error::Finished));
                        };
                        return self.after_release(*then, now);
                    }
                },
            }
        }
    }
}

impl Protocol for RedLockAcquire {
    type Output = RedLease;

    fn poll(&mut self, now: Instant) -> Step<RedLease> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn handle(&mut self, input: Response, _now: Instant) {
        if let Some((_, answer)) = self.round.iter_mut().find(|(id, _)| *id == input.id) {
            *answer = Some(input.result);
            return;
        }
        if let Some(e) = self.exchanges.iter_mut().find(|e| e.awaits(input.id)) {
            e.handle(input);
        }
    }
}
