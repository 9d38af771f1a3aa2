//! The watchdog's schedule: which leases to renew when, and when a lease that could not be
//! renewed must be given up as lost. Pure bookkeeping on caller-supplied time; the driver's
//! watchdog thread runs the extension machines it hands out and reports their outcomes.
//!
//! ```text
//!  insert ──► Scheduled(at = acquired + every) ──due──► extension handed out ──► renewed(Ok) ──► Scheduled
//!                 ▲                                       │
//!                 └──── transient failure: retry soon ◄───┤ (Redis unreachable, error reply)
//!                                                         ├─ NotOwner / WRONGTYPE ──────► Lost
//!              no successful renewal before valid_until ──┴──────────────────────────► Lost(RenewalFailed)
//!  max hold reached: the last extension ends the lease at the hold limit; at valid_until ──► Lost(MaxHoldReached)
//! ```
//!
//! Two timing rules hold whatever the driver was doing when a lease was inserted or renewed:
//! - every renewal is scheduled from the lease's acquisition or its last renewal's send time
//!   (never from when the driver got round to inserting it);
//! - an extension in flight answers by its lease's validity at the latest (its deadline is
//!   capped there), and [`Renewals::due`] reports the lease lost at its validity even while
//!   the extension is still in flight: the loss is never later than the validity.
//!
//! A walk through the graph with scripted replies: a 30 s lease is renewed after 10 s; at the
//! next renewal the key is gone (it expired, or was evicted), so the lease is lost.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{LossReason, Protocol, Reply, Response, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LockSpec, Token};
//! use redlease_core::renewal::{Due, RenewalEvent, RenewalPolicy, Renewals};
//!
//! // Answers the one request the machine sends as Redis would, and polls again.
//! fn answer<P: Protocol>(m: &mut P, now: Instant, reply: Reply) -> Step<P::Output> {
//!     let Step::Send(batch) = m.poll(now) else { panic!("expected a send") };
//!     m.handle(Response::reply(batch.requests[0].id, reply), now);
//!     m.poll(now)
//! }
//! let ttl = Duration::from_secs(30);
//! let spec = LockSpec::lease(&Keyspace::default(), "etl", Token::from_random([2; 16]), ttl).unwrap();
//! let t0 = Instant::now();
//! let mut acquire = Acquire::new(spec, &AcquireOptions::default(), 1, t0).unwrap();
//! let pair = Reply::Array(vec![Reply::Int(1), Reply::Int(12)]);
//! let Step::Done(Ok(Acquisition::Acquired(lease))) = answer(&mut acquire, t0, pair)
//! else { unreachable!() };
//!
//! let mut renewals = Renewals::new();
//! renewals.insert(7, *lease, RenewalPolicy::for_ttl(ttl), t0);
//! let at = renewals.next_wakeup().unwrap();
//! assert_eq!(at, t0 + ttl / 3);
//!
//! // Due: one extension handed out; the key is still ours (1).
//! let Due { mut renew, .. } = renewals.due(at, at + Duration::from_secs(1), 16);
//! let (id, mut extend) = renew.pop().unwrap();
//! let Step::Done(outcome) = answer(&mut extend, at, Reply::Int(1)) else { unreachable!() };
//! assert!(matches!(renewals.renewed(id, outcome, at), RenewalEvent::Renewed { .. }));
//!
//! // Next time the key is gone (0): lost, and forgotten.
//! let at = renewals.next_wakeup().unwrap();
//! let Due { mut renew, .. } = renewals.due(at, at + Duration::from_secs(1), 16);
//! let (id, mut extend) = renew.pop().unwrap();
//! let Step::Done(outcome) = answer(&mut extend, at, Reply::Int(0)) else { unreachable!() };
//! assert_eq!(renewals.renewed(id, outcome, at), RenewalEvent::Lost(LossReason::Expired));
//! assert!(renewals.is_empty());
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::saturating_add;
use crate::error::{Error, InvalidArgument, LossReason};
use crate::lease::native::NativeExtend;
use crate::lease::{Extend, Lease, ScriptOp};
use crate::limits;
use crate::protocol::{Protocol, Step};
use crate::reply::Response;

/// Identifies one watched lease.
pub type WatchId = u64;

/// What the schedule keeps of a watched lease: the [`Lease`] itself (the default), or a
/// driver's own record that holds it, so that the driver keeps one allocation per lease
/// (the schedule and the driver share it through an `Arc`).
pub trait WatchedLease {
    /// The lease.
    fn lease(&self) -> &Lease;

    /// The ttl each renewal extends the lease to: the lease's own unless the driver changed
    /// it since (an extension to another ttl).
    fn ttl(&self) -> Duration {
        self.lease().ttl
    }

    /// Until when the lease is safely ours as the schedule starts watching it: the lease's
    /// own validity unless the driver extended it since.
    fn valid_until(&self) -> Instant {
        self.lease().valid_until
    }
}

impl WatchedLease for Lease {
    fn lease(&self) -> &Lease {
        self
    }
}

/// How one lease is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewalPolicy {
    /// Renew this often (default: a third of the ttl).
    pub every: Duration,
    /// Stop renewing so that the lease ends this long after it was acquired (`None`: renew
    /// for as long as it is watched).
    pub max_hold: Option<Duration>,
}

impl RenewalPolicy {
    /// Renew every third of `ttl`, without a hold limit.
    pub fn for_ttl(ttl: Duration) -> Self {
        RenewalPolicy {
            every: ttl / 3,
            max_hold: None,
        }
    }

    /// Checks the policy against the lease's ttl: the ttl itself (see
    /// [`crate::limits`]), then that renewals come before the lease's validity ends (the ttl
    /// less its drift allowance, see [`crate::lease::drift`]) and that a hold limit is at
    /// least 1 ms. Each error names the setting and its accepted range.
    pub fn validate(&self, ttl: Duration) -> Result<(), Error> {
        // The ttl first: a ttl too short to renew is reported as a bad ttl, not as a bad
        // renewal interval derived from it.
        crate::lease::validate_ttl("ttl", ttl)?;
        let validity = ttl.saturating_sub(crate::lease::drift(ttl));
        if self.every < Duration::from_millis(1) || self.every >= validity {
            return Err(InvalidArgument::Setting(format!(
                "the renewal interval must be at least 1ms and shorter than the lease's validity ({validity:?}: the ttl {ttl:?} less its drift allowance), got {:?}",
                self.every
            ))
            .into());
        }
        if let Some(hold) = self.max_hold {
            limits::duration(
                "maximum hold time",
                hold,
                Duration::from_millis(1),
                limits::MAX_DURATION,
            )?;
        }
        Ok(())
    }
}

/// What the schedule concluded about a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalEvent {
    /// Renewed: the lease is safely ours until this instant.
    Renewed {
        /// The new validity.
        valid_until: Instant,
    },
    /// The lease is lost; the schedule has forgotten it.
    Lost(LossReason),
    /// Nothing decided yet (a transient failure; it will be retried).
    Pending,
}

/// One watched lease. Its times are kept as nanoseconds after the lease's acquisition
/// (`lease.acquired_at`), 8 bytes each where an `Instant` takes 16 (and an
/// `Option<Instant>` 16), and the final-stretch flag is the interval's top bit: the entry
/// takes 48 bytes, and the map's slot per lease 56. An offset beyond `u64::MAX - 1` ns (584
/// years, far beyond any valid ttl or hold limit) is cut to that, an interval beyond 2^63 - 1
/// ns (292 years) to that.
#[derive(Debug)]
struct Entry<T> {
    /// Shared with its holder (a driver's guard): the schedule never changes it, it keeps
    /// the validity it confirmed in `valid_ns`.
    lease: Arc<T>,
    /// Until when the lease is safely ours: `lease.valid_until`, then each renewal's.
    valid_ns: u64,
    /// The renewal interval, with [`FINAL_STRETCH`] set once the hold limit was reached (no
    /// more renewals, only the final expiry check).
    every_ns: u64,
    /// The hold limit ([`NONE`] without one).
    hold_ns: u64,
    /// When the extension in flight was sent ([`NONE`] when none is).
    sent_ns: u64,
    /// Its live heap item's key: when it is due, in nanoseconds after the schedule's epoch
    /// rounded down to [`GENERATIONS`] (see [`slot`]), plus the lease's generation, which each new item
    /// advances (time [`UNSCHEDULED`] while it has none). An item of the heap for this
    /// lease with another key is stale, also one at the same time: a check at the validity
    /// made stale by a retry and queued again at the next hand-out is not live twice.
    at_ns: u64,
}

/// No time, in an [`Entry`]'s optional offsets.
const NONE: u64 = u64::MAX;

/// The low bits of a heap item's key, which hold the lease's generation: an item's time is
/// rounded down to a multiple of this many nanoseconds (see [`slot`]).
const GENERATIONS: u64 = 64;

/// The time part of [`Entry::at_ns`] while the lease has no live item (the generation is
/// kept below it). No item's time reaches it: times are cut at [`LATEST`].
const UNSCHEDULED: u64 = !(GENERATIONS - 1);

/// The latest time an item can have (584 years after the epoch).
const LATEST: u64 = UNSCHEDULED - GENERATIONS;

/// `t` as nanoseconds after `epoch` (0 before it or without one).
fn since(epoch: Option<Instant>, t: Instant) -> u64 {
    epoch.map_or(0, |epoch| nanos(t.saturating_duration_since(epoch)))
}

/// The time part of a heap item's key for a look at `ns` after the epoch: rounded *down*
/// to [`GENERATIONS`], so a look comes at most 63 ns early, never late. A lease is counted
/// lost once the slot of its validity is reached (see [`Renewals::due`]): a loss is never
/// reported after the validity (at most 63 ns before it, well inside the validity's own
/// margin), and a check at the validity taken early is never queued again at once.
fn slot(ns: u64) -> u64 {
    ns.min(LATEST) & UNSCHEDULED
}

/// The bit of [`Entry::every_ns`] that says the hold limit was reached.
const FINAL_STRETCH: u64 = 1 << 63;

/// How long before the first inserted lease's acquisition the schedule's epoch is.
const EPOCH_BEFORE: Duration = Duration::from_secs(3600);

impl<T: WatchedLease> Entry<T> {
    /// `t` as an offset after the lease's acquisition (0 for an earlier `t`).
    fn offset(&self, t: Instant) -> u64 {
        nanos(t.saturating_duration_since(self.lease.lease().acquired_at))
    }

    /// The instant `ns` after the lease's acquisition.
    fn at(&self, ns: u64) -> Instant {
        saturating_add(self.lease.lease().acquired_at, Duration::from_nanos(ns))
    }

    fn valid_until(&self) -> Instant {
        self.at(self.valid_ns)
    }

    /// The renewal interval.
    fn every(&self) -> Duration {
        Duration::from_nanos(self.every_ns & !FINAL_STRETCH)
    }

    /// The hold limit was reached: no more renewals, only the final expiry check.
    fn final_stretch(&self) -> bool {
        self.every_ns & FINAL_STRETCH != 0
    }

    fn set_final_stretch(&mut self, on: bool) {
        if on {
            self.every_ns |= FINAL_STRETCH;
        } else {
            self.every_ns &= !FINAL_STRETCH;
        }
    }

    /// The hold limit, if any.
    fn hold_until(&self) -> Option<Instant> {
        (self.hold_ns != NONE).then(|| self.at(self.hold_ns))
    }

    /// When the extension in flight was sent, if one is.
    fn in_flight(&self) -> Option<Instant> {
        (self.sent_ns != NONE).then(|| self.at(self.sent_ns))
    }
}

/// A duration in nanoseconds, below [`NONE`].
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).map_or(NONE - 1, |n| n.min(NONE - 1))
}

/// One lease's extension, as [`Renewals::due`] hands it out: the kind's extend script, or,
/// for a plain lock on a server that has it (see [`Renewals::set_native_extend`]), the
/// server's compare-and-set ([`NativeExtend`]), which falls back to the script.
///
/// The machine is built when the extension is first polled, on the thread that sends it:
/// until then an extension holds only its lease, ttl and deadline (56 bytes). A driver that
/// takes what is due faster than it sends it (100,000 leases acquired together come due
/// together) so queues small values, not whole machines with their own copy of the call.
/// Built, it takes one allocation of the machine's own size (a script extension's 272
/// bytes, not the 440 of the native one).
#[derive(Debug)]
pub struct Extension<T = Lease> {
    lease: Arc<T>,
    ttl: Duration,
    deadline: Instant,
    machine: Machine,
}

#[derive(Debug)]
enum Machine {
    /// Not built yet; natively if the server has the command.
    Unbuilt { native: bool },
    /// The extend script.
    Script(Box<ScriptOp<Extend>>),
    /// `SET key token IFEQ token PX ttl`, then the script if that did not extend.
    Native(Box<NativeExtend>),
    /// The machine could not be built (the ttl was checked before, so never in practice).
    Failed(Option<Box<Error>>),
}

impl<T: WatchedLease> Extension<T> {
    /// Extends `lease` to `ttl`, giving up at `deadline`: natively when `native` and the
    /// lease is a plain lock, else by its script. Checks the ttl now; builds the machine when
    /// first polled.
    fn new(lease: &Arc<T>, ttl: Duration, deadline: Instant, native: bool) -> Result<Self, Error> {
        crate::lease::validate_ttl("ttl", ttl)?;
        Ok(Extension {
            lease: Arc::clone(lease),
            ttl,
            deadline,
            machine: Machine::Unbuilt { native },
        })
    }

    fn build(&self, native: bool) -> Machine {
        let built = if native {
            NativeExtend::new(self.lease.lease(), self.ttl, self.deadline)
                .map(|m| m.map(|m| Machine::Native(Box::new(m))))
                .transpose()
        } else {
            None
        };
        built
            .unwrap_or_else(|| {
                let lease = &self.lease;
                ScriptOp::extend_current(lease.lease(), lease.ttl(), self.ttl, self.deadline)
                    .map(|m| Machine::Script(Box::new(m)))
            })
            .unwrap_or_else(|e| Machine::Failed(Some(Box::new(e))))
    }

    fn machine(&mut self) -> &mut Machine {
        if let Machine::Unbuilt { native } = self.machine {
            self.machine = self.build(native);
        }
        &mut self.machine
    }

    /// Whether the server refused the native command itself (see
    /// [`NativeExtend::refused_natively`]): the driver should stop asking for it.
    pub fn refused_natively(&self) -> bool {
        matches!(&self.machine, Machine::Native(m) if m.refused_natively())
    }
}

impl<T: WatchedLease> Protocol for Extension<T> {
    type Output = Instant;

    fn poll(&mut self, now: Instant) -> Step<Instant> {
        match self.machine() {
            Machine::Script(m) => m.poll(now),
            Machine::Native(m) => m.poll(now),
            // Built just before: never still unbuilt.
            Machine::Unbuilt { .. } => Step::Done(Err(Error::Finished)),
            Machine::Failed(e) => Step::Done(Err(e.take().map_or(Error::Finished, |e| *e))),
        }
    }

    fn handle(&mut self, response: Response, now: Instant) {
        match self.machine() {
            Machine::Script(m) => m.handle(response, now),
            Machine::Native(m) => m.handle(response, now),
            Machine::Unbuilt { .. } | Machine::Failed(_) => {}
        }
    }
}

/// What [`Renewals::due`] hands out.
#[derive(Debug)]
pub struct Due<T = Lease> {
    /// Extension machines to run, one per lease.
    pub renew: Vec<(WatchId, Extension<T>)>,
    /// Leases found lost by the clock (and forgotten), each with what the schedule kept of
    /// it.
    pub lost: Vec<(WatchId, LossReason, Arc<T>)>,
}

impl<T> Default for Due<T> {
    fn default() -> Self {
        Due {
            renew: Vec::new(),
            lost: Vec::new(),
        }
    }
}

/// One item of the schedule's heap: its key (when, in nanoseconds after the schedule's
/// epoch, with the lease's generation in the low bits: see [`Entry::at_ns`]) and which
/// lease. 16 bytes, where an `Instant` alone takes 16: the heap holds up to 1.5 items per
/// watched lease, and twice that in capacity (issue 18: memory per held lease).
type Item = Reverse<(u64, WatchId)>;

/// The deadline-ordered set of watched leases: [`Lease`]s, or a driver's records that hold
/// them (see [`WatchedLease`]).
#[derive(Debug)]
pub struct Renewals<T = Lease> {
    entries: HashMap<WatchId, Entry<T>>,
    heap: BinaryHeap<Item>,
    /// The origin of the heap's times: an hour before the first inserted lease was acquired
    /// (an earlier time is kept as the epoch itself: it is long past, so due at once anyway).
    epoch: Option<Instant>,
    /// Plain locks are extended by the server's compare-and-set ([`NativeExtend`]).
    native_extend: bool,
    /// Items pushed and leases removed since the last purge (see `purge_stale`).
    since_purge: usize,
    /// The heap's length after the last purge.
    purged_len: usize,
    /// How many purges ran (tests count them).
    #[cfg(test)]
    purges: usize,
}

/// The pause before retrying a failed renewal: a tenth of the interval, at least 10 ms.
fn retry_pause(every: Duration) -> Duration {
    (every / 10).max(Duration::from_millis(10))
}

impl<T> Default for Renewals<T> {
    fn default() -> Self {
        Renewals {
            entries: HashMap::new(),
            heap: BinaryHeap::new(),
            epoch: None,
            native_extend: false,
            since_purge: 0,
            purged_len: 0,
            #[cfg(test)]
            purges: 0,
        }
    }
}

impl Renewals {
    /// An empty schedule of [`Lease`]s (see [`Renewals::default`] for a driver's records).
    pub fn new() -> Self {
        Self::default()
    }
}

impl<T: WatchedLease> Renewals<T> {
    /// Whether plain locks are extended by the server's compare-and-set (`SET key token
    /// IFEQ token PX ttl`: Valkey 8.1+, Redis 8.4+) instead of the extend script, from the
    /// next [`due`](Self::due) on. Off by default: the driver turns it on for a server it
    /// knows has the command, and off again when one refuses it
    /// ([`Extension::refused_natively`]).
    pub fn set_native_extend(&mut self, on: bool) {
        self.native_extend = on;
    }

    /// How many leases are watched.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no lease is watched.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Starts watching `lease` (by value, or shared with its holder: the schedule only reads
    /// it). Its first renewal is due `policy.every` after `lease.acquired_at` (at once if
    /// that has passed by `now`), whenever it is inserted; each renewal extends it to
    /// `lease.ttl`.
    pub fn insert(
        &mut self,
        id: WatchId,
        lease: impl Into<Arc<T>>,
        policy: RenewalPolicy,
        now: Instant,
    ) {
        let watched = lease.into();
        let (acquired, valid_until) = (watched.lease().acquired_at, watched.valid_until());
        // A time already past is due at once (the heap hands it out at the next call).
        let _ = now;
        if self.epoch.is_none() {
            self.epoch = Some(acquired.checked_sub(EPOCH_BEFORE).unwrap_or(acquired));
        }
        let first = saturating_add(acquired, policy.every).min(valid_until);
        let mut entry = Entry {
            lease: watched,
            valid_ns: 0,
            every_ns: nanos(policy.every).min(FINAL_STRETCH - 1),
            hold_ns: policy.max_hold.map_or(NONE, nanos),
            sent_ns: NONE,
            at_ns: UNSCHEDULED,
        };
        entry.valid_ns = entry.offset(valid_until);
        self.entries.insert(id, entry);
        self.schedule(id, first);
    }

    /// Makes room for `more` leases at once: inserting many leases one by one grows the map
    /// by doubling, and each doubling holds the old table and the new one together (with
    /// 100,000 leases, 13 MB at the last step).
    ///
    /// The heap gets room for a quarter more items than leases: it holds a stale item or
    /// two per lease until purged, and a full heap purges rather than grows once a fifth of
    /// it is stale (see `purge_stale`), so it stays in that room.
    pub fn reserve(&mut self, more: usize) {
        self.entries.reserve(more);
        self.heap.reserve(more.saturating_add(more / 4 + 64));
    }

    /// Stops watching a lease; returns whether it was watched. No extension for it is handed
    /// out afterwards.
    pub fn remove(&mut self, id: WatchId) -> bool {
        let removed = self.forget(id).is_some();
        self.purge_stale();
        removed
    }

    /// Every removal of a watched lease goes through here: it counts toward the next purge
    /// of the heap (its items are stale from now on). The caller runs `purge_stale` once it
    /// no longer borrows an entry.
    fn forget(&mut self, id: WatchId) -> Option<Entry<T>> {
        let entry = self.entries.remove(&id);
        self.since_purge += usize::from(entry.is_some());
        entry
    }

    /// `t` as nanoseconds after the epoch (0 before it or without one).
    fn ns(&self, t: Instant) -> u64 {
        since(self.epoch, t)
    }

    /// When the item with key `key` is due: its time (without the generation) after the
    /// epoch.
    fn instant(&self, key: u64) -> Option<Instant> {
        let ns = key & UNSCHEDULED;
        self.epoch
            .map(|epoch| saturating_add(epoch, Duration::from_nanos(ns)))
    }

    /// Schedules the lease's next look at `at` (its [`slot`]); its earlier item (if any)
    /// is stale from now: the new one has the next generation.
    fn schedule(&mut self, id: WatchId, at: Instant) {
        let ns = slot(self.ns(at));
        if let Some(e) = self.entries.get_mut(&id) {
            if e.at_ns & UNSCHEDULED == ns {
                // Its live item is due then already.
                return;
            }
            // The generation wraps after 64 items: a stale item of this lease 64 items
            // back at the very same time (a retried validity check not purged since) would
            // be live again. Harmless: the first of the two taken by `due` makes the other
            // stale (it schedules the next generation), and one at the validity finds the
            // lease lost at once.
            let key = ns | (e.at_ns.wrapping_add(1) & (GENERATIONS - 1));
            e.at_ns = key;
            self.purge_stale();
            self.heap.push(Reverse((key, id)));
            self.since_purge += 1;
        }
    }

    /// Drops the heap's stale items (of leases removed or rescheduled since) once they
    /// outnumber half the live ones. Each renewal leaves one behind (the check at the
    /// validity it renewed, a ttl away), so without this the heap held about four items
    /// per lease (renewing every third of the ttl) and grew to twice that in capacity. A
    /// heap left far larger than needed (many leases released) gives its memory back.
    ///
    /// A push that would grow a full heap purges first once a fifth of it is stale, so the
    /// room reserved for the leases ([`reserve`](Self::reserve)) is not doubled for stale
    /// items.
    ///
    /// The live items are at most one per lease, so the stale ones are at least the
    /// heap's length less the leases; whatever that estimate says, a purge runs only after
    /// a fifth of the heap's length at the last one (and 32) items were pushed or leases
    /// removed since, so its cost per scheduled item stays constant.
    fn purge_stale(&mut self) {
        if self.since_purge < self.purged_len / 5 + 32 {
            return;
        }
        let live = self.entries.len();
        let len = self.heap.len();
        let full = len == self.heap.capacity() && len - live.min(len) > len / 5 + 32;
        if len <= live + live / 2 + 32 && !full {
            return;
        }
        #[cfg(test)]
        {
            self.purges += 1;
        }
        let entries = &self.entries;
        self.heap
            .retain(|Reverse((key, id))| entries.get(id).is_some_and(|e| e.at_ns == *key));
        if self.heap.capacity() > 4 * self.heap.len() + 64 {
            self.heap.shrink_to(2 * self.heap.len() + 32);
        }
        self.purged_len = self.heap.len();
        self.since_purge = 0;
    }

    /// When the schedule next needs attention.
    pub fn next_wakeup(&mut self) -> Option<Instant> {
        while let Some(Reverse((key, id))) = self.heap.peek().copied() {
            match self.entries.get(&id) {
                Some(e) if e.at_ns == key => return self.instant(key),
                // Removed or rescheduled since: drop the stale item.
                _ => {
                    self.heap.pop();
                }
            }
        }
        None
    }

    /// Whether the lease's last extension was its final one (the hold limit is reached): its
    /// end at [`RenewalEvent::Renewed`]'s `valid_until` is then an expiry, not a failure.
    pub fn is_final(&self, id: WatchId) -> bool {
        self.entries.get(&id).is_some_and(Entry::final_stretch)
    }

    /// Takes what is due at `now`: extension machines to run (each answering by `deadline`,
    /// or by its lease's validity if that comes first) and leases found lost by the clock
    /// (including leases whose extension is still in flight when their validity passes).
    pub fn due(&mut self, now: Instant, deadline: Instant, limit: usize) -> Due<T> {
        let mut work = Vec::new();
        let mut lost = Vec::new();
        let (epoch, now_ns) = (self.epoch, self.ns(now));
        while work.len() < limit {
            let Some(at) = self.next_wakeup() else { break };
            if at > now {
                break;
            }
            let Some(Reverse((_, id))) = self.heap.pop() else {
                break;
            };
            let Some(e) = self.entries.get_mut(&id) else {
                continue;
            };
            // Its live item is taken: whatever is decided below schedules a new one (the
            // generation is kept).
            e.at_ns |= UNSCHEDULED;
            // The validity's slot, not the validity itself: the check at the validity
            // may come up to 63 ns before it.
            if slot(since(epoch, e.valid_until())) <= now_ns {
                let reason = if e.final_stretch() {
                    LossReason::MaxHoldReached
                } else {
                    LossReason::RenewalFailed
                };
                if let Some(e) = self.forget(id) {
                    lost.push((id, reason, e.lease));
                }
                continue;
            }
            if e.final_stretch() || e.sent_ns != NONE {
                let at = e.valid_until();
                self.schedule(id, at);
                continue;
            }
            let mut ttl = e.lease.ttl();
            if let Some(hold_until) = e.hold_until() {
                let left = hold_until.saturating_duration_since(now);
                if left <= ttl {
                    // The last extension: the lease ends at the hold limit.
                    ttl = left;
                    e.set_final_stretch(true);
                }
            }
            if ttl < Duration::from_millis(1) {
                let at = e.valid_until();
                self.schedule(id, at);
                continue;
            }
            // A renewal that answers after the validity it renews is worthless: the lease
            // is reported lost then, whatever comes back later.
            let valid_until = e.valid_until();
            match Extension::new(&e.lease, ttl, deadline.min(valid_until), self.native_extend) {
                Ok(op) => {
                    e.sent_ns = e.offset(now);
                    work.push((id, op));
                    // Checked again at the validity: lost then if still unanswered.
                    self.schedule(id, valid_until);
                }
                // ttl is within 1 ms ..= lease ttl, which was validated at acquisition.
                Err(_) => {
                    if let Some(e) = self.forget(id) {
                        lost.push((id, LossReason::RenewalFailed, e.lease));
                    }
                }
            }
        }
        if !lost.is_empty() {
            self.purge_stale();
        }
        Due { renew: work, lost }
    }

    /// What the schedule keeps of the lease `id`, while it is watched.
    pub fn get(&self, id: WatchId) -> Option<&Arc<T>> {
        self.entries.get(&id).map(|e| &e.lease)
    }

    /// Every watched lease, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (WatchId, &Arc<T>)> {
        self.entries.iter().map(|(id, e)| (*id, &e.lease))
    }

    /// Stops watching every lease `keep` refuses (as [`remove`](Self::remove) does each).
    pub fn retain(&mut self, mut keep: impl FnMut(WatchId, &T) -> bool) {
        let before = self.entries.len();
        self.entries.retain(|id, e| keep(*id, &e.lease));
        self.since_purge += before - self.entries.len();
        self.purge_stale();
    }

    /// Stops watching a lease found lost by its renewal's outcome.
    fn lost(&mut self, id: WatchId, reason: LossReason) -> RenewalEvent {
        self.forget(id);
        self.purge_stale();
        RenewalEvent::Lost(reason)
    }

    /// Takes the outcome of an extension handed out by [`due`](Self::due).
    pub fn renewed(
        &mut self,
        id: WatchId,
        outcome: Result<Instant, Error>,
        now: Instant,
    ) -> RenewalEvent {
        let Some(e) = self.entries.get_mut(&id) else {
            return RenewalEvent::Pending;
        };
        let sent = e.in_flight().unwrap_or(now);
        e.sent_ns = NONE;
        match outcome {
            Ok(valid_until) => {
                e.valid_ns = e.offset(valid_until);
                let next = if e.final_stretch() {
                    valid_until
                } else {
                    saturating_add(sent, e.every()).min(valid_until)
                };
                self.schedule(id, next.max(now));
                RenewalEvent::Renewed { valid_until }
            }
            Err(Error::NotOwner { reason, .. }) => self.lost(id, reason),
            Err(Error::WrongType { .. }) => self.lost(id, LossReason::Taken),
            Err(_) => {
                if now >= e.valid_until() {
                    return self.lost(id, LossReason::RenewalFailed);
                }
                e.set_final_stretch(false);
                let at = saturating_add(now, retry_pause(e.every())).min(e.valid_until());
                self.schedule(id, at);
                RenewalEvent::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::lease::{LockSpec, Token, valid_until};
    use crate::protocol::{Protocol, Step};
    use crate::reply::{Reply, Response};
    use crate::testing::origin;

    const TTL: Duration = Duration::from_millis(300);

    fn lease(now: Instant, name: &str) -> Lease {
        let spec =
            LockSpec::lease(&Keyspace::default(), name, Token::from_random([2; 16]), TTL).unwrap();
        Lease {
            kind: spec.kind,
            target: spec.target,
            token: spec.token,
            fence: 1,
            ttl: TTL,
            acquired_at: now,
            valid_until: valid_until(now, TTL),
            attempts: 1,
            unanswered: false,
            calls: spec.calls,
            data: Vec::new(),
        }
    }

    /// Runs an extension machine against a scripted reply.
    fn answer(mut op: Extension, reply: Reply, now: Instant) -> Result<Instant, Error> {
        let Step::Send(batch) = op.poll(now) else {
            panic!("expected a send")
        };
        op.handle(Response::reply(batch.requests[0].id, reply), now);
        match op.poll(now) {
            Step::Done(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn renews_every_third_of_the_ttl_while_owned() {
        let t0 = origin();
        let mut r = Renewals::new();
        r.insert(1, lease(t0, "a"), RenewalPolicy::for_ttl(TTL), t0);
        assert_eq!(r.next_wakeup(), Some(t0 + TTL / 3));
        let Due { renew: work, lost } = r.due(t0 + TTL / 6, t0 + TTL, 10);
        assert!(work.is_empty() && lost.is_empty(), "nothing due early");
        let mut now = t0;
        for _ in 0..15 {
            now = r.next_wakeup().unwrap();
            let Due {
                renew: mut work,
                lost,
            } = r.due(now, now + Duration::from_millis(50), 10);
            assert!(lost.is_empty());
            assert_eq!(work.len(), 1);
            let (id, op) = work.pop().unwrap();
            let outcome = answer(op, Reply::Int(1), now);
            assert!(
                matches!(r.renewed(id, outcome, now), RenewalEvent::Renewed { valid_until } if valid_until > now + TTL / 2)
            );
        }
        // Five ttls later it is still watched and owned.
        assert!(now >= t0 + TTL * 4);
        assert_eq!(r.len(), 1);
    }

    /// Each renewal leaves a stale item in the heap (the check at the validity it renewed);
    /// they are purged, so the heap stays within 1.5 items per lease (issue 18: memory per
    /// held lease), and every lease is still renewed on time.
    #[test]
    fn an_extension_waiting_to_be_sent_is_small() {
        // Handed out for every due lease, queued until a renewal thread sends it.
        assert!(
            std::mem::size_of::<Extension>() <= 56,
            "{}",
            std::mem::size_of::<Extension>()
        );
        // Built, a script extension allocates its own machine's size, not the native one's
        // (440 bytes, every renewal on a server without the command).
        assert!(
            std::mem::size_of::<ScriptOp<Extend>>() < std::mem::size_of::<NativeExtend>(),
            "the boxes differ in size"
        );
        assert!(std::mem::size_of::<Machine>() <= 16);
    }

    #[test]
    fn a_heap_item_takes_sixteen_bytes() {
        // Up to 1.5 per watched lease, twice that in capacity (issue 18: memory per held
        // lease); with an `Instant` and a generation it took 32.
        assert_eq!(std::mem::size_of::<Item>(), 16);
    }

    /// A lease acquired long before the schedule's first one is due at once, and the
    /// schedule's times read back exactly for leases acquired after it.
    #[test]
    fn times_before_the_epoch_are_due_at_once() {
        let t0 = origin() + EPOCH_BEFORE * 3;
        let mut r = Renewals::new();
        r.insert(1, lease(t0, "new"), RenewalPolicy::for_ttl(TTL), t0);
        assert_eq!(r.next_wakeup(), Some(t0 + TTL / 3));
        // Acquired two hours before (with a ttl as long): its renewal is long past.
        let old = t0 - EPOCH_BEFORE * 2;
        let mut l = lease(old, "old");
        l.ttl = EPOCH_BEFORE * 3;
        l.valid_until = valid_until(old, l.ttl);
        r.insert(2, l, RenewalPolicy::for_ttl(EPOCH_BEFORE * 3), t0);
        let at = r.next_wakeup().unwrap();
        assert!(at <= t0, "due at once");
        let Due { renew, lost } = r.due(t0, t0 + TTL, 10);
        assert!(lost.is_empty());
        assert_eq!(renew.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2]);
        assert_eq!(r.next_wakeup(), Some(t0 + TTL / 3));
    }

    #[test]
    fn an_entry_keeps_its_times_in_eight_bytes_each() {
        // One per watched lease, in the map with its id (issue 18: memory per held lease).
        assert!(
            std::mem::size_of::<Entry<Lease>>() <= 48,
            "{}",
            std::mem::size_of::<Entry<Lease>>()
        );
        // The offsets read back exactly, and a missing one stays missing.
        let t0 = origin();
        let policy = RenewalPolicy {
            every: TTL / 3,
            max_hold: Some(Duration::from_millis(450)),
        };
        let mut r = Renewals::new();
        r.insert(1, lease(t0, "a"), policy, t0);
        r.insert(2, lease(t0, "b"), RenewalPolicy::for_ttl(TTL), t0);
        let (a, b) = (&r.entries[&1], &r.entries[&2]);
        assert_eq!(a.valid_until(), valid_until(t0, TTL));
        assert_eq!(a.hold_until(), Some(t0 + Duration::from_millis(450)));
        assert_eq!((b.hold_until(), a.in_flight()), (None, None));
        assert_eq!(a.every(), TTL / 3);
        // The final-stretch flag shares the interval's word and leaves the interval be.
        let e = r.entries.get_mut(&1).unwrap();
        assert!(!e.final_stretch());
        e.set_final_stretch(true);
        assert!(e.final_stretch() && e.every() == TTL / 3);
        e.set_final_stretch(false);
        assert!(!e.final_stretch() && e.every() == TTL / 3);
        // An interval of centuries is cut below the flag's bit.
        let policy = RenewalPolicy {
            every: Duration::MAX,
            max_hold: None,
        };
        r.insert(3, lease(t0, "c"), policy, t0);
        assert!(!r.entries[&3].final_stretch());
    }

    #[test]
    fn stale_heap_items_are_purged_and_renewals_keep_their_times() {
        const N: usize = 200;
        let t0 = origin();
        let mut r = Renewals::new();
        r.reserve(N);
        let room = r.heap.capacity();
        assert!(room <= N + N / 4 + 64 + 4, "{room}");
        for i in 0..N {
            r.insert(
                i as WatchId,
                lease(t0, &format!("l{i}")),
                RenewalPolicy::for_ttl(TTL),
                t0,
            );
        }
        let bound = N + N / 2 + 32;
        let mut renewals = 0;
        let mut now = t0;
        while now < t0 + TTL * 6 {
            now = r.next_wakeup().unwrap();
            let Due { renew, lost } = r.due(now, now + Duration::from_millis(50), N);
            assert!(lost.is_empty(), "lost at {:?}", now - t0);
            for (id, op) in renew {
                let outcome = answer(op, Reply::Int(1), now);
                assert!(matches!(
                    r.renewed(id, outcome, now),
                    RenewalEvent::Renewed { .. }
                ));
                renewals += 1;
                assert!(
                    r.heap.len() <= bound,
                    "{} items for {N} leases",
                    r.heap.len()
                );
                // Stale items are purged before the reserved room would be doubled.
                assert_eq!(r.heap.capacity(), room);
            }
        }
        // Every lease renewed every third of the ttl: 6 ttls, 18 rounds (less the first).
        assert!(renewals >= N * 17, "{renewals}");
        assert_eq!(r.len(), N);
        // Removing every lease empties the heap and gives its memory back.
        for i in 0..N {
            assert!(r.remove(i as WatchId));
        }
        assert!(r.heap.len() <= 32, "{}", r.heap.len());
        assert!(r.heap.capacity() <= 4 * 32 + 64, "{}", r.heap.capacity());
        assert_eq!(r.next_wakeup(), None);
    }

    /// Every renewal fails (the server unreachable) until every lease is lost. Each retry
    /// reschedules a lease whose check at its validity (queued when the renewal was handed
    /// out) is still in the heap, and the next hand-out queues that check again: no lease
    /// has two live items (so none is handed out or lost twice), and the purges stay a few
    /// per round of retries. Before items carried a generation, the old check came back to
    /// life with each retry, the purge's estimate of stale items counted it as live, and a
    /// full heap purged at almost every push (reviewer: 32k leases, 2,363 purges).
    #[test]
    fn failing_renewals_keep_one_live_item_per_lease_and_purges_stay_rare() {
        const N: usize = 1000;
        let t0 = origin();
        let mut r = Renewals::new();
        r.reserve(N);
        let room = r.heap.capacity();
        for i in 0..N {
            r.insert(
                i as WatchId,
                lease(t0, &format!("l{i}")),
                RenewalPolicy::for_ttl(TTL),
                t0,
            );
        }
        let most_live_items = |r: &Renewals| -> usize {
            let mut live: HashMap<WatchId, usize> = HashMap::new();
            for Reverse((ns, id)) in r.heap.iter() {
                if r.entries.get(id).is_some_and(|e| e.at_ns == *ns) {
                    *live.entry(*id).or_default() += 1;
                }
            }
            live.into_values().max().unwrap_or(0)
        };
        let (mut rounds, mut handed_out, mut lost) = (0, 0, Vec::new());
        while let Some(now) = r.next_wakeup() {
            let due = r.due(now, now + Duration::from_millis(5), usize::MAX);
            let mut ids: Vec<_> = due.renew.iter().map(|(id, _)| *id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), due.renew.len(), "a lease handed out twice");
            handed_out += ids.len();
            for (id, reason, _) in due.lost {
                assert_eq!(reason, LossReason::RenewalFailed);
                lost.push(id);
            }
            for (id, _) in due.renew {
                let failure = Err(Error::Unavailable {
                    attempts: 1,
                    last: crate::TransportFailure::not_sent("refused"),
                });
                assert_eq!(r.renewed(id, failure, now), RenewalEvent::Pending);
            }
            rounds += 1;
            assert!(
                most_live_items(&r) <= 1,
                "round {rounds}: duplicate live items"
            );
            assert_eq!(r.heap.capacity(), room, "round {rounds}");
        }
        lost.sort_unstable();
        lost.dedup();
        assert_eq!(lost.len(), N, "each lease lost once");
        assert!(r.is_empty());
        // Retried every 10 ms from ttl/3 until the validity: about 20 rounds of N.
        assert!(
            handed_out >= 15 * N,
            "{handed_out} hand-outs in {rounds} rounds"
        );
        assert!(
            r.purges <= 4 * rounds,
            "{} purges in {rounds} rounds of {N} retries",
            r.purges
        );
    }

    /// Watches `n` leases in a heap with room reserved for them, and renews them all
    /// (answering every renewal) until a round in which a purge ran: the count of pushes
    /// and removals since is then below the next purge's threshold.
    fn renewed_until_a_purge(n: usize) -> (Renewals, Instant) {
        let t0 = origin();
        let mut r = Renewals::new();
        r.reserve(n);
        for i in 0..n {
            r.insert(
                i as WatchId,
                lease(t0, &format!("l{i}")),
                RenewalPolicy::for_ttl(TTL),
                t0,
            );
        }
        loop {
            let now = r.next_wakeup().unwrap();
            let purges = r.purges;
            let Due { renew, lost } = r.due(now, now + Duration::from_millis(50), n);
            assert!(lost.is_empty());
            for (id, op) in renew {
                let outcome = answer(op, Reply::Int(1), now);
                assert!(matches!(
                    r.renewed(id, outcome, now),
                    RenewalEvent::Renewed { .. }
                ));
            }
            if r.purges > purges {
                return (r, now);
            }
        }
    }

    /// Leases released all at once by `retain` (the driver's compaction) count toward the
    /// purge like single removals: the heap is emptied and its memory given back at once,
    /// with nothing pushed afterwards (reviewer: 100,000 released leases kept ~2 MB).
    #[test]
    fn a_mass_removal_by_retain_empties_the_heap_and_shrinks_it() {
        const N: usize = 2000;
        let (mut r, _) = renewed_until_a_purge(N);
        let room = r.heap.capacity();
        assert!(room >= N, "{room}");
        r.retain(|_, _| false);
        assert!(r.is_empty());
        assert_eq!(r.heap.len(), 0);
        assert!(
            r.heap.capacity() <= 64,
            "{} of {room} kept",
            r.heap.capacity()
        );
        assert_eq!(r.next_wakeup(), None);
    }

    /// Leases lost at once (a failover: their renewals answer "not ours") count toward the
    /// purge: their items are dropped, the heap stays within 1.5 items per live lease and
    /// inside the room reserved, while the others go on renewing.
    #[test]
    fn a_mass_loss_of_ownership_purges_and_the_heap_keeps_its_room() {
        const N: usize = 2000;
        let (mut r, _) = renewed_until_a_purge(N);
        let room = r.heap.capacity();
        let (mut lost, mut round) = (0, 0);
        while lost < N - N / 10 || round < 100 {
            round += 1;
            assert!(round < 10_000, "{lost} lost");
            let now = r.next_wakeup().unwrap();
            for (id, op) in r.due(now, now + Duration::from_millis(50), N).renew {
                // Every lease but one in ten is found not ours.
                let reply = Reply::Int(i64::from(id % 10 == 0));
                let outcome = answer(op, reply, now);
                match r.renewed(id, outcome, now) {
                    RenewalEvent::Renewed { .. } => {}
                    RenewalEvent::Lost(LossReason::Expired) => lost += 1,
                    other => panic!("{other:?}"),
                }
                let live = r.len();
                assert!(
                    r.heap.len() <= live + live / 2 + 64,
                    "round {round}: {} items for {live} leases",
                    r.heap.len()
                );
                assert!(r.heap.capacity() <= room, "round {round}");
            }
        }
        assert_eq!(lost, N - N / 10);
        assert_eq!(r.len(), N / 10);
    }

    /// A lease's times need not fall on the heap's 64 ns slots: its looks come at most
    /// 63 ns early, and its loss at the validity is never reported late (the simulation's
    /// loss-in-time property), nor is the check at it queued again when taken early.
    #[test]
    fn looks_come_at_most_63_ns_early_and_a_loss_never_late() {
        let ns = Duration::from_nanos;
        let t0 = origin();
        let mut r = Renewals::new();
        // The first lease sets the epoch; the next one's times are 37 ns off its slots.
        r.insert(1, lease(t0, "epoch"), RenewalPolicy::for_ttl(TTL), t0);
        assert!(r.remove(1));
        let acquired = t0 + ns(37);
        let l = lease(acquired, "a");
        let valid = l.valid_until;
        let policy = RenewalPolicy {
            every: TTL * 4 / 5,
            max_hold: None,
        };
        r.insert(2, l, policy, acquired);
        let first = r.next_wakeup().unwrap();
        let want = acquired + TTL * 4 / 5;
        assert!(first <= want && want - first < ns(64), "{:?}", want - first);
        assert!(r.due(first - ns(1), valid, 10).renew.is_empty());
        assert_eq!(r.due(first, valid, 10).renew.len(), 1);
        // Unanswered: the check at the validity comes by the validity, and finds it lost.
        let check = r.next_wakeup().unwrap();
        assert!(
            check <= valid && valid - check < ns(64),
            "{:?}",
            valid - check
        );
        let Due { renew, lost } = r.due(check - ns(1), valid, 10);
        assert!(renew.is_empty() && lost.is_empty());
        let Due { renew, lost } = r.due(check, valid, 10);
        assert!(renew.is_empty());
        let lost: Vec<_> = lost
            .into_iter()
            .map(|(id, reason, _)| (id, reason))
            .collect();
        assert_eq!(lost, vec![(2, LossReason::RenewalFailed)]);
        assert_eq!(r.next_wakeup(), None);
    }

    /// With the server's compare-and-set on, a plain lock's renewal is `SET ... IFEQ ... PX`
    /// (renewed on `OK`); off (the default), the extend script.
    #[test]
    fn plain_locks_are_renewed_natively_when_the_server_has_it() {
        let t0 = origin();
        let mut r = Renewals::new();
        r.insert(1, lease(t0, "a"), RenewalPolicy::for_ttl(TTL), t0);
        let first = |r: &mut Renewals, now: Instant| -> (WatchId, Extension) {
            let Due { mut renew, .. } = r.due(now, now + Duration::from_millis(50), 10);
            renew.pop().unwrap()
        };
        let send = |op: &mut Extension, now: Instant| -> (crate::command::RequestId, Vec<String>) {
            let Step::Send(batch) = op.poll(now) else {
                panic!("expected a send")
            };
            let request = &batch.requests[0];
            let args = request.command.args().iter();
            (
                request.id,
                args.map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect(),
            )
        };
        let now = r.next_wakeup().unwrap();
        let (id, mut op) = first(&mut r, now);
        assert!(
            matches!(op.machine, Machine::Unbuilt { native: false }),
            "built when first polled"
        );
        assert_eq!(send(&mut op, now).1[0], "EVALSHA");
        assert!(matches!(op.machine, Machine::Script(_)));
        r.renewed(id, Ok(valid_until(now, TTL)), now);

        r.set_native_extend(true);
        let now = r.next_wakeup().unwrap();
        let (id, mut op) = first(&mut r, now);
        let (request, args) = send(&mut op, now);
        assert!(matches!(op.machine, Machine::Native(_)));
        assert_eq!(args[0], "SET");
        assert_eq!(args[3..], ["IFEQ", args[2].as_str(), "PX", "300"]);
        op.handle(Response::reply(request, Reply::Status("OK".into())), now);
        let Step::Done(outcome) = op.poll(now) else {
            panic!("expected the outcome")
        };
        assert_eq!(outcome, Ok(valid_until(now, TTL)));
        assert!(matches!(
            r.renewed(id, outcome, now),
            RenewalEvent::Renewed { .. }
        ));
    }

    #[test]
    fn a_lease_found_not_ours_is_lost_at_once() {
        let t0 = origin();
        let mut r = Renewals::new();
        r.insert(7, lease(t0, "a"), RenewalPolicy::for_ttl(TTL), t0);
        let now = r.next_wakeup().unwrap();
        let mut work = r.due(now, now + TTL, 10).renew;
        let (id, op) = work.pop().unwrap();
        let outcome = answer(op, Reply::Int(0), now);
        assert_eq!(
            r.renewed(id, outcome, now),
            RenewalEvent::Lost(LossReason::Expired)
        );
        assert!(r.is_empty());
        assert_eq!(r.next_wakeup(), None);
    }

    #[test]
    fn transient_failures_retry_until_the_lease_must_have_expired() {
        let t0 = origin();
        let mut r = Renewals::new();
        let l = lease(t0, "a");
        let valid = l.valid_until;
        r.insert(1, l, RenewalPolicy::for_ttl(TTL), t0);
        let mut tries = 0;
        loop {
            let now = r.next_wakeup().expect("still scheduled");
            assert!(now <= valid, "never scheduled past validity");
            let Due {
                renew: mut work,
                lost,
            } = r.due(now, now + Duration::from_millis(5), 10);
            if let Some((_, reason, _)) = lost.first() {
                assert_eq!(*reason, LossReason::RenewalFailed);
                assert_eq!(now, valid);
                break;
            }
            let (id, _) = work.pop().unwrap();
            tries += 1;
            let failure = Err(Error::Unavailable {
                attempts: 1,
                last: crate::TransportFailure::not_sent("refused"),
            });
            assert_eq!(r.renewed(id, failure, now), RenewalEvent::Pending);
        }
        // Retries every 10 ms from ttl/3 until validity (~197 ms later): bounded, no spinning.
        assert!((10..=25).contains(&tries), "{tries}");
        assert!(r.is_empty());
    }

    #[test]
    fn removed_leases_are_never_handed_out_again() {
        let t0 = origin();
        let mut r = Renewals::new();
        for id in 0..100 {
            r.insert(
                id,
                lease(t0, &format!("l{id}")),
                RenewalPolicy::for_ttl(TTL),
                t0,
            );
        }
        for id in (0..100).step_by(2) {
            assert!(r.remove(id));
        }
        assert!(!r.remove(0));
        let Due { renew: work, lost } = r.due(t0 + TTL, t0 + TTL * 2, 1000);
        assert!(lost.is_empty() || lost.iter().all(|(id, _, _)| id % 2 == 1));
        let ids: Vec<_> = work
            .iter()
            .map(|(id, _)| *id)
            .chain(lost.iter().map(|(id, _, _)| *id))
            .collect();
        assert_eq!(ids.len(), 50);
        assert!(ids.iter().all(|id| id % 2 == 1));
        // A batch limit leaves the rest for the next call.
        let mut r2 = Renewals::new();
        for id in 0..10 {
            r2.insert(id, lease(t0, "x"), RenewalPolicy::for_ttl(TTL), t0);
        }
        assert_eq!(r2.due(t0 + TTL / 3, t0 + TTL, 4).renew.len(), 4);
        assert_eq!(r2.due(t0 + TTL / 3, t0 + TTL, 40).renew.len(), 6);
    }

    #[test]
    fn max_hold_ends_the_lease_at_the_limit() {
        let t0 = origin();
        let mut r = Renewals::new();
        let policy = RenewalPolicy {
            every: TTL / 3,
            max_hold: Some(Duration::from_millis(450)),
        };
        r.insert(1, lease(t0, "a"), policy, t0);
        let mut last_ttl_arg = String::new();
        loop {
            let now = r.next_wakeup().unwrap();
            let Due {
                renew: mut work,
                lost,
            } = r.due(now, now + TTL, 10);
            if let Some((_, reason, _)) = lost.first() {
                assert_eq!(*reason, LossReason::MaxHoldReached);
                assert!(now <= t0 + Duration::from_millis(450));
                break;
            }
            let (id, mut op) = work.pop().unwrap();
            let Step::Send(b) = op.poll(now) else {
                panic!()
            };
            last_ttl_arg = String::from_utf8(b.requests[0].command.args()[5].to_vec()).unwrap();
            op.handle(Response::reply(b.requests[0].id, Reply::Int(1)), now);
            let Step::Done(outcome) = op.poll(now) else {
                panic!()
            };
            r.renewed(id, outcome, now);
        }
        // The last extension asked only for what was left of the hold time.
        let last: u64 = last_ttl_arg.parse().unwrap();
        assert_eq!(last, 250, "renewed at 200 ms with 250 ms of hold time left");
    }

    #[test]
    fn the_first_renewal_is_due_from_the_acquisition_not_the_insertion() {
        let t0 = origin();
        let mut r = Renewals::new();
        // The driver got round to inserting the lease 200 ms after acquiring it.
        r.insert(
            1,
            lease(t0, "a"),
            RenewalPolicy::for_ttl(TTL),
            t0 + TTL * 2 / 3,
        );
        assert_eq!(r.next_wakeup(), Some(t0 + TTL / 3));
        // After a renewal, the next one is due an interval after that renewal was sent.
        let sent = t0 + TTL / 3;
        let (id, op) = r.due(sent, sent + TTL, 10).renew.pop().unwrap();
        let outcome = answer(op, Reply::Int(1), sent + Duration::from_millis(40));
        r.renewed(id, outcome, sent + Duration::from_millis(40));
        assert_eq!(r.next_wakeup(), Some(sent + TTL / 3));
    }

    #[test]
    fn an_unanswered_renewal_is_lost_at_the_validity_and_never_waits_past_it() {
        let t0 = origin();
        let mut r = Renewals::new();
        let l = lease(t0, "a");
        let valid = l.valid_until;
        let policy = RenewalPolicy {
            every: TTL * 4 / 5,
            max_hold: None,
        };
        r.insert(1, l, policy, t0);
        let now = t0 + TTL * 4 / 5;
        // The driver offers a deadline a whole second away: the renewal's is the validity.
        let (id, mut op) = r
            .due(now, now + Duration::from_secs(1), 10)
            .renew
            .pop()
            .unwrap();
        let Step::Send(batch) = op.poll(now) else {
            panic!("expected a send")
        };
        assert_eq!(batch.deadline, valid);
        // Unanswered: the schedule wakes at the validity and reports the loss then.
        assert_eq!(r.next_wakeup(), Some(valid));
        let Due { renew, lost } = r.due(valid, valid + Duration::from_secs(1), 10);
        assert!(renew.is_empty());
        let lost: Vec<_> = lost
            .into_iter()
            .map(|(id, reason, l)| (id, reason, l.fence))
            .collect();
        assert_eq!(lost, vec![(id, LossReason::RenewalFailed, 1)]);
        // The late answer changes nothing.
        let late = Ok(valid + TTL);
        assert_eq!(r.renewed(id, late, valid), RenewalEvent::Pending);
        assert!(r.is_empty());
    }

    #[test]
    fn policies_are_checked() {
        assert!(RenewalPolicy::for_ttl(TTL).validate(TTL).is_ok());
        let p = RenewalPolicy {
            every: TTL,
            max_hold: None,
        };
        assert!(p.validate(TTL).is_err());
        let p = RenewalPolicy {
            every: Duration::ZERO,
            max_hold: None,
        };
        assert!(p.validate(TTL).is_err());
        let p = RenewalPolicy {
            every: TTL / 3,
            max_hold: Some(Duration::ZERO),
        };
        assert!(p.validate(TTL).is_err());
        let p = RenewalPolicy {
            every: TTL / 3,
            max_hold: Some(Duration::MAX),
        };
        assert!(p.validate(TTL).is_err());
    }

    #[test]
    fn renewals_must_come_within_the_validity_and_a_short_ttl_is_named() {
        let ms = Duration::from_millis;
        // ttl 1-3 ms: the error is about the ttl, not the renewal interval derived from it.
        for ttl in [ms(1), ms(2), ms(3)] {
            let e = RenewalPolicy::for_ttl(ttl).validate(ttl).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument(InvalidArgument::DurationTooShort { what: "ttl", .. })
                ),
                "{e}"
            );
        }
        // 0.8 x ttl is within the validity (ttl - 1 % - 2 ms) of a 1 s lease ...
        let p = RenewalPolicy {
            every: ms(800),
            max_hold: None,
        };
        assert!(p.validate(ms(1000)).is_ok());
        // ... but an interval at or past the validity means the lease is lost before its
        // first renewal.
        let p = RenewalPolicy {
            every: ms(989),
            max_hold: None,
        };
        let e = p.validate(ms(1000)).unwrap_err().to_string();
        assert!(e.contains("renewal interval") && e.contains("988ms"), "{e}");
        // At the floor ttl the default policy is accepted.
        let floor = limits::MIN_TTL;
        assert!(RenewalPolicy::for_ttl(floor).validate(floor).is_ok());
    }
}
