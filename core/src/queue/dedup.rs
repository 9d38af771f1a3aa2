//! Deduplication modes: a push carries a dedup id (separate from the job id) and a mode
//! ([`Dedup`]), and the push script decides on the server's clock what it does.
//!
//! ```text
//!  push_dedup(d, mode) ──► no live entry for d ──────────────────────► Queued(new job J)
//!        │                  (entry d -> J written with J, in the same script)
//!        ├─ UntilDone: d held by J (waiting, delayed, in flight; dead unless
//!        │  dead jobs do not block) ──────────────────────────────────► Duplicate { J, state }
//!        ├─ Throttle(ttl): a window for d opened by J less than ttl ago ─► Duplicate { J, state }
//!        ├─ Debounce { delay, max_wait }: J still delayed ──────────────► Coalesced { J }
//!        │     (J's payload replaced, due at now + delay, never after its first push + max_wait)
//!        └─ KeepLatest: J waiting (ready or delayed) ────────────────────► Replaced { J }
//!              (J in flight: a follow-up F is parked behind it: Queued { F }, then
//!              Replaced { F } for later pushes; F is in no zset until J ends)
//!
//!  J acked / acked and taken / dead / cancelled, F parked ──► F ready and holding d
//!  (prelude `dedup_release`, in that same script): J and F never run side by side
//!
//!  J acked / acked and taken / deleted from the dead list ──► entry d -> J dropped by that
//!  same script (prelude `dedup_clear`), unless d is held by a later job by now
//! ```
//!
//! Where the state lives, all under the queue's hash tag: a hash dedup id -> job id, a hash
//! job id -> its entry (for the scripts that remove the job), and for throttle a zset of
//! window ends (server clock) with a hash of their jobs; both throttle keys expire with the
//! last window and ended windows are trimmed by every dedup push. A job pushed with a dedup
//! id has an id starting with `~` ([`DEDUP_ID_MARK`]): the scripts that settle a job look
//! for an entry only for those, so plain jobs cost no read.
//!
//! A dead job keeps its entry (it is still a job: [`Dedup::UntilDone`] with `dead_blocks`
//! refuses pushes while it is dead); whether it blocks is decided at push. Deleting it (or
//! purging the dead list) drops the entry.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::Token;
//! use redlease_core::protocol::{Protocol, Step};
//! use redlease_core::queue::{Dedup, DedupOutcome, JobState, QueueKeys, push_dedup};
//! use redlease_core::reply::{Reply, Response};
//!
//! let keys = QueueKeys::new(&Keyspace::default(), "mail").unwrap();
//! let now = Instant::now();
//! let job = Token::from_random([7; 16]);
//! let mut push = push_dedup(
//!     &keys, "user-42", &job, b"hello".to_vec(), Dedup::UntilDone { dead_blocks: true },
//!     0, Duration::ZERO, now + Duration::from_secs(1),
//! ).unwrap();
//! let Step::Send(batch) = push.poll(now) else { panic!() };
//! // The server found job ~abc waiting under "user-42": nothing was written.
//! let reply = Reply::Array(vec![
//!     Reply::Int(0),
//!     Reply::Bulk(b"~abc".to_vec()),
//!     Reply::Bulk(b"ready".to_vec()),
//! ]);
//! push.handle(Response::reply(batch.requests[0].id, reply), now);
//! let Step::Done(out) = push.poll(now) else { panic!() };
//! assert_eq!(
//!     out.unwrap(),
//!     DedupOutcome::Duplicate { job_id: "~abc".into(), state: JobState::Ready },
//! );
//! ```

use std::time::{Duration, Instant};

use super::{MAX_ID_LEN, QueueKeys, ceil_ms, scripts};
use crate::error::{Error, InvalidArgument};
use crate::lease::{OpKind, ScriptOp, Token};
use crate::reply::Reply;

/// The first character of the id of every job pushed with a dedup id.
pub const DEDUP_ID_MARK: char = '~';

/// How a push with a dedup id is deduplicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dedup {
    /// At most one job per dedup id until it is done (acked): a push while it waits, is
    /// delayed or runs is a [`DedupOutcome::Duplicate`]. `dead_blocks`: whether a job on the
    /// dead list still holds the id (until it is deleted or requeued and done), or a push
    /// then queues a new job.
    UntilDone {
        /// A dead job still holds the dedup id.
        dead_blocks: bool,
    },
    /// At most one job per dedup id in each window of this length (on the server's clock),
    /// from the push that queued it; whatever becomes of the job, the window holds.
    Throttle(Duration),
    /// A job due `delay` after the last push: each push while it is still delayed replaces
    /// its payload and moves its due time, but never past `max_wait` after the push that
    /// queued it (a constant stream still runs once per `max_wait`).
    Debounce {
        /// How long after the last push the job is due.
        delay: Duration,
        /// The longest a job waits from its first push (at least `delay`).
        max_wait: Duration,
    },
    /// At most one running and one waiting job per dedup id, the waiting one holding the
    /// latest payload: a push while a job waits (ready or delayed) replaces its payload;
    /// while one runs, a push parks one follow-up (later pushes replace its payload), which
    /// the end of the running job makes ready (not before: the two never run side by side):
    /// its ack, its death (a lease run out on its last delivery included) or a cancel. A
    /// parked follow-up is in no zset ([`stats`](crate::queue::stats) does not count it);
    /// if the running job goes back to waiting instead (a retry), the next push supersedes
    /// it.
    KeepLatest,
}

/// The state of a job that a dedup push found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobState {
    /// Ready to be taken.
    Ready,
    /// Waiting for its due time (or a retry backoff).
    Delayed,
    /// Leased to a worker.
    InFlight,
    /// On the dead list.
    Dead,
    /// Done and forgotten (a throttle window outlives its job).
    Done,
}

impl JobState {
    fn parse(text: &[u8]) -> Option<Self> {
        Some(match text {
            b"ready" => JobState::Ready,
            b"delayed" => JobState::Delayed,
            b"in_flight" => JobState::InFlight,
            b"dead" => JobState::Dead,
            b"done" => JobState::Done,
            _ => return None,
        })
    }
}

/// What a dedup push did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DedupOutcome {
    /// A new job was queued (or delayed) under this id.
    Queued(String),
    /// Job `job_id`, in `state`, holds the dedup id: nothing was written.
    Duplicate {
        /// The job holding the dedup id.
        job_id: String,
        /// Its state when the push ran.
        state: JobState,
    },
    /// Keep latest: the waiting job `job_id` now carries this push's payload.
    Replaced {
        /// The waiting job.
        job_id: String,
    },
    /// Debounce: the delayed job `job_id` now carries this push's payload and its due time
    /// moved (it runs once for the pushes coalesced into it).
    Coalesced {
        /// The delayed job.
        job_id: String,
    },
}

impl DedupOutcome {
    /// The job this push queued or landed on.
    pub fn job_id(&self) -> &str {
        match self {
            DedupOutcome::Queued(id)
            | DedupOutcome::Duplicate { job_id: id, .. }
            | DedupOutcome::Replaced { job_id: id }
            | DedupOutcome::Coalesced { job_id: id } => id,
        }
    }
}

/// The longest dedup id accepted, in bytes.
pub const MAX_DEDUP_ID_LEN: usize = MAX_ID_LEN;

/// The dedup push of one job ([`push_dedup`]).
#[derive(Debug, Clone, Copy)]
pub struct PushDedup;

impl OpKind for PushDedup {
    type Output = DedupOutcome;
    const CONTEXT: &'static str = "queue dedup push";
    // A lost reply may hide a push that ran: sending it again could queue a second job
    // (throttle, a job acked since) or move a due time twice. The caller learns Unavailable.
    const RETRY_LOST_REPLY: bool = false;

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<DedupOutcome, Error>> {
        let items = reply.as_array()?;
        let text = |r: &Reply| match r {
            Reply::Bulk(b) => String::from_utf8(b.clone()).ok(),
            _ => None,
        };
        let out = match items {
            [Reply::Int(1), id] => DedupOutcome::Queued(text(id)?),
            [Reply::Int(0), id, Reply::Bulk(state)] => DedupOutcome::Duplicate {
                job_id: text(id)?,
                state: JobState::parse(state)?,
            },
            [Reply::Int(2), id, Reply::Bulk(_)] => DedupOutcome::Replaced { job_id: text(id)? },
            [Reply::Int(3), id, Reply::Bulk(_)] => DedupOutcome::Coalesced { job_id: text(id)? },
            _ => return None,
        };
        Some(Ok(out))
    }
}

/// The id of a job pushed with a dedup id, made from a fresh random token: [`DEDUP_ID_MARK`]
/// then the token's text.
pub fn dedup_job_id(token: &Token) -> String {
    format!("{DEDUP_ID_MARK}{}", token.as_str())
}

/// Pushes one job with `payload` under dedup id `dedup_id` in `mode`, with a priority and a
/// delay (ignored by [`Dedup::Debounce`], whose delay is its own). A job it queues gets the
/// id [`dedup_job_id`]`(job)`. Refused with [`InvalidArgument`] before anything is sent: an
/// empty dedup id or one longer than [`MAX_DEDUP_ID_LEN`], a zero throttle ttl or debounce
/// delay, a debounce maximum wait shorter than its delay, a duration beyond
/// [`MAX_DURATION`](crate::limits::MAX_DURATION).
#[allow(clippy::too_many_arguments)]
pub fn push_dedup(
    keys: &QueueKeys,
    dedup_id: &str,
    job: &Token,
    payload: Vec<u8>,
    mode: Dedup,
    priority: u8,
    delay: Duration,
    deadline: Instant,
) -> Result<ScriptOp<PushDedup>, Error> {
    if dedup_id.is_empty() || dedup_id.len() > MAX_DEDUP_ID_LEN {
        return Err(InvalidArgument::Setting(format!(
            "a dedup id must be 1 to {MAX_DEDUP_ID_LEN} bytes, got {}",
            dedup_id.len()
        ))
        .into());
    }
    crate::limits::span("delay", delay)?;
    let positive = |what: &'static str, d: Duration| -> Result<u128, Error> {
        crate::limits::span(what, d)?;
        if d.is_zero() {
            return Err(InvalidArgument::Setting(format!("{what} must be above zero")).into());
        }
        Ok(ceil_ms(d))
    };
    let (code, window, max_wait) = match mode {
        Dedup::UntilDone { dead_blocks: true } => ("u", 0, 0),
        Dedup::UntilDone { dead_blocks: false } => ("l", 0, 0),
        Dedup::Throttle(ttl) => ("t", positive("throttle ttl", ttl)?, 0),
        Dedup::Debounce { delay, max_wait } => {
            let d = positive("debounce delay", delay)?;
            let m = positive("debounce maximum wait", max_wait)?;
            if m < d {
                return Err(InvalidArgument::Setting(format!(
                    "the debounce maximum wait ({max_wait:?}) must be at least its delay ({delay:?})"
                ))
                .into());
            }
            ("d", d, m)
        }
        Dedup::KeepLatest => ("k", 0, 0),
    };
    let call = crate::script::ScriptCall::new(&scripts::PUSH_DEDUP)
        .keys(&[
            &keys.ready,
            &keys.delayed,
            &keys.payloads,
            &keys.priorities,
            &keys.seq,
            &keys.inflight,
            &keys.dedup,
            &keys.dedup_of,
            &keys.throttle,
            &keys.throttled,
            keys.counts_slot(),
        ])
        .arg(code)
        .arg(window.to_string())
        .arg(max_wait.to_string())
        .arg(ceil_ms(delay).to_string())
        .arg(priority.to_string())
        .arg(&keys.notify)
        .arg(dedup_id)
        .arg(dedup_job_id(job))
        .arg(payload);
    Ok(ScriptOp::new(
        PushDedup,
        call,
        keys.target(),
        None,
        deadline,
    ))
}

/// Every key of the queue that holds deduplication state (for tests and inspection: each
/// must be empty once every job of the queue is gone and every throttle window ended).
pub fn dedup_keys(keys: &QueueKeys) -> [&str; 4] {
    [&keys.dedup, &keys.dedup_of, &keys.throttle, &keys.throttled]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::protocol::{Protocol, Step};
    use crate::reply::Response;

    fn keys() -> QueueKeys {
        QueueKeys::new(&Keyspace::default(), "q").unwrap()
    }

    fn run(mode: Dedup, reply: Reply) -> Result<DedupOutcome, Error> {
        let now = crate::testing::origin();
        let job = Token::from_random([1; 16]);
        let mut op = push_dedup(
            &keys(),
            "d",
            &job,
            b"p".to_vec(),
            mode,
            0,
            Duration::ZERO,
            now + Duration::from_secs(1),
        )?;
        let Step::Send(batch) = op.poll(now) else {
            panic!("expected a send")
        };
        op.handle(Response::reply(batch.requests[0].id, reply), now);
        match op.poll(now) {
            Step::Done(out) => out,
            other => panic!("expected done, got {other:?}"),
        }
    }

    #[test]
    fn every_outcome_is_read() {
        let b = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        let q = run(
            Dedup::KeepLatest,
            Reply::Array(vec![Reply::Int(1), b("~x")]),
        );
        assert_eq!(q, Ok(DedupOutcome::Queued("~x".into())));
        let r = run(
            Dedup::KeepLatest,
            Reply::Array(vec![Reply::Int(2), b("~x"), b("ready")]),
        );
        assert_eq!(
            r,
            Ok(DedupOutcome::Replaced {
                job_id: "~x".into()
            })
        );
        let mode = Dedup::Debounce {
            delay: Duration::from_millis(200),
            max_wait: Duration::from_secs(1),
        };
        let c = run(
            mode,
            Reply::Array(vec![Reply::Int(3), b("~x"), b("delayed")]),
        );
        assert_eq!(
            c,
            Ok(DedupOutcome::Coalesced {
                job_id: "~x".into()
            })
        );
        let d = run(
            Dedup::Throttle(Duration::from_secs(5)),
            Reply::Array(vec![Reply::Int(0), b("~x"), b("done")]),
        );
        assert_eq!(
            d,
            Ok(DedupOutcome::Duplicate {
                job_id: "~x".into(),
                state: JobState::Done
            })
        );
        let bad = run(
            Dedup::KeepLatest,
            Reply::Array(vec![Reply::Int(0), b("~x"), b("sleeping")]),
        );
        assert!(matches!(bad, Err(Error::UnexpectedReply { .. })), "{bad:?}");
    }

    #[test]
    fn bad_settings_are_refused_before_anything_is_sent() {
        let job = Token::from_random([1; 16]);
        let at = crate::testing::origin();
        let push = |d: &str, mode| {
            push_dedup(&keys(), d, &job, vec![], mode, 0, Duration::ZERO, at).map(drop)
        };
        let until = Dedup::UntilDone { dead_blocks: true };
        assert!(push("", until).is_err());
        assert!(push(&"x".repeat(MAX_DEDUP_ID_LEN + 1), until).is_err());
        assert!(push("d", Dedup::Throttle(Duration::ZERO)).is_err());
        let short = Dedup::Debounce {
            delay: Duration::from_secs(2),
            max_wait: Duration::from_secs(1),
        };
        assert!(push("d", short).is_err());
        assert!(push("d", Dedup::Throttle(Duration::MAX)).is_err());
        assert!(push("d", until).is_ok());
    }

    #[test]
    fn dedup_job_ids_carry_the_mark_the_scripts_look_for() {
        let id = dedup_job_id(&Token::from_random([0xab; 16]));
        assert!(id.starts_with(DEDUP_ID_MARK));
        assert_eq!(DEDUP_ID_MARK as u8, 126, "the byte the settle scripts test");
    }
}
