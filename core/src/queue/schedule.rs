//! Durable schedules: a named [`Schedule`] on a queue turns each of its occurrences into a job
//! whose id is derived from the schedule and the due time (`sched:<name>:<due ms>`), so any
//! number of processes upserting the same schedule make one job per occurrence.
//!
//! ```text
//!  upsert ──► pending occurrence (delayed job sched:<name>:<due>) ──due──► ready
//!    │ (a changed spec replaces a waiting pending occurrence)               │ take
//!    ▼                                                                      ▼
//!  schedules hash: spec, template, version, next ◄── advance ── taken occurrence
//!                                   (pushes the next occurrence, then the handler runs;
//!                                    a crash before it: redelivery advances)
//! ```
//!
//! The core reads no clock: occurrences are computed from times given to it, and the
//! scripts answer with the server's time when the caller's guess does not fit
//! ([`Upserted::Retry`], [`Advanced::Compute`]); the caller computes again from that time
//! and sends the call again. Every step is one script; the advance is idempotent (only the
//! pending occurrence advances, once).
//!
//! A whole upsert, then the advance of its first occurrence, with scripted replies:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::queue::QueueKeys;
//! use redlease_core::queue::schedule::{self, Schedule, Upserted};
//! use redlease_core::{Protocol, Reply, Response, Step};
//!
//! # fn main() -> Result<(), redlease_core::Error> {
//! let keys = QueueKeys::new(&Keyspace::default(), "reports")?;
//! let every = Schedule::every(Duration::from_secs(60))?.payload("sum");
//! assert_eq!(every.first_after(90_000), Some(120_000));
//! // The first call knows no server time: the script answers with it, nothing written.
//! let now = Instant::now();
//! let mut op = schedule::upsert(&keys, "minutely", &every, None, now + Duration::from_secs(1))?;
//! let Step::Send(batch) = op.poll(now) else { panic!("sends its call") };
//! let reply = Reply::Array(vec![Reply::Int(-1), Reply::Int(-1), Reply::Int(90_000)]);
//! op.handle(Response::reply(batch.requests[0].id, reply), now);
//! let Step::Done(Ok(Upserted::Retry { from_ms })) = op.poll(now) else { panic!("a retry") };
//! // Computed from the server's time, the occurrence the second call stores is 120_000.
//! assert_eq!(schedule::upsert_from(&every, from_ms), (90_000, Some(120_000)));
//! // Occurrence 120_000 taken at 120_003: the next is 180_000, and none was missed.
//! assert_eq!(schedule::occurrence("sched:minutely:120000"), Some(("minutely", 120_000)));
//! assert_eq!(schedule::advance_from(&every, 120_000, 120_003), (120_003, Some(180_000)));
//! assert!(!schedule::missed(&every, 120_000, 120_003));
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant};

use crate::error::{Error, InvalidArgument};
use crate::lease::{OpKind, ScriptOp};
use crate::reply::Reply;
use crate::script;
use crate::script::prelude::*;
use crate::script::{Script, ScriptCall};

use super::QueueKeys;

/// `lua/schedule_part.lua`: the schedule scripts' shared part (`read_all`, `drop_waiting`,
/// `occur`), after the prelude they call.
pub const PART: &str = include_str!("lua/schedule_part.lua");

/// `lua/schedule_upsert.lua`
pub static UPSERT: Script = script!(
    "queue_schedule_upsert",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        NOTIFY,
        super::scripts::COUNT,
        PART
    ],
    include_str!("lua/schedule_upsert.lua")
);

/// `lua/schedule_advance.lua`
pub static ADVANCE: Script = script!(
    "queue_schedule_advance",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        NOTIFY,
        super::scripts::COUNT,
        PART
    ],
    include_str!("lua/schedule_advance.lua")
);

/// `lua/schedule_remove.lua`
pub static REMOVE: Script = script!(
    "queue_schedule_remove",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOTIFY,
        super::scripts::COUNT,
        PART
    ],
    include_str!("lua/schedule_remove.lua")
);

/// `lua/schedule_list.lua`
pub static LIST: Script = script!(
    "queue_schedule_list",
    [],
    include_str!("lua/schedule_list.lua")
)
.read_only();

/// `lua/schedule_epoch.lua`
pub static EPOCH: Script = script!(
    "queue_schedule_epoch",
    [],
    include_str!("lua/schedule_epoch.lua")
)
.read_only();

/// Every schedule script.
pub static ALL: [&Script; 5] = [&UPSERT, &ADVANCE, &REMOVE, &LIST, &EPOCH];

/// The start of every occurrence's job id.
pub const OCCURRENCE_PREFIX: &str = "sched:";

/// What happens to an occurrence taken when the next one was due already (nothing ran it
/// for at least a period): the next occurrence is always the first one after the time of
/// the take, so a gap never yields more than one late run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Missed {
    /// The late occurrence is dropped (acked without running). The default.
    #[default]
    Skip,
    /// The late occurrence runs once (one catch-up for the whole gap).
    CatchUp,
}

/// When a schedule's occurrences fall.
#[derive(Debug, Clone)]
enum Rule {
    /// Every `ms` milliseconds from the start (from the Unix epoch without a start), so
    /// every process computes the same due times.
    Every(u64),
    /// A cron expression in a time zone.
    #[cfg(feature = "cron")]
    Cron {
        expr: String,
        tz: String,
        cron: Box<croner::Cron>,
        zone: chrono_tz::Tz,
    },
}

/// A schedule: when its occurrences fall (every `d`, or a cron expression in a time zone),
/// between an optional start and end (Unix milliseconds, on the server's clock), what to do
/// with a missed occurrence, and the job template (payload, priority) of each occurrence.
///
/// ```
/// use std::time::Duration;
/// use redlease_core::queue::schedule::{Missed, Schedule};
///
/// let s = Schedule::every(Duration::from_secs(10))?
///     .starting_at_ms(1_000)
///     .ending_at_ms(40_000)
///     .missed(Missed::CatchUp)
///     .payload("tick")
///     .priority(3);
/// assert_eq!(s.first_after(0), Some(1_000));
/// assert_eq!(s.first_after(1_000), Some(11_000));
/// assert_eq!(s.first_after(31_000), None); // 41_000 is past the end
/// # Ok::<(), redlease_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Schedule {
    rule: Rule,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
    missed: Missed,
    payload: Vec<u8>,
    priority: u8,
}

/// Two schedules are equal when their specs and templates are (a parsed cron expression is
/// compared by its text).
impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.spec() == other.spec()
            && self.payload == other.payload
            && self.priority == other.priority
    }
}

impl Eq for Schedule {}

fn bad(message: impl Into<String>) -> Error {
    Error::InvalidArgument(InvalidArgument::Setting(message.into()))
}

impl Schedule {
    /// Every `every` (1 ms to [`MAX_DURATION`](crate::limits::MAX_DURATION), whole
    /// milliseconds), counted from the start ([`starting_at_ms`](Self::starting_at_ms)), or
    /// from the Unix epoch without one: every 1 s falls on whole seconds.
    pub fn every(every: Duration) -> Result<Self, Error> {
        crate::limits::duration(
            "schedule period",
            every,
            Duration::from_millis(1),
            crate::limits::MAX_DURATION,
        )?;
        if !every.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(bad("a schedule period is whole milliseconds"));
        }
        Ok(Self::with(Rule::Every(every.as_millis() as u64)))
    }

    /// A cron expression (five fields, or six with seconds first; `croner`'s syntax, with
    /// `L`, `W`, `#`, and nicknames such as `@daily`) in the IANA time zone `tz` (such as
    /// `America/New_York`). Across a daylight-saving change an occurrence in the skipped hour
    /// runs at the first valid time after it, and one in the repeated hour runs once.
    #[cfg(feature = "cron")]
    pub fn cron(expr: &str, tz: &str) -> Result<Self, Error> {
        if expr.contains('\n') || tz.contains('\n') {
            return Err(bad("a cron expression or time zone has no line break"));
        }
        let cron = croner::parser::CronParser::new()
            .parse(expr)
            .map_err(|e| bad(format!("bad cron expression {expr:?}: {e}")))?;
        let zone: chrono_tz::Tz = tz
            .parse()
            .map_err(|_| bad(format!("unknown time zone {tz:?}")))?;
        Ok(Self::with(Rule::Cron {
            expr: expr.to_owned(),
            tz: tz.to_owned(),
            cron: Box::new(cron),
            zone,
        }))
    }

    fn with(rule: Rule) -> Self {
        Schedule {
            rule,
            start_ms: None,
            end_ms: None,
            missed: Missed::default(),
            payload: Vec::new(),
            priority: 0,
        }
    }

    /// Refuses a start or an end past [`MAX_SCHEDULE_MS`] (a Lua number, a double, holds
    /// integers exactly only up to 2^53): nothing is written.
    fn check_times(&self) -> Result<(), Error> {
        for (what, ms) in [("start", self.start_ms), ("end", self.end_ms)] {
            if let Some(ms) = ms
                && ms > MAX_SCHEDULE_MS
            {
                return Err(InvalidArgument::Setting(format!(
                    "a schedule's {what} is at most {MAX_SCHEDULE_MS} ms (2^53 - 1), got {ms}"
                ))
                .into());
            }
        }
        Ok(())
    }

    /// No occurrence before `ms` (Unix milliseconds); an every-`d` schedule counts its
    /// periods from here. Past [`MAX_SCHEDULE_MS`] the upsert is refused.
    pub fn starting_at_ms(mut self, ms: u64) -> Self {
        self.start_ms = Some(ms);
        self
    }

    /// No occurrence after `ms` (Unix milliseconds): the schedule then has none left.
    pub fn ending_at_ms(mut self, ms: u64) -> Self {
        self.end_ms = Some(ms);
        self
    }

    /// What to do with an occurrence taken when the next was due already. Defaults to
    /// [`Missed::Skip`].
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// The payload of every occurrence's job (empty by default).
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// The priority of every occurrence's job (0, the default, to 255).
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// The job payload of each occurrence.
    pub fn payload_bytes(&self) -> &[u8] {
        &self.payload
    }

    /// The job priority of each occurrence.
    pub fn job_priority(&self) -> u8 {
        self.priority
    }

    /// The missed-occurrence policy.
    pub fn missed_policy(&self) -> Missed {
        self.missed
    }

    /// The start, if any (Unix milliseconds).
    pub fn start_ms(&self) -> Option<u64> {
        self.start_ms
    }

    /// The end, if any (Unix milliseconds).
    pub fn end_ms(&self) -> Option<u64> {
        self.end_ms
    }

    /// The period of an every-`d` schedule (`None` for a cron schedule).
    pub fn period(&self) -> Option<Duration> {
        match self.rule {
            Rule::Every(ms) => Some(Duration::from_millis(ms)),
            #[cfg(feature = "cron")]
            Rule::Cron { .. } => None,
        }
    }

    /// The first occurrence strictly after `t_ms` (Unix milliseconds), within the start and
    /// the end; `None` when there is none.
    pub fn first_after(&self, t_ms: u64) -> Option<u64> {
        let start = self.start_ms.unwrap_or(0);
        let due = match &self.rule {
            Rule::Every(every) => {
                if t_ms < start {
                    start
                } else {
                    let k = (t_ms - start) / every + 1;
                    start.checked_add(k.checked_mul(*every)?)?
                }
            }
            #[cfg(feature = "cron")]
            Rule::Cron { cron, zone, .. } => {
                use chrono::TimeZone;
                // Occurrences fall on whole seconds: the first after t is the first after
                // t's whole second, searched from just before the start at the earliest.
                let from = if t_ms < start {
                    (start / 1000) as i64 - 1
                } else {
                    (t_ms / 1000) as i64
                };
                let at = zone.timestamp_opt(from, 0).single()?;
                let next = cron.find_next_occurrence(&at, false).ok()?;
                let ms = u64::try_from(next.timestamp()).ok()?.checked_mul(1000)?;
                if ms < start {
                    return None;
                }
                ms
            }
        };
        match self.end_ms {
            Some(end) if due > end => None,
            _ => Some(due),
        }
    }

    /// The spec as stored (one `key=value` per line; the template is stored apart). Two
    /// processes upserting the same schedule store the same text.
    pub fn spec(&self) -> String {
        let mut out = match &self.rule {
            Rule::Every(ms) => format!("every={ms}\n"),
            #[cfg(feature = "cron")]
            Rule::Cron { expr, tz, .. } => format!("cron={expr}\ntz={tz}\n"),
        };
        if let Some(s) = self.start_ms {
            out.push_str(&format!("start={s}\n"));
        }
        if let Some(e) = self.end_ms {
            out.push_str(&format!("end={e}\n"));
        }
        if self.missed == Missed::CatchUp {
            out.push_str("missed=catch-up\n");
        }
        out
    }

    /// A schedule from its stored spec ([`spec`](Self::spec)) and template. A cron spec
    /// without the `cron` feature is refused with [`Error::InvalidArgument`].
    pub fn from_spec(spec: &str, payload: Vec<u8>, priority: u8) -> Result<Self, Error> {
        let (mut every, mut cron, mut tz) = (None, None, None);
        let (mut start, mut end, mut missed) = (None, None, Missed::Skip);
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| bad(format!("bad schedule spec {spec:?}")))
        };
        for line in spec.lines() {
            match line.split_once('=') {
                Some(("every", v)) => every = Some(number(v)?),
                Some(("cron", v)) => cron = Some(v),
                Some(("tz", v)) => tz = Some(v),
                Some(("start", v)) => start = Some(number(v)?),
                Some(("end", v)) => end = Some(number(v)?),
                Some(("missed", "catch-up")) => missed = Missed::CatchUp,
                _ => return Err(bad(format!("bad schedule spec {spec:?}"))),
            }
        }
        let s = match (every, cron, tz) {
            (Some(ms), None, None) => Self::every(Duration::from_millis(ms))?,
            #[cfg(feature = "cron")]
            (None, Some(expr), Some(tz)) => Self::cron(expr, tz)?,
            #[cfg(not(feature = "cron"))]
            (None, Some(_), Some(_)) => {
                return Err(bad("a cron schedule needs the `cron` feature"));
            }
            _ => return Err(bad(format!("bad schedule spec {spec:?}"))),
        };
        let mut s = s.missed(missed).payload(payload).priority(priority);
        s.start_ms = start;
        s.end_ms = end;
        Ok(s)
    }
}

/// The key of a queue's schedules (`<prefix>:{<name>}:q:schedules`).
fn schedules_key(keys: &QueueKeys) -> String {
    let stem = keys.ready.strip_suffix("ready").unwrap_or(&keys.ready);
    format!("{stem}schedules")
}

fn keyed(keys: &QueueKeys, script: &'static Script) -> ScriptCall {
    ScriptCall::new(script).keys(&[
        &schedules_key(keys),
        &keys.ready,
        &keys.delayed,
        &keys.payloads,
        &keys.priorities,
        &keys.inflight,
        keys.counts_slot(),
    ])
}

/// Reads the epoch of a queue's schedules ([`epoch`]): the server ms their hash was first
/// written, `None` when there is none.
#[derive(Debug, Clone, Copy)]
pub struct Epoch;

impl OpKind for Epoch {
    type Output = Option<u64>;
    const CONTEXT: &'static str = "queue schedule epoch";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Option<u64>, Error>> {
        match reply {
            Reply::Nil => Some(Ok(None)),
            Reply::Bulk(b) => Some(Ok(Some(std::str::from_utf8(b).ok()?.parse().ok()?))),
            _ => None,
        }
    }
}

/// The epoch of the queue's schedules: set by the first upsert, kept while the queue's data
/// is. A client that upserted schedules reads it now and then, and upserts them again when
/// it changed (the data was lost: a restart without persistence, a failover to a replica
/// that had not received them), so that schedules outlive the loss of their definitions.
pub fn epoch(keys: &QueueKeys, deadline: Instant) -> ScriptOp<Epoch> {
    let call = ScriptCall::new(&EPOCH).keys(&[&schedules_key(keys)]);
    ScriptOp::new(Epoch, call, keys.target(), None, deadline)
}

/// The schedule name and due time (Unix ms) of an occurrence's job id, or `None` for any
/// other job.
pub fn occurrence(id: &str) -> Option<(&str, u64)> {
    let rest = id.strip_prefix(OCCURRENCE_PREFIX)?;
    let (name, due) = rest.rsplit_once(':')?;
    if name.is_empty() || due.is_empty() || due.starts_with('+') {
        return None;
    }
    Some((name, due.parse().ok()?))
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(InvalidArgument::EmptyName.into());
    }
    if name.len() > crate::keys::MAX_NAME_LEN {
        return Err(InvalidArgument::NameTooLong {
            len: name.len(),
            max: crate::keys::MAX_NAME_LEN,
        }
        .into());
    }
    Ok(())
}

fn due_text(due: Option<u64>) -> String {
    due.map_or_else(|| "-1".to_owned(), |d| d.to_string())
}

/// `(from, first occurrence strictly after from)` for an upsert whose script answered
/// [`Upserted::Retry`] with `from_ms`.
pub fn upsert_from(schedule: &Schedule, from_ms: u64) -> (u64, Option<u64>) {
    (from_ms, schedule.first_after(from_ms))
}

/// `(from, first occurrence strictly after from)` for the advance past occurrence `due`
/// taken at `now_ms`: the next occurrence is the first after both.
pub fn advance_from(schedule: &Schedule, due: u64, now_ms: u64) -> (u64, Option<u64>) {
    let from = due.max(now_ms);
    (from, schedule.first_after(from))
}

/// Whether occurrence `due`, taken at `now_ms`, was missed: the occurrence after it was due
/// already (nothing took it for at least a period).
pub fn missed(schedule: &Schedule, due: u64, now_ms: u64) -> bool {
    schedule.first_after(due).is_some_and(|next| next <= now_ms)
}

/// The latest start or end a schedule takes (Unix ms, 2^53 - 1: the largest integer a Lua
/// number holds exactly; about the year 287,396).
pub const MAX_SCHEDULE_MS: u64 = (1 << 53) - 1;

/// What an upsert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Upserted {
    /// Nothing changed: the same spec and template with its pending occurrence (`next`,
    /// `None` when none is left).
    Unchanged {
        /// The pending occurrence's due time (Unix ms).
        next: Option<u64>,
    },
    /// Created or changed; a waiting pending occurrence of the old spec was replaced.
    Set {
        /// The pending occurrence's due time (Unix ms), `None` when none is left.
        next: Option<u64>,
    },
    /// Nothing written: send it again with the first occurrence strictly after `from_ms`
    /// ([`upsert_from`]).
    Retry {
        /// The time to compute from (Unix ms): the server's time or, when the schedule is
        /// unchanged and the job of its pending occurrence is gone (cancelled and
        /// forgotten, or acked before the advance past it ran), that occurrence when it is
        /// later. An occurrence whose job ended is never made again.
        from_ms: u64,
    },
}

/// Runs an upsert call ([`upsert`]).
#[derive(Debug, Clone, Copy)]
pub struct Upsert;

fn as_u64(r: &Reply) -> Option<u64> {
    u64::try_from(r.as_int()?).ok()
}

fn as_due(r: &Reply) -> Option<Option<u64>> {
    match r.as_int()? {
        -1 => Some(None),
        n => Some(Some(u64::try_from(n).ok()?)),
    }
}

impl OpKind for Upsert {
    type Output = Upserted;
    const CONTEXT: &'static str = "queue schedule upsert";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Upserted, Error>> {
        let out = match reply.as_array()? {
            [code, next, now] => match code.as_int()? {
                0 => Upserted::Unchanged {
                    next: as_due(next)?,
                },
                1 => Upserted::Set {
                    next: as_due(next)?,
                },
                -1 => Upserted::Retry {
                    from_ms: as_u64(now)?,
                },
                _ => return None,
            },
            _ => return None,
        };
        Some(Ok(out))
    }
}

/// Upserts schedule `name` on the queue of `keys`. `from` is `(from, first occurrence
/// strictly after from)`, computed from a time the caller believes is the server's
/// ([`upsert_from`]); `None` (or a guess that does not fit) makes the script answer
/// [`Upserted::Retry`] with the time to compute from, nothing written.
pub fn upsert(
    keys: &QueueKeys,
    name: &str,
    schedule: &Schedule,
    from: Option<(u64, Option<u64>)>,
    deadline: Instant,
) -> Result<ScriptOp<Upsert>, Error> {
    check_name(name)?;
    if keys.is_grouped() {
        // No group take leases an occurrence (it has no group): it would wait for ever.
        return Err(InvalidArgument::Setting(
            "a schedule is not available on a queue's grouped keys: use the queue's own".into(),
        )
        .into());
    }
    schedule.check_times()?;
    let (from, first) = match from {
        Some((from, first)) => (from.to_string(), due_text(first)),
        None => (String::new(), String::new()),
    };
    let call = keyed(keys, &UPSERT)
        .arg(name)
        .arg(schedule.spec())
        .arg(&schedule.payload)
        .arg(schedule.priority.to_string())
        .arg(&keys.notify)
        .arg(from)
        .arg(first);
    Ok(ScriptOp::new(Upsert, call, keys.target(), None, deadline))
}

/// What an advance found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advanced {
    /// The taken occurrence was pending: the next (`None`: none left) now exists.
    Done {
        /// The server's time (Unix ms).
        now_ms: u64,
        /// The version of the stored spec.
        version: String,
        /// The schedule as stored.
        schedule: Box<Schedule>,
        /// The new pending occurrence.
        next: Option<u64>,
    },
    /// The taken occurrence is not pending: advanced already (by an earlier delivery),
    /// replaced by a change, or its schedule removed (`schedule` `None`).
    NotPending {
        /// The server's time (Unix ms).
        now_ms: u64,
        /// The schedule as stored, if it exists.
        schedule: Option<Box<Schedule>>,
    },
    /// Nothing written: send it again with the occurrence computed from this spec
    /// (version `version`) and time ([`advance_from`]).
    Compute {
        /// The server's time (Unix ms).
        now_ms: u64,
        /// The version of the stored spec.
        version: String,
        /// The schedule as stored.
        schedule: Box<Schedule>,
    },
}

/// Runs an advance call ([`advance`]).
#[derive(Debug, Clone, Copy)]
pub struct Advance;

impl OpKind for Advance {
    type Output = Advanced;
    const CONTEXT: &'static str = "queue schedule advance";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Advanced, Error>> {
        let [code, now, version, spec, next] = reply.as_array()? else {
            return None;
        };
        let now_ms = as_u64(now)?;
        let schedule = match spec {
            Reply::Bulk(spec) => {
                // The template is not needed to compute occurrences.
                let text = std::str::from_utf8(spec).ok()?;
                match Schedule::from_spec(text, Vec::new(), 0) {
                    Ok(s) => Some(Box::new(s)),
                    Err(e) => return Some(Err(e)),
                }
            }
            Reply::Nil => None,
            _ => return None,
        };
        let version = match version {
            Reply::Bulk(v) => Some(String::from_utf8(v.clone()).ok()?),
            _ => None,
        };
        let out = match (code.as_int()?, schedule, version) {
            (1, Some(schedule), Some(version)) => Advanced::Done {
                now_ms,
                version,
                schedule,
                next: as_due(next)?,
            },
            (0, schedule, _) => Advanced::NotPending { now_ms, schedule },
            (-1, Some(schedule), Some(version)) => Advanced::Compute {
                now_ms,
                version,
                schedule,
            },
            _ => return None,
        };
        Some(Ok(out))
    }
}

/// Advances schedule `name` past its occurrence `due` (taken now): pushes the next
/// occurrence if `due` is the pending one. `computed` is `(version, from, first occurrence
/// strictly after from)` from an earlier [`Advanced::Compute`] ([`advance_from`]); `None`
/// asks for the spec and the server's time. Idempotent.
pub fn advance(
    keys: &QueueKeys,
    name: &str,
    due: u64,
    computed: Option<(&str, u64, Option<u64>)>,
    deadline: Instant,
) -> Result<ScriptOp<Advance>, Error> {
    check_name(name)?;
    let (version, from, first) = match computed {
        Some((v, from, first)) => (v.to_owned(), from.to_string(), due_text(first)),
        None => (String::new(), String::new(), String::new()),
    };
    let call = keyed(keys, &ADVANCE)
        .arg(name)
        .arg(due.to_string())
        .arg(&keys.notify)
        .arg(version)
        .arg(from)
        .arg(first);
    Ok(ScriptOp::new(Advance, call, keys.target(), None, deadline))
}

/// Runs a remove call ([`remove`]): whether the schedule existed.
#[derive(Debug, Clone, Copy)]
pub struct Remove;

impl OpKind for Remove {
    type Output = bool;
    const CONTEXT: &'static str = "queue schedule remove";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<bool, Error>> {
        match reply.as_int()? {
            0 => Some(Ok(false)),
            1 => Some(Ok(true)),
            _ => None,
        }
    }
}

/// Removes schedule `name` and its waiting pending occurrence (a leased one runs to its
/// end, and advances nothing).
pub fn remove(keys: &QueueKeys, name: &str, deadline: Instant) -> Result<ScriptOp<Remove>, Error> {
    check_name(name)?;
    let call = keyed(keys, &REMOVE).arg(name);
    Ok(ScriptOp::new(Remove, call, keys.target(), None, deadline))
}

/// A schedule as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// Its spec and template.
    pub schedule: Schedule,
    /// Its pending occurrence's due time (Unix ms), `None` when none is left.
    pub next: Option<u64>,
}

/// Runs a list call ([`list`]).
#[derive(Debug, Clone, Copy)]
pub struct List;

impl OpKind for List {
    type Output = Vec<ScheduleInfo>;
    const CONTEXT: &'static str = "queue schedule list";

    fn decide(
        &self,
        reply: &Reply,
        _: Instant,
        _: bool,
    ) -> Option<Result<Vec<ScheduleInfo>, Error>> {
        let flat = reply.as_array()?;
        let mut fields = std::collections::BTreeMap::<(&[u8], u8), &[u8]>::new();
        for pair in flat.chunks(2) {
            let [Reply::Bulk(field), Reply::Bulk(value)] = pair else {
                return None;
            };
            let (kind, name) = (field.first()?, field.get(2..)?);
            fields.insert((name, *kind), value);
        }
        let mut out = Vec::new();
        for (&(name, kind), spec) in &fields {
            if kind != b's' {
                continue;
            }
            let get = |k: u8| fields.get(&(name, k)).copied();
            let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_owned);
            let priority = text(get(b'r')?)?.parse().ok()?;
            let next = match text(get(b'n')?)?.as_str() {
                "-1" => None,
                n => Some(n.parse().ok()?),
            };
            let schedule = match Schedule::from_spec(&text(spec)?, get(b'p')?.to_vec(), priority) {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            };
            out.push(ScheduleInfo {
                name: text(name)?,
                schedule,
                next,
            });
        }
        Some(Ok(out))
    }
}

/// Lists the schedules of the queue of `keys`, sorted by name.
pub fn list(keys: &QueueKeys, deadline: Instant) -> ScriptOp<List> {
    let call = ScriptCall::new(&LIST).keys(&[&schedules_key(keys)]);
    ScriptOp::new(List, call, keys.target(), None, deadline)
}

#[cfg(test)]
mod tests;
