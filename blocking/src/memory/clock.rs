//! The virtual clock of the in-process server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A clock the test controls: a start time (since the Unix epoch) plus an offset that only
/// [`advance`](Self::advance) moves. It never reads real time.
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
#[derive(Debug, Clone)]
pub struct MemoryClock {
    start_us: u64,
    offset_us: Arc<AtomicU64>,
}

impl Default for MemoryClock {
    fn default() -> Self {
        Self::new()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl MemoryClock {
    /// Where [`new`](Self::new) starts: 2026-01-01T00:00:00Z, as a duration since the Unix
    /// epoch. A fixed start keeps runs repeatable.
    pub const DEFAULT_START: Duration = Duration::from_secs(1_767_225_600);

    /// A clock at [`DEFAULT_START`](Self::DEFAULT_START).
    pub fn new() -> Self {
        Self::starting_at(Self::DEFAULT_START)
    }

    /// A clock reading `since_unix_epoch` until it is advanced.
    pub fn starting_at(since_unix_epoch: Duration) -> Self {
        MemoryClock {
            start_us: micros(since_unix_epoch),
            offset_us: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward by `by` (saturating at the far future), for every clone.
    pub fn advance(&self, by: Duration) {
        let by = micros(by);
        let _ = self
            .offset_us
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                Some(o.saturating_add(by))
            });
    }

    /// How far the clock was advanced since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_micros(self.offset_us.load(Ordering::SeqCst))
    }

    /// The time, as a duration since the Unix epoch (microsecond resolution).
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.unix_micros_u64())
    }

    fn unix_micros_u64(&self) -> u64 {
        self.start_us
            .saturating_add(self.offset_us.load(Ordering::SeqCst))
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
