//! Retry delays: exponential backoff with jitter from a generator seeded by the caller.

use std::time::{Duration, Instant};

/// A small deterministic generator (SplitMix64). The caller supplies the seed, so a
/// machine's retry schedule is reproducible in tests and random in production.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..=max`.
    pub fn below_or_eq(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            self.next_u64()
        } else {
            self.next_u64() % (max + 1)
        }
    }
}

/// Exponential backoff with "equal jitter": each delay is half the current step plus a
/// random part of up to the other half, and the step doubles up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    step: Duration,
    max: Duration,
    rng: SplitMix64,
}

impl Backoff {
    /// Starts at `initial`, doubles up to `max`, jitter drawn from `seed`.
    pub fn new(initial: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            step: initial.max(Duration::from_micros(100)),
            max: max.max(initial),
            rng: SplitMix64::new(seed),
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = self.step.saturating_mul(2).min(self.max);
        let half = step / 2;
        let jitter_us = self
            .rng
            .below_or_eq(half.as_micros().min(u64::MAX as u128) as u64);
        half + Duration::from_micros(jitter_us)
    }
}

/// `t + d`, or the latest representable instant not beyond it (never panics).
pub fn saturating_add(t: Instant, d: Duration) -> Instant {
    let mut d = d;
    loop {
        if let Some(later) = t.checked_add(d) {
            return later;
        }
        d /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_with_jitter_and_stay_capped() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(80), 7);
        let delays: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(5) && delays[0] <= Duration::from_millis(10));
        for d in &delays[3..] {
            assert!(
                *d >= Duration::from_millis(40) && *d <= Duration::from_millis(80),
                "{d:?}"
            );
        }
        // Same seed, same schedule; another seed, another schedule.
        let mut again = Backoff::new(Duration::from_millis(10), Duration::from_millis(80), 7);
        assert_eq!(
            delays,
            (0..8).map(|_| again.next_delay()).collect::<Vec<_>>()
        );
        let mut other = Backoff::new(Duration::from_millis(10), Duration::from_millis(80), 8);
        assert_ne!(
            delays,
            (0..8).map(|_| other.next_delay()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn saturating_add_never_panics() {
        let t = crate::testing::origin();
        assert!(saturating_add(t, Duration::MAX) > t);
        assert_eq!(
            saturating_add(t, Duration::from_secs(1)),
            t + Duration::from_secs(1)
        );
    }
}
