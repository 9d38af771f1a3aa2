//! RedLock: one lease over N independent Redis masters, held with a majority.
//!
//! ```text
//!  Trying ──acquire script on every node (one batch)──► all answered
//!     ▲            granted ≥ N/2+1 and validity > 0 ──────────────► Done(Acquired)
//!     │            otherwise ──► Releasing (release on every node) ─┐
//!     └── Waiting (random delay, 0..retry_max) ◄── deadline not passed ┘ else ► Done(error)
//! ```
//!
//! Validity is `ttl - elapsed - drift` with `drift = ttl/100 + 2 ms`, measured from when the
//! batch was sent. Nodes are asked in one batch, so a driver that writes to all of them
//! before reading any reply pays about one round trip, not N.
//!
//! **What RedLock cannot promise.** Its safety rests on timing assumptions: bounded clock
//! drift between the nodes (a node whose clock jumps forward expires the key early), and
//! holders that do not pause longer than the validity (a GC pause or a stopped VM after
//! acquiring lets the lease run out while the holder still acts on it). It issues no fencing
//! token that is ordered across nodes (each node's counter advances on its own), so a
//! resource cannot reject a stale holder; where that matters, use a single-node lease lock
//! with fencing, and replication safety (`min_replicas`) for failover.
//!
//! **Restarts.** The third assumption: a node does not forget a key while its lease runs.
//! A node that restarts empty (no persistence, or a snapshot older than the key) gives the
//! same name to the next client, so two restarts of five nodes are enough for a second
//! holder with a majority. Configure one of: AOF with `appendfsync always` on every node,
//! or keep a restarted node out of service (not accepting clients) for longer than the
//! longest ttl in use. What the library adds on top: an extension
//! ([`QuorumOp`] with [`QuorumAction::Extend`]) counts only the nodes where the key is
//! still this holder's ([`RedLease::granted`] becomes that count, see [`RedLease::apply`]),
//! and a lease whose holding plus unanswered nodes fall below the quorum ends at that
//! renewal. An extension never writes the key back on a node that lost it: while that node
//! was empty another client may have taken the name there (and with other nodes a
//! majority), so re-creating it would make a lease that may have been broken look whole.
//! A lease is only as strong as the nodes that held it without a gap.

use std::time::{Duration, Instant};

use crate::backoff::{SplitMix64, saturating_add};
use crate::command::{Command, NodeId, Request, RequestId, RequestIds};
use crate::error::{Error, InvalidArgument, LossReason};
use crate::lease::{Lease, LeaseKind, LockKind, LockSpec, drift};
use crate::protocol::{Batch, Protocol, Step, Wait};
use crate::reply::{Reply, Response, TransportFailure};
use crate::script::{Exchange, Progress, ScriptCall};

/// The most nodes one RedLock spans.
pub const MAX_NODES: u16 = 64;

/// How a RedLock acquisition behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedLockOptions {
    /// How many independent masters (numbered `0..nodes`).
    pub nodes: u16,
    /// `None`: try once. `Some(w)`: retry until `w` has passed. Defaults to `None`.
    pub wait: Option<Duration>,
    /// Retries wait a random time in `0..retry_max` (so competing clients desynchronise).
    /// Defaults to 100 ms.
    pub retry_max: Duration,
    /// How long each node may take to answer (much smaller than the ttl). Defaults to 50 ms.
    pub node_timeout: Duration,
}

impl RedLockOptions {
    /// The defaults for `nodes` masters.
    pub fn new(nodes: u16) -> Self {
        RedLockOptions {
            nodes,
            wait: None,
            retry_max: Duration::from_millis(100),
            node_timeout: Duration::from_millis(50),
        }
    }

    /// The majority: `nodes/2 + 1`.
    pub fn quorum(&self) -> u16 {
        self.nodes / 2 + 1
    }
}

/// A RedLock we hold: the lease (its calls name node 0; they are sent to every node) and the
/// number of nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedLease {
    /// The lease. Its `fence` is meaningless across nodes (0) and `valid_until` is the
    /// quorum's validity.
    pub lease: Lease,
    /// How many nodes the lock spans.
    pub nodes: u16,
    /// How many granted it.
    pub granted: u16,
}

impl RedLease {
    /// Takes in what an extension found: [`granted`](Self::granted) becomes the number of
    /// nodes where the key was still ours and was extended (a node that restarted empty no
    /// longer counts, and is not written again). On success the validity is the new one; if
    /// the lease surely no longer holds a majority it ends now (`valid_until = now`); if the
    /// outcome is unknown (nodes did not answer) the old validity stands, as the nodes that
    /// did not answer hold the key at most that long. Returns the outcome's result.
    pub fn apply(&mut self, outcome: QuorumOutcome, now: Instant) -> Result<(), Error> {
        self.granted = outcome.holding;
        match outcome.result {
            Ok(valid_until) => {
                self.lease.valid_until = valid_until;
                Ok(())
            }
            Err(e) => {
                if outcome.lost {
                    self.lease.valid_until = self.lease.valid_until.min(now);
                }
                Err(e)
            }
        }
    }

    /// Whether this lease still counts a majority of its nodes.
    pub fn has_quorum(&self) -> bool {
        self.granted > self.nodes / 2
    }
}

/// What one node said.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Granted,
    Busy,
    Failed,
}

fn node_calls(call: &ScriptCall, nodes: u16) -> Vec<Exchange> {
    (0..nodes)
        .map(|i| Exchange::new(call.clone().on(NodeId(i))))
        .collect()
}

/// Polls every exchange; returns the requests to send (`Err(Some)`), nothing yet
/// (`Err(None)`), or every node's answer in node order once all are in.
#[allow(clippy::type_complexity)]
fn poll_all(
    exchanges: &mut [Exchange],
    ids: &mut RequestIds,
) -> Result<Vec<Result<Reply, TransportFailure>>, Option<Vec<Request>>> {
    let mut requests = Vec::new();
    let mut answers: Vec<Option<Result<Reply, TransportFailure>>> = Vec::new();
    let mut pending = false;
    for e in exchanges.iter_mut() {
        answers.push(match e.poll(ids) {
            Progress::Send(r) => {
                requests.push(r);
                None
            }
            Progress::Awaiting => {
                pending = true;
                None
            }
            Progress::Answered(a) => Some(a),
            Progress::Idle => Some(Err(TransportFailure::not_sent("not started"))),
        });
    }
    if !requests.is_empty() || pending {
        // Answers taken by this poll stay with their exchange until every node answered.
        for (e, a) in exchanges.iter_mut().zip(answers) {
            if let Some(a) = a {
                e.restore(a);
            }
        }
        return Err((!requests.is_empty()).then_some(requests));
    }
    Ok(answers.into_iter().flatten().collect())
}

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

    /// The acquisition requests, one per node.
    fn acquisition_round(&mut self) -> Vec<Request> {
        let key = self.spec.target.keys.first().cloned().unwrap_or_default();
        let ttl_ms = u64::try_from(self.spec.ttl.as_millis()).unwrap_or(u64::MAX);
        (0..self.options.nodes)
            .map(|i| {
                let id = self.ids.next();
                self.round.push((id, None));
                let command = Command::new("SET")
                    .arg(&key)
                    .arg(self.spec.token.as_str())
                    .arg("NX")
                    .arg("PX")
                    .int_arg(ttl_ms)
                    .on(NodeId(i));
                Request { id, command }
            })
            .collect()
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
            let lease = Lease {
                kind: LeaseKind::Lock(LockKind::Lease),
                target: self.spec.target.clone(),
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
        let name = self.spec.target.name.clone();
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

impl Protocol for RedLockAcquire {
    type Output = RedLease;

    fn poll(&mut self, now: Instant) -> Step<RedLease> {
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
                        return Step::Awaiting;
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
                    Err(None) => return Step::Awaiting,
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

    fn handle(&mut self, input: Response, _now: Instant) {
        if let Some((_, answer)) = self.round.iter_mut().find(|(id, _)| *id == input.id) {
            *answer = Some(input.result);
            return;
        }
        for e in &mut self.exchanges {
            if e.handle(input.clone()) {
                return;
            }
        }
    }
}

/// What a quorum operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuorumAction {
    /// Release on every node.
    Release,
    /// Extend on every node to the given ttl.
    Extend(Duration),
}

/// What a [`QuorumOp`] found, node by node, besides its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumOutcome {
    /// The new `valid_until` of an extension (for a release: the instant it ended), or why
    /// it failed.
    pub result: Result<Instant, Error>,
    /// On how many nodes the key was still this holder's (and was extended, or released).
    /// A node that lost the key (it restarted empty, or the key expired there) is not
    /// counted, and an extension never writes the key back on it.
    pub holding: u16,
    /// Whether the lease surely no longer holds a majority: the nodes that still hold it
    /// plus those whose answer is unknown are fewer than the quorum.
    pub lost: bool,
}

/// Release or extend a [`RedLease`] on every node at once, as a [`Protocol`]. Yields a
/// [`QuorumOutcome`]: the new `valid_until` (for a release: the instant it ended) or the
/// error, and how many nodes still hold the key for this holder.
///
/// Apply an extension's outcome with [`RedLease::apply`], which keeps
/// [`RedLease::granted`] equal to the nodes that were extended.
#[derive(Debug)]
pub struct QuorumOp {
    action: QuorumAction,
    red: RedLease,
    node_timeout: Duration,
    ids: RequestIds,
    exchanges: Vec<Exchange>,
    sent_at: Option<Instant>,
    done: bool,
}

impl QuorumOp {
    /// `action` on `red`, each node answering within `node_timeout`.
    pub fn new(
        red: &RedLease,
        action: QuorumAction,
        node_timeout: Duration,
    ) -> Result<Self, Error> {
        let call = match action {
            QuorumAction::Release => red.lease.calls.release.clone(),
            QuorumAction::Extend(ttl) => {
                let ms = crate::lease::validate_ttl("ttl", ttl)?;
                red.lease.calls.extend.clone().arg(ms.to_string())
            }
        };
        let mut exchanges = node_calls(&call, red.nodes);
        for e in &mut exchanges {
            e.start();
        }
        Ok(QuorumOp {
            action,
            red: red.clone(),
            node_timeout,
            ids: RequestIds::default(),
            exchanges,
            sent_at: None,
            done: false,
        })
    }

    fn decide(&self, answers: &[Result<Reply, TransportFailure>], now: Instant) -> QuorumOutcome {
        let result = self.result(answers, now);
        let code = |a: &Result<Reply, TransportFailure>| a.as_ref().ok().and_then(Reply::as_int);
        let holding = answers.iter().filter(|a| code(a) == Some(1)).count() as u16;
        let unknown = answers
            .iter()
            .filter(|a| !matches!(code(a), Some(-1..=1)))
            .count() as u16;
        QuorumOutcome {
            result,
            holding,
            lost: holding.saturating_add(unknown) < self.red.nodes / 2 + 1,
        }
    }

    fn result(
        &self,
        answers: &[Result<Reply, TransportFailure>],
        now: Instant,
    ) -> Result<Instant, Error> {
        let code = |a: &Result<Reply, TransportFailure>| a.as_ref().ok().and_then(Reply::as_int);
        let done = answers.iter().filter(|a| code(a) == Some(1)).count() as u16;
        let taken = answers.iter().filter(|a| code(a) == Some(-1)).count() as u16;
        let failed = answers
            .iter()
            .filter(|a| !matches!(code(a), Some(-1..=1)))
            .count() as u16;
        let name = self.red.lease.target.name.clone();
        let quorum = self.red.nodes / 2 + 1;
        match self.action {
            QuorumAction::Release if done > 0 => Ok(now),
            QuorumAction::Release if failed == self.red.nodes => Err(Error::NoQuorum {
                name,
                nodes: self.red.nodes,
                needed: quorum,
                granted: 0,
                busy: taken,
                unreachable: failed,
            }),
            QuorumAction::Release => Err(Error::NotOwner {
                name,
                reason: if taken > 0 {
                    LossReason::Taken
                } else {
                    LossReason::Expired
                },
            }),
            QuorumAction::Extend(ttl) if done >= quorum => {
                Ok(crate::lease::valid_until(self.sent_at.unwrap_or(now), ttl))
            }
            QuorumAction::Extend(_) if failed > 0 => Err(Error::NoQuorum {
                name,
                nodes: self.red.nodes,
                needed: quorum,
                granted: done,
                busy: taken,
                unreachable: failed,
            }),
            QuorumAction::Extend(_) => Err(Error::NotOwner {
                name,
                reason: if taken > 0 {
                    LossReason::Taken
                } else {
                    LossReason::Expired
                },
            }),
        }
    }
}

impl Protocol for QuorumOp {
    type Output = QuorumOutcome;

    fn poll(&mut self, now: Instant) -> Step<QuorumOutcome> {
        if self.done {
            return Step::Done(Err(Error::Finished));
        }
        match poll_all(&mut self.exchanges, &mut self.ids) {
            Err(Some(requests)) => {
                if self.sent_at.is_none() {
                    self.sent_at = Some(now);
                }
                Step::Send(Batch::new(requests, saturating_add(now, self.node_timeout)))
            }
            Err(None) => Step::Awaiting,
            Ok(answers) => {
                self.done = true;
                Step::Done(Ok(self.decide(&answers, now)))
            }
        }
    }

    fn handle(&mut self, input: Response, _now: Instant) {
        for e in &mut self.exchanges {
            if e.handle(input.clone()) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::lease::Token;
    use crate::reply::ErrorReply;
    use crate::testing::origin;

    const TTL: Duration = Duration::from_secs(10);

    fn spec() -> LockSpec {
        LockSpec::lease(
            &Keyspace::default(),
            "red",
            Token::from_random([3; 16]),
            TTL,
        )
        .unwrap()
    }

    fn machine(wait: Option<Duration>, now: Instant) -> RedLockAcquire {
        let options = RedLockOptions {
            wait,
            ..RedLockOptions::new(5)
        };
        RedLockAcquire::new(spec(), options, 11, now).unwrap()
    }

    /// Sends one round and answers node i with `answers[i]`.
    fn round<P: Protocol>(
        m: &mut P,
        now: Instant,
        answers: &[Result<Reply, TransportFailure>],
    ) -> Vec<Request> {
        let Step::Send(batch) = m.poll(now) else {
            panic!("expected a batch")
        };
        for r in &batch.requests {
            let answer = answers[usize::from(r.command.node().0)].clone();
            m.handle(
                Response {
                    id: r.id,
                    result: answer,
                },
                now,
            );
        }
        batch.requests
    }

    fn granted() -> Result<Reply, TransportFailure> {
        Ok(Reply::Status("OK".into()))
    }

    fn busy() -> Result<Reply, TransportFailure> {
        Ok(Reply::Nil)
    }

    fn down() -> Result<Reply, TransportFailure> {
        Err(TransportFailure::not_sent("refused"))
    }

    #[test]
    fn a_majority_grants_it_with_validity_from_the_send_time() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let sent = round(
            &mut m,
            t0,
            &[granted(), granted(), granted(), down(), down()],
        );
        assert_eq!(sent.len(), 5);
        let nodes: Vec<u16> = sent.iter().map(|r| r.command.node().0).collect();
        assert_eq!(nodes, [0, 1, 2, 3, 4], "one request per node, in one batch");
        let later = t0 + Duration::from_millis(30);
        let Step::Done(Ok(red)) = m.poll(later) else {
            panic!("acquired")
        };
        assert_eq!(red.granted, 3);
        assert_eq!(red.lease.fence, 0, "no fence across nodes");
        assert_eq!(red.lease.valid_until, t0 + TTL - drift(TTL));
    }

    #[test]
    fn without_a_majority_it_releases_everywhere_and_says_why() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &[granted(), granted(), down(), down(), down()]);
        let releases = round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        assert_eq!(
            releases.len(),
            5,
            "released on every node, also where it failed"
        );
        assert!(
            releases
                .iter()
                .all(|r| r.command.args()[1] == crate::lease::scripts::RELEASE.sha1.as_bytes())
        );
        match m.poll(t0) {
            Step::Done(Err(Error::NoQuorum {
                nodes,
                needed,
                granted,
                busy,
                unreachable,
                ..
            })) => assert_eq!((nodes, needed, granted, busy, unreachable), (5, 3, 2, 0, 3)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn held_elsewhere_is_a_timeout_and_slow_quorums_are_not_trusted() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &[busy(), busy(), busy(), granted(), down()]);
        round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        assert!(matches!(m.poll(t0), Step::Done(Err(Error::Timeout { .. }))));

        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        // The answers came after the whole ttl: nothing left to hold.
        let late = t0 + TTL;
        round(&mut m, late, &vec![Ok(Reply::Int(1)); 5]);
        assert!(matches!(
            m.poll(late),
            Step::Done(Err(Error::Unavailable { .. }))
        ));
    }

    #[test]
    fn waiting_retries_after_a_random_delay_until_a_majority_grants_it() {
        let t0 = origin();
        let mut m = machine(Some(Duration::from_secs(1)), t0);
        round(&mut m, t0, &[busy(), busy(), busy(), granted(), granted()]);
        round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        let Step::Wait(w) = m.poll(t0) else {
            panic!("a pause")
        };
        assert!(w.until <= t0 + Duration::from_millis(100));
        let now = w.until;
        round(
            &mut m,
            now,
            &[granted(), granted(), granted(), busy(), busy()],
        );
        assert!(matches!(m.poll(now), Step::Done(Ok(_))));
    }

    #[test]
    fn acquisition_is_a_plain_set_nx_px_and_a_release_noscript_goes_to_its_node_only() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let sent = round(&mut m, t0, &[busy(), busy(), busy(), granted(), granted()]);
        let args: Vec<String> = sent[0]
            .command
            .args()
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(args[0], "SET");
        assert_eq!(args[3..], ["NX", "PX", "10000"]);
        let noscript = Ok(Reply::Error(ErrorReply::new("NOSCRIPT", "x")));
        let ok = Ok(Reply::Int(1));
        round(
            &mut m,
            t0,
            &[ok.clone(), noscript, ok.clone(), ok.clone(), ok.clone()],
        );
        let again = round(&mut m, t0, &vec![ok; 5]);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].command.node(), NodeId(1));
        assert_eq!(again[0].command.name(), "EVAL");
        assert!(matches!(m.poll(t0), Step::Done(Err(Error::Timeout { .. }))));
    }

    #[test]
    fn quorum_extension_and_release() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(red)) = m.poll(t0) else {
            panic!()
        };
        let ok = Ok(Reply::Int(1));
        let gone = Ok(Reply::Int(0));
        let taken = Ok(Reply::Int(-1));

        let mut ext =
            QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
        round(
            &mut ext,
            t0,
            &[ok.clone(), ok.clone(), ok.clone(), gone.clone(), down()],
        );
        assert_eq!(ext.poll(t0).done_ok(), Some(t0 + TTL - drift(TTL)));

        let mut ext =
            QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
        round(
            &mut ext,
            t0,
            &[ok.clone(), ok.clone(), gone.clone(), down(), down()],
        );
        let outcome = ext.poll(t0).outcome();
        assert!(matches!(
            outcome.result,
            Err(Error::NoQuorum { granted: 2, .. })
        ));
        assert_eq!((outcome.holding, outcome.lost), (2, false), "2 unknown");

        let mut rel =
            QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50)).unwrap();
        round(
            &mut rel,
            t0,
            &[gone.clone(), ok.clone(), down(), down(), down()],
        );
        assert!(rel.poll(t0).outcome().result.is_ok());

        let mut rel =
            QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50)).unwrap();
        round(
            &mut rel,
            t0,
            &[
                taken.clone(),
                gone.clone(),
                gone.clone(),
                gone.clone(),
                gone,
            ],
        );
        assert!(matches!(
            rel.poll(t0).outcome().result,
            Err(Error::NotOwner {
                reason: LossReason::Taken,
                ..
            })
        ));
    }

    #[test]
    fn bad_options_are_refused() {
        let t0 = origin();
        assert!(RedLockAcquire::new(spec(), RedLockOptions::new(0), 1, t0).is_err());
        let slow = RedLockOptions {
            node_timeout: TTL,
            ..RedLockOptions::new(3)
        };
        assert!(RedLockAcquire::new(spec(), slow, 1, t0).is_err());
        let fair = LockSpec::fair(
            &Keyspace::default(),
            "f",
            Token::from_random([1; 16]),
            TTL,
            TTL,
        )
        .unwrap();
        assert!(RedLockAcquire::new(fair, RedLockOptions::new(3), 1, t0).is_err());
    }

    #[test]
    fn granted_counts_only_nodes_that_still_hold_the_key() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(mut red)) = m.poll(t0) else {
            panic!()
        };
        assert_eq!((red.granted, red.has_quorum()), (5, true));
        let ok = Ok(Reply::Int(1));
        let gone = Ok(Reply::Int(0));
        let extend = |red: &RedLease, now: Instant, answers: &[Result<Reply, TransportFailure>]| {
            let mut ext =
                QuorumOp::new(red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
            let sent = round(&mut ext, now, answers);
            // Only the extend script, on every node: nothing writes the key back.
            assert!(
                sent.iter().all(|r| r.command.name() == "EVALSHA"),
                "{sent:?}"
            );
            ext.poll(now).outcome()
        };

        // Node 4 restarted empty: the extension holds (4 of 5) and granted says 4.
        let t1 = t0 + Duration::from_secs(1);
        let outcome = extend(
            &red,
            t1,
            &[ok.clone(), ok.clone(), ok.clone(), ok.clone(), gone.clone()],
        );
        assert_eq!((outcome.holding, outcome.lost), (4, false));
        red.apply(outcome, t1).unwrap();
        assert_eq!(red.granted, 4);
        assert_eq!(red.lease.valid_until, t1 + TTL - drift(TTL));

        // Two more restarted: 2 of 5 still ours, a quorum is impossible: lost at once.
        let t2 = t1 + Duration::from_secs(1);
        let outcome = extend(
            &red,
            t2,
            &[
                ok.clone(),
                ok.clone(),
                gone.clone(),
                gone.clone(),
                gone.clone(),
            ],
        );
        assert_eq!((outcome.holding, outcome.lost), (2, true));
        assert!(red.apply(outcome, t2).is_err());
        assert_eq!((red.granted, red.has_quorum()), (2, false));
        assert_eq!(red.lease.remaining(t2), Duration::ZERO, "reported lost now");
    }

    #[test]
    fn an_extension_with_unanswered_nodes_keeps_the_old_validity() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(mut red)) = m.poll(t0) else {
            panic!()
        };
        let before = red.lease.valid_until;
        let ok = Ok(Reply::Int(1));
        let gone = Ok(Reply::Int(0));
        let t1 = t0 + Duration::from_secs(1);
        let mut ext =
            QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
        round(&mut ext, t1, &[ok.clone(), ok, gone, down(), down()]);
        let outcome = ext.poll(t1).outcome();
        assert!(!outcome.lost, "2 held + 2 unknown could still be 3");
        assert!(red.apply(outcome, t1).is_err());
        assert_eq!(red.granted, 2);
        assert_eq!(
            red.lease.valid_until, before,
            "unknown: the old grant's validity stands"
        );
    }

    trait DoneOk {
        fn done_ok(self) -> Option<Instant>;
        fn outcome(self) -> QuorumOutcome;
    }

    impl DoneOk for Step<QuorumOutcome> {
        fn done_ok(self) -> Option<Instant> {
            self.outcome().result.ok()
        }

        fn outcome(self) -> QuorumOutcome {
            match self {
                Step::Done(Ok(outcome)) => outcome,
                other => panic!("expected an outcome, got {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod token_tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::lease::Token;
    use crate::testing::origin;

    #[test]
    fn each_attempt_after_a_full_release_uses_a_new_token() {
        let t0 = origin();
        let spec = LockSpec::lease(
            &Keyspace::default(),
            "t",
            Token::from_random([5; 16]),
            Duration::from_secs(10),
        )
        .unwrap();
        let options = RedLockOptions {
            wait: Some(Duration::from_secs(1)),
            ..RedLockOptions::new(3)
        };
        let mut m = RedLockAcquire::new(spec, options, 1, t0).unwrap();
        let mut tokens = Vec::new();
        let mut now = t0;
        for round in 0..2 {
            let Step::Send(b) = m.poll(now) else {
                panic!("acquire")
            };
            tokens.push(String::from_utf8(b.requests[0].command.args()[2].clone()).unwrap());
            for r in &b.requests {
                m.handle(Response::reply(r.id, Reply::Nil), now);
            }
            let Step::Send(rel) = m.poll(now) else {
                panic!("release")
            };
            // The release names the same token as its attempt.
            assert_eq!(
                String::from_utf8(rel.requests[0].command.args()[4].clone()).unwrap(),
                tokens[round]
            );
            for r in &rel.requests {
                m.handle(Response::reply(r.id, Reply::Int(0)), now);
            }
            let Step::Wait(w) = m.poll(now) else {
                panic!("pause")
            };
            now = w.until;
        }
        assert_ne!(tokens[0], tokens[1]);
        assert!(tokens[1].starts_with(&tokens[0]));
    }
}
