//! The checker: properties over a recorded [`History`], and which faults excuse which
//! property (the table of docs/simulation.md).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::faults::{Fault, FaultSet};
use crate::history::{AcqResult, History, HoldKind};

/// A property the checker verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    /// No two holders of an exclusive lock (or a writer and a reader) hold at once, each by
    /// its own clock.
    Exclusion,
    /// Fences of exclusive locks strictly increase in the order the server granted them.
    FenceOrder,
    /// The fenced resource never accepts a write of a holder granted before the holder of a
    /// write it accepted earlier.
    FencedResource,
    /// Never more permit holders than permits (at each grant, by the count then in force).
    Permits,
    /// Fair lock and semaphore: a grant never overtakes a live waiter that joined the line
    /// earlier (unless there was room for both).
    Fifo,
    /// Every pushed job is acked or on the dead list once the workers are done.
    JobSettled,
    /// Never two successful acks of one job.
    SingleAck,
    /// A job's delivery numbers never repeat.
    DeliveryUnique,
    /// A delayed job is never delivered before it is due.
    NotBeforeDue,
    /// A waiting acquisition ends by its deadline plus the stated bound.
    WaiterDeadline,
    /// The watchdog never sends a renewal after the lease's release.
    NoRenewalAfterRelease,
    /// A watched holder is told of its loss no later than its local validity.
    LossInTime,
    /// A waiter is not left asleep while its lock is free for longer than the wake bound.
    WakeWhenFree,
    /// The run settles: no machine spins at one instant (a livelock of driver and machine).
    Progress,
    /// Every interval in which a client believes it holds lies inside a hold of its token in
    /// the server's own record.
    HeldOnServer,
    /// A release, ack or nack succeeds only for the holder on the server, and no command
    /// ends another token's live hold.
    SettledByHolder,
    /// An attempt of an acquisition that was answered, arriving after that, takes nothing.
    LateAttempt,
    /// A renewal the watchdog counts as a success ran while the server held the lease for
    /// its token.
    RenewalOnServer,
    /// A queue's group never has more jobs leased at once (in the server's own record) than
    /// its concurrency limit.
    GroupConcurrency,
    /// At most one job per schedule occurrence: an occurrence's first delivery happens once.
    ScheduleOnce,
    /// No two live jobs for one dedup id in a mode that forbids it (until done).
    DedupOneLive,
    /// No job is leased while the queue is paused (between a pause and a resume as they ran
    /// on the server).
    NothingLeasedWhilePaused,
    /// No window in which a group (or the whole queue) with a rate limit had more jobs
    /// leased than its rate allows (GCRA: `rate x window + burst`), by the server's record.
    GroupRate,
    /// A rate-limited answer (the group defer) counts no delivery toward the job's max
    /// deliveries, by the server's record.
    RateLimitedKeepsDelivery,
    /// No ack or nack of a watched delivery of a job with a timeout ends its lease on the
    /// server later than its take plus timeout and grace.
    NoAckAfterTimeout,
    /// The queue's per-minute counters agree with what the server did: every job pushed
    /// counted once as `pushed`, every lease once as `taken` (less the takes given back),
    /// every ack that removed a job once as `acked`.
    Counted,
    /// Every job pushed is, by the server's keys when the run ended, acked, dead, cancelled,
    /// or still waiting or leased, in one place: none is present nowhere.
    Conservation,
    /// A queue's group never has more jobs leased at once (in the server's own record) than
    /// the concurrency in force when the last of them was leased, whichever path leased it
    /// and however the limits were changed at run time.
    GroupLimits,
    /// A drain answers that nothing is in flight only when nothing of the queue (its plain
    /// and its grouped jobs) was leased on the server at that instant.
    DrainTruth,
    /// A freed group slot is usable at once: a group take that finds nothing leaves no
    /// group with a ready job and fewer leases (in the server's record) than its limit.
    SlotUsable,
    /// Every schedule not removed has exactly one pending, runnable occurrence after every
    /// command the server ran; a schedule on a queue's grouped keys is refused.
    ScheduleLiveness,
    /// A keep-latest follow-up answered `Queued` (parked behind the job in flight holding
    /// its dedup id) runs: it is made ready when that job ends, and is never left parked
    /// behind a job that ended, nor lost.
    FollowUpRuns,
}

/// How long a free lease or reentrant lock may keep a waiter asleep (µs): the release
/// message's trip, a re-subscription or reconnection, and one attempt.
pub const WAKE_BOUND: u64 = 150_000;

impl Property {
    /// Every property.
    pub const ALL: [Property; 32] = [
        Property::Exclusion,
        Property::FenceOrder,
        Property::FencedResource,
        Property::Permits,
        Property::Fifo,
        Property::JobSettled,
        Property::SingleAck,
        Property::DeliveryUnique,
        Property::NotBeforeDue,
        Property::WaiterDeadline,
        Property::NoRenewalAfterRelease,
        Property::LossInTime,
        Property::WakeWhenFree,
        Property::Progress,
        Property::HeldOnServer,
        Property::SettledByHolder,
        Property::LateAttempt,
        Property::RenewalOnServer,
        Property::GroupConcurrency,
        Property::ScheduleOnce,
        Property::DedupOneLive,
        Property::NothingLeasedWhilePaused,
        Property::GroupRate,
        Property::RateLimitedKeepsDelivery,
        Property::NoAckAfterTimeout,
        Property::Counted,
        Property::Conservation,
        Property::GroupLimits,
        Property::DrainTruth,
        Property::SlotUsable,
        Property::ScheduleLiveness,
        Property::FollowUpRuns,
    ];

    /// Its index in [`Property::ALL`] (and in [`Judged`]).
    pub fn index(self) -> usize {
        Property::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    /// Its name in reports and in docs/simulation.md.
    pub fn name(self) -> &'static str {
        match self {
            Property::Exclusion => "exclusion",
            Property::FenceOrder => "fence-order",
            Property::FencedResource => "fenced-resource",
            Property::Permits => "permits",
            Property::Fifo => "fifo",
            Property::JobSettled => "job-settled",
            Property::SingleAck => "single-ack",
            Property::DeliveryUnique => "delivery-unique",
            Property::NotBeforeDue => "not-before-due",
            Property::WaiterDeadline => "waiter-deadline",
            Property::NoRenewalAfterRelease => "no-renewal-after-release",
            Property::LossInTime => "loss-in-time",
            Property::WakeWhenFree => "wake-when-free",
            Property::Progress => "progress",
            Property::HeldOnServer => "held-on-server",
            Property::SettledByHolder => "settled-by-holder",
            Property::LateAttempt => "late-attempt",
            Property::RenewalOnServer => "renewal-on-server",
            Property::GroupConcurrency => "group-concurrency",
            Property::ScheduleOnce => "schedule-once",
            Property::DedupOneLive => "dedup-one-live",
            Property::NothingLeasedWhilePaused => "nothing-leased-while-paused",
            Property::GroupRate => "group-rate",
            Property::RateLimitedKeepsDelivery => "rate-limited-keeps-delivery",
            Property::NoAckAfterTimeout => "no-ack-after-timeout",
            Property::Counted => "counted",
            Property::Conservation => "conservation",
            Property::GroupLimits => "group-limits",
            Property::DrainTruth => "drain-truth",
            Property::SlotUsable => "slot-usable",
            Property::ScheduleLiveness => "schedule-liveness",
            Property::FollowUpRuns => "follow-up-runs",
        }
    }

    /// The faults under which the property is documented NOT to hold: a run with any of
    /// them is not checked for it.
    pub fn excused_by(self) -> FaultSet {
        use Fault::*;
        let data_loss = [
            RestartEmpty,
            RestartSnapshot,
            Failover,
            FailoverMinReplicas,
            KeyEvicted,
        ];
        match self {
            // Renewals are not waited for, so even with min_replicas a failover may end a
            // renewed lease early on the new master; a clock 5 % slow outlives the lease.
            Property::Exclusion | Property::Permits | Property::Fifo => {
                let mut s = FaultSet::of(&data_loss);
                s.insert(ClockDriftExcess);
                s
            }
            Property::FenceOrder | Property::FencedResource | Property::NotBeforeDue => {
                FaultSet::NONE
            }
            // Data loss forgets that an occurrence ran (its schedule is upserted again).
            // Data loss forgets the entry with (or without) its job.
            // Data loss may forget the pause itself (the flag is a key like any other), and
            // forgets the limits and the leases a group holds.
            // Data loss forgets a rate's state (its theoretical arrival time) and the limits.
            Property::GroupRate
            | Property::JobSettled
            | Property::ScheduleOnce
            | Property::DedupOneLive
            | Property::NothingLeasedWhilePaused
            | Property::GroupConcurrency => FaultSet::of(&data_loss),
            // Data loss forgets counters with (or without) the jobs they counted.
            Property::Counted => FaultSet::of(&data_loss),
            // Data loss forgets jobs, limits (and the leases a group holds), and leases a
            // drain's count may have seen on the older copy.
            Property::Conservation
            | Property::GroupLimits
            | Property::DrainTruth
            | Property::SlotUsable => FaultSet::of(&data_loss),
            // Data loss forgets schedules, or their occurrences (upserted again later).
            Property::ScheduleLiveness => FaultSet::of(&data_loss),
            // Data loss forgets a parked follow-up with (or without) the job it follows.
            Property::FollowUpRuns => FaultSet::of(&data_loss),
            // A push handed over twice whose copy arrives after the job was acked pushes it
            // again (a push is not idempotent once the job is forgotten: `push_unique` is).
            Property::SingleAck | Property::DeliveryUnique => FaultSet::of(&[
                RestartSnapshot,
                Failover,
                FailoverMinReplicas,
                KeyEvicted,
                RequestDuplicated,
            ]),
            // A clock that jumps forward during a call counts the jump as time waited.
            Property::WaiterDeadline => FaultSet::of(&[ClientPaused, ClockJump]),
            Property::LossInTime => FaultSet::of(&[ClientPaused]),
            // Judged on the server's keys just before and after the one command.
            Property::NoRenewalAfterRelease
            | Property::Progress
            | Property::RenewalOnServer
            | Property::RateLimitedKeepsDelivery => FaultSet::NONE,
            // The server's record after data loss is not the record the holder was granted;
            // a clock 5 % slow outlives its lease.
            Property::HeldOnServer => {
                let mut s = FaultSet::of(&data_loss);
                s.insert(ClockDriftExcess);
                s
            }
            // A release told it succeeded after a lost reply is judged by the holder's clock
            // (documented): a clock 5 % slow counts a lease that ran out as still valid.
            Property::SettledByHolder => {
                let mut s = FaultSet::of(&data_loss);
                s.insert(ClockDriftExcess);
                s
            }
            // A network that hands a request over twice (TCP does not) replays an answered
            // attempt with nothing to tell it from the first; data loss forgets the undone
            // record.
            Property::LateAttempt => {
                let mut s = FaultSet::of(&data_loss);
                s.insert(RequestDuplicated);
                s
            }
            // The server keeps each timed delivery's hold limit beside its holder entry and
            // no take retry or extension leases past it, however late it arrives (it once
            // did: request-delayed seed 569, a held copy of the take; reply-delayed seed 18).
            // An evicted holders hash forgets the limit: the watchdog's, on the holder's
            // clock, is then all that is left.
            Property::NoAckAfterTimeout => FaultSet::of(&[KeyEvicted]),
            Property::WakeWhenFree => FaultSet::of(&[
                RequestLost,
                ReplyLost,
                ReplyDelayed,
                RequestDelayed,
                RequestDuplicated,
                ConnectionCut,
                ServerPaused,
                RestartEmpty,
                RestartSnapshot,
                Failover,
                FailoverMinReplicas,
                ClientPaused,
                KeyEvicted,
            ]),
        }
    }
}

/// A property that did not hold.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which.
    pub property: Property,
    /// Around when (global µs).
    pub at: u64,
    /// What the checker saw.
    pub what: String,
}

/// How many events each property judged in a run (or a sweep), by [`Property::index`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Judged(pub [u64; Property::ALL.len()]);

impl Judged {
    /// The count for `p`.
    pub fn of(&self, p: Property) -> u64 {
        self.0[p.index()]
    }

    /// Adds another run's counts.
    pub fn add(&mut self, other: &Judged) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}

struct Out<'a> {
    faults: FaultSet,
    found: &'a mut Vec<Violation>,
    judged: Judged,
}

impl Out<'_> {
    fn on(&self, p: Property) -> bool {
        !p.excused_by().intersects(self.faults)
    }
    fn judge(&mut self, p: Property, n: u64) {
        self.judged.0[p.index()] += n;
    }
    fn push(&mut self, property: Property, at: u64, what: String) {
        self.found.push(Violation { property, at, what });
    }
}

/// Checks every property not excused by `faults`.
pub fn check(h: &History, faults: FaultSet) -> Vec<Violation> {
    check_counted(h, faults).0
}

/// Checks every property not excused by `faults`; also says how many events each judged
/// (a property that judged nothing passed vacuously).
pub fn check_counted(h: &History, faults: FaultSet) -> (Vec<Violation>, Judged) {
    let mut found = Vec::new();
    let mut out = Out {
        faults,
        found: &mut found,
        judged: Judged::default(),
    };
    exclusion(h, &mut out);
    fences(h, &mut out);
    semaphores(h, &mut out);
    jobs(h, &mut out);
    schedules(h, &mut out);
    liveness(h, &mut out);
    server_record(h, &mut out);
    paused(h, &mut out);
    group_concurrency(h, &mut out);
    group_rate(h, &mut out);
    no_ack_after_timeout(h, &mut out);
    counted(h, &mut out);
    conservation(h, &mut out);
    group_limits(h, &mut out);
    drain_truth(h, &mut out);
    slot_usable(h, &mut out);
    schedule_liveness(h, &mut out);
    follow_up_runs(h, &mut out);
    if out.on(Property::RateLimitedKeepsDelivery) {
        for d in &h.defers {
            out.judge(Property::RateLimitedKeepsDelivery, 1);
            if d.after != d.before - 1 {
                out.push(
                    Property::RateLimitedKeepsDelivery,
                    d.at,
                    format!(
                        "job {:?} rate limited at {}: {} deliveries counted toward its max before, {} after (the deferred one must not count)",
                        d.id, d.at, d.before, d.after
                    ),
                );
            }
        }
    }
    if out.on(Property::Progress) {
        out.judge(Property::Progress, 1);
    }
    for (at, what) in &h.broken {
        out.push(
            Property::Progress,
            *at,
            format!("a machine ended with: {what}"),
        );
    }
    if h.runaway {
        out.push(
            Property::Progress,
            h.end,
            format!(
                "stopped after {} events at {} µs",
                crate::world::MAX_STEPS,
                h.end
            ),
        );
    }
    let judged = out.judged;
    (found, judged)
}

/// No lease opens on the server (the record's spans, in the order the server ran the
/// commands that made them) between a pause and the next resume as they ran; judged once per
/// take attempt that ran while paused.
fn paused(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::NothingLeasedWhilePaused) {
        return;
    }
    out.judge(Property::NothingLeasedWhilePaused, h.takes_while_paused);
    let mut from: Option<(usize, u64)> = None;
    let mut windows = Vec::new();
    for &(spans, at, pause) in &h.pauses {
        match (pause, from) {
            (true, None) => from = Some((spans, at)),
            (false, Some(start)) => {
                windows.push((start, spans));
                from = None;
            }
            _ => {}
        }
    }
    if let Some(start) = from {
        windows.push((start, h.spans.len()));
    }
    for ((first, at), end) in windows {
        for sp in h.spans[first..end.min(h.spans.len())]
            .iter()
            .filter(|sp| sp.opened_by.is_some())
        {
            out.push(
                Property::NothingLeasedWhilePaused,
                sp.from,
                format!(
                    "job {} leased to {} at {} while the queue was paused (since {at})",
                    sp.resource, sp.token, sp.from
                ),
            );
        }
    }
}

/// No group over its concurrency limit ([`crate::scenario::GROUP_CONCURRENCY`]): at each
/// start of a grouped job's lease on the server (a job id `<group>\u{1f}<id>`), the leases
/// of its group that are open then, itself included, are at most the limit.
fn group_concurrency(h: &History, out: &mut Out<'_>) {
    // A run that changes its limits is judged by `group-limits`.
    if !out.on(Property::GroupConcurrency) || !h.group_limits.is_empty() {
        return;
    }
    let group = |r: &str| r.split_once('\u{1f}').map(|(g, _)| g.to_owned());
    let mut by: HashMap<String, Vec<(u64, u64, &str)>> = HashMap::new();
    for sp in &h.spans {
        if let Some(g) = group(&sp.resource) {
            by.entry(g)
                .or_default()
                .push((sp.from, sp.until, sp.resource.as_str()));
        }
    }
    for (g, spans) in &by {
        for &(from, _, id) in spans {
            out.judge(Property::GroupConcurrency, 1);
            let open: Vec<&str> = spans
                .iter()
                .filter(|(f, u, _)| *f <= from && from < *u)
                .map(|s| s.2)
                .collect();
            if open.len() > crate::scenario::GROUP_CONCURRENCY {
                out.push(
                    Property::GroupConcurrency,
                    from,
                    format!(
                        "group {g}: {} leases at once when {id:?} was taken (limit {}): {open:?}",
                        open.len(),
                        crate::scenario::GROUP_CONCURRENCY
                    ),
                );
            }
        }
    }
}

/// The concurrency in force for group `g` by the changes `ran` says ran before: the group's
/// own if set, else every group's defaults (0 or none: no limit).
fn limit_at(h: &History, g: &str, ran: impl Fn(&crate::history::LimitSet) -> bool) -> Option<u32> {
    let mut own: Option<Option<u32>> = None;
    let mut every: Option<u32> = None;
    for l in h.group_limits.iter().filter(|l| ran(l)) {
        match &l.group {
            Some(x) if x == g => own = Some(l.concurrency),
            Some(_) => {}
            None => every = l.concurrency,
        }
    }
    own.flatten().or(every).filter(|c| *c > 0)
}

/// [`Property::GroupLimits`]: at each start of a grouped job's lease (a span opened by a
/// command, or restored), the open leases of its group are at most the limit in force.
fn group_limits(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::GroupLimits) || h.group_limits.is_empty() {
        return;
    }
    let mut by: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, sp) in h.spans.iter().enumerate() {
        if let Some((g, _)) = sp.resource.split_once('\u{1f}') {
            by.entry(g).or_default().push(i);
        }
    }
    for (g, list) in &by {
        for &i in list {
            let sp = &h.spans[i];
            out.judge(Property::GroupLimits, 1);
            // The changes that ran before the command that opened span `i`: earlier, or at
            // its instant before it (fewer spans recorded then than `i`, or as many).
            let ran =
                |l: &crate::history::LimitSet| l.at < sp.from || (l.at == sp.from && l.spans <= i);
            let Some(limit) = limit_at(h, g, ran) else {
                continue;
            };
            // Open then: leased by an earlier command (the record's order is the order the
            // server ran them, even at one instant) and not yet ended.
            let open: Vec<&str> = list
                .iter()
                .filter(|&&k| k <= i)
                .map(|&k| &h.spans[k])
                .filter(|o| sp.from < o.until)
                .map(|o| o.resource.as_str())
                .collect();
            if open.len() > limit as usize {
                out.push(
                    Property::GroupLimits,
                    sp.from,
                    format!(
                        "group {g}: {} leases at once when {:?} was leased to {} at {} (limit {limit} in force): {open:?}",
                        open.len(),
                        sp.resource,
                        sp.token,
                        sp.from
                    ),
                );
            }
        }
    }
}

/// [`Property::SlotUsable`]: judged once per group with ready jobs at a group take that
/// found nothing.
fn slot_usable(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::SlotUsable) {
        return;
    }
    for ((spans, at, groups), &seq) in h.idle_takes.iter().zip(&h.idle_seq) {
        for (g, ready, blocked) in groups {
            if *ready == 0 || *blocked {
                continue;
            }
            out.judge(Property::SlotUsable, 1);
            let Some(limit) = limit_at(h, g, |l| l.seq < seq) else {
                continue;
            };
            let prefix = format!("{g}\u{1f}");
            let open = h.spans[..(*spans).min(h.spans.len())]
                .iter()
                .filter(|sp| sp.resource.starts_with(&prefix) && sp.until + 1_000 > *at)
                .count();
            if open < limit as usize {
                out.push(
                    Property::SlotUsable,
                    *at,
                    format!(
                        "a group take at {at} found nothing, while group {g} had {ready} ready jobs and {open} leases (limit {limit})"
                    ),
                );
            }
        }
    }
}

/// The jobs a keep-latest push parked behind themselves ([`History::self_follow_ups`]: a
/// violation of `follow-up-runs`, fixed in the push script): left out of the other job
/// properties (`single-ack`, `delivery-unique`, `job-settled`, `conservation`) so that the
/// run reports the cause, not its consequences.
fn self_followed(h: &History) -> HashSet<&str> {
    h.self_follow_ups.iter().map(|(j, _)| j.as_str()).collect()
}

/// [`Property::FollowUpRuns`]: judged once per follow-up parked by a keep-latest push (its
/// fate when the run ended), and once per follow-up still parked then (the job it follows).
fn follow_up_runs(h: &History, out: &mut Out<'_>) {
    let Some(fin) = &h.final_jobs else { return };
    if !out.on(Property::FollowUpRuns) {
        return;
    }
    let waiting = |id: &str| {
        fin.get(id).is_some_and(|v| {
            v.iter()
                .any(|p| matches!(*p, "ready" | "delayed" | "in-flight" | "dead"))
        })
    };
    let acked: HashSet<&str> = h.acks_ran_at.iter().map(|(j, _)| j.as_str()).collect();
    let removed: HashSet<&str> = h
        .cancels_ran
        .iter()
        .filter(|c| c.2)
        .map(|c| c.0.as_str())
        .collect();
    let superseded: HashSet<&str> = h.superseded.iter().map(|(f, _)| f.as_str()).collect();
    let parked: HashMap<&str, Option<&str>> = h
        .parked_at_end
        .iter()
        .map(|(f, j)| (f.as_str(), j.as_deref()))
        .collect();
    let known = self_followed(h);
    // A keep-latest push run again must never park its own job behind itself (the push
    // script answers such a copy as the first was answered, writing nothing).
    for (j, at) in &h.self_follow_ups {
        out.judge(Property::FollowUpRuns, 1);
        out.push(
            Property::FollowUpRuns,
            *at,
            format!("a keep-latest push run again at {at} parked its own job {j} behind itself"),
        );
    }
    for (f, ran, was_parked) in &h.follow_ups {
        if !was_parked || known.contains(f.as_str()) {
            continue;
        }
        out.judge(Property::FollowUpRuns, 1);
        let f = f.as_str();
        let dropped = superseded.contains(f);
        if !(acked.contains(f)
            || removed.contains(f)
            || waiting(f)
            || parked.contains_key(f)
            || dropped)
        {
            out.push(
                Property::FollowUpRuns,
                h.end,
                format!("follow-up {f} (parked at {ran}) is nowhere at the end: not acked, cancelled, waiting nor parked"),
            );
        }
    }
    for (f, holder) in &h.parked_at_end {
        if known.contains(f.as_str()) {
            continue;
        }
        out.judge(Property::FollowUpRuns, 1);
        // Parked legitimately only behind a job that still lives (in flight, or back to
        // waiting after a nack or an expiry).
        let live = holder.as_deref().is_some_and(|j| {
            fin.get(j).is_some_and(|v| {
                v.iter()
                    .any(|p| matches!(*p, "ready" | "delayed" | "in-flight"))
            })
        });
        if !live {
            out.push(
                Property::FollowUpRuns,
                h.end,
                format!(
                    "follow-up {f} still parked at the end behind {holder:?}, which no longer lives"
                ),
            );
        }
    }
}

/// [`Property::ScheduleLiveness`]: judged once per schedule at each observation (after every
/// command a server ran, the only points at which its keys change), and once per schedule
/// upserted on grouped keys.
fn schedule_liveness(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::ScheduleLiveness) {
        return;
    }
    out.judge(Property::ScheduleLiveness, h.schedule_checks);
    // Occurrences cancelled and forgotten.
    let forgotten: HashSet<&str> = h
        .cancels_ran
        .iter()
        .filter(|c| c.2)
        .map(|c| c.0.as_str())
        .collect();
    for g in &h.schedule_gaps {
        // Between the start of a cancel of the pending occurrence and the end of the
        // advance past it (a cancel and an advance: two calls), it is not runnable.
        let skipping = !g.runnable
            && g.others.iter().all(|o| forgotten.contains(o.as_str()))
            && h.skip_windows
                .iter()
                .any(|(id, from, until)| *id == g.pending && *from <= g.at && g.at <= *until);
        if !skipping {
            out.push(
                Property::ScheduleLiveness,
                g.at,
                format!(
                    "after a command at {}: pending occurrence {} {}, other occurrences never delivered waiting: {:?}",
                    g.at,
                    g.pending,
                    if g.runnable {
                        "runnable"
                    } else {
                        "neither delayed, ready nor in flight"
                    },
                    g.others
                ),
            );
        }
    }
    for &(at, refused) in &h.grouped_schedules {
        out.judge(Property::ScheduleLiveness, 1);
        if !refused {
            out.push(
                Property::ScheduleLiveness,
                at,
                "a schedule on a queue's grouped keys was accepted (no group take leases its occurrences)".into(),
            );
        }
    }
}

/// [`Property::DrainTruth`]: no span of the record is live at an instant a drain's count
/// answered 0.
fn drain_truth(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::DrainTruth) {
        return;
    }
    for &(spans, at) in &h.drained_at {
        out.judge(Property::DrainTruth, 1);
        // The spans opened before the count ran (at its instant, by an earlier command).
        let before = &h.spans[..spans.min(h.spans.len())];
        if let Some(sp) = before.iter().find(|sp| sp.from <= at && at < sp.until) {
            out.push(
                Property::DrainTruth,
                at,
                format!(
                    "a drain's count answered nothing in flight at {at}, but {:?} was leased to {} ({}..{})",
                    sp.resource, sp.token, sp.from, sp.until
                ),
            );
        }
    }
}

/// [`Property::Conservation`], judged on [`History::final_jobs`] (the server's keys when
/// the run ended): once per job pushed, and once per payload kept.
fn conservation(h: &History, out: &mut Out<'_>) {
    let Some(fin) = &h.final_jobs else { return };
    if !out.on(Property::Conservation) {
        return;
    }
    let acked: HashSet<&str> = h.acks_ran_at.iter().map(|(j, _)| j.as_str()).collect();
    let removed: HashSet<&str> = h
        .cancels_ran
        .iter()
        .filter(|c| c.2)
        .map(|c| c.0.as_str())
        .collect();
    let places = |id: &str| -> Vec<&'static str> {
        fin.get(id)
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|p| !matches!(*p, "payload" | "enqueued-at" | "death-record"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let parked: HashSet<&str> = h.parked_at_end.iter().map(|(f, _)| f.as_str()).collect();
    // A keep-latest follow-up dropped by a later push (answered `Replaced` with the job it
    // followed, which carries the latest payload).
    let superseded: HashSet<&str> = h.superseded.iter().map(|(f, _)| f.as_str()).collect();
    let known = self_followed(h);
    let mut seen = HashSet::new();
    for p in &h.pushed {
        if !seen.insert(p.id.as_str()) || known.contains(p.id.as_str()) {
            continue;
        }
        out.judge(Property::Conservation, 1);
        let mut at = places(&p.id);
        // A keep-latest follow-up parked behind a job in flight waits (its payload in the
        // dedup entry).
        if parked.contains(p.id.as_str()) {
            at.push("parked");
        }
        let at = at;
        // Where it is: one waiting place, or in flight with its lease, or dead.
        let ok = match at.as_slice() {
            [] => {
                acked.contains(p.id.as_str())
                    || removed.contains(p.id.as_str())
                    || superseded.contains(p.id.as_str())
            }
            [_] => matches!(
                at[0],
                "ready" | "delayed" | "group-ready" | "dead" | "parked"
            ),
            [a, b] => {
                let mut v = [*a, *b];
                v.sort_unstable();
                v == ["in-flight", "leased"]
            }
            _ => false,
        };
        if !ok {
            out.push(
                Property::Conservation,
                h.end,
                format!(
                    "job {:?} (pushed at {}) at the end: {at:?} (acked: {}, cancelled and forgotten: {})",
                    p.id,
                    p.ran,
                    acked.contains(p.id.as_str()),
                    removed.contains(p.id.as_str())
                ),
            );
        }
    }
    // A payload (or its enqueue time, or a death record) kept for a job found nowhere is a
    // job lost.
    for (id, at) in fin {
        let meta = |p: &&str| matches!(*p, "payload" | "enqueued-at" | "death-record");
        if !at.iter().any(meta) {
            continue;
        }
        out.judge(Property::Conservation, 1);
        if at.iter().all(meta) {
            out.push(
                Property::Conservation,
                h.end,
                format!("job {id:?}: {at:?} kept, the job is nowhere"),
            );
        }
    }
}

/// No group over its rate ([`History::group_rates`]): for the starts of one group's jobs (of
/// every group, for the queue's own rate) as the server recorded them (the first span of
/// each lease token on a grouped job: a take or an ack-and-take, at the slot it booked if
/// it booked one ahead, [`Span::booked`], else when it ran; µs on the server's clock), in
/// time order `t_0 <= t_1 <= ...`, every run of them from `t_i` to `t_j` holds at most
/// `burst + floor((t_j - t_i) / interval)` takes (what a GCRA with that interval and
/// burst allows in that window). Judged once per take of a rate-limited group.
fn group_rate(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::GroupRate) || h.group_rates.is_empty() {
        return;
    }
    let mut seen = HashSet::new();
    let mut takes: Vec<(u64, &str, &str)> = Vec::new();
    for sp in &h.spans {
        let Some((g, _)) = sp.resource.split_once('\u{1f}') else {
            continue;
        };
        if sp.opened_by.is_some() && seen.insert((sp.resource.as_str(), sp.token.as_str())) {
            // A take that booked its group's next slot ahead: the job starts at the slot.
            takes.push((sp.booked.unwrap_or(sp.from), g, sp.resource.as_str()));
        }
    }
    takes.sort();
    for (whose, interval, burst) in &h.group_rates {
        let mut by: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
        for &(at, g, id) in &takes {
            let key = if whose.is_some() { "!" } else { g };
            by.entry(key).or_default().push((at, id));
        }
        for (g, t) in &by {
            out.judge(Property::GroupRate, t.len() as u64);
            'first: for i in 0..t.len() {
                for j in i..t.len() {
                    let allowed = burst + (t[j].0 - t[i].0) / interval;
                    if (j - i + 1) as u64 > allowed {
                        out.push(
                            Property::GroupRate,
                            t[j].0,
                            format!(
                                "{}: {} takes from {} to {} ({:?} to {:?}), a rate of one per {interval} µs with a burst of {burst} allows {allowed}",
                                if *g == "!" { "the queue".to_owned() } else { format!("group {g}") },
                                j - i + 1,
                                t[i].0,
                                t[j].0,
                                t[i].1,
                                t[j].1
                            ),
                        );
                        break 'first;
                    }
                }
            }
        }
    }
}

/// The counters agree with the server's record: `pushed` is the number of jobs the push
/// scripts that ran answered as pushed, and the schedule occurrences the schedule scripts
/// that ran added; `deferred` the rate-limited answers that ran and took their job back
/// (group defers); `acked` the number of deliveries whose ack ran and
/// removed the job (a retried ack that finds its own settlement counts nothing more); and
/// `taken` the leases the server recorded as made by a take (spans a runner opened) less
/// the takes given back (the untake answered 1). Judged once per job pushed, per lease and
/// per ack, in a run whose queue counts.
fn counted(h: &History, out: &mut Out<'_>) {
    let Some(counts) = &h.counted else {
        return;
    };
    if !out.on(Property::Counted) {
        return;
    }
    let get = |e: &str| counts.get(e).copied().unwrap_or(0);
    let acks = h.acks_ran.iter().collect::<HashSet<_>>().len() as u64;
    let leased = h.spans.iter().filter(|s| s.opened_by.is_some()).count() as u64;
    let defers = h.defers.len() as u64;
    out.judge(Property::Counted, h.pushed_ran + acks + leased + defers);
    let (pushed, acked, taken) = (get("pushed"), get("acked"), get("taken"));
    if get("deferred") != defers as i64 {
        out.push(
            Property::Counted,
            h.end,
            format!(
                "the deferred counters hold {}, {defers} rate-limited answers ran and took their job back",
                get("deferred")
            ),
        );
    }
    if pushed != h.pushed_ran as i64 {
        out.push(
            Property::Counted,
            h.end,
            format!(
                "the pushed counters hold {pushed}, the pushes that ran pushed {} jobs",
                h.pushed_ran
            ),
        );
    }
    if acked != acks as i64 {
        out.push(
            Property::Counted,
            h.end,
            format!("the acked counters hold {acked}, {acks} acks ran and removed a job"),
        );
    }
    // Every lease a command made (a span the server recorded, opened by a runner's take),
    // less the takes given back.
    let expected = leased as i64 - h.given_back as i64;
    if taken != expected {
        out.push(
            Property::Counted,
            h.end,
            format!(
                "the taken counters hold {taken}, the server leased {leased} jobs of which {} were given back",
                h.given_back
            ),
        );
    }
}

/// No ack or nack after timeout + grace: for each watched delivery of a job pushed with a
/// timeout ([`History::job_limits`]), a span of its token on the server that a command
/// ended (an ack, a nack, a give-back) ended no later than the take's run plus the larger
/// of timeout + grace and the visibility (the first lease's own length), plus one
/// network trip (the last renewal's request on its way) and the 1 % drift allowance.
/// Judged once per such delivery.
fn no_ack_after_timeout(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::NoAckAfterTimeout) {
        return;
    }
    for &(hold, limit) in &h.job_limits {
        let x = &h.holds[hold];
        out.judge(Property::NoAckAfterTimeout, 1);
        // The server's hold limit: from the take's run, in its whole milliseconds (up to 1 ms
        // late), plus 2 ms of slack and the grace rounded up (the limit recorded here is the
        // exact one).
        let bound = x.granted + limit + 4_000;
        for sp in h.spans.iter().filter(|sp| {
            sp.token == x.token
                    && sp.until > bound
                    // Ended by its holder's call, not by a cancel (which ends whichever lease
                    // its job has: seed mixed 2605, a late take's lease of an occurrence).
                    && sp
                        .closed_by
                        .is_some_and(|r| !h.cancel_runners.contains(&r))
        }) {
            out.push(
                Property::NoAckAfterTimeout,
                sp.until,
                format!(
                    "job {} (delivery {}, taken at {}, timeout + grace {limit} µs) settled on the server at {}, after {bound}",
                    sp.resource, x.fence, x.granted, sp.until
                ),
            );
        }
    }
}

fn start_of(h: &History, i: usize) -> u64 {
    let x = &h.holds[i];
    if x.kind == HoldKind::Red {
        x.received
    } else {
        x.granted
    }
}

fn exclusion(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::Exclusion) {
        return;
    }
    let reader = |k: HoldKind| k == HoldKind::Read;
    for (i, a) in h.holds.iter().enumerate() {
        if !(a.kind.exclusive() || reader(a.kind)) {
            continue;
        }
        out.judge(Property::Exclusion, 1);
        for (j, b) in h.holds.iter().enumerate().skip(i + 1) {
            if b.name != a.name || b.task == a.task || !(b.kind.exclusive() || reader(b.kind)) {
                continue;
            }
            if reader(a.kind) && reader(b.kind) {
                continue;
            }
            let (sa, ea, sb, eb) = (start_of(h, i), a.end(), start_of(h, j), b.end());
            if sa < eb && sb < ea {
                out.push(
                    Property::Exclusion,
                    sa.max(sb),
                    format!(
                        "hold {i} ({:?} c{} t{} fence {}, {sa}..{ea}) overlaps hold {j} ({:?} c{} t{} fence {}, {sb}..{eb})",
                        a.kind, a.client, a.task, a.fence, b.kind, b.client, b.task, b.fence
                    ),
                );
            }
        }
    }
}

fn fenced(k: HoldKind) -> bool {
    k.exclusive() && k != HoldKind::Red
}

fn fences(h: &History, out: &mut Out<'_>) {
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, x) in h.holds.iter().enumerate() {
        // An unfenced lease lock's holds are checked for exclusion only.
        if fenced(x.kind) && x.fenced {
            by_name.entry(&x.name).or_default().push(i);
        }
    }
    let acq_of: HashMap<usize, usize> = h
        .acqs
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a.result {
            AcqResult::Acquired(hold) => Some((hold, i)),
            _ => None,
        })
        .collect();
    if out.on(Property::FenceOrder) {
        for list in by_name.values_mut() {
            list.sort_by_key(|i| h.holds[*i].granted);
            let mut prev: Option<usize> = None;
            for (k, &j) in list.iter().enumerate() {
                let b = &h.holds[j];
                // A reentrant owner re-enters the hold it still has on the server (its
                // release failed, or the hold came back with an older snapshot or replica):
                // the same hold, with the same fence, not a new acquisition.
                let reentry = b.kind == HoldKind::Reentrant
                    && list[..k].iter().any(|&i| {
                        let a = &h.holds[i];
                        a.task == b.task && a.fence == b.fence
                    });
                // A retried acquisition that finds its own token returns the fence its first
                // grant was issued (documented; a higher one if the counter was lost), even when that grant came back with an
                // older snapshot or replica after fences were issued to others.
                let regrant = acq_of.get(&j).is_some_and(|&a| {
                    h.acqs[a]
                        .grants
                        .iter()
                        .any(|&(t, f)| t < b.granted && f == b.fence)
                });
                if reentry || regrant {
                    continue;
                }
                out.judge(Property::FenceOrder, 1);
                if let Some(i) = prev {
                    let a = &h.holds[i];
                    if b.fence <= a.fence {
                        out.push(
                            Property::FenceOrder,
                            b.granted,
                            format!(
                                "hold {j} granted at {} got fence {} after hold {i} granted at {} got fence {}",
                                b.granted, b.fence, a.granted, a.fence
                            ),
                        );
                    }
                }
                prev = Some(j);
            }
        }
    }
    if out.on(Property::FencedResource) {
        let mut newest: HashMap<&str, (u64, usize)> = HashMap::new();
        for wr in h.writes.iter().filter(|w| w.accepted) {
            let x = &h.holds[wr.hold];
            if !fenced(x.kind) || !x.fenced {
                continue;
            }
            out.judge(Property::FencedResource, 1);
            let e = newest.entry(&x.name).or_insert((x.granted, wr.hold));
            if x.granted < e.0 {
                out.push(
                    Property::FencedResource,
                    wr.at,
                    format!(
                        "accepted a write of hold {} (granted {}, fence {}) after one of hold {} (granted {})",
                        wr.hold, x.granted, x.fence, e.1, e.0
                    ),
                );
            } else {
                *e = (x.granted, wr.hold);
            }
        }
    }
}

fn permits_at(h: &History, t: u64) -> u64 {
    let mut sets = h.permits.clone();
    sets.sort_by_key(|s| s.0);
    sets.iter()
        .take_while(|s| s.0 <= t)
        .last()
        .map_or(1, |s| s.1)
}

/// Live waiters of `name` that joined before acquisition `b` and were granted after `g`.
fn live_ahead(h: &History, b: usize, g: u64) -> Vec<usize> {
    let bb = &h.acqs[b];
    let Some(&b_join) = bb.attempts.first() else {
        return Vec::new();
    };
    let mut ahead = Vec::new();
    for (i, a) in h.acqs.iter().enumerate() {
        if i == b || a.name != bb.name || a.kind != bb.kind || a.wait.is_none() {
            continue;
        }
        let AcqResult::Acquired(ha) = a.result else {
            continue;
        };
        let Some(wt) = a.waiter_timeout else { continue };
        if h.holds[ha].granted <= g {
            continue;
        }
        // A grant (even one whose reply was lost) takes a waiter out of the line: it joins
        // again with its next attempt.
        let since = a.grants.iter().map(|x| x.0).filter(|t| *t < g).max();
        let mut attempts = a
            .attempts
            .iter()
            .copied()
            .filter(|t| since.is_none_or(|s| *t > s));
        let Some(a_join) = attempts.next() else {
            continue;
        };
        if a_join >= b_join {
            continue;
        }
        // Live: it asked again within its waiter timeout, all the way to `g`.
        let mut last = a_join;
        let mut live = true;
        for t in attempts {
            if t > g {
                break;
            }
            // The server keeps a waiter's place until its last call plus the waiter
            // timeout, counted in whole milliseconds of its clock.
            if t / 1_000 - last / 1_000 >= wt / 1_000 {
                live = false;
            }
            last = t;
        }
        if live && g / 1_000 - last / 1_000 < wt / 1_000 {
            ahead.push(i);
        }
    }
    ahead
}

fn semaphores(h: &History, out: &mut Out<'_>) {
    for (b, acq) in h.acqs.iter().enumerate() {
        let AcqResult::Acquired(hb) = acq.result else {
            continue;
        };
        let kind = acq.kind;
        if !matches!(kind, HoldKind::Permit | HoldKind::Fair) {
            continue;
        }
        let g = h.holds[hb].granted;
        let holders = h
            .holds
            .iter()
            .enumerate()
            .filter(|(i, x)| {
                *i != hb && x.name == acq.name && x.kind == kind && x.granted < g && g < x.end()
            })
            .count() as u64;
        let permits = if kind == HoldKind::Permit {
            permits_at(h, g)
        } else {
            1
        };
        if kind == HoldKind::Permit && out.on(Property::Permits) {
            out.judge(Property::Permits, 1);
        }
        if kind == HoldKind::Permit && out.on(Property::Permits) && holders + 1 > permits {
            out.push(
                Property::Permits,
                g,
                format!(
                    "hold {hb} granted at {g} with {holders} other holders and {permits} permits"
                ),
            );
        }
        if out.on(Property::Fifo) && acq.wait.is_some() {
            out.judge(Property::Fifo, 1);
            let ahead = live_ahead(h, b, g);
            if holders + ahead.len() as u64 + 1 > permits {
                out.push(
                    Property::Fifo,
                    g,
                    format!(
                        "acquisition {b} granted at {g} ({holders} holders, {permits} permits) ahead of live waiters {ahead:?} that joined earlier"
                    ),
                );
            }
        }
    }
}

/// [`Property::ScheduleOnce`]: the first deliveries of each occurrence's job (judged: one
/// per occurrence delivered).
fn schedules(h: &History, out: &mut Out<'_>) {
    if !out.on(Property::ScheduleOnce) {
        return;
    }
    let mut first: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, x) in h.holds.iter().enumerate() {
        if let Some(id) = &x.job
            && id.starts_with(redlease_core::queue::schedule::OCCURRENCE_PREFIX)
            && x.fence == 1
        {
            first.entry(id).or_default().push(i);
        }
    }
    out.judge(Property::ScheduleOnce, first.len() as u64);
    for (id, list) in &first {
        if list.len() > 1 {
            out.push(
                Property::ScheduleOnce,
                h.holds[list[1]].granted,
                format!("occurrence {id} made a job again (first deliveries: holds {list:?})"),
            );
        }
    }
}

fn jobs(h: &History, out: &mut Out<'_>) {
    let known = self_followed(h);
    let mut acks: HashMap<&str, Vec<usize>> = HashMap::new();
    for s in h.settled.iter().filter(|s| s.ack) {
        if let Some(id) = &h.holds[s.hold].job
            && !known.contains(id.as_str())
        {
            acks.entry(id).or_default().push(s.hold);
        }
    }
    if out.on(Property::SingleAck) {
        out.judge(
            Property::SingleAck,
            acks.values().map(|v| v.len() as u64).sum(),
        );
        let mut ids: Vec<_> = acks.iter().filter(|(_, v)| v.len() > 1).collect();
        ids.sort();
        for (id, holds) in ids {
            out.push(
                Property::SingleAck,
                h.holds[holds[1]].received,
                format!("job {id} acked successfully by deliveries {holds:?}"),
            );
        }
    }
    let mut deliveries: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, x) in h.holds.iter().enumerate() {
        if let Some(id) = &x.job
            && !known.contains(id.as_str())
        {
            deliveries.entry(id).or_default().push(i);
        }
    }
    if out.on(Property::DeliveryUnique) {
        out.judge(
            Property::DeliveryUnique,
            deliveries.values().map(|v| v.len() as u64).sum(),
        );
        for (id, list) in &deliveries {
            let mut seen = HashSet::new();
            for &i in list {
                if !seen.insert(h.holds[i].fence) {
                    out.push(
                        Property::DeliveryUnique,
                        h.holds[i].granted,
                        format!(
                            "job {id} delivered twice as number {} (hold {i})",
                            h.holds[i].fence
                        ),
                    );
                }
            }
        }
    }
    if out.on(Property::NotBeforeDue) {
        // Judged on the server's record: every lease of the job (to anyone, a token nobody
        // holds included), against the exact push (or nack) instant plus the delay asked,
        // to the µs: never rounded down.
        let mut leased: HashMap<&str, Vec<u64>> = HashMap::new();
        // (A hold restored by a restart or failover is an old lease, not a new delivery.)
        for sp in h.spans.iter().filter(|sp| sp.opened_by.is_some()) {
            leased
                .entry(sp.resource.as_str())
                .or_default()
                .push(sp.from);
        }
        // A dead job requeued is ready at once (as if pushed anew without a delay): a
        // lease after a requeue of the job is not judged against its push or nack.
        let requeued = |id: &str, from: u64, at: u64| {
            h.requeued
                .iter()
                .any(|(j, t)| j == id && from < *t && *t <= at)
        };
        for p in h.pushed.iter().filter(|p| p.delay > 0) {
            let due = p.ran + p.delay;
            for &at in leased.get(p.id.as_str()).into_iter().flatten() {
                if requeued(&p.id, p.ran, at) {
                    continue;
                }
                out.judge(Property::NotBeforeDue, 1);
                if at < due {
                    out.push(
                        Property::NotBeforeDue,
                        at,
                        format!(
                            "job {} (pushed at {} with delay {} µs) leased at {at}, before it was due at {due}",
                            p.id, p.ran, p.delay
                        ),
                    );
                }
            }
        }
        for n in h.nacked.iter().filter(|n| n.delay > 0) {
            let due = n.ran + n.delay;
            let next = leased
                .get(n.id.as_str())
                .into_iter()
                .flatten()
                .copied()
                .filter(|&at| at > n.ran)
                .min();
            // A node restored from an older copy between the nack and the lease may have
            // brought the job back as it was before the nack (ready, or leased with a lease
            // that ran out since): the nack did not happen there.
            let undone = |at: u64| h.restored.iter().any(|&r| n.ran < r && r <= at);
            if let Some(at) = next.filter(|&at| !undone(at) && !requeued(&n.id, n.ran, at)) {
                out.judge(Property::NotBeforeDue, 1);
                if at < due {
                    out.push(
                        Property::NotBeforeDue,
                        at,
                        format!(
                            "job {} (nacked at {} with backoff {} µs) leased again at {at}, before it was due at {due}",
                            n.id, n.ran, n.delay
                        ),
                    );
                }
            }
        }
    }
    if out.on(Property::DedupOneLive) {
        // The first ack that removed each job.
        let mut acked: HashMap<&str, u64> = HashMap::new();
        for (job, at) in &h.acks_ran_at {
            acked.entry(job.as_str()).or_insert(*at);
        }
        let mut last: HashMap<&str, (&str, u64)> = HashMap::new();
        for (dedup_id, job, ran) in &h.dedup_queued {
            out.judge(Property::DedupOneLive, 1);
            if let Some(&(before, queued)) = last.get(dedup_id.as_str()) {
                let gone = acked.get(before).copied();
                if gone.is_none_or(|at| at > *ran) {
                    out.push(
                        Property::DedupOneLive,
                        *ran,
                        format!(
                            "dedup id {dedup_id}: job {job} queued at {ran} while job {before} (queued at {queued}) was live (acked at {gone:?})"
                        ),
                    );
                }
            }
            last.insert(dedup_id.as_str(), (job.as_str(), *ran));
        }
    }
    if out.on(Property::JobSettled) {
        let ran: HashSet<&str> = h
            .acks_ran
            .iter()
            .filter_map(|i| h.holds[*i].job.as_deref())
            .collect();
        out.judge(Property::JobSettled, h.pushed.len() as u64);
        // A job cancelled and forgotten is settled too.
        let removed: HashSet<&str> = h
            .cancels_ran
            .iter()
            .filter(|c| c.2)
            .map(|c| c.0.as_str())
            .collect();
        // So is a keep-latest follow-up dropped by a later push (answered `Replaced` with
        // the job it followed, which carries the latest payload).
        let superseded: HashSet<&str> = h.superseded.iter().map(|(f, _)| f.as_str()).collect();
        for p in h.pushed.iter().filter(|p| !known.contains(p.id.as_str())) {
            let acked = acks.contains_key(p.id.as_str())
                || ran.contains(p.id.as_str())
                || removed.contains(p.id.as_str())
                || superseded.contains(p.id.as_str());
            if !acked && !h.dead.contains(&p.id) {
                out.push(
                    Property::JobSettled,
                    h.end,
                    format!(
                        "job {} (pushed at {}) was neither acked nor dead at the end",
                        p.id, p.ran
                    ),
                );
            }
        }
    }
}

fn liveness(h: &History, out: &mut Out<'_>) {
    if out.on(Property::WaiterDeadline) {
        for (i, a) in h.acqs.iter().enumerate() {
            let Some(wait) = a.wait else { continue };
            out.judge(Property::WaiterDeadline, 1);
            // Attempts may end a reply timeout after the deadline; a NOSCRIPT resend, the
            // replica wait and the cleanup of a failed wait add at most three more.
            let bound = wait + 4 * a.reply_timeout + 20_000 + 1_000;
            match a.ended {
                Some((_, local)) if local - a.started_local > bound => out.push(
                    Property::WaiterDeadline,
                    a.started,
                    format!(
                        "acquisition {i} waited {} µs, over its wait {wait} plus the bound",
                        local - a.started_local
                    ),
                ),
                None if h.end > a.started + 2 * bound => out.push(
                    Property::WaiterDeadline,
                    a.started,
                    format!("acquisition {i} (wait {wait} µs) never ended"),
                ),
                _ => {}
            }
        }
    }
    for (i, x) in h.holds.iter().enumerate() {
        if out.on(Property::NoRenewalAfterRelease) && x.watched && x.release_sent.is_some() {
            out.judge(Property::NoRenewalAfterRelease, 1);
        }
        if out.on(Property::NoRenewalAfterRelease)
            && let Some(r) = x.release_sent
            && let Some(&late) = x.renewals_sent.iter().find(|&&t| t > r)
        {
            out.push(
                Property::NoRenewalAfterRelease,
                late,
                format!("hold {i} renewed at {late} after its release at {r}"),
            );
        }
        if out.on(Property::LossInTime)
            && x.watched
            && x.valid_until < h.end
            && x.release_sent.is_none_or(|r| r > x.valid_until)
        {
            out.judge(Property::LossInTime, 1);
            match &x.lost {
                Some((t, _)) if *t <= x.valid_until => {}
                other => out.push(
                    Property::LossInTime,
                    x.valid_until,
                    format!(
                        "hold {i} valid until {} was not told of its loss in time ({other:?})",
                        x.valid_until
                    ),
                ),
            }
        }
    }
    if out.on(Property::WakeWhenFree) {
        for (name, at) in &h.freed {
            out.judge(Property::WakeWhenFree, 1);
            // Taken again by any grant, including one whose holder never learnt of it (its
            // reply was lost or came too late): the lock was not free then.
            let next = h
                .acqs
                .iter()
                .filter(|a| &a.name == name && a.kind.exclusive())
                .flat_map(|a| a.grants.iter().map(|g| g.0))
                .filter(|t| t > at)
                .min()
                .unwrap_or(h.end);
            if next <= at + WAKE_BOUND {
                continue;
            }
            for (i, a) in h.acqs.iter().enumerate() {
                if &a.name != name
                    || a.wait.is_none()
                    || !matches!(a.kind, HoldKind::Lease | HoldKind::Reentrant)
                {
                    continue;
                }
                let ended = a.ended.map_or(h.end, |e| e.0);
                if a.started < *at && ended > at + WAKE_BOUND {
                    out.push(
                        Property::WakeWhenFree,
                        *at,
                        format!(
                            "acquisition {i} slept while the lock was free from {at} to {next}"
                        ),
                    );
                }
            }
        }
    }
}

/// Whether the server's `held` is `token`: the same, or (RedLock) one of its attempts,
/// `<token>.<attempt>`.
fn same_token(token: &str, held: &str) -> bool {
    held.strip_prefix(token)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The properties judged on the server's own record ([`crate::record`]).
fn server_record(h: &History, out: &mut Out<'_>) {
    let mut by: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    for (i, sp) in h.spans.iter().enumerate() {
        by.entry((sp.resource.as_str(), sp.token.as_str()))
            .or_default()
            .push(i);
    }
    let resource = |x: &crate::history::Hold| x.job.clone().unwrap_or_else(|| x.name.clone());
    if out.on(Property::HeldOnServer) && h.recorded {
        for (i, x) in h.holds.iter().enumerate() {
            let r = resource(x);
            let spans = by
                .get(&(r.as_str(), x.token.as_str()))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            // A cancel ends a job's lease by design: its holder learns of it by a message or
            // its next renewal, and is not judged past the cancel.
            let cancelled = spans
                .iter()
                .map(|&k| &h.spans[k])
                .filter(|sp| sp.closed_by.is_some_and(|r| h.cancel_runners.contains(&r)))
                .map(|sp| sp.until)
                .min();
            let (from, to) = (x.received, x.end().min(cancelled.unwrap_or(u64::MAX)));
            if to <= from {
                continue;
            }
            out.judge(Property::HeldOnServer, 1);
            let covering = |node: Option<u16>| {
                spans.iter().any(|&k| {
                    let sp = &h.spans[k];
                    node.is_none_or(|n| sp.node == n) && sp.from <= from && to <= sp.until
                })
            };
            let held = if x.kind == HoldKind::Red {
                let quorum = h.nodes / 2 + 1;
                (0..h.nodes).filter(|n| covering(Some(*n))).count() >= usize::from(quorum)
            } else {
                covering(None)
            };
            if !held {
                let seen: Vec<String> = spans
                    .iter()
                    .map(|&k| {
                        let sp = &h.spans[k];
                        format!("n{} {}..{}", sp.node, sp.from, sp.until)
                    })
                    .collect();
                out.push(
                    Property::HeldOnServer,
                    from,
                    format!(
                        "hold {i} ({:?} c{} t{} of {r}) believed held {from}..{to}, but the server held its token only {seen:?}",
                        x.kind, x.client, x.task
                    ),
                );
            }
        }
    }
    if out.on(Property::SettledByHolder) {
        // No command ends another token's live hold.
        for sp in &h.spans {
            let Some(r) = sp.closed_by else { continue };
            // A cancel ends whichever lease its job has.
            if h.cancel_runners.contains(&r) {
                continue;
            }
            out.judge(Property::SettledByHolder, 1);
            let info = h.runners.get(r);
            let token = info.and_then(|i| i.token.as_deref());
            let next = info.and_then(|i| i.next_token.as_deref());
            if ![token, next]
                .into_iter()
                .flatten()
                .any(|t| same_token(t, &sp.token))
            {
                out.push(
                    Property::SettledByHolder,
                    sp.until,
                    format!(
                        "runner {r} (token {token:?}) ended the hold of {} by {} on n{} at {} (held since {})",
                        sp.resource, sp.token, sp.node, sp.until, sp.from
                    ),
                );
            }
        }
        // A release, ack or nack the caller was told succeeded ended its own hold.
        for &(r, hold) in &h.settle_ok {
            let x = &h.holds[hold];
            if x.kind == HoldKind::Red {
                continue;
            }
            out.judge(Property::SettledByHolder, 1);
            let res = resource(x);
            let spans = by
                .get(&(res.as_str(), x.token.as_str()))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            // An ack or nack ended the job's lease itself (or its own earlier copy did: the
            // settled record answers the retry). A release may also be told it succeeded
            // when its lost attempt was sent while the lease was valid and the retry finds
            // the key gone or re-taken (documented: only that token could have ended it,
            // and the holder stopped acting on it when it sent the release): then the
            // server must have held the lease when the release was sent.
            let ended = spans.iter().any(|&k| h.spans[k].closed_by == Some(r))
                || (x.kind != HoldKind::Job
                    && x.release_sent.is_some_and(|sent| {
                        spans.iter().any(|&k| {
                            let sp = &h.spans[k];
                            sp.from <= sent && sent < sp.until
                        })
                    }));
            if !ended {
                out.push(
                    Property::SettledByHolder,
                    h.runners.get(r).and_then(|i| i.done).unwrap_or(h.end),
                    format!(
                        "runner {r} was told its release, ack or nack of hold {hold} ({:?} {res} by {}) succeeded, but no command of it ended that hold on the server",
                        x.kind, x.token
                    ),
                );
            }
        }
    }
    if out.on(Property::RenewalOnServer) && h.recorded {
        for &(hold, ran) in &h.renewed {
            let x = &h.holds[hold];
            out.judge(Property::RenewalOnServer, 1);
            let r = resource(x);
            // A reentrant lock is renewed by owner (all its holds at once): the renewal is
            // right while any hold of the same owner (task) is on the server, such as one
            // restored by a failover (documented re-entry of a restored hold).
            let tokens: Vec<&str> = if x.kind == HoldKind::Reentrant {
                h.runners
                    .iter()
                    .filter(|i| {
                        i.acq.is_some_and(|a| {
                            h.acqs[a].task == x.task && h.acqs[a].kind == HoldKind::Reentrant
                        })
                    })
                    .filter_map(|i| i.token.as_deref())
                    .collect()
            } else {
                vec![x.token.as_str()]
            };
            let held = tokens.iter().any(|t| {
                by.get(&(r.as_str(), *t)).is_some_and(|v| {
                    v.iter().any(|&k| {
                        let sp = &h.spans[k];
                        // A command that ended the hold at the renewal's instant may have
                        // run after it (a server pause runs its held requests at one
                        // instant: a renewal, then a cancel).
                        sp.from <= ran
                            && (ran < sp.until || (ran == sp.until && sp.closed_by.is_some()))
                    })
                })
            });
            if !held {
                out.push(
                    Property::RenewalOnServer,
                    ran,
                    format!(
                        "hold {hold} ({:?} c{} t{} of {r}) counted a renewal that ran at {ran} as a success, but the server did not hold its token then",
                        x.kind, x.client, x.task
                    ),
                );
            }
        }
    }
    if out.on(Property::LateAttempt) {
        for &(r, at, set) in &h.late_attempts {
            let Some(info) = h.runners.get(r) else {
                continue;
            };
            let Some(acq) = info.acq else { continue };
            // Only an acquisition that was answered, and only once the call that settled
            // its grant (release, ack, nack) ran: that call records the token as undone.
            // Before it, a late attempt that finds its own grant live takes nothing new, and
            // one that arrives after the grant ran out is the documented gap (a lease that
            // just runs out records nothing; docs/guarantees.md). An unfenced lock's bare
            // `SET NX PX` reads no undone record (documented).
            let AcqResult::Acquired(hold) = h.acqs[acq].result else {
                continue;
            };
            let settled = h
                .runners
                .iter()
                .any(|i| i.settles == Some(hold) && i.first_ran.is_some_and(|first| first < at));
            if set || !settled {
                continue;
            }
            out.judge(Property::LateAttempt, 1);
            for sp in h
                .spans
                .iter()
                .filter(|sp| sp.opened_by == Some(r) && sp.from == at)
            {
                out.push(
                    Property::LateAttempt,
                    at,
                    format!(
                        "an attempt of acquisition {acq} (answered at {:?}) ran at {at} and took {} for token {} (held until {})",
                        info.done, sp.resource, sp.token, sp.until
                    ),
                );
            }
        }
    }
}

impl Property {
    /// What the property says, for docs/simulation.md.
    pub fn statement(self) -> &'static str {
        match self {
            Property::Exclusion => {
                "No two holders of an exclusive lock (lease, reentrant, fair, write, RedLock), nor a writer and a reader, hold at once, each lease counted from its grant to the end of its validity by the holder's own clock (or its release)"
            }
            Property::FenceOrder => {
                "Fences of exclusive locks strictly increase in the order the server granted them, across restarts, failovers and evictions"
            }
            Property::FencedResource => {
                "A resource that accepts a write only with a fence at least the highest it has seen never accepts a write of a holder granted before the holder of an earlier accepted write"
            }
            Property::Permits => {
                "A permit is never granted while the permits in force (including a `set_permits` change) are all held"
            }
            Property::Fifo => {
                "Fair lock and semaphore: a grant never overtakes a live waiter (one that asked again within its waiter timeout) that joined the line earlier, unless there was a permit for both"
            }
            Property::JobSettled => {
                "Every pushed job (every push that ran, whatever its reply) is acked or on the dead list once the workers are done"
            }
            Property::SingleAck => "Never two successful acks of one job",
            Property::DeliveryUnique => "A job's delivery numbers never repeat",
            Property::NotBeforeDue => {
                "A delayed or nacked job is never leased (to anyone) before its push or nack ran plus its delay, to the µs (a nack that a restart from a snapshot or a failover undid, restoring the job as it was before, excepted)"
            }
            Property::WaiterDeadline => {
                "A waiting acquisition ends by its wait plus 4 reply timeouts and the replica wait (late attempt, NOSCRIPT resend, `WAIT`, cleanup)"
            }
            Property::NoRenewalAfterRelease => {
                "The watchdog never sends a renewal after the lease's release"
            }
            Property::LossInTime => {
                "A watched holder is told of its loss no later than its local validity"
            }
            Property::WakeWhenFree => {
                "A waiter of a lease or reentrant lock is not left asleep while the lock is free for longer than 150 ms (release message, re-subscription or reconnection, one attempt)"
            }
            Property::Progress => {
                "The run settles: no machine and driver spin at one instant, and no machine reports a broken protocol contract"
            }
            Property::HeldOnServer => {
                "Every interval in which a client believes it holds a lock, permit or job (granted, not released, not told of a loss, within its validity by its own clock) lies inside a hold of its token in the server's own record (RedLock: on a majority of nodes)"
            }
            Property::SettledByHolder => {
                "A release, ack or nack that succeeds ended its own token's hold on the server (a release told it succeeded after a lost reply: its token held the lock when it was sent), and no command ends another token's live hold"
            }
            Property::RenewalOnServer => {
                "A renewal the watchdog counts as a success ran while the server held the lease for its token (a reentrant lock: for its owner); it is judged under data loss too: the first renewal after a key is lost must report the loss"
            }
            Property::GroupConcurrency => {
                "A queue's group never has more jobs leased at once than its concurrency limit, by the server's own record of leases (a lease counts from its take until its ack, nack, give-back or expiry)"
            }
            Property::ScheduleOnce => {
                "At most one job per schedule occurrence: the job `sched:<name>:<due>` of an occurrence is delivered as its first delivery once, whoever upserts the schedule, however often an occurrence is redelivered (each redelivery advances the schedule at most once)"
            }
            Property::DedupOneLive => {
                "No two live jobs for one dedup id in a mode that forbids it: a push with a dedup id until done queues a job only after every job it queued before for that id was acked (a dead job holds the id)"
            }
            Property::GroupRate => {
                "A queue's group with a rate limit (and the whole queue, with its own) never had more jobs leased in any window than the rate allows: `burst + floor(window / interval)` takes from the first to the last, by the takes as they ran on the server, to the µs of its clock"
            }
            Property::RateLimitedKeepsDelivery => {
                "A job whose handler answered \"rate limited\" goes back without counting the delivery: when the group defer ran on the server and took the job back, the job's deliveries counted toward its max deliveries there (deliveries less base) are one fewer than just before it, the deferred one no longer counted"
            }
            Property::NoAckAfterTimeout => {
                "A job pushed with a timeout: no ack, nack or give-back of a watched delivery of it ends its lease on the server later than the take's run plus timeout + grace (and the server's 4 ms of rounding and slack), whenever the requests that renew it arrive: the server keeps the delivery's hold limit and leases it no further"
            }
            Property::Counted => {
                "The queue's per-minute counters agree with the server's record: `pushed` holds the jobs the push scripts that ran answered as pushed (a duplicate not) and the schedule occurrences the schedule scripts that ran added, `deferred` the rate-limited answers (group defers) that ran and took their job back, `taken` the leases the server recorded as made by a take less the takes given back after an unanswered call, `acked` the deliveries whose ack ran and removed the job (a retried ack not again; an ack and take in one script count one counter for both events)"
            }
            Property::Conservation => {
                "Every job pushed (every push that ran) is, by the server's own keys when the run ended (not the clients' beliefs), acked (an ack ran and removed it), dead, cancelled (forgotten), or still waiting (ready, delayed, in its group) or leased (in flight with its lease), in one place: none is present nowhere, none in two places, no payload is kept for a job found nowhere"
            }
            Property::GroupLimits => {
                "Mixed runs, whose group limits change at run time (every group's defaults, a group's own set or cleared): at each start of a grouped job's lease in the server's record, whichever path leased it, its group's open leases (itself included) are at most the concurrency in force then (the changes as they ran on the server)"
            }
            Property::SlotUsable => {
                "A freed group slot is usable at once: a group take that ran and found nothing to lease (the queue not paused) left no group with a ready job, not rate-blocked nor paused, whose open leases in the server's record (give or take 1 ms of expiry) were fewer than its concurrency in force"
            }
            Property::ScheduleLiveness => {
                "Every schedule not removed has exactly one pending, runnable occurrence at every instant, judged after every command a server ran (the only points at which its keys change): the occurrence its hash names as pending is delayed, ready or in flight, and no other occurrence of it that was never delivered waits (between the start of a cancel of the pending occurrence and the end of the advance past it, two calls, it is not runnable); a schedule upserted on a queue's grouped keys is refused with `InvalidArgument`"
            }
            Property::FollowUpRuns => {
                "A keep-latest follow-up answered `Queued` while the job holding its dedup id was in flight (parked behind it) runs, or is dropped with the documented answer: when the run ended (by the server's keys) it was acked, cancelled, is waiting, leased or dead, or is still parked behind a job that still lives (in flight or waiting again), or a later push of its dedup id found that job waiting again and answered `Replaced` with it (the job carries the latest payload; the follow-up is dropped); never parked behind a job that ended, nor lost"
            }
            Property::DrainTruth => {
                "A drain's count that answered 0 (nothing in flight) ran when the server's record held no live lease of the queue, plain or grouped"
            }
            Property::NothingLeasedWhilePaused => {
                "No job is leased (in the server's own record) after a pause of the queue ran and before the next resume ran: not by a take sent before the pause, a woken waiter, an ack-and-take, nor a reclaim of an expired lease"
            }
            Property::LateAttempt => {
                "An attempt of an answered acquisition (a request held past its retry) that runs after the grant was released, acked or nacked takes nothing: not a lock, permit or job (an unfenced lock's bare `SET NX PX` excepted, and an attempt arriving after the grant ran out but before it was settled: both documented)"
            }
        }
    }
}

/// The property table of docs/simulation.md (between its `table:start` and `table:end`
/// markers), rendered from the checker's own excuses so that the two cannot drift apart.
pub fn table_markdown() -> String {
    let mut s = String::from(
        "| property | holds | holds under | not checked under (documented not to hold) |\n|---|---|---|---|\n",
    );
    for p in Property::ALL {
        let excused = p.excused_by();
        let holds: Vec<_> = Fault::ALL
            .into_iter()
            .filter(|f| !excused.has(*f))
            .map(Fault::name)
            .collect();
        let not: Vec<_> = excused.iter().map(Fault::name).collect();
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            p.name(),
            p.statement(),
            if not.is_empty() {
                "every fault".to_owned()
            } else {
                holds.join(", ")
            },
            if not.is_empty() {
                "—".to_owned()
            } else {
                not.join(", ")
            },
        ));
    }
    s
}
