//! Cancelling a job from any process ([`cancel`]), and how its holder learns of it.
//!
//! ```text
//!   ready / delayed ──cancel──► dead (reason "cancelled: <message>") or forgotten
//!   in flight ──cancel──► lease ended at once ──► dead (same reason) or forgotten
//!        │                  │ token marked in `cancelled` (zset token -> until ms)
//!        │                  └ message on the cancel channel, payload the token
//!        ▼
//!   holder: told by the message (if it listens), and at the latest by its next renewal,
//!           which answers -3 ("cancelled": LossReason::Cancelled); its ack or nack is
//!           refused (NotOwner): the job is no longer its to settle
//! ```
//!
//! The mark is kept for the job's lease left at the cancel plus [`CANCEL_KEEP`], so the
//! holder's renewal (due well before the lease would have ended) finds it even when the
//! message was lost.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::queue::QueueKeys;
//! use redlease_core::queue::cancel::{self, Cancelled, CancelledJobs};
//! use redlease_core::{Protocol, Reply, Response, Step};
//!
//! let keys = QueueKeys::new(&Keyspace::default(), "mail").unwrap();
//! let now = Instant::now();
//! let deadline = now + Duration::from_secs(1);
//! let mut op = cancel::cancel(&keys, "job-1", "user gone", CancelledJobs::Dead, deadline).unwrap();
//! let Step::Send(batch) = op.poll(now) else { panic!() };
//! // The job was in flight: its holder is told.
//! op.handle(Response::reply(batch.requests[0].id, Reply::Int(2)), now);
//! assert!(matches!(op.poll(now), Step::Done(Ok(Cancelled::InFlight))));
//! // Holders listen on their own token's tag.
//! assert_eq!(keys.cancel_wake("t").tag.as_deref(), Some("t"));
//! ```

use std::time::{Duration, Instant};

use super::{MAX_ID_LEN, QueueKeys, scripts};
use crate::error::{Error, InvalidArgument};
use crate::lease::{OpKind, ScriptOp};
use crate::protocol::WakeOn;
use crate::reply::Reply;
use crate::script::ScriptCall;

/// How long past the job's lease a cancelled delivery's mark is kept (its renewal answers
/// "cancelled" until then): a minute.
pub const CANCEL_KEEP: Duration = Duration::from_secs(60);

/// The longest cancel message: 4 KiB (it is stored with the dead job and the mark).
pub const MAX_MESSAGE_LEN: usize = 4096;

/// What becomes of a cancelled job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CancelledJobs {
    /// It goes to the dead list, its reason `cancelled: <message>` (the default: an
    /// operator sees what was cancelled, and can requeue it).
    #[default]
    Dead,
    /// It is forgotten (payload and all), as if acked.
    Remove,
}

/// What [`cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The job was waiting (ready or delayed): it will not run.
    Waiting,
    /// The job was in flight: its lease ended, and its holder is told (by a message if it
    /// listens, by its next renewal otherwise).
    InFlight,
    /// No such job waits or runs (done, dead, cancelled already, or never pushed).
    NotFound,
}

/// The cancel script's outcome.
#[derive(Debug, Clone, Copy)]
pub struct Cancel;

impl OpKind for Cancel {
    type Output = Cancelled;
    const CONTEXT: &'static str = "job cancel";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Cancelled, Error>> {
        Some(Ok(match reply.as_int()? {
            1 => Cancelled::Waiting,
            2 => Cancelled::InFlight,
            0 => Cancelled::NotFound,
            _ => return None,
        }))
    }
}

/// Cancels job `id` with `message` (kept with a dead job, told to its holder), the job then
/// dead or forgotten as `jobs` says. Idempotent: a retry after a lost reply finds nothing
/// left to cancel ([`Cancelled::NotFound`]). An id of 0 or more than [`MAX_ID_LEN`] bytes,
/// or a message longer than [`MAX_MESSAGE_LEN`], is refused before anything is sent.
pub fn cancel(
    keys: &QueueKeys,
    id: &str,
    message: &str,
    jobs: CancelledJobs,
    deadline: Instant,
) -> Result<ScriptOp<Cancel>, Error> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(InvalidArgument::Setting(format!(
            "a job id must be 1 to {MAX_ID_LEN} bytes, got {}",
            id.len()
        ))
        .into());
    }
    if message.len() > MAX_MESSAGE_LEN {
        return Err(InvalidArgument::Setting(format!(
            "a cancel message must be at most {MAX_MESSAGE_LEN} bytes, got {}",
            message.len()
        ))
        .into());
    }
    let call = ScriptCall::new(&scripts::CANCEL)
        .keys(&[
            &keys.ready,
            &keys.delayed,
            &keys.payloads,
            &keys.priorities,
            &keys.inflight,
            &keys.leases,
            &keys.holders,
            &keys.deliveries,
            &keys.bases,
            &keys.dead,
            &keys.reasons,
            &keys.cancelled,
            &keys.cancel_messages,
            &keys.dedup,
            &keys.dedup_of,
            keys.counts_slot(),
            &keys.paused,
        ])
        .arg(id)
        .arg(message)
        .arg(match jobs {
            CancelledJobs::Dead => "dead",
            CancelledJobs::Remove => "remove",
        })
        .arg(&keys.cancel_notify)
        .arg(CANCEL_KEEP.as_millis().to_string())
        .arg(&keys.notify);
    Ok(ScriptOp::new(Cancel, call, keys.target(), None, deadline))
}

/// Whether a delivery was cancelled, and its message.
#[derive(Debug, Clone, Copy)]
pub struct CancelMessage;

impl OpKind for CancelMessage {
    type Output = Option<String>;
    const CONTEXT: &'static str = "job cancel check";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Option<String>, Error>> {
        let items = reply.as_array()?;
        let message = match items.get(1)? {
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            _ => return None,
        };
        Some(Ok(match items.first()?.as_int()? {
            1 => Some(message),
            0 => None,
            _ => return None,
        }))
    }
}

/// Asks whether the delivery holding `token` was cancelled: its message if so (a holder
/// that heard a cancel message, or whose renewal answered "cancelled", learns why).
pub fn cancel_message(keys: &QueueKeys, token: &str, deadline: Instant) -> ScriptOp<CancelMessage> {
    let call = ScriptCall::new(&scripts::CANCEL_MESSAGE)
        .keys(&[&keys.cancelled, &keys.cancel_messages])
        .arg(token);
    ScriptOp::new(CancelMessage, call, keys.target(), None, deadline)
}

/// [`push`](super::push) of jobs that each carry `timeout` (1 ms to
/// [`MAX_DURATION`](crate::limits::MAX_DURATION), else refused before anything is sent):
/// whoever takes one gets it as [`TakenJob::timeout`](super::TakenJob::timeout), whatever
/// the taker's own settings. Kept with the job's base (the bases hash: `base:timeout`), read
/// by every take anyway, so jobs without one cost nothing more.
pub fn push_with_timeout(
    keys: &QueueKeys,
    jobs: &[super::NewJob],
    priority: u8,
    delay: Duration,
    timeout: Duration,
    deadline: Instant,
) -> Result<ScriptOp<super::Push>, Error> {
    crate::limits::duration(
        "job timeout",
        timeout,
        Duration::from_millis(1),
        crate::limits::MAX_DURATION,
    )?;
    let plain = super::push(keys, jobs, priority, delay, deadline)?;
    drop(plain);
    let mut call = ScriptCall::new(&scripts::PUSH)
        .keys(&[
            &keys.ready,
            &keys.delayed,
            &keys.payloads,
            &keys.priorities,
            &keys.seq,
            keys.counts_slot(),
            &keys.bases,
        ])
        .arg(format!(
            "{}:{}",
            super::ceil_ms(delay),
            super::ceil_ms(timeout)
        ))
        .arg(priority.to_string())
        .arg(&keys.notify);
    for job in jobs {
        call = call.arg(&job.id).arg(&job.payload);
    }
    let kind = super::Push {
        ids: jobs.iter().map(|j| j.id.clone()).collect(),
        grouped: false,
    };
    Ok(ScriptOp::new(kind, call, keys.target(), None, deadline))
}

impl QueueKeys {
    /// What the holder of the delivery with `token` listens to for its cancel message.
    pub fn cancel_wake(&self, token: &str) -> WakeOn {
        WakeOn::tagged(&self.cancel_channel, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;

    #[test]
    fn bad_ids_and_long_messages_are_refused_before_anything_is_sent() {
        let keys = QueueKeys::new(&Keyspace::default(), "q").unwrap();
        let at = crate::testing::origin();
        assert!(cancel(&keys, "", "m", CancelledJobs::Dead, at).is_err());
        let long = "x".repeat(MAX_MESSAGE_LEN + 1);
        assert!(cancel(&keys, "a", &long, CancelledJobs::Dead, at).is_err());
        assert!(cancel(&keys, "a", "", CancelledJobs::Remove, at).is_ok());
    }

    #[test]
    fn the_check_reads_the_message_or_nothing() {
        let d = CancelMessage;
        let at = crate::testing::origin();
        let yes = Reply::Array(vec![Reply::Int(1), Reply::Bulk(b"why".to_vec())]);
        assert_eq!(d.decide(&yes, at, false), Some(Ok(Some("why".into()))));
        let no = Reply::Array(vec![Reply::Int(0), Reply::Bulk(Vec::new())]);
        assert_eq!(d.decide(&no, at, false), Some(Ok(None)));
        assert_eq!(d.decide(&Reply::Int(1), at, false), None);
    }
}
