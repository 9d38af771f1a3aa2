//! Releasing or extending a RedLock on every node at once.

use std::time::{Duration, Instant};

use crate::backoff::saturating_add;
use crate::command::RequestIds;
use crate::error::{Error, LossReason};
use crate::protocol::{Batch, Outstanding, Protocol, Step};
use crate::reply::{Reply, Response, TransportFailure};
use crate::script::Exchange;

use super::{RedLease, node_calls, poll_all};

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
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    action: QuorumAction,
    /// The lock's name (for errors).
    name: String,
    /// How many nodes the lock spans.
    nodes: u16,
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
            outstanding: Outstanding::default(),
            action,
            name: red.lease.target.name.to_string(),
            nodes: red.nodes,
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
            lost: holding.saturating_add(unknown) < self.nodes / 2 + 1,
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
        // Cloned only for an error.
        let name = || self.name.clone();
        let quorum = self.nodes / 2 + 1;
        match self.action {
            QuorumAction::Release if done > 0 => Ok(now),
            QuorumAction::Release if failed == self.nodes => Err(Error::NoQuorum {
                name: name(),
                nodes: self.nodes,
                needed: quorum,
                granted: 0,
                busy: taken,
                unreachable: failed,
            }),
            QuorumAction::Release => Err(Error::NotOwner {
                name: name(),
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
                name: name(),
                nodes: self.nodes,
                needed: quorum,
                granted: done,
                busy: taken,
                unreachable: failed,
            }),
            QuorumAction::Extend(_) => Err(Error::NotOwner {
                name: name(),
                reason: if taken > 0 {
                    LossReason::Taken
                } else {
                    LossReason::Expired
                },
            }),
        }
    }
}

impl QuorumOp {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<QuorumOutcome> {
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
            Err(None) => self.outstanding.step(now),
            Ok(answers) => {
                self.done = true;
                Step::Done(Ok(self.decide(&answers, now)))
            }
        }
    }
}

impl Protocol for QuorumOp {
    type Output = QuorumOutcome;

    fn poll(&mut self, now: Instant) -> Step<QuorumOutcome> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn handle(&mut self, input: Response, _now: Instant) {
        if let Some(e) = self.exchanges.iter_mut().find(|e| e.awaits(input.id)) {
            e.handle(input);
        }
    }
}
