//! RedLock: one lease over N independent Redis masters, held with a majority.
//!
//! ```text
//!  Trying ──SET key token NX PX ttl on every node (one batch)──► all answered
//!     ▲            granted ≥ N/2+1 and validity > 0 ──────────────► Done(Acquired)
//!     │            otherwise ──► Releasing (on every node that may hold it;
//!     │                              none may: no round) ──────────┐
//!     └── Waiting (random delay, 0..retry_max) ◄── deadline not passed ┘ else ► Done(error)
//! ```
//!
//! Validity is `ttl - elapsed - drift` with `drift = ttl/100 + 2 ms`, measured from when the
//! batch was sent. Nodes are asked in one batch, so a driver that writes to all of them
//! before reading any reply pays about one round trip, not N.
//!
//! **Each node is asked with the native `SET key token NX PX ttl`**, as canonical RedLock
//! (and redsync, node-redlock, Redisson) does, not with the single-node lease lock's fenced
//! acquire script: RedLock has no fence to issue, so a node holds only its key (the token,
//! under a PX ttl), and a grant costs it one plain `SET`. `OK` grants it on that node, nil
//! means another holder has it there; an error reply (a key of another type, an ACL user
//! without `SET`) or anything else grants nothing and counts, in [`Error::NoQuorum`], with
//! the nodes that did not answer. The command is sent without `GET`: a node's lost reply is
//! never asked again within a round (the next attempt uses a new token), so there is nothing
//! for `SET ... NX GET` (Redis 7.0+) to recognise, and 6.2 nodes would refuse it.
//!
//! **Undoing a failed round.** Without a quorum (or without validity left), the round is
//! released on every node that may hold its key, and only there: the nodes that granted
//! it, and those whose reply was lost, timed out or never sent (the `SET` may have run).
//! A node that answered nil (another holder's key) or an error reply did not run the `SET`,
//! and each attempt has a fresh token, so it cannot hold this attempt's key: it gets no
//! command at all. When no node may hold it (every node busy or refusing, the common case
//! under contention), there is no undo round: a contended attempt costs one round trip and
//! one `SET` per node. (This reads an error reply as the server's refusal to run the
//! command, which it is from Redis and Valkey; a proxy between the client and a node that
//! answered an error after forwarding a `SET` that then ran would leave that node's key in
//! place until its ttl: the same liveness cost as the delayed `SET` below.)
//!
//! **Lost replies.** A node whose `SET` reply was lost (timed out, connection dropped after
//! the write) does not count towards the quorum, though the command may have run there.
//! The lease still spans every node, so its release (and the undoing of a failed round)
//! asks that node too, and an extension counts it if the key is ours there. One race is
//! left, as in every RedLock implementation: a `SET` delayed in the network that reaches a
//! node *after* the release there sets the key again, with no holder to release it; that
//! node then refuses the name to everyone until the key's ttl runs out. This costs
//! liveness on one node for at most the ttl, never safety (the stray key's token belongs to
//! no holder, and one node is not a quorum).
//!
//! **What RedLock cannot promise.** Its safety rests on timing assumptions: bounded clock
//! drift between the nodes (a node whose clock jumps forward expires the key early), and
//! holders that do not pause longer than the validity (a GC pause or a stopped VM after
//! acquiring lets the lease run out while the holder still acts on it). It issues no fencing
//! token (a [`RedLease`]'s `lease.fence` is always 0: a counter per node would not be
//! ordered across nodes), so a resource cannot reject a stale holder; where that matters,
//! use a single-node lease lock with fencing, and replication safety (`min_replicas`) for
//! failover.
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

use crate::command::{Command, NodeId, Request, RequestId, RequestIds};
use crate::error::Error;
use crate::lease::{Lease, NativeDelete};
use crate::reply::{Reply, Response, TransportFailure};
use crate::script::Script;

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
/// number of nodes. A [`QuorumOp`] extends it with the lease's extend call, and releases it
/// with RedLock's own [`RELEASE`] (the lease's release call also announces the release,
/// which no RedLock waiter listens for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedLease {
    /// The lease. Its `fence` is always 0 (RedLock issues none: no counter is kept on any
    /// node) and `valid_until` is the quorum's validity.
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

/// `release.lua`: RedLock's release on one node, the lease lock's owner-checked delete
/// without its release announcement (no RedLock waiter listens for one). Same replies as the
/// lease release: `1` released, `0` gone (expired), `-1` another holder has it.
pub static RELEASE: Script = crate::script!("redlock_release", [], include_str!("release.lua"));

/// `EVALSHA` of [`RELEASE`] on `key` for `token`, for node 0.
fn release_command(key: &str, token: &str) -> Command {
    Command::with_capacity("EVALSHA", 4)
        .arg(RELEASE.sha1)
        .arg("1")
        .arg(key)
        .arg(token)
}

/// The native compare-and-delete `how` of `key` for `token`.
fn native_delete(how: NativeDelete, key: &[u8], token: &[u8]) -> Command {
    match how {
        NativeDelete::DelIfEq => Command::with_capacity("DELIFEQ", 2).arg(key).arg(token),
        NativeDelete::DelExIfEq => Command::with_capacity("DELEX", 3)
            .arg(key)
            .arg("IFEQ")
            .arg(token),
    }
}

/// In which form a node is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The round's command (for a script round, its `EVALSHA`).
    Given,
    /// The script's `EVAL` (after a `NOSCRIPT`).
    Eval,
    /// The node's native compare-and-delete, instead of the release script.
    Native,
}

/// Where one node's request of a [`NodeRound`] stands.
#[derive(Debug)]
enum NodeState {
    Sent {
        id: RequestId,
        form: Form,
    },
    /// To be asked again in this form: the script by its digest after a native delete that
    /// did not delete (`0`: gone or another's, the script says which) or was refused, by
    /// its source after `NOSCRIPT`.
    Resend(Form),
    Answered(Result<Reply, TransportFailure>),
    /// Not asked at all (see [`NodeRound::only`]).
    Skipped,
}

/// One command sent to every node in one batch, and each node's answer. The command is
/// built once (for node 0) and copied to each node. A script's call goes out as `EVALSHA`;
/// a node answering `NOSCRIPT` is asked again with `EVAL`, that node only.
///
/// A release round may ask some nodes with their native compare-and-delete instead
/// ([`with_native`](Self::with_native)): `1` is the script's `1` (released); a `0` cannot
/// tell a key gone from another holder's, and an error reply means the node refused it, so
/// either way that node is then asked with the script, which changes nothing on a key that
/// is not ours and says which it was.
#[derive(Debug)]
struct NodeRound {
    /// The command, until it has been copied to every node (kept for a script round, whose
    /// `EVAL` is built from it).
    command: Option<Command>,
    /// The script the command calls by its digest, if it is an `EVALSHA`.
    script: Option<&'static Script>,
    count: u16,
    /// Each node's request, by node (empty until the round is sent).
    nodes: Vec<NodeState>,
    /// Per node, the native command to ask it with first (empty: none).
    native: Vec<Option<Command>>,
    /// The nodes (bit `n` for node `n`) that refused their native command.
    refused: u64,
    /// Whether a native delete's `0` is final (set by [`undoing`](Self::undoing)).
    zero_is_final: bool,
    /// The nodes (bit `n` for node `n`) not to ask at all (set by [`only`](Self::only)).
    skip: u64,
}

impl NodeRound {
    /// `command` (a plain one) on nodes `0..count`.
    fn plain(command: Command, count: u16) -> Self {
        NodeRound {
            command: Some(command),
            script: None,
            count,
            nodes: Vec::new(),
            native: Vec::new(),
            refused: 0,
            zero_is_final: false,
            skip: 0,
        }
    }

    /// `command`, an `EVALSHA` of `script`, on nodes `0..count`.
    fn script(command: Command, script: &'static Script, count: u16) -> Self {
        NodeRound {
            script: Some(script),
            ..NodeRound::plain(command, count)
        }
    }

    /// This release round (of [`release_command`]: `EVALSHA sha 1 key token`), asking node
    /// `n` with its native compare-and-delete `native[n]` where it has one (see
    /// [`NodeRound`]). Unchanged once sent.
    fn with_native(mut self, native: &[Option<NativeDelete>]) -> Self {
        let Some(command) = self.command.as_ref().filter(|_| self.nodes.is_empty()) else {
            return self;
        };
        let args = command.args();
        let (Some(key), Some(token)) = (args.get(3), args.get(4)) else {
            return self;
        };
        if self.script.is_some_and(|s| std::ptr::eq(s, &RELEASE))
            && native.iter().any(Option::is_some)
        {
            self.native = native
                .iter()
                .take(usize::from(self.count))
                .map(|how| how.map(|how| native_delete(how, key, token)))
                .collect();
        }
        self
    }

    /// This release round as the undoing of a failed acquisition, whose answers nobody
    /// reads: a native delete that deleted nothing (`0`: gone, or another holder's) is that
    /// node's final answer, not asked again with the script. (A refusal still is: it
    /// deleted nothing that may be ours.)
    fn undoing(mut self) -> Self {
        self.zero_is_final = true;
        self
    }

    /// This round on the nodes in `nodes` only (bit `n` for node `n`): the others get no
    /// command and count as done, with no answer. Unchanged once sent.
    fn only(mut self, nodes: u64) -> Self {
        if self.nodes.is_empty() {
            self.skip = !nodes;
        }
        self
    }

    /// The requests to send now: every node's on the first poll, then those of the nodes
    /// to ask again; `None` when there is nothing to send.
    fn poll(&mut self, ids: &mut RequestIds) -> Option<Vec<Request>> {
        if self.nodes.is_empty() {
            let count = self.count;
            if count == 0 {
                return None;
            }
            let mut requests = Vec::with_capacity(usize::from(count));
            self.nodes.reserve_exact(usize::from(count));
            for i in 0..count {
                if i < 64 && self.skip & (1 << i) != 0 {
                    self.nodes.push(NodeState::Skipped);
                    continue;
                }
                let native = self.native.get_mut(usize::from(i)).and_then(Option::take);
                let (command, form) = match native {
                    Some(native) => (Some(native), Form::Native),
                    // A plain round's last node takes the original.
                    None if i + 1 == count && self.script.is_none() => {
                        (self.command.take(), Form::Given)
                    }
                    None => (self.command.clone(), Form::Given),
                };
                let Some(command) = command else { break };
                let id = ids.next();
                self.nodes.push(NodeState::Sent { id, form });
                requests.push(Request {
                    id,
                    command: command.on(NodeId(i)),
                });
            }
            self.native = Vec::new();
            return (!requests.is_empty()).then_some(requests);
        }
        if !self.nodes.iter().any(|n| matches!(n, NodeState::Resend(_))) {
            return None;
        }
        let eval = if self
            .nodes
            .iter()
            .any(|n| matches!(n, NodeState::Resend(Form::Eval)))
        {
            self.eval()
        } else {
            None
        };
        let mut requests = Vec::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let NodeState::Resend(form) = *node else {
                continue;
            };
            let command = match form {
                Form::Eval => eval.clone(),
                _ => self.command.clone(),
            };
            let i = u16::try_from(i).unwrap_or(u16::MAX);
            let id = ids.next();
            *node = match command {
                Some(command) => {
                    requests.push(Request {
                        id,
                        command: command.on(NodeId(i)),
                    });
                    NodeState::Sent { id, form }
                }
                // Nothing to ask with (cannot happen: only a script round asks again).
                None => NodeState::Answered(Err(TransportFailure::not_sent("no command"))),
            };
        }
        Some(requests)
    }

    /// The `EVAL` form of a script round's `EVALSHA`: the source in place of the digest.
    fn eval(&self) -> Option<Command> {
        let (command, script) = (self.command.as_ref()?, self.script?);
        let args = command.args();
        let mut eval = Command::with_capacity("EVAL", args.iter().count()).arg(script.source);
        for arg in args.iter().skip(2) {
            eval = eval.arg(arg);
        }
        Some(eval)
    }

    /// Takes the outcome of one of this round's requests (others are ignored).
    fn handle(&mut self, input: Response) -> bool {
        let Some((n, node)) = self
            .nodes
            .iter_mut()
            .enumerate()
            .find(|(_, s)| matches!(s, NodeState::Sent { id, .. } if *id == input.id))
        else {
            return false;
        };
        let NodeState::Sent { form, .. } = *node else {
            return false;
        };
        *node = match (form, input.result) {
            (Form::Given, Ok(Reply::Error(e))) if e.is("NOSCRIPT") && self.script.is_some() => {
                NodeState::Resend(Form::Eval)
            }
            (Form::Native, Ok(Reply::Int(1))) => NodeState::Answered(Ok(Reply::Int(1))),
            (Form::Native, Ok(Reply::Int(0))) if self.zero_is_final => {
                NodeState::Answered(Ok(Reply::Int(0)))
            }
            (Form::Native, Ok(Reply::Int(0))) => NodeState::Resend(Form::Given),
            // Any other answer (an error, a reply not understood): the script decides. Only
            // a refusal of the command itself (not known, no right to it) makes the driver
            // stop choosing it there; a passing error (LOADING, BUSY, OOM...) does not.
            (Form::Native, Ok(reply)) => {
                let refused = matches!(&reply, Reply::Error(e)
                    if e.is("NOPERM") || (e.is("ERR") && e.message.contains("unknown command")));
                if refused && n < 64 {
                    self.refused |= 1 << n;
                }
                NodeState::Resend(Form::Given)
            }
            (_, other) => NodeState::Answered(other),
        };
        true
    }

    /// The nodes that refused their native command, in node order.
    fn refused(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.count.min(64)).filter(|n| self.refused & (1 << n) != 0)
    }

    /// Whether every node asked has answered.
    fn is_done(&self) -> bool {
        self.nodes.len() == usize::from(self.count)
            && self
                .nodes
                .iter()
                .all(|n| matches!(n, NodeState::Answered(_) | NodeState::Skipped))
    }

    /// The answers, in node order (complete once [`is_done`](Self::is_done)).
    fn answers(&self) -> impl Iterator<Item = &Result<Reply, TransportFailure>> {
        self.answers_by_node().map(|(_, a)| a)
    }

    /// The answers with their node, in node order.
    fn answers_by_node(&self) -> impl Iterator<Item = (u16, &Result<Reply, TransportFailure>)> {
        self.nodes.iter().enumerate().filter_map(|(n, s)| match s {
            NodeState::Answered(a) => Some((u16::try_from(n).unwrap_or(u16::MAX), a)),
            _ => None,
        })
    }
}

mod acquire;
mod quorum;

pub use acquire::RedLockAcquire;
pub use quorum::{QuorumAction, QuorumOp, QuorumOutcome};

#[cfg(test)]
mod tests;
