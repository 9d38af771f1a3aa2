//! Looking into a queue without changing it: the jobs in one state a page at a time
//! ([`list_jobs`]), one job by id ([`job_info`]), and the per-minute counts of what
//! happened to the queue ([`counts`]). Each is one read-only script on the server's clock.
//!
//! ```text
//!   list_jobs(state, None) ──► JobPage { jobs, next: Some(cursor) }
//!   list_jobs(state, Some(cursor)) ──► ... ──► JobPage { jobs, next: None }   (the last page)
//!   job_info(id) ──► Some(JobInfo { state, priority, enqueued_at, due_at, deliveries, .. }) | None
//!   counts(from, to) ──► [MinuteCounts { start, events: {pushed: n, taken: n, ..} }, ..]
//! ```
//!
//! A page is ordered as the state's set is (ready: priority then FIFO; delayed: due time;
//! in flight: lease expiry; dead: oldest first). Paging a state that does not change visits
//! every job exactly once; a job that moves while it is paged may be missed or seen twice
//! (the cursor is the last job's place, not a snapshot).
//!
//! ```
//! use std::time::Instant;
//! use redlease_core::keys::Keyspace;
//! use redlease_core::queue::{QueueKeys, inspect::{JobStatus, list_jobs}};
//!
//! let keys = QueueKeys::new(&Keyspace::default(), "mail").unwrap();
//! // The first page of up to 100 ready jobs: one script call, no write.
//! let op = list_jobs(&keys, JobStatus::Ready, None, 100, Instant::now()).unwrap();
//! # let _ = op;
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use super::{QueueKeys, scripts};
use crate::error::{Error, InvalidArgument};
use crate::lease::{OpKind, ScriptOp};
use crate::reply::Reply;
use crate::script::ScriptCall;

/// How many payload bytes a [`JobInfo`] carries as its [`preview`](JobInfo::preview).
pub const PREVIEW_LEN: usize = 128;

/// The most jobs one page holds ([`list_jobs`]'s limit is capped to it).
pub const MAX_PAGE: usize = 10_000;

/// How long the per-minute counts are kept: 48 hours (and the minute being counted).
pub const COUNTS_KEPT: Duration = Duration::from_secs(48 * 3600);

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum JobStatus {
    /// Ready to be taken.
    Ready,
    /// Waiting for its due time (a delay, or a retry's backoff).
    Delayed,
    /// Leased to a worker.
    InFlight,
    /// On the dead list.
    Dead,
    /// Kept (its payload is there) but in none of the states above: a state added by a
    /// feature this version does not know.
    Other,
}

impl JobStatus {
    /// The states a job can be listed in ([`list_jobs`]).
    pub const LISTABLE: [JobStatus; 4] = [
        JobStatus::Ready,
        JobStatus::Delayed,
        JobStatus::InFlight,
        JobStatus::Dead,
    ];

    /// Its name: `ready`, `delayed`, `in_flight`, `dead`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Ready => "ready",
            JobStatus::Delayed => "delayed",
            JobStatus::InFlight => "in_flight",
            JobStatus::Dead => "dead",
            JobStatus::Other => "other",
        }
    }

    fn parse(text: &[u8]) -> Option<Self> {
        Some(match text {
            b"ready" => JobStatus::Ready,
            b"delayed" => JobStatus::Delayed,
            b"in_flight" => JobStatus::InFlight,
            b"dead" => JobStatus::Dead,
            b"other" => JobStatus::Other,
            _ => return None,
        })
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobStatus {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match JobStatus::parse(s.as_bytes()) {
            Some(state) => Ok(state),
            None => Err(InvalidArgument::Setting(format!(
                "a job state is ready, delayed, in_flight, dead or other, got {s:?}"
            ))
            .into()),
        }
    }
}

/// What the queue knows of one job, read on the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// Its id.
    pub id: String,
    /// Where it is.
    pub state: JobStatus,
    /// Its priority (0, the default, to 255).
    pub priority: u8,
    /// When it was pushed (`None`: by a version that did not record it).
    pub enqueued_at: Option<SystemTime>,
    /// How long ago it was pushed, on the server's clock (`None` as for `enqueued_at`).
    pub age: Option<Duration>,
    /// When a delayed job is due.
    pub due_at: Option<SystemTime>,
    /// When a dead job died (`None`: before deaths were recorded).
    pub died_at: Option<SystemTime>,
    /// How often it was delivered so far.
    pub deliveries: u64,
    /// How long the lease of a job in flight has left (zero: it ran out, and the job is
    /// redelivered at the next take).
    pub lease_left: Option<Duration>,
    /// Its payload's size in bytes.
    pub payload_size: u64,
    /// The payload's first bytes (at most [`PREVIEW_LEN`]).
    pub preview: Vec<u8>,
}

/// Where the next page of a listing starts: the last job's place (opaque; its text, from
/// [`as_str`](Self::as_str), may be kept and given back with [`JobCursor::from`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobCursor(String);

impl JobCursor {
    /// The cursor as text (stable across calls and processes, for a tool's `--cursor`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// (score, id): the score up to the first `:`.
    fn parts(&self) -> (&str, &str) {
        self.0.split_once(':').unwrap_or((&self.0, ""))
    }
}

impl From<String> for JobCursor {
    fn from(text: String) -> Self {
        JobCursor(text)
    }
}

impl std::fmt::Display for JobCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, in the state's order.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<JobCursor>,
}

fn bulk(r: &Reply) -> Option<&[u8]> {
    match r {
        Reply::Bulk(b) => Some(b),
        _ => None,
    }
}

fn text(r: &Reply) -> Option<&str> {
    std::str::from_utf8(bulk(r)?).ok()
}

fn unix_ms(ms: u64) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// A score or time as the scripts give it (a decimal integer, possibly as a float's text).
fn ms_of(text: &str) -> Option<u64> {
    if let Ok(n) = text.parse::<u64>() {
        return Some(n);
    }
    let f: f64 = text.parse().ok()?;
    (0.0..9.007_199_254_740_992e15)
        .contains(&f)
        .then_some(f as u64)
}

/// One job from `job_fields`' eight replies, at server time `now` (ms).
fn job_of(f: &[Reply], now: u64) -> Option<JobInfo> {
    let [id, state, score, priority, deliveries, at, size, preview] = f else {
        return None;
    };
    let state = JobStatus::parse(bulk(state)?)?;
    let score = match text(score)? {
        "" => None,
        s => Some(ms_of(s)?),
    };
    let at = match text(at)? {
        "" => None,
        s => Some(ms_of(s)?),
    };
    Some(JobInfo {
        id: text(id)?.to_owned(),
        state,
        priority: u8::try_from(priority.as_int()?).ok()?,
        enqueued_at: at.map(unix_ms).map(|t| t.unwrap_or(SystemTime::UNIX_EPOCH)),
        age: at.map(|at| Duration::from_millis(now.saturating_sub(at))),
        due_at: score
            .filter(|_| state == JobStatus::Delayed)
            .and_then(unix_ms),
        died_at: score.filter(|_| state == JobStatus::Dead).and_then(unix_ms),
        deliveries: u64::try_from(deliveries.as_int()?).ok()?,
        lease_left: score
            .filter(|_| state == JobStatus::InFlight)
            .map(|until| Duration::from_millis(until.saturating_sub(now))),
        payload_size: u64::try_from(size.as_int()?).ok()?,
        preview: bulk(preview)?.to_vec(),
    })
}

fn inspect_call(keys: &QueueKeys, script: &'static crate::script::Script) -> ScriptCall {
    ScriptCall::new(script).keys(&[
        &keys.ready,
        &keys.delayed,
        &keys.inflight,
        &keys.dead,
        &keys.payloads,
        &keys.priorities,
        &keys.deliveries,
    ])
}

/// Reads a page of jobs ([`list_jobs`]).
#[derive(Debug, Clone, Copy)]
pub struct ListJobs;

impl OpKind for ListJobs {
    type Output = JobPage;
    const CONTEXT: &'static str = "queue job listing";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<JobPage, Error>> {
        let items = reply.as_array()?;
        let (head, jobs) = items.split_at_checked(3)?;
        let now = u64::try_from(head[0].as_int()?).ok()?;
        if jobs.len() % 8 != 0 {
            return None;
        }
        let next = match (text(&head[1])?, text(&head[2])?) {
            ("", _) => None,
            (score, id) => Some(JobCursor(format!("{score}:{id}"))),
        };
        let jobs = jobs
            .chunks(8)
            .map(|f| job_of(f, now))
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(JobPage { jobs, next }))
    }
}

/// The jobs in `state` after `cursor` (`None`: from the start), at most `limit` (1 to
/// [`MAX_PAGE`]; more is capped, 0 is refused). [`JobStatus::Other`] cannot be listed.
pub fn list_jobs(
    keys: &QueueKeys,
    state: JobStatus,
    cursor: Option<&JobCursor>,
    limit: usize,
    deadline: Instant,
) -> Result<ScriptOp<ListJobs>, Error> {
    if limit == 0 {
        return Err(InvalidArgument::Setting("a page holds at least 1 job".into()).into());
    }
    if state == JobStatus::Other {
        return Err(InvalidArgument::Setting(
            "jobs in state other cannot be listed (look them up by id)".into(),
        )
        .into());
    }
    let (score, id) = cursor.map_or(("", ""), JobCursor::parts);
    if !score.is_empty() && ms_of(score).is_none() && score.parse::<f64>().is_err() {
        return Err(InvalidArgument::Setting(format!("not a job cursor: {score:?}")).into());
    }
    let call = inspect_call(keys, &scripts::INSPECT_LIST)
        .arg(state.as_str())
        .arg(score)
        .arg(id)
        .arg(limit.min(MAX_PAGE).to_string())
        .arg(PREVIEW_LEN.to_string());
    Ok(ScriptOp::new(ListJobs, call, keys.target(), None, deadline))
}

/// Looks a job up ([`job_info`]).
#[derive(Debug, Clone, Copy)]
pub struct LookUpJob;

impl OpKind for LookUpJob {
    type Output = Option<JobInfo>;
    const CONTEXT: &'static str = "queue job lookup";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Option<JobInfo>, Error>> {
        let items = reply.as_array()?;
        let (now, fields) = items.split_first()?;
        let now = u64::try_from(now.as_int()?).ok()?;
        if fields.is_empty() {
            return Some(Ok(None));
        }
        Some(Ok(Some(job_of(fields, now)?)))
    }
}

/// Job `id`, wherever it is (`None`: no job has this id: never pushed, or acked and
/// forgotten, or deleted from the dead list).
pub fn job_info(keys: &QueueKeys, id: &str, deadline: Instant) -> ScriptOp<LookUpJob> {
    let call = inspect_call(keys, &scripts::INSPECT_JOB)
        .arg(id)
        .arg(PREVIEW_LEN.to_string());
    ScriptOp::new(LookUpJob, call, keys.target(), None, deadline)
}

/// The names of the events the queue's scripts count ([`MinuteCounts::events`]).
pub mod event {
    /// Jobs pushed (duplicates refused by their id are not).
    pub const PUSHED: &str = "pushed";
    /// Deliveries handed to workers (a take given back after its reply was lost is not).
    pub const TAKEN: &str = "taken";
    /// Jobs acked (done and forgotten).
    pub const ACKED: &str = "acked";
    /// Nacks: failed deliveries given back by their worker (retried or dead).
    pub const FAILED: &str = "failed";
    /// Jobs made to wait for another delivery after a nack or a lease that ran out.
    pub const RETRIED: &str = "retried";
    /// Jobs moved to the dead list (by a nack or a lease that ran out).
    pub const DEAD: &str = "dead";
    /// Leases that ran out (the worker died or hung): the job was retried or went dead.
    pub const EXPIRED: &str = "expired";
    /// Grouped jobs whose handler was rate limited: put back at the head of their group
    /// without counting a delivery, the group made to wait (`Retry::RateLimited`).
    pub const DEFERRED: &str = "deferred";
}

/// What happened to a queue in one minute of the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MinuteCounts {
    /// The minute's start.
    pub start: SystemTime,
    /// Each event counted in it ([`event`]), with how often (other features may add
    /// events: a name not in [`event`] is kept as it is).
    pub events: BTreeMap<String, i64>,
}

impl MinuteCounts {
    /// How often `event` happened in this minute (0: not at all).
    pub fn get(&self, event: &str) -> i64 {
        self.events.get(event).copied().unwrap_or(0)
    }
}

/// Reads the per-minute counts ([`counts`]).
#[derive(Debug, Clone, Copy)]
pub struct Counts;

impl OpKind for Counts {
    type Output = Vec<MinuteCounts>;
    const CONTEXT: &'static str = "queue counts";

    fn decide(
        &self,
        reply: &Reply,
        _: Instant,
        _: bool,
    ) -> Option<Result<Vec<MinuteCounts>, Error>> {
        let items = reply.as_array()?;
        if items.len() % 2 != 0 {
            return None;
        }
        let out = items
            .chunks(2)
            .map(|c| {
                let minute = u64::try_from(c[0].as_int()?).ok()?;
                let fields = c[1].as_array()?;
                if fields.len() % 2 != 0 {
                    return None;
                }
                let events = fields
                    .chunks(2)
                    .map(|f| Some((text(&f[0])?.to_owned(), f[1].as_int()?)))
                    .collect::<Option<BTreeMap<_, _>>>()?;
                Some(MinuteCounts {
                    start: unix_ms(minute.checked_mul(60_000)?)?,
                    events,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(out))
    }
}

/// The minutes from `from` to `to` (both included, by their start on the server's clock)
/// that counted anything, oldest first. At most [`COUNTS_KEPT`] plus a minute is asked
/// for: an earlier `from` is moved up to `to` minus that (the counts are gone anyway).
/// `from` after `to` is refused.
pub fn counts(
    keys: &QueueKeys,
    from: SystemTime,
    to: SystemTime,
    deadline: Instant,
) -> Result<ScriptOp<Counts>, Error> {
    let minute = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 60)
    };
    let (from, to) = (minute(from), minute(to));
    if from > to {
        return Err(InvalidArgument::Setting("counts from a time after their end".into()).into());
    }
    let from = from.max(to.saturating_sub(COUNTS_KEPT.as_secs() / 60 + 1));
    let call = ScriptCall::new(&scripts::COUNTS)
        .keys(&[&keys.counts])
        .arg(from.to_string())
        .arg(to.to_string());
    Ok(ScriptOp::new(Counts, call, keys.target(), None, deadline))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn a_page_reads_its_jobs_and_its_cursor() {
        let reply = Reply::Array(vec![
            Reply::Int(10_000),
            b("2000"),
            b("a:b"),
            b("a:b"),
            b("in_flight"),
            b("2000"),
            Reply::Int(3),
            Reply::Int(2),
            b("4000"),
            Reply::Int(5),
            b("hello"),
        ]);
        let page = ListJobs
            .decide(&reply, crate::testing::origin(), false)
            .unwrap()
            .unwrap();
        assert_eq!(page.next.as_ref().unwrap().as_str(), "2000:a:b");
        assert_eq!(page.next.as_ref().unwrap().parts(), ("2000", "a:b"));
        let job = &page.jobs[0];
        assert_eq!(job.state, JobStatus::InFlight);
        assert_eq!(job.priority, 3);
        assert_eq!(job.deliveries, 2);
        assert_eq!(job.age, Some(Duration::from_millis(6000)));
        // The lease ran out 8 s ago: nothing left (never negative).
        assert_eq!(job.lease_left, Some(Duration::ZERO));
        assert_eq!(job.due_at, None);
        assert_eq!(job.preview, b"hello");
    }

    #[test]
    fn malformed_pages_are_refused() {
        for reply in [
            Reply::Array(vec![Reply::Int(1), b(""), b(""), b("x")]),
            Reply::Int(1),
            Reply::Array(vec![]),
        ] {
            assert!(
                ListJobs
                    .decide(&reply, crate::testing::origin(), false)
                    .is_none()
            );
        }
        let unknown_state = Reply::Array(vec![
            Reply::Int(1),
            b("nowhere"),
            b(""),
            b(""),
            b("weird"),
            b(""),
            Reply::Int(0),
            Reply::Int(1),
            b(""),
            Reply::Int(0),
            b(""),
        ]);
        assert!(
            LookUpJob
                .decide(&unknown_state, crate::testing::origin(), false)
                .is_none()
        );
    }

    #[test]
    fn bad_listings_are_refused_before_anything_is_sent() {
        let keys = QueueKeys::new(&crate::keys::Keyspace::default(), "q").unwrap();
        let at = crate::testing::origin();
        assert!(list_jobs(&keys, JobStatus::Ready, None, 0, at).is_err());
        assert!(list_jobs(&keys, JobStatus::Other, None, 1, at).is_err());
        let bad = JobCursor::from("x:y".to_owned());
        assert!(list_jobs(&keys, JobStatus::Ready, Some(&bad), 1, at).is_err());
        let later = SystemTime::UNIX_EPOCH + Duration::from_secs(120);
        assert!(counts(&keys, later, SystemTime::UNIX_EPOCH, at).is_err());
        assert_eq!(
            "in_flight".parse::<JobStatus>().unwrap(),
            JobStatus::InFlight
        );
        assert!("busy".parse::<JobStatus>().is_err());
    }

    #[test]
    fn counts_read_minutes_and_events() {
        let reply = Reply::Array(vec![
            Reply::Int(2),
            Reply::Array(vec![b("pushed"), b("3"), b("taken"), b("-1")]),
        ]);
        let out = Counts
            .decide(&reply, crate::testing::origin(), false)
            .unwrap()
            .unwrap();
        assert_eq!(
            out[0].start,
            SystemTime::UNIX_EPOCH + Duration::from_secs(120)
        );
        assert_eq!(out[0].get(event::PUSHED), 3);
        assert_eq!(out[0].get(event::TAKEN), -1);
        assert_eq!(out[0].get(event::ACKED), 0);
    }
}
