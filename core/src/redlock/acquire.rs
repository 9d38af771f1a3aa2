//! Acquiring a RedLock: one round on every node, counted against the quorum.

use std::time::{Duration, Instant};

use crate::backoff::{SplitMix64, saturating_add};
use crate::command::{Command, Request, RequestIds};
use crate::error::{Error, InvalidArgument};
use crate::lease::{Lease, LeaseKind, LockKind, LockSpec, NativeDelete, drift};
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{Reply, Response, TransportFailure};

use super::{Answer, MAX_NODES, NodeRound, RedLease, RedLockOptions, release_command};

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
    /// The round in flight: the acquisition on every node (`Trying`) or the release on
    /// every node that may hold the key (`Releasing`).
    round: Option<NodeRound>,
    state: State,
    sent_at: Instant,
    attempts: u32,
    last: Option<Error>,
    base_token: crate::lease::Token,
    /// Per node, the native compare-and-delete a failed round's release asks it with
    /// (empty: the script everywhere); see [`with_native_release`](Self::with_native_release).
    native: Vec<Option<NativeDelete>>,
    /// The nodes (bit `n` for node `n`) that refused their native compare-and-delete.
    refused: u64,
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
        if options.node_timeout.saturating_mul(2) >= spec.ttl {
            return Err(InvalidArgument::Setting(format!(
                "the node timeout ({:?}) must be under half the ttl ({:?})",
                options.node_timeout, spec.ttl
            ))
            .into());
        }
        let mut machine = RedLockAcquire {
            outstanding: Outstanding::default(),
            deadline: options
                .wait
                .map(|w| saturating_add(now, crate::limits::wait(w))),
            round: None,
            started: now,
            rng: SplitMix64::new(seed),
            ids: RequestIds::default(),
            state: State::Trying,
            sent_at: now,
            attempts: 0,
            last: None,
            base_token: spec.token.clone(),
            native: Vec::new(),
            refused: 0,
            spec,
            options,
        };
        machine.start();
        Ok(machine)
    }

    /// Undoes a failed round, on the nodes that may hold its key, on each node `n` for
    /// which `native[n]` names its native compare-and-delete (Valkey 9.0+ `DELIFEQ`, Redis
    /// 8.4+ `DELEX ... IFEQ`) with that command instead of the release script, as
    /// [`QuorumOp::with_native_release`] does for a held lease: cheaper for the node. Unlike
    /// there, a node where it deletes nothing is not asked again (whether the key was gone
    /// or another holder's changes nothing here), so a node undone in vain (its lost `SET`
    /// did not run, or its grant has expired) costs one native delete; a node that refuses
    /// it is asked with the script, gets the script in this acquisition's later rounds, and
    /// is reported by [`native_refused`](Self::native_refused).
    ///
    /// [`QuorumOp::with_native_release`]: super::QuorumOp::with_native_release
    pub fn with_native_release(mut self, native: &[Option<NativeDelete>]) -> Self {
        self.native = if native.iter().any(Option::is_some) {
            native
                .iter()
                .take(usize::from(self.options.nodes))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        self
    }

    /// The nodes that refused their native compare-and-delete in a failed round's release
    /// (an unknown command, a `NOPERM`), in node order: a driver should stop choosing it
    /// for them.
    pub fn native_refused(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.options.nodes.min(64)).filter(|n| self.refused & (1 << n) != 0)
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
                self.spec.calls = self.spec.calls.map(|call| call.with_arg(0, t));
                self.spec.token = token;
            }
        }
        self.round = None;
    }

    /// The lock key.
    fn key(&self) -> &str {
        self.spec.target.keys.first().unwrap_or("")
    }

    /// The acquisition on every node: one command, built once, copied to each. A plain
    /// `SET key token NX PX ttl`: RedLock has no fence to issue, and a node whose reply is
    /// lost counts as failed and is never asked again in the round (every release asks every
    /// node), so no script is needed to recognise a retry (see the module docs).
    fn acquisition_round(&self) -> NodeRound {
        let ttl_ms = u64::try_from(self.spec.ttl.as_millis()).unwrap_or(u64::MAX);
        let set = Command::with_capacity("SET", 5)
            .arg(self.key())
            .arg(self.spec.token.as_str())
            .arg("NX")
            .arg("PX")
            .int_arg(ttl_ms);
        NodeRound::plain(set, self.options.nodes)
    }

    /// Undoes a failed round on the nodes in `may_hold` (bit `n` for node `n`), then goes
    /// on with `then`.
    fn undo(&mut self, may_hold: u64, then: Result<(), Error>) {
        let release = release_command(self.key(), self.spec.token.as_str());
        let mut round =
            NodeRound::script(release, &super::RELEASE, self.options.nodes).only(may_hold);
        if !self.native.is_empty() {
            round = round.with_native(&self.native).undoing();
        }
        self.round = Some(round);
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

    fn decide(&mut self, round: &NodeRound, now: Instant) -> Option<Step<RedLease>> {
        let (mut granted, mut busy, mut failed) = (0u16, 0u16, 0u16);
        // The nodes that may hold this attempt's key: every node but those whose answer
        // says the `SET` did not run (nil: the key exists; an error reply: refused).
        let mut may_hold = all_nodes(self.options.nodes);
        for (node, answer) in round.answers_by_node() {
            if matches!(answer, Ok(Reply::Nil | Reply::Error(_))) && node < 64 {
                may_hold &= !(1 << node);
            }
            let count = match answer {
                Ok(Reply::Status(ok)) if ok == "OK" => Answer::Granted,
                Ok(Reply::Nil) => Answer::Busy,
                _ => Answer::Failed,
            };
            let n = match count {
                Answer::Granted => &mut granted,
                Answer::Busy => &mut busy,
                Answer::Failed => &mut failed,
            };
            *n = n.saturating_add(1);
        }
        // A node that never answered (none: the round is done) counts as failed.
        failed = failed.saturating_add(
            self.options
                .nodes
                .saturating_sub(granted.saturating_add(busy).saturating_add(failed)),
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
                unanswered: false,
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
        // Undo the partial acquisition where it may be: the nodes that granted it, and
        // those whose reply was lost (the `SET` may have run). None: nothing to undo.
        if may_hold == 0 {
            return Some(self.after_release(Ok(()), now));
        }
        self.undo(may_hold, Ok(()));
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
                Step::Wait(Wait::until(until))
            }
            _ => {
                self.state = State::Done;
                // Trying once and finding it held: say so as a timeout of zero wait.
                Step::Done(Err(error))
            }
        }
    }
}

/// The bits of nodes `0..nodes` (all 64 from 64 nodes on).
fn all_nodes(nodes: u16) -> u64 {
    1u64.checked_shl(u32::from(nodes))
        .map_or(u64::MAX, |bit| bit - 1)
}

impl RedLockAcquire {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<RedLease> {
        loop {
            match &self.state {
                State::Done => return Step::Done(Err(Error::Finished)),
                State::Waiting { until } => {
                    if now < *until {
                        return Step::Wait(Wait::until(*until));
                    }
                    self.state = State::Trying;
                    self.start();
                }
                State::Trying | State::Releasing { .. } => {
                    if self.round.is_none() {
                        // Trying, not yet sent (a release round is made with its state).
                        self.attempts += 1;
                        self.sent_at = now;
                        self.round = Some(self.acquisition_round());
                    }
                    let Some(round) = self.round.as_mut() else {
                        return Step::Done(Err(Error::Finished));
                    };
                    if let Some(requests) = round.poll(&mut self.ids) {
                        return self.batch(requests, now);
                    }
                    if !round.is_done() {
                        return self.outstanding.step(now);
                    }
                    let Some(round) = self.round.take() else {
                        return Step::Done(Err(Error::Finished));
                    };
                    match std::mem::replace(&mut self.state, State::Done) {
                        State::Releasing { then } => {
                            for n in round.refused() {
                                // The script on that node from now on.
                                self.refused |= 1 << n;
                                if let Some(how) = self.native.get_mut(usize::from(n)) {
                                    *how = None;
                                }
                            }
                            return self.after_release(*then, now);
                        }
                        _ => {
                            self.state = State::Trying;
                            if let Some(step) = self.decide(&round, now) {
                                return step;
                            }
                        }
                    }
                }
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
        if let Some(round) = &mut self.round {
            round.handle(input);
        }
    }
}
