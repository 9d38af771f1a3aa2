//! The `SetNxExpire` algorithm after a `SETNX` that found the key taken: read the holder's
//! value and ttl; set the expiry of our own key, or repair a holder's key left without one
//! (see the [module docs](crate::legacy) for its state graph).

use std::time::{Duration, Instant};

use super::{LegacyAcquire, LegacyAcquisition, Phase};
use crate::backoff::saturating_add;
use crate::lease::drift;
use crate::protocol::Step;
use crate::reply::Reply;

impl LegacyAcquire {
    /// SetNxExpire: the value and ttl of a key that `SETNX` found taken.
    pub(super) fn on_get_pttl(
        &mut self,
        get: Reply,
        pttl: Reply,
        sent_at: Instant,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        let Some(ms) = pttl.as_int() else {
            return self.unexpected("legacy lock ttl (PTTL)", &pttl, now);
        };
        let value = match get {
            Reply::Nil => return self.again(now),
            Reply::Bulk(value) => value,
            other => return self.unexpected("legacy lock read (GET)", &other, now),
        };
        let ours = value == self.token.as_str().as_bytes();
        match ms {
            // Gone between the GET and the PTTL.
            -2 => self.again(now),
            // No expiry. Ours (a SETNX whose reply, or whose PEXPIRE, was lost): set it now.
            // Another holder's (it died between SETNX and PEXPIRE): repair it, so it cannot
            // block the lock forever.
            -1 => {
                let pexpire = self.pexpire();
                let phase = if ours {
                    Phase::Expire { from: now }
                } else {
                    Phase::Repair
                };
                Some(self.send(phase, vec![pexpire], now))
            }
            ms if ms > 0 => {
                let left = Duration::from_millis(ms.unsigned_abs());
                if ours {
                    let valid = saturating_add(sent_at, left.saturating_sub(drift(self.ttl)));
                    if valid > now {
                        return Some(self.acquired(self.token.as_str().to_owned(), sent_at, valid));
                    }
                }
                self.busy(Some(left), now)
            }
            // PTTL 0 does not occur (an expiring key reports at least 1 ms); treat it as gone.
            0 => self.again(now),
            _ => self.unexpected("legacy lock ttl (PTTL)", &pttl, now),
        }
    }
}
