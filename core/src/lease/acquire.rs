//! Acquiring a lock of any kind: try once, or wait with backoff (woken early by release
//! messages) until a deadline.

use std::time::{Duration, Instant};

use super::spec::undoing;
use super::{
    Lease, LeaseCalls, LeaseKind, LockKind, LockSpec, error_from_reply, int_pair_and_data, pttl,
    valid_until,
};
use crate::backoff::{Backoff, saturating_add};
use crate::command::{Command, Request, RequestId, RequestIds};
use crate::error::{Error, InvalidArgument};
use crate::protocol::{Batch, Outstanding, Protocol, Step, Wait};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};
use crate::script::ScriptCall;
use crate::script::{Exchange, Progress};

/// The longest a `min_replicas` check may wait for acknowledgements.
pub const MAX_REPLICA_WAIT: Duration = Duration::from_secs(3600);

/// The first retry pause of a waiting acquisition ([`AcquireOptions::retry_initial`]'s
/// default, and the blocking driver's).
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(5);

/// The longest retry pause of a waiting acquisition ([`AcquireOptions::retry_max`]'s
/// default, and the blocking driver's): 1 s. A waiter is meant to be woken by the release
/// message ([`Wait::wake_on`](crate::Wait::wake_on)); the pauses only bound how late it
/// notices a message it missed, or a holder that went away without releasing. A driver that
/// does not listen for wake-ups should set a shorter `retry_max` (say 50-200 ms): without
/// them, the pause is how long a waiter may sleep past a release.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(1);

/// How an acquisition behaves (the lock itself is described by its [`LockSpec`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    /// `None`: try once. `Some(w)`: retry until `w` has passed since the start. Defaults to `None`.
    pub wait: Option<Duration>,
    /// The first retry pause; it doubles (with jitter) up to `retry_max`. Defaults to 5 ms
    /// ([`DEFAULT_RETRY_INITIAL`]).
    pub retry_initial: Duration,
    /// The longest retry pause (never beyond the holder's remaining lease). Defaults to 1 s
    /// ([`DEFAULT_RETRY_MAX`], as the blocking driver's locks): right for a driver that
    /// listens for release messages; without them, set it shorter.
    pub retry_max: Duration,
    /// How long one attempt may wait for its reply (passed to the driver as the batch
    /// deadline). An attempt started before the wait deadline may end up to this much after
    /// it. Defaults to 1 s.
    pub reply_timeout: Duration,
    /// Replication safety: after acquiring, `WAIT` until this many replicas acknowledged the
    /// write (at most the given time); with fewer, release and fail with
    /// [`Error::ReplicationFailed`]. Defaults to `None` (no check).
    pub min_replicas: Option<(u32, Duration)>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            wait: None,
            retry_initial: DEFAULT_RETRY_INITIAL,
            retry_max: DEFAULT_RETRY_MAX,
            reply_timeout: Duration::from_secs(1),
            min_replicas: None,
        }
    }
}

/// What an acquisition yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// The lock is ours.
    Acquired(Box<Lease>),
    /// Another holder has it (only when trying once; a waiting acquisition ends with
    /// [`Error::Timeout`] instead).
    Busy {
        /// Time left on the holder's lease (`None`: unknown, or the key has no expiry).
        holder_ttl: Option<Duration>,
    },
}

#[derive(Debug)]
enum State {
    /// An unfenced lease lock's first attempt: a bare `SET <lock> <token> NX PX <ttl>`,
    /// ready (`request: None`), in flight, or answered.
    SetNx {
        request: Option<RequestId>,
        answer: Option<Result<Reply, TransportFailure>>,
    },
    /// The acquisition call is ready or in flight.
    Trying,
    /// Pausing before the next attempt.
    Waiting {
        until: Instant,
        /// When the last answer changes by itself (see [`Wait::unchanged_until`]).
        unchanged_until: Option<Instant>,
    },
    /// Acquired; waiting for replicas to acknowledge it (`WAIT`).
    Replicating {
        lease: Box<Lease>,
        request: Option<RequestId>,
        answer: Option<Result<Reply, TransportFailure>>,
    },
    /// Finishing: the calls in `cleanup` run (all in one batch), then `result` is returned.
    CleaningUp {
        result: Result<Acquisition, Error>,
    },
    Done,
}

/// The acquisition of a lock, as a [`Protocol`].
///
/// ```text
///   SetNx ──SET lock token NX PX ttl──► OK ─────────────────────────► Done(Acquired, fence 0)
///     │  (unfenced lease lock only)      nil, error reply ─► Trying (at once)
///     │                                  lost reply ─► as a lost reply of Trying's script
///     ▼
///   Trying ──EVALSHA acquire──► {1,fence} or fence ─────────────────► Done(Acquired)
///     ▲  │                      {0,pttl}: try once ────────────────► Done(Busy)
///     │  │                      {0,pttl}: waiting ─► Waiting(until backoff or holder's ttl)
///     │  │                                              │ wake (release message) or until
///     │  └──── transport failure: retry (waiting) ◄─────┘
///     └───────────────────────────────────────────────┘
///   deadline passed ──────────────────► CleaningUp[cancel] ───────────► Done(Timeout)
///   failure after a lost reply ───────► CleaningUp[release, cancel] ──► Done(error)
///   a reply not understood ───────────► CleaningUp[release, cancel] ──► Done(UnexpectedReply)
/// ```
///
/// Every acquire script recognises its own token, so a retry after a lost reply returns the
/// fence it was issued rather than a second one (unless the fence counter was lost, evicted
/// or deleted: then a higher one, from the server clock floor); the cleanup after a lost reply releases
/// what the lost attempt may have taken, and a waiter that gives up leaves any queue it
/// joined ([`LockSpec::cancel`]).
///
/// An unfenced lease lock ([`LockSpec::fenced`]`(false)`) starts with the native
/// `SET <lock> <token> NX PX <ttl>`, no script: `OK` grants the lease (fence 0, valid from
/// that attempt's send time). Anything else goes on exactly as a fenced acquisition would,
/// with the acquire script: a busy lock (nil) is asked again at once by the script, which
/// reports the holder's time left (so trying once on a busy lock costs two round trips), a
/// wrong type, or an undone acquisition; an error reply is left for the script to report (or
/// to wait out, if it is a passing one); a lost reply counts as a lost attempt (the script
/// recognises our token if the `SET` took the lock; the cleanup undoes it if we give up). A
/// grant by the script also reports fence 0. See [`LockSpec::fenced`] for what this gives
/// up.
#[derive(Debug)]
pub struct Acquire {
    /// The deadline of the batch in flight.
    outstanding: Outstanding,
    spec: LockSpec,
    started: Instant,
    deadline: Option<Instant>,
    reply_timeout: Duration,
    backoff: Backoff,
    ids: RequestIds,
    exchange: Exchange,
    cleanup: Vec<Exchange>,
    state: State,
    attempts: u32,
    sent_at: Instant,
    lost_reply: bool,
    seen_busy: bool,
    /// The lock was granted (a failed replication check must release it).
    granted: bool,
    /// A script ran to its end with a reply we do not understand: it may have written
    /// (taken the lock, joined a line), so the attempt is undone before failing. (An error
    /// reply stops a script before its first write: every script reads and checks its keys
    /// first.)
    may_have_written: bool,
    min_replicas: Option<(u32, Duration)>,
}

impl Acquire {
    /// An acquisition of the lock `spec`, starting at `now`; `seed` drives the retry
    /// jitter. Fails at once on bad options (nothing is sent).
    pub fn new(
        spec: LockSpec,
        options: &AcquireOptions,
        seed: u64,
        now: Instant,
    ) -> Result<Self, Error> {
        crate::limits::timeout("reply timeout", options.reply_timeout)?;
        crate::limits::retry("retry", options.retry_initial, options.retry_max)?;
        if let Some((count, timeout)) = options.min_replicas {
            if count == 0 {
                return Err(InvalidArgument::Setting(
                    "min_replicas needs at least 1 replica".into(),
                )
                .into());
            }
            // WAIT 0 would block forever on the server.
            crate::limits::duration(
                "replica acknowledgement timeout",
                timeout,
                Duration::from_millis(1),
                MAX_REPLICA_WAIT,
            )?;
            if timeout >= spec.ttl / 2 {
                return Err(InvalidArgument::Setting(format!(
                    "the replica acknowledgement timeout ({timeout:?}) must be under half the ttl ({:?})",
                    spec.ttl
                ))
                .into());
            }
        }
        if !spec.fenced && spec.kind != LeaseKind::Lock(LockKind::Lease) {
            return Err(InvalidArgument::Setting(format!(
                "only a lease lock can go without a fence, not a {:?} lock",
                spec.kind
            ))
            .into());
        }
        // Trying once never takes a place in a line.
        let spec = if options.wait.is_none() {
            spec.trying_once()
        } else {
            spec
        };
        let mut exchange = Exchange::new(spec.acquire.clone());
        let state = if spec.fenced {
            exchange.start();
            State::Trying
        } else {
            State::SetNx {
                request: None,
                answer: None,
            }
        };
        Ok(Acquire {
            outstanding: Outstanding::default(),
            deadline: options
                .wait
                .map(|w| saturating_add(now, crate::limits::wait(w))),
            started: now,
            reply_timeout: options.reply_timeout,
            backoff: Backoff::new(options.retry_initial, options.retry_max, seed),
            ids: RequestIds::default(),
            exchange,
            cleanup: Vec::new(),
            state,
            attempts: 0,
            sent_at: now,
            lost_reply: false,
            seen_busy: false,
            granted: false,
            may_have_written: false,
            min_replicas: options.min_replicas,
            spec,
        })
    }

    /// The lock being acquired. Once the acquisition succeeded, its
    /// [`target`](LockSpec::target) has moved into the [`Lease`] (and is empty here).
    pub fn spec(&self) -> &LockSpec {
        &self.spec
    }

    fn batch(&self, requests: Vec<Request>, now: Instant) -> Step<Acquisition> {
        Step::Send(Batch::new(
            requests,
            saturating_add(now, self.reply_timeout),
        ))
    }

    /// Finishes with `result`, first running the cleanup it calls for: release what a lost
    /// attempt may hold, and leave any waiting line joined.
    fn finish(&mut self, result: Result<Acquisition, Error>) -> Option<Step<Acquisition>> {
        // Never called with an acquisition: every path here ends without the lock.
        let mut calls = Vec::new();
        if self.lost_reply || self.granted || self.may_have_written {
            calls.extend(self.spec.undo.clone());
        }
        if self.seen_busy || self.lost_reply || self.may_have_written {
            // A busy answer may have put us in a line (fair queue, waiting writers).
            calls.extend(self.spec.cancel.clone());
        }
        if calls.is_empty() {
            self.state = State::Done;
            return Some(Step::Done(result));
        }
        self.cleanup = calls
            .into_iter()
            .map(|c| {
                let mut e = Exchange::new(c);
                e.start();
                e
            })
            .collect();
        self.state = State::CleaningUp { result };
        None
    }

    /// Pauses before the next attempt: for the backoff's next delay, at most `cap` (the
    /// holder's ttl, or the time until a job is due). `busy_ms`: the script's busy answer
    /// (`{0, ms}`), when that is why.
    fn pause(
        &mut self,
        now: Instant,
        cap: Option<Duration>,
        busy_ms: Option<i64>,
    ) -> Option<Step<Acquisition>> {
        let deadline = self.deadline?;
        let mut delay = self.backoff.next_delay();
        if let Some(cap) = cap {
            // The holder's lease ends by then at the latest.
            delay = delay.min(cap.max(Duration::from_millis(1)));
        }
        let until = saturating_add(now, delay).min(deadline);
        // Only where every other change is announced on the wake channel: a lease lock
        // (released with a message; otherwise it changes when its ttl runs out) and a job
        // (pushed, nacked, given back or requeued with a message; otherwise it changes when
        // a delayed job falls due or a lease runs out: the `ms` answered, -2 when nothing
        // is scheduled at all).
        let changes_in = match (self.spec.kind, busy_ms) {
            (LeaseKind::Lock(LockKind::Lease), Some(ms)) if ms >= 0 => cap,
            (LeaseKind::Job, Some(ms)) if ms >= 0 => cap,
            (LeaseKind::Job, Some(-2)) => Some(Duration::MAX),
            _ => None,
        };
        let unchanged_until = changes_in.map(|d| {
            saturating_add(now, d.max(Duration::from_millis(1)))
                .min(deadline)
                .max(until)
        });
        self.state = State::Waiting {
            until,
            unchanged_until,
        };
        Some(self.wait_step(until, unchanged_until))
    }

    fn wait_step(&self, until: Instant, unchanged_until: Option<Instant>) -> Step<Acquisition> {
        Step::Wait(Wait {
            until,
            wake_on: Some(self.spec.wake.clone()),
            unchanged_until,
        })
    }

    fn on_reply(&mut self, reply: Reply, now: Instant) -> Option<Step<Acquisition>> {
        if let Reply::Error(e) = reply {
            // During a failover (READONLY, MASTERDOWN) or a cluster migration (TRYAGAIN,
            // CLUSTERDOWN) the command did not run: a waiting acquisition waits for the new
            // master; trying once reports it as `Unavailable` (a passing failure), not as an
            // error of the lock.
            if e.is_transient() && self.deadline.is_none_or(|d| now < d) {
                return self.on_failure(TransportFailure::not_sent(e.to_string()), now);
            }
            let err = error_from_reply(&self.spec.target, e);
            return self.finish(Err(err));
        }
        // Exclusive holds are issued fences from 1; a read hold reports the last writer's
        // fence, 0 before the first writer; a permit's fence is 0; an unfenced lease's `SET
        // NX PX` grant comes here as fence 0.
        let min_fence = match self.spec.kind {
            LeaseKind::Lock(LockKind::Read) | LeaseKind::Permit => 0,
            _ if !self.spec.fenced => 0,
            _ => 1,
        };
        // Only a job carries data (its id and payload), and it always does.
        let wants_data = self.spec.kind == LeaseKind::Job;
        // A grant is `{1, fence}` (with a job's data), or the bare fence from the two
        // scripts that answer so (an integer reply is cheaper for the server than a table):
        // `acquire.lua` (a lease lock's fence, >= 1) and `permit_acquire.lua` (0). A bare
        // integer from any other script is malformed.
        let parsed = match reply {
            Reply::Int(fence)
                if self.spec.kind == LeaseKind::Lock(LockKind::Lease)
                    || (self.spec.kind == LeaseKind::Permit && fence == 0) =>
            {
                Some((1, fence, Vec::new()))
            }
            Reply::Int(_) => None,
            _ => int_pair_and_data(&reply),
        };
        match parsed {
            // A job's data: its id and payload, and its attempt after a requeue.
            Some((1, fence, data))
                if fence >= min_fence && wants_data == crate::queue::is_job_data(&data, fence) =>
            {
                // A job with a hold limit is leased no longer than that on the server: its
                // validity ends by then, counted from this attempt's send.
                let hold_left = if wants_data {
                    u64::try_from(fence)
                        .ok()
                        .and_then(|f| crate::queue::job_tail_of(&data, f))
                        .and_then(|t| t.hold_left)
                } else {
                    None
                };
                let valid = match hold_left {
                    Some(left) => valid_until(self.sent_at, self.spec.ttl)
                        .min(valid_until(self.sent_at, left)),
                    None => valid_until(self.sent_at, self.spec.ttl),
                };
                if now >= valid {
                    // Granted, but the reply came after the lease's local validity: nothing
                    // of it is safely ours. A waiting acquisition asks again (the script
                    // knows our token); trying once undoes the grant and fails.
                    self.granted = true;
                    if self.deadline.is_some_and(|d| now < d) {
                        self.exchange.start();
                        return None;
                    }
                    return self.finish(Err(Error::Unavailable {
                        attempts: self.attempts,
                        last: TransportFailure::no_reply(
                            "the lock was granted, but the reply came after the lease's validity ran out",
                        ),
                    }));
                }
                let mut calls = self.spec.calls.clone();
                if self.lost_reply
                    && let Some(release) = self.remembering_release()
                {
                    // An attempt went unanswered and may still arrive: the release records
                    // the token as undone, so that it takes nothing then.
                    calls = LeaseCalls::new(release, calls.extend(), calls.inspect());
                }
                // The lease takes the target, unless a replication check may still need it
                // for an error.
                let mut target = if self.min_replicas.is_none() {
                    std::mem::take(&mut self.spec.target)
                } else {
                    self.spec.target.clone()
                };
                if let Some(id) = data.first().filter(|_| wants_data) {
                    calls = calls.for_job(id);
                    target.name = crate::queue::lease_name(&target.name, id);
                }
                let lease = Box::new(Lease {
                    kind: self.spec.kind,
                    target,
                    token: self.spec.token.clone(),
                    // An unfenced spec promises no fence, whoever granted it.
                    fence: if self.spec.fenced { fence as u64 } else { 0 },
                    ttl: self.spec.ttl,
                    acquired_at: self.sent_at,
                    valid_until: valid,
                    attempts: self.attempts,
                    unanswered: self.lost_reply,
                    calls,
                    data,
                });
                if self.min_replicas.is_some() {
                    self.granted = true;
                    self.state = State::Replicating {
                        lease,
                        request: None,
                        answer: None,
                    };
                    return None;
                }
                self.state = State::Done;
                Some(Step::Done(Ok(Acquisition::Acquired(lease))))
            }
            Some((0, ms, data)) if data.is_empty() => {
                self.seen_busy = true;
                let holder_ttl = pttl(ms);
                match self.deadline {
                    None => self.finish(Ok(Acquisition::Busy { holder_ttl })),
                    Some(deadline) if now >= deadline => {
                        let err = Error::Timeout {
                            name: self.spec.target.name.to_string(),
                            waited: now.saturating_duration_since(self.started),
                            attempts: self.attempts,
                        };
                        self.finish(Err(err))
                    }
                    Some(_) => self.pause(now, holder_ttl, Some(ms)),
                }
            }
            _ => {
                self.may_have_written = true;
                self.finish(Err(Error::UnexpectedReply {
                    context: "lock acquisition",
                    reply: reply.describe(),
                }))
            }
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
            return self.finish(Err(Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            }));
        }
        match self.pause(now, None, None) {
            Some(step) => Some(step),
            None => {
                self.exchange.start();
                None
            }
        }
    }

    /// The release of a lease whose acquisition had an attempt that went unanswered: it
    /// also records the token as undone ([`LockSpec::undo`]'s set, for
    /// [`UNDONE_KEEP`](super::UNDONE_KEEP)), so that the attempt, if it was only delayed
    /// and arrives after the release, takes nothing. For most kinds that is the undo call
    /// itself (the release plus the set); a reentrant hold's undo takes back a hold instead,
    /// and a job's gives it back uncounted, so theirs is their release plus the undo's set.
    fn remembering_release(&self) -> Option<ScriptCall> {
        let undo = self.spec.undo.as_ref()?;
        match self.spec.kind {
            LeaseKind::Lock(LockKind::Reentrant) | LeaseKind::Job => {
                let undone = String::from_utf8(undo.last_key()?.to_vec()).ok()?;
                Some(undoing(self.spec.calls.release().clone(), &undone))
            }
            _ => Some(undo.clone()),
        }
    }

    /// The first attempt of an unfenced lease lock: a bare `SET <lock> <token> NX PX <ttl>`.
    fn set_nx(&self) -> Command {
        let key = self.spec.target.keys.first().unwrap_or_default();
        let token = self.spec.token.as_str();
        Command::with_bytes("SET", 5, key.len() + token.len() + 24)
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .int_arg(u64::try_from(self.spec.ttl.as_millis()).unwrap_or(u64::MAX))
            .on(self.spec.acquire.node())
    }

    /// The `SET NX PX` answered: `OK` is a grant (fence 0); anything else goes on with the
    /// acquire script as a fenced acquisition would.
    fn on_set_nx(
        &mut self,
        answer: Result<Reply, TransportFailure>,
        now: Instant,
    ) -> Option<Step<Acquisition>> {
        self.state = State::Trying;
        match answer {
            // The grant, as the script's (fence 0: the spec promises none).
            Ok(Reply::Status(s)) if s == "OK" => self.on_reply(Reply::Int(0), now),
            Err(failure) => self.on_failure(failure, now),
            // Busy (nil), or an error reply: the script reports the holder's time left, a
            // wrong type, an undone acquisition, or the error itself (a passing one is waited
            // out as usual). It runs at once: the holder's ttl is not known yet.
            Ok(Reply::Nil | Reply::Error(_)) => {
                self.exchange.start();
                None
            }
            // A reply `SET` never gives: it may have taken the lock. The script recognises
            // our token if it did; a cleanup undoes it if we give up.
            Ok(_) => {
                self.lost_reply = true;
                self.exchange.start();
                None
            }
        }
    }

    /// The `WAIT` answered: keep the lock with enough replicas, else release and fail.
    fn on_replicated(&mut self, now: Instant) -> Option<Step<Acquisition>> {
        let State::Replicating {
            lease,
            answer: Some(answer),
            ..
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return Some(Step::Done(Err(Error::Finished)));
        };
        let (required, timeout) = self.min_replicas.unwrap_or((0, Duration::ZERO));
        let result = match answer {
            // Acknowledged, and still valid after the wait.
            Ok(Reply::Int(n)) if n >= i64::from(required) && now < lease.valid_until => {
                return Some(Step::Done(Ok(Acquisition::Acquired(lease))));
            }
            Ok(Reply::Int(_)) if now >= lease.valid_until => Err(Error::Unavailable {
                attempts: self.attempts,
                last: TransportFailure::no_reply(
                    "the replicas acknowledged only after the lease's validity ran out",
                ),
            }),
            Ok(Reply::Int(n)) => Err(Error::ReplicationFailed {
                name: self.spec.target.name.to_string(),
                acknowledged: u32::try_from(n).unwrap_or(0),
                required,
                timeout,
            }),
            Ok(Reply::Error(e)) => Err(error_from_reply(&self.spec.target, e)),
            Ok(other) => Err(Error::UnexpectedReply {
                context: "replica acknowledgement (WAIT)",
                reply: other.describe(),
            }),
            Err(failure) => Err(Error::Unavailable {
                attempts: self.attempts,
                last: failure,
            }),
        };
        // `finish` releases the lock we were granted before reporting.
        self.finish(result)
    }

    fn poll_cleanup(&mut self, now: Instant) -> Step<Acquisition> {
        let mut requests = Vec::new();
        let mut awaiting = false;
        for e in &mut self.cleanup {
            match e.poll(&mut self.ids) {
                Progress::Send(r) => requests.push(r),
                Progress::Awaiting => awaiting = true,
                // Whatever the cleanup's outcome, the result stands.
                Progress::Answered(_) | Progress::Idle => {}
            }
        }
        if !requests.is_empty() {
            return self.batch(requests, now);
        }
        if awaiting {
            return self.outstanding.step(now);
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::CleaningUp { result } => Step::Done(result),
            _ => Step::Done(Err(Error::Finished)),
        }
    }
}

impl Acquire {
    /// What [`poll`](Protocol::poll) yields, before it notes a batch's deadline.
    fn next_step(&mut self, now: Instant) -> Step<Acquisition> {
        loop {
            match &self.state {
                State::Done => return Step::Done(Err(Error::Finished)),
                State::Waiting {
                    until,
                    unchanged_until,
                } => {
                    if now < *until {
                        return self.wait_step(*until, *unchanged_until);
                    }
                    self.state = State::Trying;
                    self.exchange.start();
                }
                State::CleaningUp { .. } => return self.poll_cleanup(now),
                State::SetNx { request: None, .. } => {
                    let id = self.ids.next();
                    let command = self.set_nx();
                    self.state = State::SetNx {
                        request: Some(id),
                        answer: None,
                    };
                    self.attempts += 1;
                    self.sent_at = now;
                    return self.batch(vec![Request { id, command }], now);
                }
                State::SetNx { answer: None, .. } => return self.outstanding.step(now),
                State::SetNx {
                    answer: Some(_), ..
                } => {
                    let State::SetNx {
                        answer: Some(answer),
                        ..
                    } = std::mem::replace(&mut self.state, State::Trying)
                    else {
                        continue;
                    };
                    if let Some(step) = self.on_set_nx(answer, now) {
                        return step;
                    }
                }
                State::Replicating {
                    request: Some(_),
                    answer: None,
                    ..
                } => return self.outstanding.step(now),
                State::Replicating { request: None, .. } => {
                    let (count, timeout) = self.min_replicas.unwrap_or((0, Duration::ZERO));
                    let id = self.ids.next();
                    if let State::Replicating { request, .. } = &mut self.state {
                        *request = Some(id);
                    }
                    let command = Command::new("WAIT")
                        .int_arg(count)
                        .int_arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
                    return Step::Send(Batch {
                        requests: vec![Request { id, command }],
                        deadline: saturating_add(saturating_add(now, timeout), self.reply_timeout),
                        server_wait: timeout,
                        same_connection: true,
                    });
                }
                State::Replicating {
                    answer: Some(_), ..
                } => {
                    if let Some(step) = self.on_replicated(now) {
                        return step;
                    }
                }
                State::Trying => {
                    let step = match self.exchange.poll(&mut self.ids) {
                        Progress::Send(request) => {
                            if request.command.is("EVALSHA") {
                                self.attempts += 1;
                            }
                            self.sent_at = now;
                            return self.batch(vec![request], now);
                        }
                        Progress::Awaiting => return self.outstanding.step(now),
                        Progress::Answered(Ok(reply)) => self.on_reply(reply, now),
                        Progress::Answered(Err(failure)) => self.on_failure(failure, now),
                        Progress::Idle => self.finish(Err(Error::Finished)),
                    };
                    if let Some(step) = step {
                        return step;
                    }
                }
            }
        }
    }
}

impl Protocol for Acquire {
    type Output = Acquisition;

    fn poll(&mut self, now: Instant) -> Step<Acquisition> {
        let step = self.next_step(now);
        self.outstanding.track(&step);
        step
    }

    fn wake(&mut self, _now: Instant) {
        if let State::Waiting { .. } = self.state {
            self.state = State::Trying;
            self.exchange.start();
        }
    }

    fn handle(&mut self, input: Response, _now: Instant) {
        if let State::SetNx {
            request: Some(id),
            answer,
        } = &mut self.state
        {
            if input.id == *id {
                *answer = Some(input.result);
            }
            return;
        }
        if let State::Replicating {
            request: Some(id),
            answer,
            ..
        } = &mut self.state
        {
            if input.id == *id {
                *answer = Some(input.result);
            }
            return;
        }
        match self.state {
            State::CleaningUp { .. } => {
                for e in &mut self.cleanup {
                    if e.handle(input.clone()) {
                        break;
                    }
                }
            }
            _ => {
                self.exchange.handle(input);
            }
        }
    }
}
