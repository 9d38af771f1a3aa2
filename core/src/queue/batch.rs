//! Taking up to n jobs in one round trip, each on its own lease, and acking many in one.
//!
//! ```text
//!   TakeBatch ──EVALSHA take_batch(tokens)──► {0, job, job, ...} ──► Done(jobs, each its own lease)
//!     │    ▲                                  {ms | -2} ───────────► Done(no jobs, next due in)
//!     │    └── no reply: send again (the same tokens: the script hands each token the job
//!     │        already leased to it, its lease renewed from now)
//!     ├── gave up after a lost reply ──► Undoing[untake each token] ──► Done(Unavailable)
//!     └── answered after a lost reply ──► Undoing[untake each token left empty] ──► Done(jobs)
//!
//!   ack_many ──EVALSHA ack_many(id, token, ...)──► "1102" ──► one outcome per job
//! ```
//!
//! Each job of a batch is a delivery like a take's: its own token, delivery number and lease
//! (renew each with its own calls), and its own exactly-once ack (the settled record of its
//! token). The take reads the queue's pause inside its script, as the single take does, and
//! takes from the main ready set only (jobs kept elsewhere, such as grouped ones, are not
//! taken past their own limits). A reply that comes back after the leases' local validity
//! is not trusted: the jobs are given back (their deliveries not counted), as the single take
//! does.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::Token;
//! use redlease_core::protocol::{Protocol, Step};
//! use redlease_core::queue::{QueueKeys, QueueSettings, batch};
//! use redlease_core::reply::{Reply, Response};
//!
//! let keys = QueueKeys::new(&Keyspace::new("app").unwrap(), "mail").unwrap();
//! let tokens = vec![Token::from_random([1; 16]), Token::from_random([2; 16])];
//! let now = Instant::now();
//! let deadline = now + Duration::from_secs(1);
//! let mut take =
//!     batch::TakeBatch::new(&keys, tokens, &QueueSettings::default(), deadline).unwrap();
//! let Step::Send(b) = take.poll(now) else { panic!() };
//! // One job was ready: it went to the first token.
//! let job = Reply::Array(vec![
//!     Reply::Int(1),
//!     Reply::Int(1),
//!     Reply::Bulk(b"j1".to_vec()),
//!     Reply::Bulk(b"payload".to_vec()),
//! ]);
//! take.handle(Response::reply(b.requests[0].id, Reply::Array(vec![Reply::Int(0), job])), now);
//! let Step::Done(Ok(taken)) = take.poll(now) else { panic!() };
//! assert_eq!(taken.jobs.len(), 1);
//! assert_eq!(taken.jobs[0].id, "j1");
//! assert_eq!(taken.jobs[0].lease.token, Token::from_random([1; 16]));
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ack_take::{Untake, job_on, remember_when_settled};
use super::take::TakenJob;
use super::{Bound, QueueKeys, QueueSettings, SETTLED_KEEP, scripts};
use crate::backoff::saturating_add;
use crate::error::{Error, InvalidArgument, LossReason};
use crate::lease::{Lease, OpKind, ScriptOp, Target, Token};
use crate::protocol::{Protocol, Step};
use crate::reply::{FailureKind, Reply, Response};
use crate::script::ScriptCall;

/// The most jobs one batch take or ack may name.
pub const MAX_BATCH: usize = 1000;

/// How long the untakes of an unanswered batch may take at least (past its deadline).
const UNDO_TIME: Duration = Duration::from_secs(1);

/// What a batch take found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakenBatch {
    /// The jobs, in the order the queue serves them (none: nothing was ready).
    pub jobs: Vec<TakenJob>,
    /// With no job: the time until the next delayed job is due or the next in-flight lease
    /// runs out (`None`: nothing is scheduled, or the queue is paused).
    pub next_due_in: Option<Duration>,
}

/// The batch call's reading of a reply.
#[derive(Debug)]
pub(crate) struct BatchCall {
    bound: Arc<Bound>,
    tokens: Vec<Token>,
}

impl OpKind for BatchCall {
    type Output = TakenBatch;
    const CONTEXT: &'static str = "queue batch take";

    fn decide(
        &self,
        reply: &Reply,
        sent_at: Instant,
        _: bool,
    ) -> Option<Result<TakenBatch, Error>> {
        let items = reply.as_array()?;
        let (wait, jobs) = items.split_first()?;
        let wait = wait.as_int()?;
        if jobs.is_empty() {
            let next_due_in = match wait {
                -2 => None,
                ms if ms >= 1 => Some(Duration::from_millis(ms as u64)),
                _ => return None,
            };
            return Some(Ok(TakenBatch {
                jobs: Vec::new(),
                next_due_in,
            }));
        }
        if wait != 0 || jobs.len() > self.tokens.len() {
            return None;
        }
        let mut used = vec![false; self.tokens.len()];
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let [
                Reply::Int(number),
                Reply::Int(delivery),
                Reply::Bulk(id),
                Reply::Bulk(payload),
                tail @ ..,
            ] = job.as_array()?
            else {
                return None;
            };
            let index = usize::try_from(*number).ok()?.checked_sub(1)?;
            if *delivery < 1
                || index >= self.tokens.len()
                || std::mem::replace(&mut used[index], true)
            {
                return None;
            }
            let delivery = *delivery as u64;
            let tail = super::parse_job_tail(tail.iter().map(Reply::as_bulk), delivery)?;
            let token = &self.tokens[index];
            match job_on(
                &self.bound,
                token,
                id.clone(),
                delivery,
                tail,
                payload.clone(),
                sent_at,
            ) {
                Ok(job) => out.push(job),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(TakenBatch {
            jobs: out,
            next_due_in: None,
        }))
    }
}

#[derive(Debug)]
enum State {
    Calling(Box<ScriptOp<BatchCall>>),
    /// Giving back what the tokens may hold, one at a time, then finishing with `result`.
    Undoing {
        op: Box<ScriptOp<Untake>>,
        rest: Vec<Token>,
        result: Result<TakenBatch, Error>,
    },
    Done,
}

/// A batch take as a [`Protocol`]: one script call leasing up to one job per token. It never
/// waits for jobs (take one with a waiting [`TakeJob`](super::TakeJob) first).
#[derive(Debug)]
pub struct TakeBatch {
    state: State,
    bound: Arc<Bound>,
    tokens: Vec<Token>,
    deadline: Instant,
    lost_reply: bool,
}

impl TakeBatch {
    /// Takes up to `tokens.len()` jobs (1 to [`MAX_BATCH`]; [`InvalidArgument`] otherwise),
    /// each leased to its own token, giving up at `deadline`. Fails at once on bad settings.
    pub fn new(
        keys: &QueueKeys,
        tokens: Vec<Token>,
        settings: &QueueSettings,
        deadline: Instant,
    ) -> Result<Self, Error> {
        if tokens.is_empty() || tokens.len() > MAX_BATCH {
            return Err(InvalidArgument::Setting(format!(
                "a batch takes 1 to {MAX_BATCH} jobs, got {}",
                tokens.len()
            ))
            .into());
        }
        let visibility_ms = settings.validate()?;
        let bound = keys.bound(settings, visibility_ms);
        let mut call = ScriptCall::new(&scripts::TAKE_BATCH)
            .keys(&keys.take_keys())
            .arg(settings.lease_arg(visibility_ms))
            .arg(settings.max_deliveries.to_string());
        for t in &tokens {
            call = call.arg(t.as_str());
        }
        let kind = BatchCall {
            bound: bound.clone(),
            tokens: tokens.clone(),
        };
        let op = ScriptOp::new(kind, call, keys.target(), None, deadline);
        Ok(TakeBatch {
            state: State::Calling(Box::new(op)),
            bound,
            tokens,
            deadline,
            lost_reply: false,
        })
    }

    /// Starts giving back `tokens` (whatever each may hold), then finishes with `result`.
    fn undo(
        &mut self,
        mut tokens: Vec<Token>,
        result: Result<TakenBatch, Error>,
        now: Instant,
    ) -> Option<Step<TakenBatch>> {
        let Some(call) = self.bound.take.undo.clone() else {
            self.state = State::Done;
            return Some(Step::Done(result));
        };
        let Some(token) = tokens.pop() else {
            self.state = State::Done;
            return Some(Step::Done(result));
        };
        let deadline = self.deadline.max(saturating_add(now, UNDO_TIME));
        let target = Target {
            name: "queue untake".into(),
            keys: Vec::new().into(),
        };
        let op = ScriptOp::new(Untake, call.with_token(&token), target, None, deadline);
        self.state = State::Undoing {
            op: Box::new(op),
            rest: tokens,
            result,
        };
        None
    }
}

impl Protocol for TakeBatch {
    type Output = TakenBatch;

    fn poll(&mut self, now: Instant) -> Step<TakenBatch> {
        loop {
            match &mut self.state {
                State::Calling(op) => match op.poll(now) {
                    Step::Done(Ok(mut out)) => {
                        if out.jobs.first().is_some_and(|j| now >= j.lease.valid_until) {
                            // Handed over, but the reply came after the leases' local
                            // validity: not safely ours. Give them back uncounted.
                            let tokens = out.jobs.drain(..).map(|j| j.lease.token).collect();
                            out.next_due_in = Some(Duration::ZERO);
                            if let Some(step) = self.undo(tokens, Ok(out), now) {
                                return step;
                            }
                            continue;
                        }
                        if self.lost_reply {
                            // An attempt went unanswered and may still arrive: settling a job
                            // records its token as undone, so that it takes nothing then.
                            for job in &mut out.jobs {
                                remember_when_settled(&mut job.lease, &self.bound);
                            }
                            // The tokens this answer left empty are untaken now (recorded
                            // as undone): the late attempt would lease jobs to them, and
                            // nobody would hold those jobs.
                            let empty: Vec<Token> = self
                                .tokens
                                .iter()
                                .filter(|t| !out.jobs.iter().any(|j| &j.lease.token == *t))
                                .cloned()
                                .collect();
                            if let Some(step) = self.undo(empty, Ok(out), now) {
                                return step;
                            }
                            continue;
                        }
                        self.state = State::Done;
                        return Step::Done(Ok(out));
                    }
                    Step::Done(Err(e)) => {
                        // A lost reply, or one not understood, may have leased jobs to the
                        // tokens: give them back. (An error reply wrote nothing.)
                        let unknown = matches!(e, Error::UnexpectedReply { .. });
                        if !self.lost_reply && !unknown {
                            self.state = State::Done;
                            return Step::Done(Err(e));
                        }
                        let tokens = self.tokens.clone();
                        if let Some(step) = self.undo(tokens, Err(e), now) {
                            return step;
                        }
                    }
                    other => return other,
                },
                State::Undoing { op, .. } => match op.poll(now) {
                    Step::Done(_) => {
                        // Best effort: an untake that fails leaves a lease that runs out, and
                        // its job is delivered again (never lost).
                        let State::Undoing { rest, result, .. } =
                            std::mem::replace(&mut self.state, State::Done)
                        else {
                            return Step::Done(Err(Error::Finished));
                        };
                        if let Some(step) = self.undo(rest, result, now) {
                            return step;
                        }
                    }
                    Step::Send(b) => return Step::Send(b),
                    Step::Wait(w) => return Step::Wait(w),
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

/// The acks of many jobs in one call: one outcome per job, in order (`Ok`, or
/// [`Error::NotOwner`] when its lease had run out or another delivery holds it). Retried
/// after a lost reply: each job's settled record makes its ack idempotent.
#[derive(Debug, Clone)]
pub struct AckedMany {
    names: Vec<Arc<str>>,
}

impl OpKind for AckedMany {
    type Output = Vec<Result<(), Error>>;
    const CONTEXT: &'static str = "queue ack many";

    fn decide(
        &self,
        reply: &Reply,
        _: Instant,
        _: bool,
    ) -> Option<Result<Vec<Result<(), Error>>, Error>> {
        let Reply::Bulk(flags) = reply else {
            return None;
        };
        if flags.len() != self.names.len() {
            return None;
        }
        let out = flags
            .iter()
            .zip(&self.names)
            .map(|(flag, name)| {
                let reason = match flag {
                    b'1' => return Some(Ok(())),
                    b'0' => LossReason::Expired,
                    b'2' => LossReason::Taken,
                    _ => return None,
                };
                Some(Err(Error::NotOwner {
                    name: name.to_string(),
                    reason,
                }))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(out))
    }
}

/// Acks the jobs `(id, lease)` in one call (1 to [`MAX_BATCH`]), answering by `deadline`;
/// `valid_until` is the earliest validity of their leases now (for the lost-reply rule).
/// A lease one of whose take attempts went unanswered ([`Lease::unanswered`]) is refused
/// with [`InvalidArgument`]: ack it alone ([`TakenJob::ack`]), which records its token.
pub fn ack_many(
    keys: &QueueKeys,
    jobs: &[(&str, &Lease)],
    valid_until: Instant,
    deadline: Instant,
) -> Result<ScriptOp<AckedMany>, Error> {
    if jobs.is_empty() || jobs.len() > MAX_BATCH {
        return Err(InvalidArgument::Setting(format!(
            "an ack names 1 to {MAX_BATCH} jobs, got {}",
            jobs.len()
        ))
        .into());
    }
    if jobs.iter().any(|(_, lease)| lease.unanswered) {
        return Err(InvalidArgument::Setting(
            "a job taken after a lost reply is acked alone (its token is recorded as undone)"
                .into(),
        )
        .into());
    }
    let pairs: Vec<(&str, &str)> = jobs
        .iter()
        .map(|(id, lease)| (*id, lease.token.as_str()))
        .collect();
    let call = ack_many_call(keys, &pairs);
    let kind = AckedMany {
        names: jobs.iter().map(|(_, l)| l.target.name.clone()).collect(),
    };
    Ok(ScriptOp::new(
        kind,
        call,
        keys.target(),
        Some(valid_until),
        deadline,
    ))
}

/// The script call of [`ack_many`] for jobs given as `(id, token)` (for a driver that runs
/// its own machine, or a test).
pub fn ack_many_call(keys: &QueueKeys, jobs: &[(&str, &str)]) -> ScriptCall {
    let mut call = ScriptCall::new(&scripts::ACK_MANY)
        .keys(&keys.ack_keys())
        .arg(SETTLED_KEEP.as_millis().to_string())
        .arg(&keys.notify);
    for (id, token) in jobs {
        call = call.arg(*id).arg(*token);
    }
    call
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::reply::TransportFailure;

    fn keys() -> QueueKeys {
        QueueKeys::new(&Keyspace::new("t").unwrap(), "q").unwrap()
    }

    fn job(number: i64, id: &str) -> Reply {
        Reply::Array(vec![
            Reply::Int(number),
            Reply::Int(1),
            Reply::Bulk(id.as_bytes().to_vec()),
            Reply::Bulk(b"p".to_vec()),
        ])
    }

    fn tokens(n: u8) -> Vec<Token> {
        (1..=n).map(|i| Token::from_random([i; 16])).collect()
    }

    #[test]
    fn a_batch_names_each_token_and_hands_each_job_its_own_lease() {
        let now = crate::testing::origin();
        let d = now + Duration::from_secs(1);
        let mut t = TakeBatch::new(&keys(), tokens(3), &QueueSettings::default(), d).unwrap();
        let Step::Send(b) = t.poll(now) else { panic!() };
        let args: Vec<_> = b.requests[0].command.args().map(|a| a.to_vec()).collect();
        assert_eq!(args[2], b"14");
        assert_eq!(args[17..19], [b"30000".to_vec(), b"5".to_vec()]);
        assert_eq!(args.len(), 19 + 3);
        let reply = Reply::Array(vec![Reply::Int(0), job(2, "b"), job(1, "a")]);
        t.handle(Response::reply(b.requests[0].id, reply), now);
        let Step::Done(Ok(out)) = t.poll(now) else {
            panic!()
        };
        let got: Vec<_> = out
            .jobs
            .iter()
            .map(|j| (j.id.as_str(), j.lease.token.clone()))
            .collect();
        assert_eq!(
            got,
            vec![("b", tokens(3)[1].clone()), ("a", tokens(3)[0].clone())]
        );
        assert_eq!(&*out.jobs[0].lease.target.name, "queue q job b");
    }

    #[test]
    fn a_batch_reply_naming_a_token_twice_or_none_is_unexpected_and_given_back() {
        let now = crate::testing::origin();
        let d = now + Duration::from_secs(1);
        for bad in [
            Reply::Array(vec![Reply::Int(0), job(1, "a"), job(1, "b")]),
            Reply::Array(vec![Reply::Int(0), job(4, "a")]),
            Reply::Array(vec![Reply::Int(0)]),
        ] {
            let mut t = TakeBatch::new(&keys(), tokens(3), &QueueSettings::default(), d).unwrap();
            let Step::Send(b) = t.poll(now) else { panic!() };
            t.handle(Response::reply(b.requests[0].id, bad), now);
            // Each token is given back before the error is reported.
            for _ in 0..3 {
                let Step::Send(b) = t.poll(now) else {
                    panic!("no untake")
                };
                t.handle(Response::reply(b.requests[0].id, Reply::Int(0)), now);
            }
            assert!(matches!(
                t.poll(now),
                Step::Done(Err(Error::UnexpectedReply { .. }))
            ));
        }
    }

    /// The tokens a request names among its arguments.
    fn named(b: &crate::Batch, tokens: &[Token]) -> Vec<Token> {
        let args: Vec<Vec<u8>> = b.requests[0].command.args().map(|a| a.to_vec()).collect();
        tokens
            .iter()
            .filter(|t| args.iter().any(|a| a == t.as_str().as_bytes()))
            .cloned()
            .collect()
    }

    #[test]
    fn a_retry_answered_with_fewer_jobs_after_a_lost_reply_untakes_the_empty_tokens() {
        // The first attempt may still arrive: the tokens the answer left empty are untaken
        // (recorded as undone), or it would lease jobs to nobody. An empty answer untakes all.
        let now = crate::testing::origin();
        let d = now + Duration::from_secs(5);
        let all = tokens(3);
        for (reply, empty) in [
            (
                Reply::Array(vec![Reply::Int(0), job(2, "b")]),
                vec![all[0].clone(), all[2].clone()],
            ),
            (Reply::Array(vec![Reply::Int(-2)]), all.clone()),
        ] {
            let mut t = TakeBatch::new(&keys(), all.clone(), &QueueSettings::default(), d).unwrap();
            let Step::Send(b) = t.poll(now) else { panic!() };
            t.handle(
                Response::failed(b.requests[0].id, TransportFailure::no_reply("timeout")),
                now,
            );
            let mut now = now;
            let b = loop {
                match t.poll(now) {
                    Step::Send(b) => break b,
                    Step::Wait(w) => now = w.until,
                    Step::Done(out) => panic!("no retry: {out:?}"),
                }
            };
            t.handle(Response::reply(b.requests[0].id, reply), now);
            let mut untaken = Vec::new();
            let out = loop {
                match t.poll(now) {
                    Step::Send(b) => {
                        assert_eq!(&*b.requests[0].command.name(), "EVALSHA");
                        untaken.extend(named(&b, &all));
                        t.handle(Response::reply(b.requests[0].id, Reply::Int(0)), now);
                    }
                    Step::Done(out) => break out.unwrap(),
                    Step::Wait(_) => panic!("no wait expected"),
                }
            };
            untaken.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            assert_eq!(untaken, empty);
            assert_eq!(out.jobs.len(), all.len() - empty.len());
            // The job handed over is settled with its token recorded as undone.
            assert!(out.jobs.iter().all(|j| j.lease.unanswered));
        }
    }

    #[test]
    fn an_empty_batch_says_when_the_next_job_is_due_and_sizes_are_checked() {
        let now = crate::testing::origin();
        let d = now + Duration::from_secs(1);
        let mut t = TakeBatch::new(&keys(), tokens(2), &QueueSettings::default(), d).unwrap();
        let Step::Send(b) = t.poll(now) else { panic!() };
        t.handle(
            Response::reply(b.requests[0].id, Reply::Array(vec![Reply::Int(250)])),
            now,
        );
        let Step::Done(Ok(out)) = t.poll(now) else {
            panic!()
        };
        assert!(out.jobs.is_empty());
        assert_eq!(out.next_due_in, Some(Duration::from_millis(250)));
        assert!(TakeBatch::new(&keys(), Vec::new(), &QueueSettings::default(), d).is_err());
        assert!(ack_many(&keys(), &[], now, d).is_err());
    }
}
