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
}

type Callback = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Sched {
    /// Timers: (due, sequence, callback), fired in (due, sequence) order.
    timers: Vec<(u64, u64, Callback)>,
    next_seq: u64,
    /// Threads blocked on the clock: told when it moves.
    sleepers: Vec<(u64, Sender<()>)>,
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
        for (_, tx) in &self.sched().sleepers {
            let _ = tx.try_send(());
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
        let target = self.offset_of(until);
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
            sched.sleepers.push((id, tx));
            id
        };
        let never = crossbeam_channel::never();
        let wake = wake.unwrap_or(&never);
        let woke = loop {
            if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                break Woke::Cancelled;
            }
            if self.offset() >= target {
                break Woke::Deadline;
            }
            crossbeam_channel::select! {
                recv(moved) -> _ => {}
                recv(wake) -> msg => if msg.is_ok() { break Woke::Message } else {
                    // The subscriber was cut (a restart): wait for the clock alone.
                    break self.wait_alone(target, &moved, cancel);
                },
            }
        };
        self.sched().sleepers.retain(|(i, _)| *i != id);
        woke
    }

    fn wait_alone(&self, target: u64, moved: &Receiver<()>, cancel: Option<&AtomicBool>) -> Woke {
        loop {
            if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                return Woke::Cancelled;
            }
            if self.offset() >= target {
                return Woke::Deadline;
            }
            let _ = moved.recv();
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
