//! Ack a job and take the next one in one round trip: what a busy worker does between two
//! jobs.
//!
//! ```text
//!   AckAndTake ──EVALSHA ack_take──► {ack, 1, delivery, id, payload} ──► Done { ack, Taken(next) }
//!     │    ▲                         {ack, 0, ms | -2} ────────────────► Done { ack, Empty }
//!     │    └── no reply: send again (same tokens: the script finds the settled ack and
//!     │        the job already leased to the next token, so nothing happens twice)
//!     └── gave up after a lost reply ──► Undoing[untake next token] ──► Done(Unavailable)
//! ```
//!
//! Safety, the same as an ack followed by a take:
//! - the next job's lease starts when the script hands it over, and its local validity is
//!   counted from the send of the attempt that was answered; a reply that comes after that
//!   validity gives the job back (untake: its delivery not counted) and says `Empty`;
//! - a lost reply is answered by sending the same call again: the ack part finds its own
//!   settlement (`Ok`), the take part finds the job it leased to the next token;
//! - when no attempt is answered, whatever the next token may hold is given back (untake),
//!   and the token is remembered as undone, so a late attempt takes nothing; the caller
//!   learns `Unavailable` and retries the plain [`ack`](super::TakenJob::ack), which the
//!   settlement record makes idempotent.
//!
//! So a job is neither lost (an unanswered take is given back) nor run twice (an ack or take
//! is recognised on retry).

use std::time::{Duration, Instant};

use super::take::{Take, TakenJob};
use super::{QueueKeys, QueueSettings, SETTLED_KEEP, take};
use crate::backoff::saturating_add;
use crate::error::{Error, LossReason};
use crate::lease::{Lease, LockSpec, OpKind, ScriptOp, Token, valid_until};
use crate::protocol::{Protocol, Step};
use crate::reply::{FailureKind, Reply, Response};
use crate::script::ScriptCall;

/// How long the untake of an unanswered call may take at least (past the call's deadline).
const UNDO_TIME: Duration = Duration::from_secs(1);

/// What [`AckAndTake`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AckedAndTaken {
    /// The ack of the finished job: `Ok`, or [`Error::NotOwner`] when its lease had run out
    /// (it goes, or went, to another worker: this worker's work must not count).
    pub ack: Result<(), Error>,
    /// The next job, leased to the next token, or `Empty` (take again with a waiting take).
    pub next: Take,
}

/// The combined call's reading of a reply.
#[derive(Debug)]
pub(crate) struct AckTakeCall {
    acked: String,
    next: LockSpec,
}

impl OpKind for AckTakeCall {
    type Output = AckedAndTaken;
    const CONTEXT: &'static str = "queue ack and take";

    fn decide(
        &self,
        reply: &Reply,
        sent_at: Instant,
        _: bool,
    ) -> Option<Result<AckedAndTaken, Error>> {
        let items = reply.as_array()?;
        let (ack, rest) = items.split_first()?;
        let ack = match ack.as_int()? {
            1 => Ok(()),
            0 => Err(self.not_owner(LossReason::Expired)),
            -1 => Err(self.not_owner(LossReason::Taken)),
            _ => return None,
        };
        let next = match rest {
            [
                Reply::Int(1),
                Reply::Int(delivery),
                Reply::Bulk(id),
                Reply::Bulk(payload),
            ] if *delivery >= 1 => {
                let lease = self.lease(id, *delivery as u64, payload, sent_at);
                match TakenJob::from_lease(lease) {
                    Ok(job) => Take::Taken(Box::new(job)),
                    Err(e) => return Some(Err(e)),
                }
            }
            [Reply::Int(0), Reply::Int(ms)] => Take::Empty {
                next_due_in: u64::try_from(*ms).ok().map(Duration::from_millis),
            },
            _ => return None,
        };
        Some(Ok(AckedAndTaken { ack, next }))
    }
}

impl AckTakeCall {
    fn not_owner(&self, reason: LossReason) -> Error {
        Error::NotOwner {
            name: self.acked.clone(),
            reason,
        }
    }

    /// The lease of the job handed to the next token, as a take would have made it.
    fn lease(&self, id: &[u8], delivery: u64, payload: &[u8], sent_at: Instant) -> Lease {
        let spec = &self.next;
        let calls = spec.calls.for_job(id);
        let mut target = spec.target.clone();
        target.name = format!("{} job {}", target.name, String::from_utf8_lossy(id)).into();
        Lease {
            kind: spec.kind,
            target,
            token: spec.token.clone(),
            fence: delivery,
            ttl: spec.ttl,
            acquired_at: sent_at,
            valid_until: valid_until(sent_at, spec.ttl),
            attempts: 1,
            calls,
            data: vec![id.to_vec(), payload.to_vec()],
        }
    }
}

/// The untake of the next token: any int answer is fine (1 given back, 0 nothing held).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Untake;

impl OpKind for Untake {
    type Output = ();
    const CONTEXT: &'static str = "queue untake";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<(), Error>> {
        reply.as_int().map(|_| Ok(()))
    }
}

// The large variant is the one in use for almost the whole life of the machine.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum State {
    Calling(ScriptOp<AckTakeCall>),
    /// Giving back what the next token may hold, then finishing with `result`.
    Undoing {
        op: Box<ScriptOp<Untake>>,
        result: Result<AckedAndTaken, Error>,
    },
    Done,
}

/// The ack of one job and the take of the next, in one script call, as a [`Protocol`].
/// Made by [`TakenJob::ack_and_take`]. It never waits for a job: on `Empty`, take again
/// with a waiting [`TakeJob`](super::TakeJob).
#[derive(Debug)]
pub struct AckAndTake {
    state: State,
    /// The untake of the next token, sent when the outcome is unknown.
    undo: Option<ScriptCall>,
    deadline: Instant,
    lost_reply: bool,
}

impl AckAndTake {
    fn undoing(
        &mut self,
        result: Result<AckedAndTaken, Error>,
        now: Instant,
    ) -> Option<Step<AckedAndTaken>> {
        match self.undo.take() {
            Some(call) => {
                // The call may have used up the deadline: the untake gets its own time.
                let deadline = self.deadline.max(saturating_add(now, UNDO_TIME));
                let op = Box::new(ScriptOp::new(Untake, call, self.target(), None, deadline));
                self.state = State::Undoing { op, result };
                None
            }
            None => {
                self.state = State::Done;
                Some(Step::Done(result))
            }
        }
    }

    fn target(&self) -> crate::lease::Target {
        crate::lease::Target {
            name: "queue untake".into(),
            keys: Vec::new().into(),
        }
    }
}

impl Protocol for AckAndTake {
    type Output = AckedAndTaken;

    fn poll(&mut self, now: Instant) -> Step<AckedAndTaken> {
        loop {
            match &mut self.state {
                State::Calling(op) => match op.poll(now) {
                    Step::Done(Ok(mut out)) => {
                        if let Take::Taken(job) = &out.next
                            && now >= job.lease.valid_until
                        {
                            // Handed over, but the reply came after the lease's local
                            // validity: it is not safely ours. Give it back uncounted.
                            out.next = Take::Empty {
                                next_due_in: Some(Duration::ZERO),
                            };
                            if let Some(step) = self.undoing(Ok(out), now) {
                                return step;
                            }
                            continue;
                        }
                        self.state = State::Done;
                        return Step::Done(Ok(out));
                    }
                    Step::Done(Err(e)) => {
                        // A lost reply, or a reply not understood, may have leased a job to
                        // the next token: give it back. (An error reply means the script
                        // wrote nothing: it reads every key before writing; a command never
                        // sent ran nothing.)
                        let unknown = matches!(e, Error::UnexpectedReply { .. });
                        if !self.lost_reply && !unknown {
                            self.undo = None;
                        }
                        if let Some(step) = self.undoing(Err(e), now) {
                            return step;
                        }
                    }
                    other => return other,
                },
                State::Undoing { op, .. } => match op.poll(now) {
                    Step::Done(_) => {
                        // Best effort: if the untake fails too, the job's lease runs out and
                        // it is delivered again (never lost).
                        let State::Undoing { result, .. } =
                            std::mem::replace(&mut self.state, State::Done)
                        else {
                            return Step::Done(Err(Error::Finished));
                        };
                        return Step::Done(result);
                    }
                    Step::Send(b) => return Step::Send(b),
                    Step::Wait(w) => return Step::Wait(w),
                    // No other step is ever returned.
                    #[allow(unreachable_patterns)]
                    _ => return Step::Done(Err(Error::Finished)),
                },
                State::Done => return Step::Done(Err(Error::Finished)),
            }
        }
    }

    fn handle(&mut self, input: Response, now: Instant) {
        match &mut self.state {
            State::Calling(op) => {
                if matches!(&input.result, Err(f) if f.kind == FailureKind::NoReply) {
                    self.lost_reply = true;
                }
                op.handle(input, now);
            }
            State::Undoing { op, .. } => op.handle(input, now),
            State::Done => {}
        }
    }
}

impl TakenJob {
    /// Acks this job and takes the next one (leased to `next_token`) in one round trip,
    /// giving up at `deadline`. See [`AckAndTake`] for why it is as safe as an ack then a
    /// take. Fails at once on bad settings.
    pub fn ack_and_take(
        &self,
        keys: &QueueKeys,
        next_token: Token,
        settings: &QueueSettings,
        deadline: Instant,
    ) -> Result<AckAndTake, Error> {
        ack_and_take(keys, &self.id, &self.lease, next_token, settings, deadline)
    }
}

/// [`TakenJob::ack_and_take`] for a driver that keeps the job's id and lease apart: acks
/// job `id` held as `lease` and takes the next job for `next_token`.
pub fn ack_and_take(
    keys: &QueueKeys,
    id: &str,
    lease: &Lease,
    next_token: Token,
    settings: &QueueSettings,
    deadline: Instant,
) -> Result<AckAndTake, Error> {
    let next = take(keys, next_token, settings)?;
    let call = ack_take_call(keys, id, lease.token.as_str(), &next, settings);
    let undo = next.undo.clone();
    let kind = AckTakeCall {
        acked: lease.target.name.to_string(),
        next,
    };
    let op = ScriptOp::new(
        kind,
        call,
        lease.target.clone(),
        Some(lease.valid_until),
        deadline,
    );
    Ok(AckAndTake {
        state: State::Calling(op),
        undo,
        deadline,
        lost_reply: false,
    })
}

fn ack_take_call(
    keys: &QueueKeys,
    id: &str,
    token: &str,
    next: &LockSpec,
    settings: &QueueSettings,
) -> ScriptCall {
    ack_and_take_call(keys, id, token, next.token.as_str(), settings)
}

/// The script call of [`ack_and_take`]: ack job `id` leased with `token`, take the next
/// for `next_token` (for a driver that runs its own machine, or a test).
pub fn ack_and_take_call(
    keys: &QueueKeys,
    id: &str,
    token: &str,
    next_token: &str,
    settings: &QueueSettings,
) -> ScriptCall {
    keys.calls
        .ack_take
        .clone()
        .arg(id)
        .arg(token)
        .arg(SETTLED_KEEP.as_millis().to_string())
        .arg(next_token)
        .arg(settings.visibility.as_millis().to_string())
        .arg(settings.max_deliveries.to_string())
}
