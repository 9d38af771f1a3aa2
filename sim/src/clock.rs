//! A simulated client's local clock, as a function of the run's global virtual time.

/// A client's monotonic clock: global virtual time (µs since the run started) scaled by a
/// rate (parts per million faster, negative: slower) and moved forward once by an optional
/// jump. It never goes back, as `Instant` never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalClock {
    /// Rate error in parts per million (`-10_000`: the clock runs 1 % slow).
    pub rate_ppm: i64,
    /// Global time of the forward jump (`u64::MAX`: none).
    pub jump_at: u64,
    /// How far it jumps forward, in µs.
    pub jump_by: u64,
}

impl Default for LocalClock {
    fn default() -> Self {
        LocalClock {
            rate_ppm: 0,
            jump_at: u64::MAX,
            jump_by: 0,
        }
    }
}

impl LocalClock {
    /// The local reading (µs) at global time `g`.
    pub fn local(&self, g: u64) -> u64 {
        let g = i128::from(g);
        let scaled = g + g * i128::from(self.rate_ppm) / 1_000_000;
        let mut l = u64::try_from(scaled.max(0)).unwrap_or(u64::MAX);
        if g >= i128::from(self.jump_at) {
            l = l.saturating_add(self.jump_by);
        }
        l
    }

    /// The first global time at which the local clock reads `l` or later.
    pub fn global_at(&self, l: u64) -> u64 {
        // `local` is monotonic: bisect. Rates stay within ±50 %, so `2l + 1` reads past `l`.
        let (mut lo, mut hi) = (0u64, l.saturating_mul(2).saturating_add(1));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.local(mid) >= l {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_at_inverts_local_with_drift_and_a_jump() {
        let c = LocalClock {
            rate_ppm: -50_000,
            jump_at: 1_000_000,
            jump_by: 200_000,
        };
        assert_eq!(c.local(100_000), 95_000);
        let g = c.global_at(95_000);
        assert!(c.local(g) >= 95_000 && c.local(g - 1) < 95_000 && g <= 100_000);
        // Local readings skipped by the jump are reached at the jump.
        assert_eq!(c.global_at(1_000_000), 1_000_000);
        assert_eq!(c.local(1_000_000), 1_150_000);
        let g = c.global_at(2_000_000);
        assert!(c.local(g) >= 2_000_000 && c.local(g - 1) < 2_000_000);
    }
}
