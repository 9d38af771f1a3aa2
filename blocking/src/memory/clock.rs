//! The virtual clock of the in-process server and of its clients.
//!
//! # How time moves
//!
//! Nothing on this clock reads real time: it moves only when it is told to.
//!
//! - [`advance`](MemoryClock::advance) moves it forward. On the way it fires, in time order
//!   and each at its own instant, the timers clients set on it (a watchdog's next renewal
//!   round), so a lease renewed every 10 s is renewed three times by `advance(30 s)`.
//! - **Auto-advance** (on by default): a client call that has to wait on this clock (a lock
//!   waiting for its holder, a retry's backoff, a queue waiting for a job) does not block:
//!   the clock jumps to the end of that wait at once (firing timers on the way), as tokio's
//!   paused clock does when every task is idle. A test of "a waiter gives up after 10 s"
//!   therefore takes microseconds, on one thread, deterministically.
//! - Threads the library starts itself (the workers of `Queue::work`) never move the clock:
//!   they wait until another thread moves it past their deadline, or a message wakes them.
//! - With client calls running on several threads at once, auto-advance would let one
//!   thread's wait jump past another thread's work: turn it off
//!   ([`set_auto_advance(false)`](MemoryClock::set_auto_advance)); waits then block until the
//!   test calls [`advance`](MemoryClock::advance) (or a release message wakes them), and
//!   [`sleepers`](MemoryClock::sleepers) says how many threads are waiting on the clock.
//!   Move the clock while those threads wait, not while one is in the middle of a call: a
//!   reply that comes after a jump is, to the client, a reply that took that long (a lease
//!   acquired that way is already past its validity, as it would be on a real network).
//!
//! The clock's `Instant`s (what the client's machines are given as "now") are an origin
//! taken once when the clock is made, plus how far it was advanced: two runs see the same
//! durations between events.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};

/// A clock the test controls: a start time (since the Unix epoch) plus an offset that only
/// [`advance`](Self::advance) (or a client's wait, see the [module docs](self)) moves. It
/// never reads real time.
///
/// Clones share the offset: hand one clone to each [`MemoryServer`](super::MemoryServer)
/// (several servers for RedLock) and keep one to advance them all together.
///
/// ```
/// use std::time::Duration;
/// use redlease::memory::MemoryClock;
///
/// let clock = MemoryClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(30));
/// assert_eq!(clock.now() - t0, Duration::from_secs(30));
/// assert_eq!(clock.elapsed(), Duration::from_secs(30));
/// ```
#[derive(Clone)]
pub struct MemoryClock {
    start_us: u64,
    inner: Arc<Inner>,
}

struct Inner {
    offset_us: AtomicU64,
    /// What `instant()` adds the offset to (taken once, when the clock is made).
    origin: Instant,
    auto_advance: AtomicBool,
    sched: Mutex<Sched>,
    /// Sleepers that sleep past their poll because nothing would change before (they go
    /// back to their poll when the data changes): told of every change.
    hinted: std::sync::atomic::AtomicUsize,
}

type Callback = Box<dyn FnOnce() + Send>;

/// A thread blocked on the clock.
struct Sleeper {
    id: u64,
    /// The offset it wakes at (unless a message or a cancel wakes it first).
    wakes_at: u64,
    /// A sleeper past its poll: the offset of its poll, and the data version it saw. Once
    /// the data changes, it wakes at its poll instead.
    quiet: Option<(u64, u64)>,
    moved: Sender<()>,
}

#[derive(Default)]
struct Sched {
    /// Timers: (due, sequence, callback), fired in (due, sequence) order.
    timers: Vec<(u64, u64, Callback)>,
    next_seq: u64,
    /// Threads blocked on the clock: told when it moves.
    sleepers: Vec<Sleeper>,
    next_sleeper: u64,
}

impl std::fmt::Debug for MemoryClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryClock")
            .field("now", &self.now())
            .field("elapsed", &self.elapsed())
            .field("auto_advance", &self.auto_advance())
            .finish()
    }
}

impl Default for MemoryClock {
    fn default() -> Self {
        Self::new()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

thread_local! {
    /// This thread was started by the library (a queue worker) or is firing a timer: its
    /// waits never move the clock by themselves.
    static PASSIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set while this thread fires timers: a wait inside a timer moves the clock without
    /// firing further timers (no re-entry).
    static FIRING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How a wait on the clock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// The clock reached the deadline.
    Deadline,
    /// A message came.
    Message,
    /// The thread was asked to stop.
    Cancelled,
}

/// Why [`MemoryClock::run_until`] stopped before its condition held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunError {
    /// The next wake-up was further than `limit` from the start: the clock was moved by
    /// `limit` (no further), and the condition still did not hold.
    TimeLimit {
        /// The limit given.
        limit: Duration,
    },
    /// No thread waited on the clock (or fewer than asked) for this long in real time: no
    /// thread can go on by moving the clock.
    Stalled {
        /// How long, in real time.
        waited: Duration,
    },
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::TimeLimit { limit } => write!(
                f,
                "the condition did not hold within {limit:?} of the in-process clock"
            ),
            RunError::Stalled { waited } => write!(
                f,
                "the condition did not hold and no thread waited on the in-process clock for {waited:?} of real time"
            ),
        }
    }
}

impl std::error::Error for RunError {}

impl MemoryClock {
    /// Where [`new`](Self::new) starts: 2026-01-01T00:00:00Z, as a duration since the Unix
    /// epoch. A fixed start keeps runs repeatable.
    pub const DEFAULT_START: Duration = Duration::from_secs(1_767_225_600);

    /// A clock at [`DEFAULT_START`](Self::DEFAULT_START), auto-advancing.
    pub fn new() -> Self {
        Self::starting_at(Self::DEFAULT_START)
    }

    /// A clock reading `since_unix_epoch` until it is advanced.
    pub fn starting_at(since_unix_epoch: Duration) -> Self {
        MemoryClock {
            start_us: micros(since_unix_epoch),
            inner: Arc::new(Inner {
                offset_us: AtomicU64::new(0),
                origin: Instant::now(),
                auto_advance: AtomicBool::new(true),
                sched: Mutex::new(Sched::default()),
                hinted: std::sync::atomic::AtomicUsize::new(0),
            }),
        }
    }

    fn sched(&self) -> MutexGuard<'_, Sched> {
        // Every update is one step: a panic elsewhere leaves a usable state.
        self.inner.sched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether two handles are the same clock.
    pub fn same_as(&self, other: &MemoryClock) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Turns auto-advance on (the default) or off; see the [module docs](self).
    pub fn set_auto_advance(&self, on: bool) {
        self.inner.auto_advance.store(on, Ordering::SeqCst);
    }

    /// Whether a client's wait moves the clock by itself.
    pub fn auto_advance(&self) -> bool {
        self.inner.auto_advance.load(Ordering::SeqCst)
    }

    /// How many threads are blocked waiting for this clock to move (with auto-advance off,
    /// or library threads such as queue workers).
    pub fn sleepers(&self) -> usize {
        self.sched().sleepers.len()
    }

    /// Moves the clock forward by `by` (saturating at the far future), for every clone,
    /// firing the timers due on the way, each at its own instant.
    pub fn advance(&self, by: Duration) {
        let target = self.offset().saturating_add(micros(by));
        self.advance_to_offset(target);
    }

    fn offset(&self) -> u64 {
        self.inner.offset_us.load(Ordering::SeqCst)
    }

    fn set_offset(&self, to: u64) {
        self.inner.offset_us.fetch_max(to, Ordering::SeqCst);
    }

    /// Moves the clock to `target` (an offset), firing timers due by then in order.
    fn advance_to_offset(&self, target: u64) {
        if FIRING.with(|f| f.get()) {
            // A wait inside a timer: move on, fire nothing (the outer advance goes on).
            self.set_offset(target);
            self.notify();
            return;
        }
        loop {
            let due = {
                let mut sched = self.sched();
                let first = sched
                    .timers
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.0 <= target)
                    .min_by_key(|(_, t)| (t.0, t.1))
                    .map(|(i, _)| i);
                first.map(|i| sched.timers.swap_remove(i))
            };
            let Some((at, _, callback)) = due else { break };
            self.set_offset(at);
            self.notify();
            FIRING.with(|f| f.set(true));
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(callback));
            FIRING.with(|f| f.set(false));
        }
        self.set_offset(target);
        self.notify();
    }

    /// Tells every blocked thread that the clock moved.
    fn notify(&self) {
        for sleeper in &self.sched().sleepers {
            let _ = sleeper.moved.try_send(());
        }
    }

    /// Tells the sleepers that sleep past their poll that the data is now at `version`:
    /// those that saw another go back to their poll. Nothing to do, and no lock taken, when
    /// there are none.
    pub(crate) fn kick_hinted(&self, version: u64) {
        if self.inner.hinted.load(Ordering::SeqCst) == 0 {
            return;
        }
        for sleeper in &mut self.sched().sleepers {
            if let Some((poll, seen)) = sleeper.quiet
                && seen != version
            {
                sleeper.wakes_at = sleeper.wakes_at.min(poll);
                sleeper.quiet = None;
                let _ = sleeper.moved.try_send(());
            }
        }
    }

    /// Runs `f` with timers held back: a wait inside moves the clock without firing any
    /// (a watchdog round must not re-enter itself).
    pub(crate) fn without_timers<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                FIRING.with(|f| f.set(self.0));
            }
        }
        let _restore = Restore(FIRING.with(|f| f.replace(true)));
        f()
    }

    /// Wakes every blocked thread (to look at its cancel flag).
    pub(crate) fn kick(&self) {
        self.notify();
    }

    /// Runs `callback` once the clock reaches `at` (at once if it has).
    pub(crate) fn at(&self, at: Instant, callback: impl FnOnce() + Send + 'static) {
        let due = self.offset_of(at);
        if due <= self.offset() {
            callback();
            return;
        }
        let mut sched = self.sched();
        let seq = sched.next_seq;
        sched.next_seq += 1;
        sched.timers.push((due, seq, Box::new(callback)));
    }

    fn offset_of(&self, t: Instant) -> u64 {
        micros(t.saturating_duration_since(self.inner.origin))
    }

    /// The clock as an `Instant` (the origin plus the offset).
    pub(crate) fn instant(&self) -> Instant {
        self.inner.origin + Duration::from_micros(self.offset())
    }

    /// Marks this thread as started by the library: its waits never move the clock.
    pub(crate) fn set_passive_thread() {
        PASSIVE.with(|p| p.set(true));
    }

    /// Waits until the clock reaches `until`, `wake` has a message, or `cancel` is set. With
    /// auto-advance on a caller's thread, the clock jumps to `until` at once (a message
    /// already there ends it first).
    pub(crate) fn wait_until(
        &self,
        until: Instant,
        wake: Option<&Receiver<super::Message>>,
        cancel: Option<&AtomicBool>,
    ) -> Woke {
        self.wait(until, None, wake, cancel)
    }

    /// Waits as [`wait_until`](Self::wait_until) does, until `quiet` (when nothing the
    /// waiter waits for can change unless a message comes), going back to `poll` (an earlier
    /// instant: when it would poll on Redis) as soon as the data's version (`version()`)
    /// is no longer `seen`, the one its last answer saw. So a wait costs one wake-up per
    /// change, not one per poll.
    pub(crate) fn wait_quiet(
        &self,
        quiet: Instant,
        poll: Instant,
        (seen, version): (u64, &dyn Fn() -> u64),
        wake: Option<&Receiver<super::Message>>,
        cancel: Option<&AtomicBool>,
    ) -> Woke {
        let poll = self.offset_of(poll);
        self.wait(quiet, Some((poll, seen, version)), wake, cancel)
    }

    fn wait(
        &self,
        until: Instant,
        quiet: Option<(u64, u64, &dyn Fn() -> u64)>,
        wake: Option<&Receiver<super::Message>>,
        cancel: Option<&AtomicBool>,
    ) -> Woke {
        let mut target = self.offset_of(until);
        // Already changed: wait until the poll.
        let quiet = match quiet {
            Some((poll, seen, version)) if poll < target => {
                if version() == seen {
                    Some((poll, seen, version))
                } else {
                    target = poll;
                    None
                }
            }
            _ => None,
        };
        let passive = PASSIVE.with(|p| p.get());
        let firing = FIRING.with(|f| f.get());
        if let Some(rx) = wake
            && rx.try_recv().is_ok()
        {
            return Woke::Message;
        }
        if self.offset() >= target {
            return Woke::Deadline;
        }
        if firing || (!passive && self.auto_advance()) {
            self.advance_to_offset(target);
            return Woke::Deadline;
        }
        let (tx, moved) = crossbeam_channel::bounded(1);
        let id = {
            let mut sched = self.sched();
            let id = sched.next_sleeper;
            sched.next_sleeper += 1;
            sched.sleepers.push(Sleeper {
                id,
                wakes_at: target,
                quiet: quiet.map(|(poll, seen, _)| (poll, seen)),
                moved: tx,
            });
            id
        };
        if let Some((poll, seen, version)) = quiet {
            self.inner.hinted.fetch_add(1, Ordering::SeqCst);
            // A change between the look above and the registration: a change after it
            // finds the sleeper registered (`kick_hinted`).
            if version() != seen
                && let Some(s) = self.sched().sleepers.iter_mut().find(|s| s.id == id)
            {
                s.wakes_at = s.wakes_at.min(poll);
                s.quiet = None;
            }
        }
        let never = crossbeam_channel::never();
        let mut wake = wake.unwrap_or(&never);
        let woke = loop {
            if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                break Woke::Cancelled;
            }
            let wakes_at = self
                .sched()
                .sleepers
                .iter()
                .find(|s| s.id == id)
                .map_or(target, |s| s.wakes_at);
            if self.offset() >= wakes_at {
                break Woke::Deadline;
            }
            crossbeam_channel::select! {
                recv(moved) -> _ => {}
                recv(wake) -> msg => if msg.is_ok() { break Woke::Message } else {
                    // The subscriber was cut (a restart): wait for the clock alone.
                    wake = &never;
                },
            }
        };
        if quiet.is_some() {
            self.inner.hinted.fetch_sub(1, Ordering::SeqCst);
        }
        self.sched().sleepers.retain(|s| s.id != id);
        woke
    }

    /// How long [`run_until`](Self::run_until) waits, in real time, for a thread to go
    /// to sleep on the clock before it gives up with [`RunError::Stalled`].
    pub const STALL: Duration = Duration::from_secs(30);

    /// Moves the clock from one wake-up to the next until `done` holds: the pump a test
    /// with several threads needs (`Queue::work`'s workers, or client calls on threads
    /// with auto-advance off). Whenever at least one thread waits on the clock and none is
    /// between waking and its next call, it moves the clock to the earliest instant any
    /// waiting thread wakes at (or a timer, such as a watchdog round, fires at), never by a
    /// guessed step. Returns how far it moved the clock.
    ///
    /// With several threads making calls, a thread in the middle of a call does not wait on
    /// the clock, and a jump it does not see looks to it like a reply that took that long:
    /// [`run_until_waiting`](Self::run_until_waiting) moves the clock only once a given
    /// number of threads wait.
    ///
    /// Never hangs: it stops with [`RunError::TimeLimit`] (the clock moved by `limit`)
    /// when the next wake-up is further than `limit` from where it started, and with
    /// [`RunError::Stalled`] when no thread waited on the clock for [`STALL`](Self::STALL)
    /// of real time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redlease::memory::MemoryServer;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = MemoryServer::new();
    /// let clock = server.clock();
    /// let queue = server.client().queue("mail")?;
    /// // One worker: while it runs a call, no thread waits on the clock, so it stays put
    /// // (with two, the idle one's wait would let the clock jump past the busy one: see
    /// // run_until_waiting).
    /// let workers = queue.work(1, |_job| -> Result<(), String> { Ok(()) })?;
    /// let in_an_hour = redlease::queue::PushOptions::new().delay(Duration::from_secs(3600));
    /// queue.push_with("in an hour", in_an_hour)?;
    /// // The worker waits on the clock; it jumps to the job's due time.
    /// clock.run_until(Duration::from_secs(7200), || workers.report().acked == 1)?;
    /// assert!(clock.elapsed() >= Duration::from_secs(3600));
    /// assert!(clock.elapsed() < Duration::from_secs(7200));
    /// workers.stop();
    /// # Ok(()) }
    /// ```
    pub fn run_until(
        &self,
        limit: Duration,
        done: impl FnMut() -> bool,
    ) -> Result<Duration, RunError> {
        self.run_until_waiting(1, limit, done)
    }

    /// [`run_until`](Self::run_until), moving the clock only while at least `threads`
    /// threads wait on it (and none is between waking and its next call): give the number
    /// of threads that make calls (workers and the test's own), so that none is in the
    /// middle of a call when the clock jumps. With `0`, timers alone (a watchdog's rounds)
    /// move it too.
    pub fn run_until_waiting(
        &self,
        threads: usize,
        limit: Duration,
        mut done: impl FnMut() -> bool,
    ) -> Result<Duration, RunError> {
        let start = self.offset();
        let end = start.saturating_add(micros(limit));
        let moved = |clock: &MemoryClock| Duration::from_micros(clock.offset() - start);
        // Real time, only to bound how long no thread waits on the clock.
        let mut idle_since = Instant::now();
        loop {
            if done() {
                return Ok(moved(self));
            }
            let now = self.offset();
            let next = {
                let sched = self.sched();
                let waking = sched.sleepers.iter().any(|s| s.wakes_at <= now);
                if waking || sched.sleepers.len() < threads {
                    None
                } else {
                    let sleeper = sched.sleepers.iter().map(|s| s.wakes_at).min();
                    let timer = sched.timers.iter().map(|t| t.0).filter(|&t| t > now).min();
                    sleeper.into_iter().chain(timer).min()
                }
            };
            match next {
                Some(at) if at > end => {
                    self.advance_to_offset(end);
                    return if done() {
                        Ok(moved(self))
                    } else {
                        Err(RunError::TimeLimit { limit })
                    };
                }
                Some(at) => {
                    self.advance_to_offset(at);
                    idle_since = Instant::now();
                }
                None => {
                    let idle = idle_since.elapsed();
                    if idle > Self::STALL {
                        return Err(RunError::Stalled { waited: idle });
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    /// How far the clock was advanced since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_micros(self.offset())
    }

    /// The time, as a duration since the Unix epoch (microsecond resolution).
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.unix_micros_u64())
    }

    fn unix_micros_u64(&self) -> u64 {
        self.start_us.saturating_add(self.offset())
    }

    /// The time in Unix microseconds (what `TIME` answers, in two parts).
    pub fn unix_micros(&self) -> i64 {
        i64::try_from(self.unix_micros_u64()).unwrap_or(i64::MAX)
    }

    /// The time in Unix milliseconds (what key expiry counts in).
    pub fn unix_ms(&self) -> i64 {
        self.unix_micros() / 1000
    }

    /// The time as a `SystemTime`.
    pub fn system_time(&self) -> SystemTime {
        UNIX_EPOCH + self.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn advance_fires_timers_in_time_order_each_at_its_instant() {
        let clock = MemoryClock::new();
        let t0 = clock.instant();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for secs in [20, 5, 10] {
            let (c, seen) = (clock.clone(), seen.clone());
            clock.at(t0 + secs * S, move || {
                seen.lock().unwrap().push((secs, c.elapsed()));
            });
        }
        clock.advance(12 * S);
        assert_eq!(*seen.lock().unwrap(), [(5, 5 * S), (10, 10 * S)]);
        assert_eq!(clock.elapsed(), 12 * S);
        clock.advance(8 * S);
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_timer_set_inside_a_timer_fires_in_the_same_advance() {
        let clock = MemoryClock::new();
        let fired = Arc::new(AtomicU32::new(0));
        fn rearm(clock: &MemoryClock, fired: &Arc<AtomicU32>) {
            let (c, f) = (clock.clone(), fired.clone());
            clock.at(clock.instant() + 10 * S, move || {
                f.fetch_add(1, Ordering::SeqCst);
                rearm(&c, &f);
            });
        }
        rearm(&clock, &fired);
        clock.advance(35 * S);
        assert_eq!(fired.load(Ordering::SeqCst), 3, "at 10, 20 and 30 s");
    }

    #[test]
    fn a_callers_wait_jumps_the_clock_and_fires_timers_on_the_way() {
        let clock = MemoryClock::new();
        let fired = Arc::new(AtomicU32::new(0));
        let f = fired.clone();
        clock.at(clock.instant() + 3 * S, move || {
            f.fetch_add(1, Ordering::SeqCst);
        });
        let until = clock.instant() + 10 * S;
        assert_eq!(clock.wait_until(until, None, None), Woke::Deadline);
        assert_eq!(clock.elapsed(), 10 * S);
        assert_eq!(fired.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn without_auto_advance_a_wait_lasts_until_the_clock_is_moved_or_cancelled() {
        let clock = MemoryClock::new();
        clock.set_auto_advance(false);
        let until = clock.instant() + 10 * S;
        let c = clock.clone();
        let waiter = std::thread::spawn(move || c.wait_until(until, None, None));
        let start = Instant::now();
        while clock.sleepers() == 0 {
            assert!(start.elapsed() < 30 * S, "the waiter never waited");
            std::thread::yield_now();
        }
        clock.advance(9 * S);
        assert!(!waiter.is_finished(), "9 s is not its 10 s");
        clock.advance(S);
        assert_eq!(waiter.join().unwrap(), Woke::Deadline);
        assert_eq!(clock.elapsed(), 10 * S);

        let cancel = Arc::new(AtomicBool::new(false));
        let (c, flag) = (clock.clone(), cancel.clone());
        let until = clock.instant() + 10 * S;
        let waiter = std::thread::spawn(move || c.wait_until(until, None, Some(&flag)));
        while clock.sleepers() == 0 {
            assert!(start.elapsed() < 30 * S, "the waiter never waited");
            std::thread::yield_now();
        }
        cancel.store(true, Ordering::SeqCst);
        clock.kick();
        assert_eq!(waiter.join().unwrap(), Woke::Cancelled);
        assert_eq!(clock.elapsed(), 10 * S, "a cancelled wait moves nothing");
    }
}
