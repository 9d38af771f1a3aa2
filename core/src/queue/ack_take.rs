//! Ack a job and take the next one in one round trip: what a busy worker does between two
//! jobs.
//!
//! ```text
//!   AckAndTake ──EVALSHA ack_take──► {ack, delivery, id, payload} ─────► Done { ack, Taken(next) }
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

use std::sync::Arc;

use super::take::{Take, TakenJob};
use super::{Bound, JobTail, QueueKeys, QueueSettings, SETTLED_KEEP, job_name};
use crate::backoff::saturating_add;
use crate::error::{Error, LossReason};
use crate::lease::spec::undoing;
use crate::lease::{Lease, LeaseCalls, LeaseKind, OpKind, ScriptOp, Target, Token, valid_until};
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
    /// The name of the acked job's lease.
    acked: Arc<str>,
    /// The queue's take spec for these settings, whose calls the next job's lease gets.
    bound: Arc<Bound>,
    /// The next token.
    token: Token,
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
                Reply::Int(delivery),
                Reply::Bulk(id),
                Reply::Bulk(payload),
                tail @ ..,
            ] if *delivery >= 1 => {
                let delivery = *delivery as u64;
                let tail = super::parse_job_tail(tail.iter().map(Reply::as_bulk), delivery)?;
                match self.job(id.clone(), delivery, tail, payload.clone(), sent_at) {
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

    /// The reply of a handed-over job read by value: its id and payload moved into the job,
    /// not copied. Any other reply is read by [`decide`](OpKind::decide).
    fn decide_owned(
        &self,
        reply: Reply,
        sent_at: Instant,
        lost_in_time: bool,
    ) -> Result<Result<AckedAndTaken, Error>, Reply> {
        let mut items = match reply {
            Reply::Array(items) => items,
            other => return Err(other),
        };
        if let [
            Reply::Int(ack @ -1..=1),
            Reply::Int(delivery @ 1..),
            Reply::Bulk(id),
            Reply::Bulk(payload),
            tail @ ..,
        ] = items.as_mut_slice()
            && let Some(parsed) =
                super::parse_job_tail(tail.iter().map(Reply::as_bulk), *delivery as u64)
        {
            let ack = match *ack {
                1 => Ok(()),
                0 => Err(self.not_owner(LossReason::Expired)),
                _ => Err(self.not_owner(LossReason::Taken)),
            };
            let (id, payload) = (std::mem::take(id), std::mem::take(payload));
            let job = self.job(id, *delivery as u64, parsed, payload, sent_at);
            return Ok(job.map(|job| AckedAndTaken {
                ack,
                next: Take::Taken(Box::new(job)),
            }));
        }
        let reply = Reply::Array(items);
        self.decide(&reply, sent_at, lost_in_time).ok_or(reply)
    }
}

impl AckTakeCall {
    fn not_owner(&self, reason: LossReason) -> Error {
        Error::NotOwner {
            name: self.acked.to_string(),
            reason,
        }
    }

    /// The job handed to the next token, on the lease a take would have made.
    fn job(
        &self,
        id: Vec<u8>,
        delivery: u64,
        tail: JobTail,
        payload: Vec<u8>,
        sent_at: Instant,
    ) -> Result<TakenJob, Error> {
        job_on(
            &self.bound,
            &self.token,
            id,
            delivery,
            tail,
            payload,
            sent_at,
        )
    }
}

/// The job `id` handed to `token` as delivery `delivery`, on the lease a take of `bound`'s
/// settings would have made, its validity counted from `sent_at` (and ending by its hold
/// limit, if the reply's `tail` gives one).
pub(crate) fn job_on(
    bound: &Bound,
    token: &Token,
    id: Vec<u8>,
    delivery: u64,
    tail: JobTail,
    payload: Vec<u8>,
    sent_at: Instant,
) -> Result<TakenJob, Error> {
    {
        let Ok(text) = String::from_utf8(id) else {
            return Err(Error::UnexpectedReply {
                context: "queue take",
                reply: "a job id that is not UTF-8".into(),
            });
        };
        let spec = &bound.take;
        // The take spec's calls, bound to the next token and this job's id (both in slots:
        // nothing is copied).
        let subject = Arc::new(text.as_bytes().to_vec());
        let bind = |call: ScriptCall| call.with_token(token).with_subject(&subject);
        let lease = Lease {
            kind: LeaseKind::Job,
            target: Target {
                name: job_name(&bound.job_name, &text),
                keys: spec.target.keys.clone(),
            },
            token: token.clone(),
            fence: delivery,
            ttl: spec.ttl,
            acquired_at: sent_at,
            valid_until: match tail.hold_left {
                Some(left) => valid_until(sent_at, spec.ttl).min(valid_until(sent_at, left)),
                None => valid_until(sent_at, spec.ttl),
            },
            attempts: 1,
            unanswered: false,
            calls: spec.calls.rebound(bind),
            data: Vec::new(),
        };
        Ok(TakenJob {
            id: text,
            payload,
            delivery,
            attempt: tail.attempt,
            timeout: tail.timeout,
            hold_left: tail.hold_left,
            enqueued_at: tail.enqueued.map(|(at, _)| at),
            waited: tail.enqueued.map(|(_, waited)| waited),
            start_in: tail.start_in,
            lease,
        })
    }
}

/// Marks `lease`, a job handed over by an ack-and-take one of whose attempts went
/// unanswered ([`Lease::unanswered`]): its release (a nack) records the token as undone in
/// the set of `bound`'s take undo. Its ack and nack do too ([`QueueKeys::settling`]).
pub(crate) fn remember_when_settled(lease: &mut Lease, bound: &Bound) {
    lease.unanswered = true;
    let Some(undone) = bound.take.undo.as_ref().and_then(ScriptCall::last_key) else {
        return;
    };
    let Ok(undone) = std::str::from_utf8(undone) else {
        return;
    };
    let calls = &lease.calls;
    let release = undoing(calls.release().clone(), undone);
    lease.calls = LeaseCalls::new(release, calls.extend(), calls.inspect());
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
    /// What the untake of the next token is made from, sent when the outcome is unknown
    /// (`None` once it is known that there is nothing to give back).
    undo: Option<(Arc<Bound>, Token)>,
    deadline: Instant,
    lost_reply: bool,
}

impl AckAndTake {
    /// Uses `valid_until` as the acked job's validity for the lost-reply rule instead of
    /// the one it was taken with: the validity now, after renewals or extensions (see
    /// [`ScriptOp::with_valid_until`]).
    pub fn with_valid_until(mut self, valid_until: Instant) -> Self {
        if let State::Calling(op) = &mut self.state {
            op.set_valid_until(valid_until);
        }
        self
    }

    fn undoing(
        &mut self,
        result: Result<AckedAndTaken, Error>,
        now: Instant,
    ) -> Option<Step<AckedAndTaken>> {
        let undo = self.undo.take().and_then(|(bound, token)| {
            let call = bound.take.undo.as_ref()?;
            Some(call.clone().with_token(&token))
        });
        match undo {
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
                        if self.lost_reply {
                            match &mut out.next {
                                Take::Taken(job) => {
                                    if let Some((bound, _)) = &self.undo {
                                        // An attempt went unanswered and may still arrive:
                                        // settling the job records its token as undone, so
                                        // that it takes nothing then.
                                        remember_when_settled(&mut job.lease, bound);
                                    }
                                }
                                Take::Empty { .. } => {
                                    // Acked, nothing handed over: the late attempt would
                                    // lease the next pushed job to a token nobody holds.
                                    // Untake it (recorded as undone) before answering.
                                    if let Some(step) = self.undoing(Ok(out), now) {
                                        return step;
                                    }
                                    continue;
                                }
                            }
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
    let visibility_ms = settings.validate()?;
    let bound = keys.bound(settings, visibility_ms);
    let mut call = bind_call(&bound, id, &lease.token, &next_token);
    if lease.unanswered {
        // The acked job's take had an attempt that went unanswered: its token is recorded
        // as undone too (see `Lease::unanswered`).
        call = call.arg(crate::lease::spec::ms(crate::lease::UNDONE_KEEP));
    }
    let undo = Some((bound.clone(), next_token.clone()));
    let kind = AckTakeCall {
        acked: lease.target.name.clone(),
        bound,
        token: next_token,
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

/// The combined call of `bound`, bound without copying its keys or other arguments: the
/// acked job's `id`, its token `acked` and the `next` token each in its slot.
pub(crate) fn bind_call(bound: &Bound, id: &str, acked: &Token, next: &Token) -> ScriptCall {
    bound
        .ack_take
        .clone()
        .with_subject(&Arc::new(id.as_bytes().to_vec()))
        .with_token(next)
        .with_prior(acked)
}

/// The combined call with the constant arguments for `settings` and slots for the rest:
/// the acked job's id (subject slot), its token (prior slot), the next token (owner slot),
/// the two token slots holding `placeholder` until bound. The same arguments as
/// [`ack_and_take_call`].
pub(crate) fn ack_take_template(
    keys: &QueueKeys,
    placeholder: &Token,
    settings: &QueueSettings,
) -> ScriptCall {
    keys.calls
        .ack_take
        .clone()
        .subject_arg()
        .prior_arg(placeholder)
        .arg(SETTLED_KEEP.as_millis().to_string())
        .owner_arg(placeholder)
        .arg(settings.lease_arg(settings.visibility.as_millis() as u64))
        .arg(settings.max_deliveries.to_string())
        .compact()
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
        .arg(settings.lease_arg(settings.visibility.as_millis() as u64))
        .arg(settings.max_deliveries.to_string())
}
