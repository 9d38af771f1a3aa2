//! Releasing or extending a RedLock on every node at once.

use std::time::{Duration, Instant};

use crate::backoff::saturating_add;
use crate::command::RequestIds;
use crate::error::{Error, LossReason};
use crate::lease::NativeDelete;
use crate::protocol::{Batch, Outstanding, Protocol, Step};
use crate::reply::{Reply, Response};

use super::{NodeRound, RedLease, release_command};

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
    name: std::sync::Arc<str>,
    /// How many nodes the lock spans.
    nodes: u16,
    node_timeout: Duration,
    ids: RequestIds,
    /// The call on every node.
    round: NodeRound,
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
        let round = match action {
            // RedLock's own release: nobody listens for a RedLock release announcement.
            QuorumAction::Release => {
                let key = red.lease.target.keys.first().unwrap_or("");
                let release = release_command(key, red.lease.token.as_str());
                NodeRound::script(release, &super::RELEASE, red.nodes)
            }
            QuorumAction::Extend(ttl) => {
                let ms = crate::lease::validate_ttl("ttl", ttl)?;
                let call = red.lease.calls.extend().arg(ms.to_string());
                NodeRound::script(call.evalsha(), call.script(), red.nodes)
            }
        };
        Ok(QuorumOp {
            outstanding: Outstanding::default(),
            action,
            name: red.lease.target.name.clone(),
            nodes: red.nodes,
            node_timeout,
            ids: RequestIds::default(),
            round,
            sent_at: None,
            done: false,
        })
    }

    /// A release that asks each node `n` for which `native[n]` names its native
    /// compare-and-delete (Valkey 9.0+ `DELIFEQ`, Redis 8.4+ `DELEX ... IFEQ`; a driver learns
    /// them from the nodes) with that command instead of the release script: cheaper for
    /// the node, with the same outcomes (a node where it deletes nothing, or that refuses
    /// it, is then asked with the script, which says whether the key was gone or another
    /// holder's). No change to an extension, or to an operation already sent.
    pub fn with_native_release(mut self, native: &[Option<NativeDelete>]) -> Self {
        if self.action == QuorumAction::Release {
            self.round = self.round.with_native(native);
        }
        self
    }

    /// The nodes that refused their native compare-and-delete (an error reply, such as an
    /// unknown command or a `NOPERM`), in node order: a driver should stop choosing it for
    /// them.
    pub fn native_refused(&self) -> impl Iterator<Item = u16> + '_ {
        self.round.refused()
    }

    fn decide(&self, now: Instant) -> QuorumOutcome {
        // Each node's answer: 1 done (the key was ours), 0 gone, -1 another holder's;
        // anything else (an error, no reply) leaves it unknown.
        let (mut done, mut taken, mut known) = (0u16, 0u16, 0u16);
        for answer in self.round.answers() {
            match answer.as_ref().ok().and_then(Reply::as_int) {
                Some(1) => done += 1,
                Some(-1) => taken += 1,
                Some(0) => {}
                _ => continue,
            }
            known += 1;
        }
        let failed = self.nodes.saturating_sub(known);
        QuorumOutcome {
            result: self.result(done, taken, failed, now),
            holding: done,
            lost: done.saturating_add(failed) < self.nodes / 2 + 1,
        }
    }

    /// The result, from how many nodes were done, held by another, and did not answer.
    fn result(&self, done: u16, taken: u16, failed: u16, now: Instant) -> Result<Instant, Error> {
        // Cloned only for an error.
        let name = || self.name.to_string();
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
        if let Some(requests) = self.round.poll(&mut self.ids) {
            if self.sent_at.is_none() {
                self.sent_at = Some(now);
            }
            return Step::Send(Batch::new(requests, saturating_add(now, self.node_timeout)));
        }
        if !self.round.is_done() {
            return self.outstanding.step(now);
        }
        self.done = true;
        Step::Done(Ok(self.decide(now)))
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
        self.round.handle(input);
    }
}
