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
}

/// How long a free lease or reentrant lock may keep a waiter asleep (µs): the release
/// message's trip, a re-subscription or reconnection, and one attempt.
pub const WAKE_BOUND: u64 = 150_000;

impl Property {
    /// Every property.
    pub const ALL: [Property; 14] = [
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
    ];

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
            Property::JobSettled => FaultSet::of(&data_loss),
            Property::SingleAck | Property::DeliveryUnique => {
                FaultSet::of(&[RestartSnapshot, Failover, FailoverMinReplicas, KeyEvicted])
            }
            // A clock that jumps forward during a call counts the jump as time waited.
            Property::WaiterDeadline => FaultSet::of(&[ClientPaused, ClockJump]),
            Property::LossInTime => FaultSet::of(&[ClientPaused]),
            Property::NoRenewalAfterRelease | Property::Progress => FaultSet::NONE,
            Property::WakeWhenFree => FaultSet::of(&[
                RequestLost,
                ReplyLost,
                ReplyDelayed,
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

struct Out<'a> {
    faults: FaultSet,
    found: &'a mut Vec<Violation>,
}

impl Out<'_> {
    fn on(&self, p: Property) -> bool {
        !p.excused_by().intersects(self.faults)
    }
    fn push(&mut self, property: Property, at: u64, what: String) {
        self.found.push(Violation { property, at, what });
    }
}

/// Checks every property not excused by `faults`.
pub fn check(h: &History, faults: FaultSet) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut out = Out {
        faults,
        found: &mut found,
    };
    exclusion(h, &mut out);
    fences(h, &mut out);
    semaphores(h, &mut out);
    jobs(h, &mut out);
    liveness(h, &mut out);
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
    found
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

fn jobs(h: &History, out: &mut Out<'_>) {
    let mut acks: HashMap<&str, Vec<usize>> = HashMap::new();
    for s in h.settled.iter().filter(|s| s.ack) {
        if let Some(id) = &h.holds[s.hold].job {
            acks.entry(id).or_default().push(s.hold);
        }
    }
    if out.on(Property::SingleAck) {
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
        if let Some(id) = &x.job {
            deliveries.entry(id).or_default().push(i);
        }
    }
    if out.on(Property::DeliveryUnique) {
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
        for p in &h.pushed {
            // The server counts due times in whole milliseconds of its clock.
            let due = p.ran / 1_000 * 1_000 + p.delay;
            for &i in deliveries.get(p.id.as_str()).into_iter().flatten() {
                if h.holds[i].granted / 1_000 * 1_000 < due {
                    out.push(
                        Property::NotBeforeDue,
                        h.holds[i].granted,
                        format!(
                            "job {} delivered at {} before it was due at {due}",
                            p.id, h.holds[i].granted
                        ),
                    );
                }
            }
        }
    }
    if out.on(Property::JobSettled) {
        let ran: HashSet<&str> = h
            .acks_ran
            .iter()
            .filter_map(|i| h.holds[*i].job.as_deref())
            .collect();
        for p in &h.pushed {
            let acked = acks.contains_key(p.id.as_str()) || ran.contains(p.id.as_str());
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
                "A delayed job is never delivered before it is due (server clock, ms)"
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
