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
//!
//! The acquisition is [`RedLockAcquire`] (in `acquire.rs`), release and extension on every
//! node are [`QuorumOp`] (in `quorum.rs`).
//!
//! A walk through the graph with scripted replies: of three nodes, two grant the lock (one is
//! down), which is a majority; the holder then extends it on the two that hold it, and
//! releases.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Protocol, Reply, Response, Step, TransportFailure};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::{LockSpec, Token};
//! use redlease_core::redlock::*;
//!
//! // Sends one batch, answering node `i` with `answers[i]`, and polls again.
//! fn round<P: Protocol>(m: &mut P, now: Instant, answers: &[Result<Reply, TransportFailure>]) -> Step<P::Output> {
//!     let Step::Send(batch) = m.poll(now) else { panic!("expected a batch") };
//!     assert_eq!(batch.requests.len(), answers.len(), "one request per node, in one batch");
//!     for r in &batch.requests {
//!         let result = answers[usize::from(r.command.node().0)].clone();
//!         m.handle(Response { id: r.id, result }, now);
//!     }
//!     m.poll(now)
//! }
//! let ttl = Duration::from_secs(10);
//! let spec = LockSpec::lease(&Keyspace::default(), "invoices", Token::from_random([4; 16]), ttl).unwrap();
//! let now = Instant::now();
//! let mut acquire = RedLockAcquire::new(spec, RedLockOptions::new(3), 7, now).unwrap();
//!
//! let ok = Ok(Reply::Status("OK".into()));
//! let down = Err(TransportFailure::not_sent("connection refused"));
//! let Step::Done(Ok(mut red)) = round(&mut acquire, now, &[ok.clone(), ok, down.clone()])
//! else { unreachable!() };
//! assert_eq!((red.granted, red.has_quorum()), (2, true));
//!
//! let extend = QuorumAction::Extend(ttl);
//! let mut op = QuorumOp::new(&red, extend, Duration::from_millis(50)).unwrap();
//! let held = Ok(Reply::Int(1));
//! let Step::Done(Ok(outcome)) = round(&mut op, now, &[held.clone(), held.clone(), down.clone()])
//! else { unreachable!() };
//! assert!(red.apply(outcome, now).is_ok());
//!
//! let mut op = QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50)).unwrap();
//! let Step::Done(Ok(outcome)) = round(&mut op, now, &[held.clone(), held, down])
//! else { unreachable!() };
//! assert_eq!(outcome.holding, 2);
//! assert!(outcome.result.is_ok());
//! ```

use std::time::{Duration, Instant};

use crate::command::{NodeId, Request, RequestIds};
use crate::error::Error;
use crate::lease::Lease;
use crate::reply::{Reply, TransportFailure};
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

/// Polls every exchange (made by [`node_calls`]: one call, one exchange per node, so a
/// command built for one node is copied for the others); returns the requests to send
/// (`Err(Some)`), nothing yet (`Err(None)`), or every node's answer in node order once all
/// are in.
#[allow(clippy::type_complexity)]
fn poll_all(
    exchanges: &mut [Exchange],
    ids: &mut RequestIds,
) -> Result<Vec<Result<Reply, TransportFailure>>, Option<Vec<Request>>> {
    let mut requests = Vec::new();
    let mut answers: Vec<Option<Result<Reply, TransportFailure>>> =
        Vec::with_capacity(exchanges.len());
    let mut pending = false;
    let mut built = None;
    let exchanges_len = exchanges.len();
    for e in exchanges.iter_mut() {
        answers.push(match e.poll_sharing(ids, &mut built) {
            Progress::Send(r) => {
                if requests.is_empty() {
                    requests.reserve_exact(exchanges_len);
                }
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

mod acquire;
mod quorum;

pub use acquire::RedLockAcquire;
pub use quorum::{QuorumAction, QuorumOp, QuorumOutcome};

#[cfg(test)]
mod tests;
