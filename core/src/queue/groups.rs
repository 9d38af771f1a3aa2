//! Job groups: fair takes across groups (tenants, customers, partners), each group under its
//! own concurrency and rate limits, and the whole set of groups under the queue's.
//!
//! Grouped jobs live in keys of their own under the queue's hash tag (`<stem>:q:g:<part>`,
//! [`QueueKeys::grouped`]), so that jobs without a group send and cost exactly what they did:
//! the plain take never sees a grouped job. The grouped keys run the queue's own scripts for
//! everything a job does once taken (extend, inspect, nack, give back, dead list), and these
//! scripts for what differs: the push into a group, the fair take, the ack that frees a
//! group's slot, the "rate limited for d" answer, and the limits.
//!
//! ```text
//!  group push ──► group's ready zset (priority, FIFO) ── group joins the ring ──┐
//!                                                                               ▼
//!   ring (zset: group -> turn last served; least recently served first) ── take scans ≤ 16:
//!     │ paused ('g:<group>' in the pause hash) ──► set aside until resumed
//!     │ full (its running leases ≥ concurrency) ──► full zset until its first lease ends
//!     │                                             (or an ack frees a slot: back at once)
//!     │ rate denied (GCRA, the rate limiter's engine) ──► blocked zset until allowed
//!     └ eligible ──► head job leased (in flight, and in the group's leased zset), the
//!                    group to the back of the ring (or out of it when it has no more)
//!   in flight ──ack──► forgotten (the group's slot freed, takers woken)
//!             ──rate limited for d──► head of its group, not counted; group blocked for d
//!             ──nack / lease ran out / given back──► staging ──next take──► its group
//!   nothing eligible: Empty with the ms until a group, a delayed job or a lease may change
//! ```
//!
//! A group's slot is a lease: a worker that dies frees it when its lease runs out, with no
//! counter to leak. Limits live in Redis (a hash: the defaults of every group, a group's
//! own, the whole queue's), so every process obeys the same ones and they change at run
//! time ([`set_limits`]).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::queue::groups::{self, GroupLimits, LimitsOf};
//! use redlease_core::queue::{NewJob, QueueKeys};
//! use redlease_core::rate::RateLimit;
//!
//! let keys = QueueKeys::grouped(&Keyspace::default(), "api")?;
//! let job = NewJob { id: "7".into(), payload: b"call".to_vec() };
//! // A push into group "acme" (its job's id in the queue: "acme\u{1f}7").
//! let _push = groups::push(&keys, "acme", &[job], 0, Duration::ZERO, Instant::now())?;
//! // Each group: 2 at a time, 50 a second, one at once.
//! let limits = GroupLimits::new()
//!     .concurrency(2)
//!     .rate(RateLimit::new(50, Duration::from_secs(1), 1)?);
//! let _set = groups::set_limits(&keys, LimitsOf::EveryGroup, Some(limits), Instant::now())?;
//! assert_eq!(groups::split_id("acme\u{1f}7"), (Some("acme"), "7"));
//! # Ok::<(), redlease_core::Error>(())
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{KeyedCalls, Push, QueueKeys, SETTLED_KEEP, ceil_ms, placeholder_token};
use crate::error::{Error, InvalidArgument};
use crate::keys::Keyspace;
use crate::lease::{Lease, OpKind, ScriptOp};
use crate::rate::RateLimit;
use crate::reply::Reply;
use crate::script::prelude::*;
use crate::script::{Script, ScriptCall};

/// The byte between a job's group and its id in the queue's grouped keys.
pub const SEPARATOR: char = '\u{1f}';

/// How far ahead a group take books its group's next rate slot (`RESERVE_US` in
/// `lua/group_take.lua`; no further than one interval of the group's rate, so that a group
/// holds about one booking at a time): a take that finds the slot at most this far away
/// leases the job now and says when it may start
/// ([`TakenJob::start_in`](super::TakenJob::start_in)), and a rate-blocked group is looked
/// at again that long before its slot. So the rate is kept exactly (each slot booked from
/// the last, not from a take's late arrival) while a taker's wake-up and round trip fit in
/// this margin. The whole queue's rate ([`LimitsOf::Queue`]) is booked the same way; a take
/// that books both starts at the later slot, and each rate's time moves as from that start.
pub const GROUP_RESERVE: Duration = Duration::from_millis(10);

/// The longest group id accepted, in bytes.
pub const MAX_GROUP_LEN: usize = 128;

/// `lua/group_push.lua`
pub static GROUP_PUSH: Script = crate::script!(
    "queue_group_push",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS_UP,
        READY,
        NOTIFY,
        super::scripts::COUNT
    ],
    include_str!("lua/group_push.lua")
);

/// `lua/group_take.lua`
pub static GROUP_TAKE: Script = crate::script!(
    "queue_group_take",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        READY,
        super::scripts::COUNT,
        DEDUP,
        super::scripts::DEAD_LIST,
        DEDUP_RELEASE,
        super::scripts::BURY,
        super::scripts::GROUP_FREE,
        super::scripts::RECLAIM,
        GCRA
    ],
    include_str!("lua/group_take.lua")
);

/// `lua/group_ack.lua`
pub static GROUP_ACK: Script = crate::script!(
    "queue_group_ack",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        REMEMBER,
        NOTIFY,
        super::scripts::COUNT,
        super::scripts::GROUP_FREE
    ],
    include_str!("lua/group_ack.lua")
);

/// `lua/group_defer.lua`
pub static GROUP_DEFER: Script = crate::script!(
    "queue_group_defer",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        REMEMBER,
        NOTIFY,
        super::scripts::COUNT
    ],
    include_str!("lua/group_defer.lua")
);

/// `lua/group_limits.lua`
pub static GROUP_LIMITS: Script = crate::script!(
    "queue_group_limits",
    [crate::script::prelude::UNDECLARED_KEYS, NOTIFY],
    include_str!("lua/group_limits.lua")
);

/// `lua/group_page.lua`: a page of the groups with their figures (read only).
pub static GROUP_PAGE: Script = crate::script!(
    "queue_group_page",
    [crate::script::prelude::UNDECLARED_KEYS],
    include_str!("lua/group_page.lua")
)
.read_only();

/// Every group script.
pub static ALL: [&Script; 6] = [
    &GROUP_PUSH,
    &GROUP_TAKE,
    &GROUP_ACK,
    &GROUP_DEFER,
    &GROUP_LIMITS,
    &GROUP_PAGE,
];

/// The keys of a queue's groups (besides the grouped jobs' own queue keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupKeys {
    /// Groups with ready jobs that may be eligible (zset: group -> turn last served). A
    /// group's own keys are named after it without `ring`: `r:<group>`, `i:<group>`,
    /// `t:<group>`.
    ring: String,
    blocked: String,
    full: String,
    aside: String,
    /// Groups set aside as full, and as rate-blocked, before a change of limits: the takes
    /// look at them again, 16 a take (a change moves the sets here whole, `RENAME`).
    recheck_full: String,
    recheck_blocked: String,
    turn: String,
    limits: String,
    rate: String,
}

impl QueueKeys {
    /// The keys of the grouped jobs of queue `name`: `<prefix>:{<name>}:q:g:<part>` (and
    /// the queue's pauses, `<prefix>:{<name>}:q:paused`, shared with its plain jobs).
    pub fn grouped(keyspace: &Keyspace, name: &str) -> Result<Self, Error> {
        let stem = keyspace.stem(name)?;
        let k = |part: &str| format!("{stem}:q:g:{part}");
        let groups = GroupKeys {
            ring: k("ring"),
            blocked: k("blocked"),
            full: k("full"),
            aside: k("aside"),
            recheck_full: k("recheck_full"),
            recheck_blocked: k("recheck_blocked"),
            turn: k("turn"),
            limits: k("limits"),
            rate: k("rate"),
        };
        QueueKeys::with_parts(keyspace, name, "q:g:", Some(Arc::new(groups)))
    }

    /// Whether these are a queue's grouped keys ([`QueueKeys::grouped`]).
    pub fn is_grouped(&self) -> bool {
        self.groups.is_some()
    }
}

/// The grouped keys' take and ack (their other calls are the queue's own).
pub(super) fn rebind(calls: &mut KeyedCalls, k: &QueueKeys, g: &GroupKeys) {
    calls.dequeue = ScriptCall::new(&GROUP_TAKE).keys(&[
        &k.ready,
        &k.delayed,
        &k.payloads,
        &k.priorities,
        &k.seq,
        &k.inflight,
        &k.leases,
        &k.deliveries,
        &k.dead,
        &k.holders,
        &k.bases,
        &k.undone,
        &g.ring,
        &g.blocked,
        &g.full,
        &g.limits,
        &g.turn,
        &g.rate,
        &k.paused,
        &g.aside,
        k.counts_slot(),
        &g.recheck_full,
        &g.recheck_blocked,
    ]);
    let ack_keys: [&str; 14] = [
        &k.inflight,
        &k.leases,
        &k.payloads,
        &k.priorities,
        &k.deliveries,
        &k.holders,
        &k.bases,
        &k.settled,
        &g.ring,
        &g.full,
        &g.turn,
        &g.limits,
        k.counts_slot(),
        &k.paused,
    ];
    calls.ack = ScriptCall::new(&GROUP_ACK).keys(&ack_keys);
    calls.ack_bound = ScriptCall::new(&GROUP_ACK)
        .keys(&ack_keys)
        .subject_arg()
        .owner_arg(&placeholder_token())
        .arg(SETTLED_KEEP.as_millis().to_string())
        .arg(&k.notify)
        .compact();
}

/// A job's group and its id, from its id in the grouped keys (`<group>\u{1f}<id>`); no
/// group for an id without the separator.
pub fn split_id(id: &str) -> (Option<&str>, &str) {
    match id.split_once(SEPARATOR) {
        Some((group, id)) => (Some(group), id),
        None => (None, id),
    }
}

/// A job's address as a user gives it: its id as pushed and its group (`None`: a plain
/// job), never the composed id the grouped keys store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobRef {
    /// Its group, for a job pushed into one.
    pub group: Option<String>,
    /// Its id, as pushed.
    pub id: String,
}

impl JobRef {
    /// A plain job's address.
    pub fn plain(id: impl Into<String>) -> Self {
        Self {
            group: None,
            id: id.into(),
        }
    }

    /// A grouped job's address.
    pub fn grouped(group: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            group: Some(group.into()),
            id: id.into(),
        }
    }

    /// The address of the job stored under `stored` (a composed `<group>\u{1f}<id>` or a
    /// plain id).
    pub fn from_stored(stored: &str) -> Self {
        match split_id(stored) {
            (Some(group), id) => Self::grouped(group, id),
            (None, id) => Self::plain(id),
        }
    }
}

/// Checks a group id: 1 to [`MAX_GROUP_LEN`] bytes, without [`SEPARATOR`].
pub fn check_group(group: &str) -> Result<(), Error> {
    if group.is_empty() || group.len() > MAX_GROUP_LEN || group.contains(SEPARATOR) {
        return Err(InvalidArgument::Setting(format!(
            "a group id must be 1 to {MAX_GROUP_LEN} bytes without the byte 0x1f, got {group:?}"
        ))
        .into());
    }
    Ok(())
}

fn grouped(keys: &QueueKeys) -> Result<&GroupKeys, Error> {
    keys.groups.as_deref().ok_or_else(|| {
        InvalidArgument::Setting("these are not a queue's grouped keys".into()).into()
    })
}

/// Pushes `jobs` into `group` with one priority and delay, giving up at `deadline`: each is
/// [`Pushed::Queued`](super::Pushed::Queued), [`Duplicate`](super::Pushed::Duplicate) or
/// [`GroupFull`](super::Pushed::GroupFull), under the id given (not the queue's).
pub fn push(
    keys: &QueueKeys,
    group: &str,
    jobs: &[super::NewJob],
    priority: u8,
    delay: Duration,
    deadline: Instant,
) -> Result<ScriptOp<Push>, Error> {
    let g = grouped(keys)?;
    check_group(group)?;
    if jobs.is_empty() {
        return Err(InvalidArgument::Setting("nothing to push".into()).into());
    }
    let mut call = ScriptCall::new(&GROUP_PUSH)
        .keys(&[
            &keys.delayed,
            &keys.payloads,
            &keys.priorities,
            &keys.seq,
            &g.ring,
            &g.blocked,
            &g.full,
            &g.aside,
            &g.turn,
            &g.limits,
            keys.counts_slot(),
        ])
        .arg(ceil_ms(delay).to_string())
        .arg(priority.to_string())
        .arg(&keys.notify)
        .arg(group);
    let room = super::MAX_ID_LEN - group.len() - 1;
    for job in jobs {
        if job.id.is_empty() || job.id.len() > room {
            return Err(InvalidArgument::Setting(format!(
                "a grouped job id must be 1 to {room} bytes, got {}",
                job.id.len()
            ))
            .into());
        }
        call = call.arg(&job.id).arg(&job.payload);
    }
    let kind = Push {
        ids: jobs.iter().map(|j| j.id.clone()).collect(),
        grouped: true,
    };
    Ok(ScriptOp::new(kind, call, keys.target(), None, deadline))
}

/// Flow limits: of each group, or of the whole set of a queue's grouped jobs. Every limit is
/// optional (none by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use = "limits do nothing until set"]
pub struct GroupLimits {
    concurrency: u32,
    rate: Option<RateLimit>,
    max_size: u64,
}

impl GroupLimits {
    /// No limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `n` jobs leased at once (0: no limit, the default), across every process. A
    /// lease that runs out (a dead worker) frees its slot.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// At most this rate of takes (the rate limiter's GCRA, on the server clock).
    pub fn rate(mut self, rate: RateLimit) -> Self {
        self.rate = Some(rate);
        self
    }

    /// A group holding `n` ready jobs refuses more ([`Pushed::GroupFull`](super::Pushed::GroupFull));
    /// 0: no maximum (the default). Delayed pushes are not counted nor refused. Not used as
    /// a queue-wide limit.
    pub fn max_size(mut self, n: u64) -> Self {
        self.max_size = n;
        self
    }

    /// The concurrency limit (0: none).
    pub fn concurrency_limit(&self) -> u32 {
        self.concurrency
    }

    /// The rate limit, if any.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate
    }

    /// How the scripts read it: `concurrency interval_us tolerance_us max_size`.
    fn encode(&self) -> String {
        let (interval, tolerance) = match &self.rate {
            Some(r) => (r.interval().as_micros() as u64, r.tolerance_us()),
            None => (0, 0),
        };
        format!(
            "{} {interval} {tolerance} {}",
            self.concurrency, self.max_size
        )
    }
}

/// Whose limits [`set_limits`] sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitsOf<'a> {
    /// The defaults of every group without its own.
    EveryGroup,
    /// One group's own (replacing the defaults for it, as a whole).
    Group(&'a str),
    /// The whole set of the queue's grouped jobs (its concurrency across every group and
    /// process, its rate of takes).
    Queue,
}

/// Sets limits (`None`: clears them), taking effect at the next take; idle takers are woken.
#[derive(Debug, Clone, Copy)]
pub struct SetLimits;

impl OpKind for SetLimits {
    type Output = ();
    const CONTEXT: &'static str = "group limits";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<(), Error>> {
        (reply.as_int()? == 1).then_some(Ok(()))
    }
}

/// Sets (or with `None` clears) the limits of `of`.
pub fn set_limits(
    keys: &QueueKeys,
    of: LimitsOf<'_>,
    limits: Option<GroupLimits>,
    deadline: Instant,
) -> Result<ScriptOp<SetLimits>, Error> {
    let call = limits_call(keys, of, limits)?;
    Ok(ScriptOp::new(
        SetLimits,
        call,
        keys.target(),
        None,
        deadline,
    ))
}

/// The script call of [`set_limits`] (it answers 1).
pub fn limits_call(
    keys: &QueueKeys,
    of: LimitsOf<'_>,
    limits: Option<GroupLimits>,
) -> Result<ScriptCall, Error> {
    let g = grouped(keys)?;
    let field = match of {
        LimitsOf::EveryGroup => "*".to_owned(),
        LimitsOf::Group(group) => {
            check_group(group)?;
            format!("g:{group}")
        }
        LimitsOf::Queue => "!".to_owned(),
    };
    let call = ScriptCall::new(&GROUP_LIMITS)
        .keys(&[
            &g.limits,
            &g.ring,
            &g.blocked,
            &g.full,
            &g.recheck_full,
            &g.recheck_blocked,
        ])
        .arg(field)
        .arg(limits.map(|l| l.encode()).unwrap_or_default())
        .arg(&keys.notify);
    Ok(call)
}

/// The "rate limited for `wait`" answer for the grouped job `id` held as `lease`: the job
/// goes back to the head of its group without counting the delivery (its attempt stays; its
/// delivery number still increases on the next take), and its group takes nothing for
/// `wait`. Run it with [`ScriptOp::release_with`] (owner-checked like an ack).
pub fn rate_limited_call(
    keys: &QueueKeys,
    id: &str,
    lease: &Lease,
    wait: Duration,
) -> Result<ScriptCall, Error> {
    let call = rate_limited(keys, id, lease.token.as_str(), wait)?;
    Ok(keys.settling(call, lease))
}

/// [`rate_limited_call`] for job `id` leased with `token`, without the record of an
/// unanswered take attempt ([`QueueKeys::settling`]).
pub fn rate_limited(
    keys: &QueueKeys,
    id: &str,
    token: &str,
    wait: Duration,
) -> Result<ScriptCall, Error> {
    let g = grouped(keys)?;
    let call = ScriptCall::new(&GROUP_DEFER)
        .keys(&[
            &keys.inflight,
            &keys.leases,
            &keys.holders,
            &keys.bases,
            &keys.settled,
            &g.ring,
            &g.blocked,
            &g.full,
            keys.counts_slot(),
        ])
        .arg(id)
        .arg(token)
        .arg(ceil_ms(wait.min(crate::limits::MAX_DURATION)).to_string())
        .arg(&keys.notify)
        .arg(SETTLED_KEEP.as_millis().to_string());
    Ok(call)
}

/// Where a group stands, as [`group_page`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupState {
    /// In the ring: it has ready jobs a take may lease now.
    Ready,
    /// Set aside: its running leases fill its concurrency (until a slot is freed).
    Full,
    /// Set aside: its rate (or the queue's) allows no take yet.
    RateBlocked,
    /// Set aside while paused ([`pause`](super::pause)).
    Paused,
}

/// One group and its figures.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group's id.
    pub id: String,
    /// Where it stands.
    pub state: GroupState,
    /// Its jobs waiting in it (sorted into it by a take; [`QueueStats`](super::QueueStats)
    /// counts these as ready too).
    pub ready: u64,
    /// Its leases running (its slots in use).
    pub in_flight: u64,
    /// Whether it is paused (it may still be in the ring until a take sets it aside).
    pub paused: bool,
}

/// Where a page of [`group_page`] starts: the first page is [`GroupCursor::START`], each
/// next one the page's [`GroupPage::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupCursor {
    set: u8,
    from: u64,
}

impl GroupCursor {
    /// The first page.
    pub const START: GroupCursor = GroupCursor { set: 1, from: 0 };
}

/// One page of groups, and where the next starts (`None`: this was the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPage {
    /// The groups of this page.
    pub groups: Vec<GroupInfo>,
    /// The next page's cursor.
    pub next: Option<GroupCursor>,
}

/// The most groups one page holds.
pub const MAX_GROUP_PAGE: u32 = 1000;

/// Reads one page of groups.
#[derive(Debug, Clone, Copy)]
pub struct ReadGroupPage;

impl OpKind for ReadGroupPage {
    type Output = GroupPage;
    const CONTEXT: &'static str = "group page";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<GroupPage, Error>> {
        let items = reply.as_array()?;
        let (head, rest) = items.split_at_checked(2)?;
        if rest.len() % 5 != 0 {
            return None;
        }
        let set = u8::try_from(head[0].as_int()?).ok()?;
        let from = u64::try_from(head[1].as_int()?).ok()?;
        let next = (set != 0).then_some(GroupCursor { set, from });
        let groups = rest
            .chunks(5)
            .map(|c| {
                let id = match &c[0] {
                    Reply::Bulk(b) => String::from_utf8(b.clone()).ok()?,
                    _ => return None,
                };
                let state = match c[1].as_int()? {
                    1 => GroupState::Ready,
                    2 | 6 => GroupState::RateBlocked,
                    3 | 5 => GroupState::Full,
                    4 => GroupState::Paused,
                    _ => return None,
                };
                Some(GroupInfo {
                    id,
                    state,
                    ready: u64::try_from(c[2].as_int()?).ok()?,
                    in_flight: u64::try_from(c[3].as_int()?).ok()?,
                    paused: c[4].as_int()? == 1,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(GroupPage { groups, next }))
    }
}

/// One page of the queue's groups that have jobs waiting, with their figures: at most
/// `count` (1 to [`MAX_GROUP_PAGE`]) from `cursor`, the ring's groups first (least
/// recently served first), then those set aside. A read-only script (sent as
/// `EVALSHA_RO`) whose cost is bounded by the page. A group whose every job is in flight
/// (none waiting) is in no set and not listed; its leases count in the queue's stats.
/// Groups that move between sets while a caller pages may be seen twice or not at all.
pub fn group_page(
    keys: &QueueKeys,
    cursor: GroupCursor,
    count: u32,
    deadline: Instant,
) -> Result<ScriptOp<ReadGroupPage>, Error> {
    let g = grouped(keys)?;
    crate::limits::count(
        "group page size",
        u64::from(count),
        1,
        u64::from(MAX_GROUP_PAGE),
    )?;
    let call = ScriptCall::new(&GROUP_PAGE)
        .keys(&[
            &g.ring,
            &g.blocked,
            &g.full,
            &g.aside,
            &g.recheck_full,
            &g.recheck_blocked,
            &keys.paused,
        ])
        .arg(cursor.set.to_string())
        .arg(cursor.from.to_string())
        .arg(count.to_string());
    Ok(ScriptOp::new(
        ReadGroupPage,
        call,
        keys.target(),
        None,
        deadline,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Digests match their sources; each script includes exactly the prelude it calls.
    #[test]
    fn scripts_match_their_digests_and_prelude() {
        crate::script::tests::check_scripts(&ALL);
    }

    /// The script books a slot as far ahead as the driver waits for one.
    #[test]
    fn the_take_books_slots_as_far_ahead_as_group_reserve() {
        let line = format!("local RESERVE_US = {}\n", GROUP_RESERVE.as_micros());
        assert!(GROUP_TAKE.source.contains(&line), "{line}");
    }

    #[test]
    fn bad_group_ids_are_refused() {
        let keys = QueueKeys::grouped(&Keyspace::default(), "q").unwrap();
        let job = super::super::NewJob {
            id: "1".into(),
            payload: vec![],
        };
        for bad in ["", "a\u{1f}b", &"x".repeat(MAX_GROUP_LEN + 1)] {
            let out = push(
                &keys,
                bad,
                std::slice::from_ref(&job),
                0,
                Duration::ZERO,
                crate::testing::origin(),
            );
            assert!(matches!(out, Err(Error::InvalidArgument(_))), "{bad:?}");
        }
        let plain = QueueKeys::new(&Keyspace::default(), "q").unwrap();
        assert!(
            push(
                &plain,
                "a",
                &[job],
                0,
                Duration::ZERO,
                crate::testing::origin()
            )
            .is_err()
        );
    }

    #[test]
    fn a_push_reads_one_flag_per_job_a_full_group_included() {
        use crate::testing::{Scenario, origin};
        let keys = QueueKeys::grouped(&Keyspace::default(), "q").unwrap();
        let jobs: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|id| super::super::NewJob {
                id: (*id).into(),
                payload: vec![],
            })
            .collect();
        let now = origin();
        let op = push(
            &keys,
            "g",
            &jobs,
            0,
            Duration::ZERO,
            now + Duration::from_secs(1),
        )
        .unwrap();
        let mut d = Scenario::new(op, now);
        d.answer(Reply::Bulk(b"102".to_vec()));
        use super::super::Pushed::*;
        assert_eq!(
            d.expect_done().unwrap(),
            vec![
                Queued("a".into()),
                Duplicate("b".into()),
                GroupFull("c".into())
            ]
        );
    }

    #[test]
    fn limits_are_encoded_for_the_scripts() {
        let l = GroupLimits::new()
            .concurrency(2)
            .rate(RateLimit::new(50, Duration::from_secs(1), 1).unwrap())
            .max_size(9);
        assert_eq!(l.encode(), "2 20000 20000 9");
        assert_eq!(GroupLimits::new().encode(), "0 0 0 0");
    }

    #[test]
    fn grouped_keys_share_the_tag_and_the_pauses() {
        let plain = QueueKeys::new(&Keyspace::default(), "q").unwrap();
        let g = QueueKeys::grouped(&Keyspace::default(), "q").unwrap();
        assert_eq!(plain.paused, g.paused);
        assert!(g.ready.contains(":q:g:"));
        assert!(g.is_grouped() && !plain.is_grouped());
        assert_eq!(g.calls.dequeue.script().name, "queue_group_take");
    }

    #[test]
    fn a_group_page_reads_each_groups_figures_and_its_next_cursor() {
        use crate::testing::{Scenario, origin};
        let keys = QueueKeys::grouped(&Keyspace::default(), "q").unwrap();
        let plain = QueueKeys::new(&Keyspace::default(), "q").unwrap();
        let now = origin();
        let deadline = now + Duration::from_secs(1);
        assert!(group_page(&plain, GroupCursor::START, 10, deadline).is_err());
        for bad in [0, MAX_GROUP_PAGE + 1] {
            assert!(group_page(&keys, GroupCursor::START, bad, deadline).is_err());
        }
        let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        let mut d = Scenario::new(
            group_page(&keys, GroupCursor::START, 2, deadline).unwrap(),
            now,
        );
        let sent = d.answer(Reply::Array(vec![
            Reply::Int(3),
            Reply::Int(1),
            bulk("acme"),
            Reply::Int(1),
            Reply::Int(4),
            Reply::Int(2),
            Reply::Int(0),
            bulk("zeta"),
            Reply::Int(3),
            Reply::Int(0),
            Reply::Int(5),
            Reply::Int(1),
        ]));
        let args: Vec<String> = sent
            .command
            .args()
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        // Keys 7 (the ring, the five aside sets, the pauses); set 1 from 0, at most 2.
        assert_eq!(
            args[2..],
            [
                "7".to_owned(),
                keys.groups.as_ref().unwrap().ring.clone(),
                keys.groups.as_ref().unwrap().blocked.clone(),
                keys.groups.as_ref().unwrap().full.clone(),
                keys.groups.as_ref().unwrap().aside.clone(),
                keys.groups.as_ref().unwrap().recheck_full.clone(),
                keys.groups.as_ref().unwrap().recheck_blocked.clone(),
                keys.paused.clone(),
                "1".into(),
                "0".into(),
                "2".into()
            ]
        );
        let page = d.expect_done().unwrap();
        assert_eq!(page.next, Some(GroupCursor { set: 3, from: 1 }));
        assert_eq!(
            page.groups,
            vec![
                GroupInfo {
                    id: "acme".into(),
                    state: GroupState::Ready,
                    ready: 4,
                    in_flight: 2,
                    paused: false
                },
                GroupInfo {
                    id: "zeta".into(),
                    state: GroupState::Full,
                    ready: 0,
                    in_flight: 5,
                    paused: true
                },
            ]
        );
        // The last page says so; a reply of another shape is refused.
        let mut d = Scenario::new(
            group_page(&keys, page.next.unwrap(), 2, deadline).unwrap(),
            now,
        );
        d.answer(Reply::Array(vec![Reply::Int(0), Reply::Int(0)]));
        assert_eq!(
            d.expect_done().unwrap(),
            GroupPage {
                groups: vec![],
                next: None
            }
        );
        let mut d = Scenario::new(
            group_page(&keys, GroupCursor::START, 2, deadline).unwrap(),
            now,
        );
        d.answer(Reply::Array(vec![Reply::Int(0), Reply::Int(0), bulk("x")]));
        assert!(d.expect_done().is_err());
    }
}
