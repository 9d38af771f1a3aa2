//! A reliable queue on Redis: FIFO within a priority, delayed jobs, leases (visibility
//! timeouts) with ack/nack, redelivery of jobs whose lease ran out, and a dead-letter list.
//!
//! ```text
//!  push ──► ready (zset: priority, then FIFO) ◄── due ── delayed (zset: due time)
//!             │ take: lease for `visibility` (renewed by the watchdog while held)
//!             ▼
//!           in flight (zset: lease expiry) ──ack──► forgotten
//!             │  ack_and_take: the ack, and the next ready job leased, in one call
//!             │  nack ──► delayed (backoff) or ready      │ lease ran out ──► ready again
//!             └── after max deliveries (nack or lease ran out) ──► dead (list) ──requeue──► ready
//! ```
//!
//! Every step is one script on the server's clock. Taking a job is an acquisition of a lease
//! of kind [`LeaseKind::Job`], so it runs on the same machine as
//! every lock ([`Acquire`](crate::lease::Acquire)): an idle worker waits until the earliest
//! due time or lease expiry, or until a push wakes it; there is no polling interval. Its
//! "fence" is the delivery number of the job (1 on first delivery), which a worker can pass
//! to the systems it writes to, so that a redelivered job's writes win over a stale worker's.
//!
//! What a take yields is named: [`TakeJob`] gives [`Take::Taken`] (a [`TakenJob`]: id,
//! payload, delivery, lease) or [`Take::Empty`] (with the time until the next job is due). A
//! busy worker acks and is handed the next job in one round trip ([`AckAndTake`]), as safely
//! as an ack followed by a take.

mod ack_take;
pub mod batch;
pub mod cancel;
pub mod dead;
pub mod dedup;
pub mod groups;
pub mod inspect;
pub mod pause;
pub mod schedule;
pub mod scripts;
mod take;

pub use ack_take::{AckAndTake, AckedAndTaken, ack_and_take, ack_and_take_call};
pub use cancel::push_with_timeout;
pub use dedup::{Dedup, DedupOutcome, JobState, PushDedup, push_dedup};
pub use take::{Take, TakeJob, TakenJob};

use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, InvalidArgument};
use crate::keys::Keyspace;
use crate::lease::spec::undoing;
use crate::lease::{
    Lease, LeaseCalls, LeaseKind, LockSpec, OpKind, ScriptOp, Target, Token, validate_ttl,
};
use crate::protocol::WakeOn;
use crate::reply::Reply;
use crate::script::ScriptCall;

/// The keys of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// The queue's name.
    pub name: String,
    ready: String,
    delayed: String,
    payloads: String,
    priorities: String,
    seq: String,
    inflight: String,
    leases: String,
    deliveries: String,
    dead: String,
    /// The dead list's retention, when set ([`dead::retention`]).
    dead_keep: String,
    holders: String,
    bases: String,
    settled: String,
    undone: String,
    /// Why each dead job died (the handler's error), by id.
    reasons: String,
    /// Cancelled deliveries (zset token -> until when their renewal answers "cancelled").
    cancelled: String,
    /// Why each cancelled delivery was cancelled (hash token -> message).
    cancel_messages: String,
    /// The channel of cancel messages (its `notify` argument: see `Keyspace::notify_arg`).
    cancel_channel: String,
    cancel_notify: String,
    /// Deduplication ([`dedup`]): dedup id -> the job holding it; job -> its entry; the
    /// throttle windows (zset dedup id -> until) and their jobs.
    dedup: String,
    dedup_of: String,
    throttle: String,
    throttled: String,
    /// The pauses (hash: `*` the whole queue, `g:<group id>` one group -> the server ms of
    /// the pause; `drain` -> the channel a drain waiter listens on): see [`pause`].
    paused: String,
    /// The stem of the per-minute counts (`<counts>:<minute>:<event>`, string counters; a
    /// job's enqueue time is kept beside its payload, in `payloads`).
    counts: String,
    /// Whether the scripts that move jobs count them ([`QueueKeys::with_counts`]).
    counting: bool,
    channel: String,
    notify: String,
    /// The channel a drain waiter ([`pause::Drain`]) listens on, and how scripts name it.
    drained: String,
    drained_notify: String,
    /// The queue's other in-flight set: the grouped jobs' for the plain keys, the plain
    /// jobs' for the grouped keys (a drain counts both).
    sibling_inflight: String,
    /// How scripts name the queue's other wake channel (the grouped jobs' for the plain
    /// keys, the plain jobs' for the grouped keys: a resume wakes the takers of both).
    sibling_notify: String,
    /// `<prefix>:{<name>}:q:g:`, the start of the names of the queue's groups' keys (a
    /// group's resume brings it back to their ring, through either handle).
    group_stem: String,
    /// The keys of the queue's groups, on the grouped keys ([`QueueKeys::grouped`]).
    groups: Option<std::sync::Arc<groups::GroupKeys>>,
    /// The calls every job makes, with their keys bound once per queue (a clone shares
    /// them: each job adds only its arguments).
    calls: KeyedCalls,
}

/// The queue's script calls with their keys and no arguments, built once per queue; and
/// the calls of every job with their constant arguments too and slots for the varying ones
/// (bound per job without copying the keys).
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyedCalls {
    push: ScriptCall,
    /// The push of one job ready now with the default priority: delay `0`, priority `0`,
    /// the channel, then the id in the owner slot and the payload in the subject slot.
    push_now: ScriptCall,
    /// The ack: the id in the subject slot, the token in the owner slot, [`SETTLED_KEEP`].
    ack_bound: ScriptCall,
    /// `queue <name> job `: the start of the name of each job's lease.
    job_name: std::sync::Arc<str>,
    dequeue: ScriptCall,
    nack: ScriptCall,
    ack: ScriptCall,
    ack_take: ScriptCall,
    extend: ScriptCall,
    inspect: ScriptCall,
    untake: ScriptCall,
    target: Target,
    /// The take spec for the settings of the first take, bound to each later take's token
    /// ([`take`]).
    take: TakeTemplate,
}

/// A queue's take spec and combined ack-and-take call, built by its first take and shared
/// by the takes with the same settings (a queue's takes usually share them): each binds its
/// token (and, once taken, the job's id) without copying the keys.
#[derive(Debug, Clone, Default)]
struct TakeTemplate(std::sync::OnceLock<std::sync::Arc<Bound>>);

/// What [`TakeTemplate`] keeps (shared by the machines that bind it).
#[derive(Debug)]
pub(crate) struct Bound {
    settings: QueueSettings,
    /// The take spec, its calls' tokens and job ids in slots ([`take_spec`]).
    take: LockSpec,
    /// The ack-and-take call: the acked job's id in the subject slot, its token as a plain
    /// argument of a random token's length (replaced in place), the next token in the owner
    /// slot ([`ack_take::ack_and_take_call`]).
    ack_take: ScriptCall,
    /// `queue <name> job `: the start of the name of each job's lease.
    job_name: std::sync::Arc<str>,
}

/// A cache: it does not make two queues' keys differ.
impl PartialEq for TakeTemplate {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TakeTemplate {}

impl KeyedCalls {
    fn new(k: &QueueKeys) -> Self {
        // The ack's keys, for the plain call and the one bound per job.
        let ack_keys = k.ack_keys();
        let push_keys: [&str; 6] = [
            &k.ready,
            &k.delayed,
            &k.payloads,
            &k.priorities,
            &k.seq,
            k.counts_slot(),
        ];
        KeyedCalls {
            push: ScriptCall::new(&scripts::PUSH).keys(&push_keys),
            dequeue: ScriptCall::new(&scripts::DEQUEUE).keys(&[
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
                &k.paused,
                k.counts_slot(),
            ]),
            nack: ScriptCall::new(&scripts::NACK).keys(&[
                &k.inflight,
                &k.leases,
                &k.delayed,
                &k.ready,
                &k.priorities,
                &k.seq,
                &k.deliveries,
                &k.dead,
                &k.holders,
                &k.bases,
                &k.settled,
                &k.reasons,
                &k.paused,
                k.counts_slot(),
            ]),
            ack: ScriptCall::new(&scripts::ACK).keys(&ack_keys),
            ack_take: ScriptCall::new(&scripts::ACK_TAKE).keys(&k.ack_take_keys()),
            push_now: ScriptCall::new(&scripts::PUSH)
                .keys(&push_keys)
                .arg("0")
                .arg("0")
                .arg(&k.notify)
                .owner_arg(&placeholder_token())
                .subject_arg()
                .compact(),
            ack_bound: ScriptCall::new(&scripts::ACK)
                .keys(&ack_keys)
                .subject_arg()
                .owner_arg(&placeholder_token())
                .arg(SETTLED_KEEP.as_millis().to_string())
                .arg(&k.notify)
                .compact(),
            job_name: format!("queue {} job ", k.name).into(),
            extend: ScriptCall::new(&scripts::JOB_EXTEND).keys(&[
                &k.inflight,
                &k.leases,
                &k.cancelled,
                &k.holders,
            ]),
            inspect: ScriptCall::new(&scripts::JOB_INSPECT).keys(&[&k.inflight, &k.leases]),
            untake: ScriptCall::new(&scripts::UNTAKE).keys(&[
                &k.inflight,
                &k.leases,
                &k.ready,
                &k.priorities,
                &k.seq,
                &k.deliveries,
                &k.holders,
                k.counts_slot(),
                &k.undone,
            ]),
            target: Target {
                name: format!("queue {}", k.name).into(),
                keys: vec![
                    k.ready.clone(),
                    k.delayed.clone(),
                    k.payloads.clone(),
                    k.inflight.clone(),
                    k.leases.clone(),
                    k.deliveries.clone(),
                    k.dead.clone(),
                ]
                .into(),
            },
            take: TakeTemplate::default(),
        }
    }
}

impl QueueKeys {
    /// The keys of queue `name`: `<prefix>:{<name>}:q:<part>`.
    pub fn new(keyspace: &Keyspace, name: &str) -> Result<Self, Error> {
        Self::with_parts(keyspace, name, "q:", None)
    }

    /// The keys of queue `name` under `<prefix>:{<name>}:<parts><part>`, with `groups`.
    fn with_parts(
        keyspace: &Keyspace,
        name: &str,
        parts: &str,
        groups: Option<std::sync::Arc<groups::GroupKeys>>,
    ) -> Result<Self, Error> {
        let stem = keyspace.stem(name)?;
        let k = |part: &str| format!("{stem}:{parts}{part}");
        let mut keys = QueueKeys {
            name: name.to_owned(),
            ready: k("ready"),
            delayed: k("delayed"),
            payloads: k("payloads"),
            priorities: k("priorities"),
            seq: k("seq"),
            inflight: k("inflight"),
            leases: k("leases"),
            deliveries: k("deliveries"),
            dead: k("dead"),
            dead_keep: k("dead_keep"),
            holders: k("holders"),
            bases: k("bases"),
            settled: k("settled"),
            undone: k("undone"),
            reasons: k("reasons"),
            cancelled: k("cancelled"),
            cancel_messages: k("cancel_messages"),
            cancel_channel: k("cancel"),
            cancel_notify: keyspace.notify_arg(&k("cancel")),
            dedup: k("dedup"),
            dedup_of: k("dedup_of"),
            throttle: k("throttle"),
            throttled: k("throttled"),
            paused: format!("{stem}:q:paused"),
            counts: k("counts"),
            counting: false,
            channel: k("pushed"),
            notify: keyspace.notify_arg(&k("pushed")),
            // One drain channel for the plain and the grouped keys: a drain of either
            // counts both in-flight sets, and every settling script announces on it.
            drained: format!("{stem}:q:drained"),
            drained_notify: keyspace.notify_arg(&format!("{stem}:q:drained")),
            sibling_inflight: if groups.is_some() {
                format!("{stem}:q:inflight")
            } else {
                format!("{stem}:q:g:inflight")
            },
            sibling_notify: keyspace.notify_arg(&if groups.is_some() {
                format!("{stem}:q:pushed")
            } else {
                format!("{stem}:q:g:pushed")
            }),
            group_stem: format!("{stem}:q:g:"),
            groups,
            calls: KeyedCalls {
                push: ScriptCall::new(&scripts::PUSH),
                dequeue: ScriptCall::new(&scripts::DEQUEUE),
                nack: ScriptCall::new(&scripts::NACK),
                ack: ScriptCall::new(&scripts::ACK),
                ack_take: ScriptCall::new(&scripts::ACK_TAKE),
                push_now: ScriptCall::new(&scripts::PUSH),
                ack_bound: ScriptCall::new(&scripts::ACK),
                job_name: "".into(),
                extend: ScriptCall::new(&scripts::JOB_EXTEND),
                inspect: ScriptCall::new(&scripts::JOB_INSPECT),
                untake: ScriptCall::new(&scripts::UNTAKE),
                target: Target::default(),
                take: TakeTemplate::default(),
            },
        };
        let mut calls = KeyedCalls::new(&keys);
        if let Some(g) = &keys.groups {
            groups::rebind(&mut calls, &keys, g);
        }
        keys.calls = calls;
        Ok(keys)
    }

    /// These keys with the per-minute counts on or off (off by default). On, the scripts
    /// that move the queue's jobs count what happened, per minute of the server's clock
    /// (read with [`inspect::counts`]): one `INCR` per event, about 10 % more server
    /// instructions on a plain job's push, take and ack (`scripts/cpu.sh`). Off, the counts
    /// slot of each script names the queue's ready set instead, and nothing is counted.
    pub fn with_counts(mut self, on: bool) -> Self {
        if self.counting != on {
            self.counting = on;
            let mut calls = KeyedCalls::new(&self);
            if let Some(g) = &self.groups {
                groups::rebind(&mut calls, &self, g);
            }
            self.calls = calls;
        }
        self
    }

    /// Whether the scripts count this queue's events ([`QueueKeys::with_counts`]).
    pub fn counts_on(&self) -> bool {
        self.counting
    }

    /// The key in the counts slot of the scripts that move jobs: the stem of the per-minute
    /// counts when counting, else the ready set (`lua/count.lua`'s `counting` tells them
    /// apart by the last byte: `s` of `counts`, `y` of `ready`).
    pub(crate) fn counts_slot(&self) -> &str {
        if self.counting {
            &self.counts
        } else {
            &self.ready
        }
    }

    /// The keys of the take (and the batch take), in their scripts' order.
    fn take_keys(&self) -> [&str; 14] {
        [
            &self.ready,
            &self.delayed,
            &self.payloads,
            &self.priorities,
            &self.seq,
            &self.inflight,
            &self.leases,
            &self.deliveries,
            &self.dead,
            &self.holders,
            &self.bases,
            &self.undone,
            &self.paused,
            self.counts_slot(),
        ]
    }

    /// The keys of the ack (and the ack of many), in their scripts' order.
    /// The dedup keys, the ready set and the counter come after the pause key: touched only
    /// for a job pushed with a dedup id (its entry dropped, a parked keep-latest follow-up
    /// made ready), declared for all (bytes, not commands); then the counts.
    fn ack_keys(&self) -> [&str; 14] {
        [
            &self.inflight,
            &self.leases,
            &self.payloads,
            &self.priorities,
            &self.deliveries,
            &self.holders,
            &self.bases,
            &self.settled,
            &self.paused,
            &self.dedup,
            &self.dedup_of,
            &self.ready,
            &self.seq,
            self.counts_slot(),
        ]
    }

    /// The keys of the combined ack and take, in its script's order.
    fn ack_take_keys(&self) -> [&str; 17] {
        [
            &self.ready,
            &self.delayed,
            &self.payloads,
            &self.priorities,
            &self.seq,
            &self.inflight,
            &self.leases,
            &self.deliveries,
            &self.dead,
            &self.holders,
            &self.bases,
            &self.settled,
            &self.undone,
            &self.paused,
            &self.dedup,
            &self.dedup_of,
            self.counts_slot(),
        ]
    }

    fn target(&self) -> Target {
        self.calls.target.clone()
    }

    /// `call`, an ack or a nack ([`ack_lease_call`], [`nack_because`]) of the job held as
    /// `lease`, recording the lease's token as undone too when an attempt of its take went
    /// unanswered ([`Lease::unanswered`]): that attempt, if it was only delayed and arrives
    /// after this settlement, then takes nothing. Unchanged otherwise (the usual case).
    pub fn settling(&self, call: ScriptCall, lease: &Lease) -> ScriptCall {
        if lease.unanswered {
            undoing(call, &self.undone)
        } else {
            call
        }
    }

    /// The take spec and ack-and-take call for `settings` (validated), bound to nothing:
    /// the cached ones when `settings` are those of the queue's first take.
    fn bound(&self, settings: &QueueSettings, visibility_ms: u64) -> std::sync::Arc<Bound> {
        let cache = &self.calls.take.0;
        if let Some(bound) = cache.get()
            && bound.settings == *settings
        {
            return bound.clone();
        }
        let placeholder = placeholder_token();
        let bound = std::sync::Arc::new(Bound {
            settings: *settings,
            take: take_spec(self, placeholder.clone(), settings, visibility_ms).compact(),
            ack_take: ack_take::ack_take_template(self, &placeholder, settings),
            job_name: self.calls.job_name.clone(),
        });
        // Only the first take's settings are kept: a queue's takes usually share them.
        match cache.set(bound) {
            // Cached now: found by the first lookup.
            Ok(()) => self.bound(settings, visibility_ms),
            // Other settings were cached first (or the same, by another thread just now).
            Err(bound) => bound,
        }
    }
}

/// The name of the lease of job `id`, `prefix` being `queue <name> job ` (in errors about it).
fn job_name(prefix: &str, id: &str) -> std::sync::Arc<str> {
    joined(&[prefix, id])
}

/// The name of the lease of job `id` taken from the queue named `queue` (`queue <name>`, the
/// take's target): `queue <name> job <id>`.
pub(crate) fn lease_name(queue: &str, id: &[u8]) -> std::sync::Arc<str> {
    match std::str::from_utf8(id) {
        // The usual case: a UTF-8 id read as it is (the lossy reading walks it in chunks).
        Ok(id) => joined(&[queue, " job ", id]),
        Err(_) => joined(&[queue, " job ", &String::from_utf8_lossy(id)]),
    }
}

/// `parts` joined, put together on the stack when short, so that it costs one allocation.
fn joined(parts: &[&str]) -> std::sync::Arc<str> {
    let mut buf = [0u8; 160];
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len <= buf.len() {
        let mut at = 0;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part.as_bytes());
            at += part.len();
        }
        // Whole strings, one after another: UTF-8.
        if let Ok(name) = std::str::from_utf8(&buf[..len]) {
            return name.into();
        }
    }
    parts.concat().into()
}

/// A take's attempt since the job's last requeue from the dead list (the fifth element of
/// a take's reply, a decimal string): 1 to `delivery`, else `None` (a malformed reply).
pub(crate) fn parse_attempt(text: &[u8], delivery: u64) -> Option<u64> {
    let n: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (1..=delivery).contains(&n).then_some(n)
}

/// A job's timeout as a take's reply carries it (ms, at least 1).
pub(crate) fn parse_timeout(text: &[u8]) -> Option<Duration> {
    let ms: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (ms >= 1).then(|| Duration::from_millis(ms))
}

/// What a take's reply says of a handed job after its id and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobTail {
    /// Its attempt ([`parse_attempt`]; the delivery when the reply has none).
    pub(crate) attempt: u64,
    /// Its own timeout ([`parse_timeout`]).
    pub(crate) timeout: Option<Duration>,
    /// From the take's run to the delivery's hold limit on the server (its timeout, own or
    /// the queue's, plus the grace): the server leases it no longer.
    pub(crate) hold_left: Option<Duration>,
    /// When it was pushed and how long before this take ([`parse_enqueued`]), if recorded.
    pub(crate) enqueued: Option<(SystemTime, Duration)>,
    /// From the take's run to the group rate slot it booked, when the job may start.
    pub(crate) start_in: Option<Duration>,
}

/// Reads the tail of a handed job in a take's reply (`None` items: not bulk strings):
/// nothing; its attempt; its attempt and timeout; its attempt, its timeout (empty: none of
/// its own) and the ms from the take's run to its hold limit; or five: its attempt (empty:
/// its delivery), timeout (empty: none of its own), ms to the hold limit (empty: none),
/// enqueue time and wait (`lua/reclaim.lua`'s `handed`); or six: those five (the enqueue
/// time and wait both empty when not recorded) and the µs from the take's run to the group
/// rate slot it booked (`lua/group_take.lua`). `None` for anything else.
pub(crate) fn parse_job_tail<'a>(
    tail: impl ExactSizeIterator<Item = Option<&'a [u8]>>,
    delivery: u64,
) -> Option<JobTail> {
    let n = tail.len();
    let mut tail = tail;
    let mut out = JobTail::plain(delivery);
    if n == 4 || n > 6 {
        return None;
    }
    if let Some(attempt) = tail.next() {
        let attempt = attempt?;
        if !(attempt.is_empty() && n >= 5) {
            out.attempt = parse_attempt(attempt, delivery)?;
        }
    }
    if let Some(timeout) = tail.next() {
        let timeout = timeout?;
        // Empty only beside a hold limit (the queue's timeout applies) or an enqueue time.
        if !(timeout.is_empty() && n >= 3) {
            out.timeout = Some(parse_timeout(timeout)?);
        }
    }
    if let Some(left) = tail.next() {
        let left = left?;
        if !(left.is_empty() && n >= 5) {
            let ms: u64 = std::str::from_utf8(left).ok()?.parse().ok()?;
            out.hold_left = Some(Duration::from_millis(ms));
        }
    }
    if let (Some(at), Some(waited)) = (tail.next(), tail.next()) {
        let (at, waited) = (at?, waited?);
        if !(n == 6 && at.is_empty() && waited.is_empty()) {
            out.enqueued = Some(parse_enqueued(at, waited)?);
        }
    }
    if let Some(start) = tail.next() {
        let us: u64 = std::str::from_utf8(start?).ok()?.parse().ok()?;
        out.start_in = Some(Duration::from_micros(us));
    }
    Some(out)
}

impl JobTail {
    /// The tail of a job handed with none: its attempt is its delivery.
    pub(crate) fn plain(delivery: u64) -> Self {
        JobTail {
            attempt: delivery,
            timeout: None,
            hold_left: None,
            enqueued: None,
            start_in: None,
        }
    }
}

/// [`parse_job_tail`] of a lease's data (the id and payload first).
pub(crate) fn job_tail_of(data: &[Vec<u8>], fence: u64) -> Option<JobTail> {
    parse_job_tail(data.get(2..)?.iter().map(|v| Some(v.as_slice())), fence)
}

/// Whether `data` is what a take's grant of delivery `fence` carries: the job's id and
/// payload, then the tail [`parse_job_tail`] reads.
pub(crate) fn is_job_data(data: &[Vec<u8>], fence: i64) -> bool {
    data.len() >= 2 && u64::try_from(fence).is_ok_and(|fence| job_tail_of(data, fence).is_some())
}

/// A job's enqueue time (server ms since the epoch, decimal text) and how long ago that was
/// when it was taken (ms, decimal text), as a take's reply carries them.
pub(crate) fn parse_enqueued(at: &[u8], waited: &[u8]) -> Option<(SystemTime, Duration)> {
    let ms = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<u64>().ok();
    let at = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms(at)?))?;
    Some((at, Duration::from_millis(ms(waited)?)))
}

/// The token held in the owner slot of a call template until a real one is bound: a random
/// token's length, so that binding the token of a taken job in its place copies nothing.
fn placeholder_token() -> Token {
    Token::from_random([0; 16])
}

/// How jobs are leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// How long a taken job stays invisible to other workers before it is redelivered
    /// (renewed while its handle lives). Defaults to 30 s.
    pub visibility: Duration,
    /// After this many deliveries, a job that fails (nack) or whose lease runs out goes to
    /// the dead list. Defaults to 5.
    pub max_deliveries: u32,
    /// The jobs' timeout (a job pushed with one of its own keeps it). With a timeout, the
    /// server keeps each delivery's hold limit, the timeout plus
    /// [`timeout_grace`](Self::timeout_grace) from when it ran the take, beside its lease:
    /// no retry of the take and no extension, however late it arrives, leases the job past
    /// it. Defaults to none.
    pub timeout: Option<Duration>,
    /// How long after its timeout a job's lease may still run (its handler's chance to
    /// stop). Defaults to 1 s.
    pub timeout_grace: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            visibility: Duration::from_secs(30),
            max_deliveries: 5,
            timeout: None,
            timeout_grace: DEFAULT_TIMEOUT_GRACE,
        }
    }
}

/// [`QueueSettings::timeout_grace`]'s default.
pub const DEFAULT_TIMEOUT_GRACE: Duration = Duration::from_secs(1);

/// The slack of a hold limit with the default grace (its milliseconds plus 2): what the take
/// scripts assume when a take's lease argument is the bare visibility (`lua/reclaim.lua`'s
/// `lease_args`, which writes it out: `script::tests` checks the two agree).
pub const DEFAULT_SLACK_MS: u64 = DEFAULT_TIMEOUT_GRACE.as_millis() as u64 + 2;

impl QueueSettings {
    /// Checks the settings: `max_deliveries` at least 1, the visibility timeout a valid
    /// lease ttl ([`MIN_TTL`](crate::limits::MIN_TTL) to
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION)). A take checks them too.
    pub fn check(&self) -> Result<(), Error> {
        self.validate().map(drop)
    }

    fn validate(&self) -> Result<u64, Error> {
        if self.max_deliveries == 0 {
            return Err(
                InvalidArgument::Setting("max_deliveries must be at least 1".into()).into(),
            );
        }
        if let Some(t) = self.timeout {
            crate::limits::span("timeout", t)?;
        }
        crate::limits::span("timeout grace", self.timeout_grace)?;
        validate_ttl("visibility timeout", self.visibility)
    }

    /// A take's lease argument: the visibility in milliseconds, then `:` and the slack of a
    /// delivery's hold limit (the grace, rounded up, plus 2 ms: the server's clock is read in
    /// whole milliseconds, rounded down, and what is left of the limit is told 1 ms short, so
    /// that the taker's own hold limit is the timeout + grace + 1 ms it was before the server
    /// kept one), then, with a queue timeout, `:` and it (rounded up). The server keeps a
    /// timed delivery's hold limit from it (`lua/reclaim.lua`'s `lease_args`).
    /// A queue without a timeout and with the default grace sends the bare visibility, as a
    /// plain take always did: the script takes the default grace's slack then
    /// ([`DEFAULT_SLACK_MS`]).
    fn lease_arg(&self, visibility_ms: u64) -> String {
        let slack = ceil_ms(self.timeout_grace) + 2;
        match self.timeout {
            Some(t) => format!("{visibility_ms}:{slack}:{}", ceil_ms(t)),
            None if slack == u128::from(DEFAULT_SLACK_MS) => visibility_ms.to_string(),
            None => format!("{visibility_ms}:{slack}"),
        }
    }
}

/// `d` in whole milliseconds, rounded up: a delay or a backoff sent to the server is never
/// shorter than asked (a job is never due early; 999 µs is 1 ms, not nothing).
fn ceil_ms(d: Duration) -> u128 {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        ms + 1
    } else {
        ms
    }
}

/// How long the server remembers that a delivery was settled (acked or nacked), so that an
/// ack or nack retried after a lost reply finds its own settlement and returns `Ok`, while a
/// retry that finds the job settled by another delivery is refused ([`Error::NotOwner`]).
/// A retry sent later than this after the settlement is answered `NotOwner` too: never a
/// second success. One entry per settled delivery lives this long (about 100 bytes each).
pub const SETTLED_KEEP: Duration = Duration::from_secs(60);

/// The highest priority (served first); 0 is the lowest and the default.
pub const MAX_PRIORITY: u8 = 255;

/// The longest job id accepted, in bytes.
pub const MAX_ID_LEN: usize = 512;

/// One job to push: an id (deduplicates: a job whose id is queued, delayed, running or dead
/// is not pushed again) and its payload (any bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// The job id.
    pub id: String,
    /// The payload.
    pub payload: Vec<u8>,
}

/// What a push did with one job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pushed {
    /// Queued (or delayed) under this id.
    Queued(String),
    /// A job with this id is already queued, delayed, running or dead: nothing was written.
    Duplicate(String),
    /// Its group holds its maximum of ready jobs ([`groups::GroupLimits::max_size`]):
    /// nothing was written.
    GroupFull(String),
}

/// The push of one batch of jobs, in one script call.
#[derive(Debug, Clone)]
pub struct Push {
    /// The ids pushed, in order (the script answers one flag per job).
    ids: Vec<String>,
    /// A push into a group, whose script may answer `2` (the group is full); a plain push's
    /// script never does.
    grouped: bool,
}

impl OpKind for Push {
    type Output = Vec<Pushed>;
    const CONTEXT: &'static str = "queue push";
    // A push whose reply was lost may have run, and its job may already be taken and acked
    // (which forgets the id): sending it again could queue the job a second time. The
    // caller gets Unavailable with a "no reply" failure: the push may or may not have happened.
    const RETRY_LOST_REPLY: bool = false;

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Vec<Pushed>, Error>> {
        let flags = pushed_flags(reply, self.ids.len())?;
        let out = flags
            .iter()
            .zip(&self.ids)
            .map(|(flag, id)| match flag {
                b'1' => Some(Pushed::Queued(id.clone())),
                b'0' => Some(Pushed::Duplicate(id.clone())),
                b'2' if self.grouped => Some(Pushed::GroupFull(id.clone())),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(out))
    }
}

/// Pushes `jobs` with one priority and delay (zero: ready at once), giving up at `deadline`.
pub fn push(
    keys: &QueueKeys,
    jobs: &[NewJob],
    priority: u8,
    delay: Duration,
    deadline: Instant,
) -> Result<ScriptOp<Push>, Error> {
    if jobs.is_empty() {
        return Err(InvalidArgument::Setting("nothing to push".into()).into());
    }
    let mut call = keys
        .calls
        .push
        .clone()
        .arg(ceil_ms(delay).to_string())
        .arg(priority.to_string())
        .arg(&keys.notify);
    for job in jobs {
        if job.id.is_empty() || job.id.len() > MAX_ID_LEN {
            return Err(InvalidArgument::Setting(format!(
                "a job id must be 1 to {MAX_ID_LEN} bytes, got {}",
                job.id.len()
            ))
            .into());
        }
        call = call.arg(&job.id).arg(&job.payload);
    }
    let kind = Push {
        ids: jobs.iter().map(|j| j.id.clone()).collect(),
        grouped: false,
    };
    Ok(ScriptOp::new(kind, call, keys.target(), None, deadline))
}

/// The push of one job under a fresh id ([`push_new`]): yields `true` when it was queued,
/// `false` when a job with its id was already there (nothing written).
#[derive(Debug, Clone, Copy)]
pub struct PushNew;

impl OpKind for PushNew {
    type Output = bool;
    const CONTEXT: &'static str = "queue push";
    // As for [`Push`].
    const RETRY_LOST_REPLY: bool = false;

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<bool, Error>> {
        match pushed_flags(reply, 1)? {
            b"1" => Some(Ok(true)),
            b"0" => Some(Ok(false)),
            _ => None,
        }
    }
}

/// The push script's answer for `count` jobs: one character per job (`1` pushed, `0`
/// duplicate); `None` for any other reply.
fn pushed_flags(reply: &Reply, count: usize) -> Option<&[u8]> {
    match reply {
        Reply::Bulk(flags) if flags.len() == count => Some(flags),
        _ => None,
    }
}

/// Pushes one job whose id is `id`, a fresh random token ([`Token::from_random`]: its hex
/// text is the job id), ready now with the default priority 0: [`push`] of one job, built
/// without copying the payload again (it is moved into the call) and without copying the
/// queue's keys. `deadline` as for [`push`].
pub fn push_new(
    keys: &QueueKeys,
    id: &Token,
    payload: Vec<u8>,
    deadline: Instant,
) -> ScriptOp<PushNew> {
    let call = keys
        .calls
        .push_now
        .clone()
        .with_token(id)
        .with_subject(&std::sync::Arc::new(payload));
    ScriptOp::new(PushNew, call, keys.target(), None, deadline)
}

/// What taking a job from `keys` needs: acquire it as a lease of kind [`LeaseKind::Job`].
/// Dropping the lease without an ack returns the job at once (a nack without backoff).
pub fn take(keys: &QueueKeys, token: Token, settings: &QueueSettings) -> Result<LockSpec, Error> {
    let visibility_ms = settings.validate()?;
    let bound = keys.bound(settings, visibility_ms);
    match bound.take.with_token(token.clone()) {
        Some(spec) => Ok(spec),
        // Every call of a take spec has its token slot (`take_spec`): not reached.
        None => Ok(take_spec(keys, token, settings, visibility_ms).compact()),
    }
}

/// The take spec, its calls built with the token in their owner slot and, on the lease's
/// calls, a slot for the job id bound once the job is taken ([`LeaseCalls::for_job`]'s
/// first argument), so that later takes rebind both without copying
/// ([`LockSpec::with_token`]).
fn take_spec(
    keys: &QueueKeys,
    token: Token,
    settings: &QueueSettings,
    visibility_ms: u64,
) -> LockSpec {
    let max = settings.max_deliveries.to_string();
    let c = &keys.calls;
    LockSpec {
        kind: LeaseKind::Job,
        acquire: c
            .dequeue
            .clone()
            .owner_arg(&token)
            .arg(settings.lease_arg(visibility_ms))
            .arg(&max),
        calls: LeaseCalls::new(
            // A plain release gives the job back at once: a nack without backoff or reason.
            c.nack
                .clone()
                .subject_arg()
                .owner_arg(&token)
                .arg("0")
                .arg(&max)
                .arg(&keys.notify)
                .arg(SETTLED_KEEP.as_millis().to_string())
                .arg(""),
            c.extend.clone().subject_arg().owner_arg(&token),
            c.inspect.clone().subject_arg().owner_arg(&token),
        ),
        cancel: None,
        // A take whose reply was lost: give back whatever job was leased to this token.
        undo: Some(
            c.untake
                .clone()
                .owner_arg(&token)
                .arg(&keys.notify)
                .arg(crate::lease::UNDONE_KEEP.as_millis().to_string()),
        ),
        queued: false,
        wake: WakeOn::any(&keys.channel),
        notify: keys.notify.clone(),
        fenced: true,
        target: keys.target(),
        token,
        ttl: settings.visibility,
    }
}

fn nack_call(
    keys: &QueueKeys,
    token: &str,
    backoff: Duration,
    max: u32,
    reason: &str,
) -> ScriptCall {
    keys.calls
        .nack
        .clone()
        .arg(token)
        .arg(ceil_ms(backoff).to_string())
        .arg(max.to_string())
        .arg(&keys.notify)
        .arg(SETTLED_KEEP.as_millis().to_string())
        .arg(reason)
}

/// The ack of job `id` leased with `token` (run it with [`ScriptOp::release_with`]). It
/// records the settled delivery for [`SETTLED_KEEP`], so a retry after a lost reply returns
/// `Ok` only if this delivery's own ack removed the job.
pub fn ack_call(keys: &QueueKeys, id: &str, token: &str) -> ScriptCall {
    // The wake channel: a grouped job's ack wakes the takers its freed slot may let in, and
    // any ack those of a keep-latest follow-up it makes ready.
    keys.calls
        .ack
        .clone()
        .arg(id)
        .arg(token)
        .arg(SETTLED_KEEP.as_millis().to_string())
        .arg(&keys.notify)
}

/// [`ack_call`] for the lease `token` of a taken job: the same call, built without copying
/// the queue's keys.
pub fn ack_lease_call(keys: &QueueKeys, id: &str, token: &Token) -> ScriptCall {
    keys.calls
        .ack_bound
        .clone()
        .with_subject(&std::sync::Arc::new(id.as_bytes().to_vec()))
        .with_token(token)
}

/// The nack of job `id` leased with `token`: retry after `backoff` (zero: at once), or after
/// `max_deliveries` deliveries move it to the dead list.
pub fn nack(
    keys: &QueueKeys,
    id: &str,
    token: &str,
    backoff: Duration,
    max_deliveries: u32,
) -> ScriptCall {
    nack_because(keys, id, token, backoff, max_deliveries, "")
}

/// [`nack`] recording why the job failed: if this nack moves it to the dead list, `reason`
/// is kept with it ([`DeadJob::reason`]). `max_deliveries` 0 moves it there now (no retry).
/// Run it with [`nack_op`] to learn whether it went to the dead list.
pub fn nack_because(
    keys: &QueueKeys,
    id: &str,
    token: &str,
    backoff: Duration,
    max_deliveries: u32,
    reason: &str,
) -> ScriptCall {
    nack_call(keys, token, backoff, max_deliveries, reason).prepend_arg(id)
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Nacked {
    /// The job will be delivered again (after its backoff).
    Retrying,
    /// The job went to the dead list.
    Dead,
    /// An earlier attempt of this delivery whose reply was lost did it (the script's record of
    /// settled deliveries says so); whether the job was retried or went dead is not known.
    Done,
}

/// Runs a nack call ([`nack_because`]) for the job leased as `lease`.
#[derive(Debug, Clone)]
pub struct Nack {
    name: String,
}

impl OpKind for Nack {
    type Output = Nacked;
    const CONTEXT: &'static str = "queue nack";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Nacked, Error>> {
        let outcome = match reply.as_int()? {
            1 => Nacked::Retrying,
            2 => Nacked::Dead,
            3 => Nacked::Done,
            0 => return Some(Err(self.not_owner(crate::LossReason::Expired))),
            -1 => return Some(Err(self.not_owner(crate::LossReason::Taken))),
            _ => return None,
        };
        Some(Ok(outcome))
    }
}

impl Nack {
    fn not_owner(&self, reason: crate::LossReason) -> Error {
        Error::NotOwner {
            name: self.name.clone(),
            reason,
        }
    }
}

/// The machine of a nack `call` ([`nack_because`]) of the job leased as `lease`, answering by
/// `deadline`; owner-checked like a release.
pub fn nack_op(lease: &crate::lease::Lease, call: ScriptCall, deadline: Instant) -> ScriptOp<Nack> {
    let kind = Nack {
        name: lease.target.name.to_string(),
    };
    ScriptOp::new(
        kind,
        call,
        lease.target.clone(),
        Some(lease.valid_until),
        deadline,
    )
}

/// Queue counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueStats {
    /// Jobs ready to be taken.
    pub ready: u64,
    /// Jobs waiting for their due time (or a retry backoff).
    pub delayed: u64,
    /// Jobs leased to workers.
    pub in_flight: u64,
    /// Jobs on the dead list.
    pub dead: u64,
    /// How long ago the oldest ready job was pushed, on the server's clock (`None`: no
    /// ready job with a known enqueue time). "Oldest" among the jobs next in line at each
    /// priority: within a priority jobs are taken in order, so it is the longest any job
    /// about to be taken has been in the queue (Sidekiq's queue latency).
    pub oldest_ready_age: Option<Duration>,
    /// The least lease time left among jobs in flight (`None`: none in flight; zero: a
    /// lease ran out and its job is redelivered at the next take).
    pub least_lease_left: Option<Duration>,
}

/// Reads the counts.
#[derive(Debug, Clone, Copy)]
pub struct Stats;

impl OpKind for Stats {
    type Output = QueueStats;
    const CONTEXT: &'static str = "queue stats";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<QueueStats, Error>> {
        let n = |r: &Reply| u64::try_from(r.as_int()?).ok();
        // -1: none.
        let ms = |r: &Reply| match r.as_int()? {
            -1 => Some(None),
            v => Some(Some(Duration::from_millis(u64::try_from(v).ok()?))),
        };
        match reply.as_array()? {
            [a, b, c, d, age, left] => Some(Ok(QueueStats {
                ready: n(a)?,
                delayed: n(b)?,
                in_flight: n(c)?,
                dead: n(d)?,
                oldest_ready_age: ms(age)?,
                least_lease_left: ms(left)?,
            })),
            _ => None,
        }
    }
}

/// The counts of a queue.
pub fn stats(keys: &QueueKeys, deadline: Instant) -> ScriptOp<Stats> {
    let mut call = ScriptCall::new(&scripts::STATS).keys(&[
        &keys.ready,
        &keys.delayed,
        &keys.inflight,
        &keys.dead,
        &keys.payloads,
    ]);
    if keys.is_grouped() {
        // The jobs waiting in their groups' own ready sets count as ready.
        call = call.key(&format!("{}sorted", keys.group_stem));
    }
    ScriptOp::new(Stats, call, keys.target(), None, deadline)
}

/// A job on the dead list.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadJob {
    /// Its id (as pushed: without its group).
    pub id: String,
    /// Its group, for a job pushed into one (listed through the queue's
    /// [`grouped`](QueueKeys::grouped) keys).
    pub group: Option<String>,
    /// How often it was delivered.
    pub deliveries: u64,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Why it died: the error its handler gave on the last nack, or the message it was
    /// cancelled with (`None`: none was given, or its lease ran out on the last delivery).
    pub reason: Option<String>,
    /// When it died, on the server's clock (`None`: it died before deaths were recorded).
    pub died_at: Option<SystemTime>,
    /// What it died of (`None`: not recorded, or a kind this version does not know).
    pub cause: Option<dead::DeathCause>,
}

/// Lists dead jobs.
#[derive(Debug, Clone, Copy)]
pub struct DeadJobs;

impl OpKind for DeadJobs {
    type Output = Vec<DeadJob>;
    const CONTEXT: &'static str = "dead-letter list";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Vec<DeadJob>, Error>> {
        let items = reply.as_array()?;
        if items.len() % 5 != 0 {
            return None;
        }
        let out = items
            .chunks(5)
            .map(|c| {
                let bulk = |r: &Reply| match r {
                    Reply::Bulk(b) => Some(b.clone()),
                    _ => None,
                };
                let record = bulk(&c[4])?;
                let record = dead::parse_record(&record);
                let id = String::from_utf8(bulk(&c[0])?).ok()?;
                let (group, id) = match groups::split_id(&id) {
                    (Some(g), id) => (Some(g.to_owned()), id.to_owned()),
                    (None, _) => (None, id),
                };
                Some(DeadJob {
                    id,
                    group,
                    deliveries: u64::try_from(c[1].as_int()?).ok()?,
                    payload: bulk(&c[2])?,
                    reason: Some(String::from_utf8_lossy(&bulk(&c[3])?).into_owned())
                        .filter(|r| !r.is_empty()),
                    died_at: record.map(|r| r.0),
                    cause: record.and_then(|r| r.1),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(out))
    }
}

/// The oldest `limit` dead jobs.
pub fn dead_jobs(keys: &QueueKeys, limit: usize, deadline: Instant) -> ScriptOp<DeadJobs> {
    let call = ScriptCall::new(&scripts::DEAD)
        .keys(&[&keys.dead, &keys.payloads, &keys.deliveries, &keys.reasons])
        .arg(limit.max(1).to_string());
    ScriptOp::new(DeadJobs, call, keys.target(), None, deadline)
}

/// Deletes dead jobs for good. Yields how many were deleted.
#[derive(Debug, Clone, Copy)]
pub struct DeleteDead;

impl OpKind for DeleteDead {
    type Output = u64;
    const CONTEXT: &'static str = "dead-letter deletion";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<u64, Error>> {
        Some(Ok(u64::try_from(reply.as_int()?).ok()?))
    }
}

/// Deletes dead job `id` with its payload, so the dead list does not grow without bound and
/// the id may be pushed again. An empty id is refused with [`InvalidArgument`] (no job has
/// one: [`push`] refuses it). A purge of every dead job goes in pages:
/// [`dead::purge_page`].
pub fn delete_dead(
    keys: &QueueKeys,
    id: &str,
    deadline: Instant,
) -> Result<ScriptOp<DeleteDead>, Error> {
    if id.is_empty() {
        return Err(InvalidArgument::Setting(format!(
            "a dead job id must be 1 to {MAX_ID_LEN} bytes, got 0 (purge every dead job with purge_dead)"
        ))
        .into());
    }
    let call = forget_call(keys).arg(id).arg("one");
    Ok(ScriptOp::new(
        DeleteDead,
        call,
        keys.target(),
        None,
        deadline,
    ))
}

/// The forget script's call with its keys: a deletion of one dead job, or with a page's
/// record as a last key, a purge page ([`dead::purge_page`]).
pub(super) fn forget_call(keys: &QueueKeys) -> ScriptCall {
    ScriptCall::new(&scripts::FORGET).keys(&[
        &keys.dead,
        &keys.payloads,
        &keys.priorities,
        &keys.deliveries,
        &keys.bases,
        &keys.reasons,
        &keys.dedup,
        &keys.dedup_of,
    ])
}

/// Moves a dead job back to ready.
#[derive(Debug, Clone, Copy)]
pub struct Requeue;

impl OpKind for Requeue {
    type Output = bool;
    const CONTEXT: &'static str = "requeue";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<bool, Error>> {
        match reply.as_int()? {
            1 => Some(Ok(true)),
            0 => Some(Ok(false)),
            _ => None,
        }
    }
}

/// Moves dead job `id` back to ready, as new for its budget and backoff: max deliveries are
/// counted afresh, and its takes report [`TakenJob::attempt`] from 1 again (a retry
/// backoff restarts from it). Its delivery number ([`TakenJob::delivery`], the job's fence)
/// keeps increasing: it never repeats. `false` if it was not dead.
pub fn requeue(keys: &QueueKeys, id: &str, deadline: Instant) -> ScriptOp<Requeue> {
    let call = ScriptCall::new(&scripts::REQUEUE)
        .keys(&[
            &keys.dead,
            &keys.ready,
            &keys.priorities,
            &keys.seq,
            &keys.deliveries,
            &keys.bases,
            &keys.reasons,
            &keys.payloads,
        ])
        .arg(id)
        .arg(&keys.notify);
    ScriptOp::new(Requeue, call, keys.target(), None, deadline)
}
#[cfg(test)]
mod tests;
