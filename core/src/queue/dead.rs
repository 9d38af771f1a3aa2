//! The dead list's records, retention and bulk actions.
//!
//! ```text
//!   nack past max deliveries ─(failed, or timed_out from timed_out())─┐
//!   lease ran out on the last delivery ─(expired, or timed_out when   ├─► bury: RPUSH dead id,
//!     the lease ended at its hold limit; in every take script)        │   payloads[id\xfe] =
//!   cancel(id, dead) ─(cancelled)─────────────────────────────────────┘   '<ms> <kind>',
//!                                                                          count 'dead', trim
//!   trim (in the script that buried, ≤ 50 a call): while the list is over its count, or its
//!     oldest died longer ago than the age ──► LPOP, every trace of that job deleted
//!   act (a page: ≤ 1,000 entries looked at, ≤ 50 acted on, oldest first) ──► the picked
//!     ones requeued (as new for their budget) or deleted; {next index | -1 at the end, ids}
//! ```
//!
//! Every death is recorded beside the job's payload (field `<id>` + byte `0xfe` of the
//! payloads hash: no job id has that byte) as its server time in ms and its
//! [`DeathCause`]; the reason text stays in the reasons hash. The retention
//! ([`DeadRetention`], default [`DeadRetention::DEFAULT`]: 10,000 jobs, 180 days, as
//! Sidekiq's) lives in Redis (`<stem>:q:dead_keep`), so every process applies the same one,
//! and is applied by the script that adds to the list: a dead list cannot outgrow it, and
//! a trimmed job leaves nothing behind (payload, enqueue time, record, priority,
//! deliveries, base, reason, dedup entry).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::protocol::{Protocol, Step};
//! use redlease_core::queue::QueueKeys;
//! use redlease_core::queue::dead::{self, DeadAction, DeadFilter, DeathCause};
//! use redlease_core::queue::groups::JobRef;
//! use redlease_core::reply::{Reply, Response};
//!
//! let keys = QueueKeys::new(&Keyspace::default(), "mail")?;
//! let now = Instant::now();
//! // Requeue the jobs whose lease ran out, looking at the first 1,000 entries.
//! let filter = DeadFilter::new().cause(DeathCause::LeaseExpired);
//! // The page's call id: unique to it (a retry after a lost reply is answered from its record).
//! let mut act = dead::act(&keys, DeadAction::Requeue, &filter, 0, 1000, 50, "3f9c:0", now + Duration::from_secs(1))?;
//! let Step::Send(batch) = act.poll(now) else { panic!() };
//! let id = batch.requests[0].id;
//! // The server requeued two and reached the list's end.
//! let reply = Reply::Array(vec![Reply::Int(-1), Reply::Bulk(b"7".to_vec()), Reply::Bulk(b"9".to_vec())]);
//! act.handle(Response::reply(id, reply), now);
//! let Step::Done(Ok(page)) = act.poll(now) else { panic!() };
//! assert_eq!((page.next, page.ids), (None, vec![JobRef::plain("7"), JobRef::plain("9")]));
//! # Ok::<(), redlease_core::Error>(())
//! ```

use std::time::{Duration, Instant, SystemTime};

use super::{QueueKeys, scripts};
use crate::error::{Error, InvalidArgument};
use crate::lease::{OpKind, ScriptOp};
use crate::reply::Reply;
use crate::script::ScriptCall;

/// Why a job went to the dead list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeathCause {
    /// Its handler failed on its last delivery (the reason is the handler's error).
    Failed,
    /// Its lease ran out on its last delivery (its worker died or hung without a timeout).
    LeaseExpired,
    /// It ran past its timeout: its handler gave up (a nack whose reason is `timed out`,
    /// as the blocking crate's `Job::timed_out` sends), or it ignored the signal until its
    /// lease ended at the hold limit.
    TimedOut,
    /// It was cancelled ([`cancel`](super::cancel)).
    Cancelled,
}

impl DeathCause {
    /// The name the scripts record (`lua/bury.lua`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeathCause::Failed => "failed",
            DeathCause::LeaseExpired => "expired",
            DeathCause::TimedOut => "timed_out",
            DeathCause::Cancelled => "cancelled",
        }
    }

    /// The cause named `s` (as [`as_str`](Self::as_str) names it).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "failed" => DeathCause::Failed,
            "expired" => DeathCause::LeaseExpired,
            "timed_out" => DeathCause::TimedOut,
            "cancelled" => DeathCause::Cancelled,
            _ => return None,
        })
    }
}

impl std::fmt::Display for DeathCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A death's record as the scripts keep it (`'<server ms> <kind>'`): when, and why (`None`
/// for a kind this version does not know). `None` for anything else.
pub(crate) fn parse_record(record: &[u8]) -> Option<(SystemTime, Option<DeathCause>)> {
    let text = std::str::from_utf8(record).ok()?;
    let (ms, kind) = text.split_once(' ')?;
    let at = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms.parse().ok()?))?;
    Some((at, DeathCause::parse(kind)))
}

/// How long the dead list keeps its jobs: at most `max_jobs` (the oldest go first), none
/// that died longer than `max_age` ago. `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadRetention {
    /// The most dead jobs kept.
    pub max_jobs: Option<u64>,
    /// The longest a dead job is kept (whole ms, on the server's clock).
    pub max_age: Option<Duration>,
}

impl DeadRetention {
    /// What a queue keeps until told otherwise: 10,000 jobs, for 180 days (Sidekiq's).
    pub const DEFAULT: DeadRetention = DeadRetention {
        max_jobs: Some(10_000),
        max_age: Some(Duration::from_secs(180 * 24 * 3600)),
    };

    /// No limit: dead jobs stay until requeued or deleted.
    pub const UNLIMITED: DeadRetention = DeadRetention {
        max_jobs: None,
        max_age: None,
    };
}

impl Default for DeadRetention {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The largest count or age (ms) accepted: 2^53 - 1, the largest integer Lua keeps exactly.
const MAX_KEEP: u64 = 9_007_199_254_740_991;

/// What a retention call did: the retention now in force and how many dead jobs it deleted
/// (at most [`RETAIN_STEP`] a call: call again while it says that many).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// The retention in force.
    pub retention: DeadRetention,
    /// Dead jobs deleted by this call.
    pub deleted: u64,
}

/// Sets, resets or reads the dead list's retention.
#[derive(Debug, Clone, Copy)]
pub struct Retain;

/// Dead jobs a retention call deletes at most (as a page acts on at most [`MAX_ACT`]).
pub const RETAIN_STEP: u64 = 50;

impl OpKind for Retain {
    type Output = Retained;
    const CONTEXT: &'static str = "dead-letter retention";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Retained, Error>> {
        let items = reply.as_array()?;
        let [jobs, ms, deleted] = items else {
            return None;
        };
        let some = |n: u64| (n > 0).then_some(n);
        Some(Ok(Retained {
            retention: DeadRetention {
                max_jobs: some(u64::try_from(jobs.as_int()?).ok()?),
                max_age: some(u64::try_from(ms.as_int()?).ok()?).map(Duration::from_millis),
            },
            deleted: u64::try_from(deleted.as_int()?).ok()?,
        }))
    }
}

/// The retention call: `Some` sets it (and applies it), `None` reads it.
pub fn retention(
    keys: &QueueKeys,
    set: Option<DeadRetention>,
    deadline: Instant,
) -> Result<ScriptOp<Retain>, Error> {
    let mut call = ScriptCall::new(&scripts::DEAD_KEEP).keys(&[
        &keys.dead,
        &keys.payloads,
        &keys.priorities,
        &keys.deliveries,
        &keys.bases,
        &keys.reasons,
        &keys.dedup,
        &keys.dedup_of,
        &keys.dead_keep,
    ]);
    call = match set {
        None => call.arg("get"),
        Some(r) if r == DeadRetention::DEFAULT => call.arg("default"),
        Some(r) => {
            let jobs = r.max_jobs.unwrap_or(0);
            let ms = r.max_age.map_or(0, |d| d.as_millis());
            if r.max_jobs == Some(0) || r.max_age.is_some_and(|d| d.as_millis() == 0) {
                return Err(InvalidArgument::Setting(
                    "a dead-list retention keeps at least one job for at least 1 ms (None: no limit)"
                        .into(),
                )
                .into());
            }
            if jobs > MAX_KEEP || ms > u128::from(MAX_KEEP) {
                return Err(InvalidArgument::Setting(format!(
                    "a dead-list retention above {MAX_KEEP} jobs or ms is not kept exactly"
                ))
                .into());
            }
            call.arg("set").arg(jobs.to_string()).arg(ms.to_string())
        }
    };
    Ok(ScriptOp::new(Retain, call, keys.target(), None, deadline))
}

/// Which dead jobs a bulk action picks: all of them by default; each setting narrows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadFilter {
    cause: Option<DeathCause>,
    reason_contains: Option<String>,
    died_before: Option<SystemTime>,
}

impl DeadFilter {
    /// Every dead job.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only jobs that died of `cause`.
    pub fn cause(mut self, cause: DeathCause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// Only jobs whose reason contains `text` (as given, case and all).
    pub fn reason_contains(mut self, text: impl Into<String>) -> Self {
        self.reason_contains = Some(text.into()).filter(|t: &String| !t.is_empty());
        self
    }

    /// Only jobs that died at or before `at` (the server's clock, whole ms).
    pub fn died_before(mut self, at: SystemTime) -> Self {
        self.died_before = Some(at);
        self
    }

    /// Whether it picks a dead job that died of `cause` at `at` with `reason` (the
    /// scripts' rule, for callers that filter what they listed).
    pub fn picks(
        &self,
        cause: Option<DeathCause>,
        at: Option<SystemTime>,
        reason: Option<&str>,
    ) -> bool {
        self.cause.is_none_or(|c| cause == Some(c))
            && self
                .died_before
                .is_none_or(|b| at.is_some_and(|at| at <= b))
            && self
                .reason_contains
                .as_deref()
                .is_none_or(|t| reason.is_some_and(|r| r.contains(t)))
    }
}

/// What a bulk action does to the jobs it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadAction {
    /// Back to ready, as new for their budget ([`requeue`](super::requeue)).
    Requeue,
    /// Deleted for good, with every trace of them.
    Delete,
}

/// One page of a bulk action: the ids acted on, and where the next page starts (`None`: the
/// end of the dead list was reached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadPage {
    /// The index in the dead list to look from next.
    pub next: Option<u64>,
    /// The jobs requeued or deleted, oldest first (a grouped job by its group and id).
    pub ids: Vec<super::groups::JobRef>,
}

/// Runs one page of a bulk action.
#[derive(Debug, Clone, Copy)]
pub struct Act;

impl OpKind for Act {
    type Output = DeadPage;
    const CONTEXT: &'static str = "dead-letter bulk action";
    // A page sent again after a lost reply is answered from its record (kept a minute, by
    // its call id): it acts on nothing more, and the ids it acted on are reported.

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<DeadPage, Error>> {
        let (first, rest) = reply.as_array()?.split_first()?;
        let next = match first.as_int()? {
            -1 => None,
            n => Some(u64::try_from(n).ok()?),
        };
        let ids = rest
            .iter()
            .map(|r| match r {
                Reply::Bulk(b) => std::str::from_utf8(b)
                    .ok()
                    .map(super::groups::JobRef::from_stored),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(DeadPage { next, ids }))
    }
}

/// The most entries one page looks at.
pub const MAX_SCAN: u64 = 1000;

/// The most dead jobs one page acts on (requeues or deletes, a purge page too). Each costs
/// the server some 20-35 µs on a quiet machine (every trace of the job is moved or
/// deleted), so a page of 50 runs about 1-2 ms (1,000 ran 19-36 ms), leaving room under
/// 5 ms for a loaded machine.
pub const MAX_ACT: u64 = 50;

/// The longest id of a bulk call's page ([`act`], [`purge_page`]).
pub const MAX_CALL_ID_LEN: usize = 64;

/// The key a page's reply is recorded under: `<dead>:page:<call>`.
fn page_record(keys: &QueueKeys, call: &str) -> Result<String, Error> {
    if call.is_empty() || call.len() > MAX_CALL_ID_LEN {
        return Err(InvalidArgument::Setting(format!(
            "a page's call id must be 1 to {MAX_CALL_ID_LEN} bytes, got {}",
            call.len()
        ))
        .into());
    }
    Ok(format!("{}:page:{call}", keys.dead))
}

/// What a page of [`purge_page`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgedPage {
    /// How many dead jobs it deleted (fewer than the page's size: the list is empty now,
    /// but for jobs that died meanwhile).
    pub deleted: u64,
    /// The dead list's length before the page.
    pub before: u64,
}

/// Runs a purge page ([`purge_page`]).
#[derive(Debug, Clone, Copy)]
pub struct Purge;

impl OpKind for Purge {
    type Output = PurgedPage;
    const CONTEXT: &'static str = "dead-letter purge";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<PurgedPage, Error>> {
        let [deleted, before] = reply.as_array()? else {
            return None;
        };
        Some(Ok(PurgedPage {
            deleted: u64::try_from(deleted.as_int()?).ok()?,
            before: u64::try_from(before.as_int()?).ok()?,
        }))
    }
}

/// Deletes the oldest [`MAX_ACT`] dead jobs for good, as
/// [`delete_dead`](super::delete_dead) does one: a page of a purge. Call it again until a
/// page deletes fewer than that, or as many as the list held at the first page were
/// deleted (jobs that die meanwhile join the list's end). `call` names the page, as for
/// [`act`]: sent again after a lost reply, it deletes nothing more and reports what it did.
pub fn purge_page(
    keys: &QueueKeys,
    call: &str,
    deadline: Instant,
) -> Result<ScriptOp<Purge>, Error> {
    let record = page_record(keys, call)?;
    let call = super::forget_call(keys)
        .key(&record)
        .arg("")
        .arg("page")
        .arg(MAX_ACT.to_string());
    Ok(ScriptOp::new(Purge, call, keys.target(), None, deadline))
}

/// One page of `action` on the dead jobs `filter` picks: looks at up to `scan` entries
/// (1 to [`MAX_SCAN`]) from index `from` (oldest first), acts on at most `limit` (at least
/// 1; at most [`MAX_ACT`] a page). Call again from the page's `next` until it is `None` or enough were acted on.
///
/// `call` names this page, unique to it (e.g. random bytes in hex and the page's number;
/// 1 to [`MAX_CALL_ID_LEN`] bytes): the page's reply is recorded under it for a minute, so
/// that the page sent again after a lost reply is answered from the record and acts on
/// nothing more. Its cost is bounded by the page (`scan` entries), whatever the list holds.
#[allow(clippy::too_many_arguments)]
pub fn act(
    keys: &QueueKeys,
    action: DeadAction,
    filter: &DeadFilter,
    from: u64,
    scan: u64,
    limit: u64,
    call: &str,
    deadline: Instant,
) -> Result<ScriptOp<Act>, Error> {
    let record = page_record(keys, call)?;
    if !(1..=MAX_SCAN).contains(&scan) || limit == 0 {
        return Err(InvalidArgument::Setting(format!(
            "a dead-list page looks at 1 to {MAX_SCAN} entries and acts on at least 1, got {scan} and {limit}"
        ))
        .into());
    }
    let before = match filter.died_before {
        None => String::new(),
        Some(at) => at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis().to_string())
            .unwrap_or_else(|_| "0".into()),
    };
    let call = ScriptCall::new(&scripts::DEAD_ACT)
        .keys(&[
            &keys.dead,
            &keys.ready,
            &keys.priorities,
            &keys.seq,
            &keys.deliveries,
            &keys.bases,
            &keys.reasons,
            &keys.payloads,
            &keys.dedup,
            &keys.dedup_of,
            &record,
        ])
        .arg(match action {
            DeadAction::Requeue => "requeue",
            DeadAction::Delete => "delete",
        })
        .arg(from.to_string())
        .arg(scan.to_string())
        .arg(limit.min(MAX_ACT).to_string())
        .arg(filter.cause.map_or("", DeathCause::as_str))
        .arg(filter.reason_contains.as_deref().unwrap_or(""))
        .arg(before)
        .arg(&keys.notify);
    Ok(ScriptOp::new(Act, call, keys.target(), None, deadline))
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

    fn run<K: OpKind>(mut op: ScriptOp<K>, reply: Reply) -> Result<K::Output, Error> {
        let now = crate::testing::origin();
        let Step::Send(batch) = op.poll(now) else {
            panic!("sends first")
        };
        op.handle(Response::reply(batch.requests[0].id, reply), now);
        match op.poll(now) {
            Step::Done(r) => r,
            _ => panic!("done after one reply"),
        }
    }

    /// The scripts name a queue's keys after its dead list (`lua/dead_list.lua`): the names
    /// they make are the keys' own, for plain and grouped keys.
    #[test]
    fn the_keys_the_scripts_name_after_the_dead_list_are_the_queues() {
        let plain = keys();
        let grouped = QueueKeys::grouped(&Keyspace::new("app").unwrap(), "q").unwrap();
        for k in [&plain, &grouped] {
            let stem = k.dead.strip_suffix("dead").unwrap();
            let named = |part: &str| format!("{stem}{part}");
            for (part, key) in [
                ("payloads", &k.payloads),
                ("priorities", &k.priorities),
                ("deliveries", &k.deliveries),
                ("bases", &k.bases),
                ("reasons", &k.reasons),
                ("dedup", &k.dedup),
                ("dedup_of", &k.dedup_of),
                ("ready", &k.ready),
                ("seq", &k.seq),
                ("dead_keep", &k.dead_keep),
            ] {
                assert_eq!(&named(part), key);
            }
        }
        assert!(grouped.dead.ends_with(":q:g:dead"));
    }

    #[test]
    fn records_parse_and_unknown_kinds_keep_their_time() {
        let (at, cause) = parse_record(b"1700000000123 timed_out").unwrap();
        assert_eq!(
            at.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(cause, Some(DeathCause::TimedOut));
        assert_eq!(parse_record(b"5 later").unwrap().1, None);
        for bad in [&b""[..], b"x failed", b"12", b"-1 failed"] {
            assert!(parse_record(bad).is_none(), "{bad:?}");
        }
        for c in [
            DeathCause::Failed,
            DeathCause::LeaseExpired,
            DeathCause::TimedOut,
            DeathCause::Cancelled,
        ] {
            assert_eq!(DeathCause::parse(c.as_str()), Some(c));
        }
    }

    #[test]
    fn a_retention_is_checked_and_read_back() {
        let deadline = crate::testing::origin() + Duration::from_secs(1);
        for bad in [
            DeadRetention {
                max_jobs: Some(0),
                max_age: None,
            },
            DeadRetention {
                max_jobs: None,
                max_age: Some(Duration::from_micros(10)),
            },
            DeadRetention {
                max_jobs: Some(u64::MAX),
                max_age: None,
            },
        ] {
            assert!(matches!(
                retention(&keys(), Some(bad), deadline),
                Err(Error::InvalidArgument(_))
            ));
        }
        let got = run(
            retention(&keys(), None, deadline).unwrap(),
            Reply::Array(vec![Reply::Int(0), Reply::Int(60_000), Reply::Int(3)]),
        )
        .unwrap();
        assert_eq!(
            got,
            Retained {
                retention: DeadRetention {
                    max_jobs: None,
                    max_age: Some(Duration::from_secs(60))
                },
                deleted: 3
            }
        );
        // Anything else is a protocol error, never a panic.
        assert!(run(retention(&keys(), None, deadline).unwrap(), Reply::Int(1)).is_err());
    }

    #[test]
    fn a_page_reads_its_next_index_and_ids() {
        let deadline = crate::testing::origin() + Duration::from_secs(1);
        let f = DeadFilter::new().reason_contains("boom");
        let op = act(&keys(), DeadAction::Delete, &f, 5, 10, 3, "c1", deadline).unwrap();
        let page = run(
            op,
            Reply::Array(vec![Reply::Int(12), Reply::Bulk(b"a".to_vec())]),
        )
        .unwrap();
        assert_eq!(
            page,
            DeadPage {
                next: Some(12),
                ids: vec![super::super::groups::JobRef::plain("a")]
            }
        );
        for (scan, limit) in [(0, 1), (MAX_SCAN + 1, 1), (1, 0)] {
            assert!(
                act(
                    &keys(),
                    DeadAction::Requeue,
                    &f,
                    0,
                    scan,
                    limit,
                    "c",
                    deadline
                )
                .is_err()
            );
        }
        // A call id is 1 to 64 bytes.
        for call in ["", &"x".repeat(MAX_CALL_ID_LEN + 1)] {
            assert!(act(&keys(), DeadAction::Requeue, &f, 0, 1, 1, call, deadline).is_err());
            assert!(purge_page(&keys(), call, deadline).is_err());
        }
        let op = act(&keys(), DeadAction::Delete, &f, 0, 1, 1, "c2", deadline).unwrap();
        assert!(run(op, Reply::Array(vec![Reply::Int(-2)])).is_err());
    }

    #[test]
    fn a_page_whose_reply_was_lost_is_sent_again_under_its_call_id() {
        use crate::reply::TransportFailure;
        use crate::testing::Scenario;
        let now = crate::testing::origin();
        let f = DeadFilter::new();
        let op = act(
            &keys(),
            DeadAction::Requeue,
            &f,
            0,
            10,
            3,
            "c7:0",
            now + Duration::from_secs(3),
        )
        .unwrap();
        // The page's record is one of its keys: a page sent again is answered from it.
        let record = "redlease:{q}:q:dead:page:c7:0";
        let args = |r: &crate::command::Request| r.command.args().to_vec();
        let mut s = Scenario::new(op, now);
        let first = s.fail(TransportFailure::no_reply("timeout"));
        s.sleep_through();
        let again = s.answer(Reply::Array(vec![
            Reply::Int(-1),
            Reply::Bulk(b"a".to_vec()),
        ]));
        assert_eq!(args(&first), args(&again), "sent again as it was");
        assert!(
            args(&first)
                .iter()
                .any(|a| a.as_slice() == record.as_bytes())
        );
        assert_eq!(
            s.expect_done(),
            Ok(DeadPage {
                next: None,
                ids: vec![super::super::groups::JobRef::plain("a")]
            })
        );
        // A purge page too.
        let op = purge_page(&keys(), "c8:0", now + Duration::from_secs(3)).unwrap();
        let mut s = Scenario::new(op, now);
        s.fail(TransportFailure::no_reply("timeout"));
        s.sleep_through();
        s.answer(Reply::Array(vec![Reply::Int(1000), Reply::Int(2500)]));
        assert_eq!(
            s.expect_done(),
            Ok(PurgedPage {
                deleted: 1000,
                before: 2500
            })
        );
    }

    #[test]
    fn the_filter_picks_as_the_script_does() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let f = DeadFilter::new()
            .cause(DeathCause::Failed)
            .died_before(at)
            .reason_contains("db");
        assert!(f.picks(Some(DeathCause::Failed), Some(at), Some("db down")));
        assert!(!f.picks(Some(DeathCause::Cancelled), Some(at), Some("db down")));
        assert!(!f.picks(
            Some(DeathCause::Failed),
            Some(at + Duration::from_millis(1)),
            Some("db")
        ));
        assert!(!f.picks(Some(DeathCause::Failed), None, Some("db")));
        assert!(!f.picks(Some(DeathCause::Failed), Some(at), None));
        assert!(DeadFilter::new().picks(None, None, None));
        assert!(
            DeadFilter::new()
                .reason_contains("")
                .picks(None, None, None)
        );
    }
}
