//! The `GetSet` algorithm after a `SETNX` that found the key taken: read the holder's
//! timestamp, and take an expired lock over with `GETSET` (see the [module docs](crate::legacy)
//! for its state graph and its flaws).

use std::time::{Duration, Instant};

use super::{LegacyAcquire, LegacyAcquisition, Phase};
use crate::lease::valid_until;
use crate::legacy::getset_expiry;
use crate::protocol::Step;
use crate::reply::Reply;

impl LegacyAcquire {
    /// GetSet: the value of a key that `SETNX` found taken.
    pub(super) fn on_get(
        &mut self,
        reply: Reply,
        _sent_at: Instant,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        let read = match reply {
            Reply::Nil => return self.again(now),
            Reply::Bulk(read) => read,
            other => return self.unexpected("legacy lock read (GET)", &other, now),
        };
        let Some(expiry) = getset_expiry(&read) else {
            return self.unexpected("legacy lock value (GET)", &Reply::Bulk(read), now);
        };
        let wall = self.clock.unix_ms_at(now);
        // Written by one of our SETNX whose reply was lost: SETNX only writes a free key,
        // so the lock is ours (while its time lasts).
        let ours = self
            .unconfirmed
            .iter()
            .find(|(v, _)| v.as_bytes() == read.as_slice())
            .map(|(v, sent)| (v.clone(), *sent));
        if let Some((value, sent_at)) = ours {
            let valid = valid_until(sent_at, self.ttl);
            if expiry > wall && valid > now {
                return Some(self.acquired(value, sent_at, valid));
            }
        }
        if expiry > wall {
            return self.busy(Some(Duration::from_millis(expiry - wall)), now);
        }
        // Expired: take it over. We own the lock only if GETSET returns what we read.
        let value = self.value_at(now);
        let getset = self.command("GETSET").arg(&value);
        Some(self.send(
            Phase::TakeOver {
                read,
                value,
                sent_at: now,
            },
            vec![getset],
            now,
        ))
    }

    /// GetSet: the old value returned by our takeover.
    pub(super) fn on_getset(
        &mut self,
        reply: Reply,
        read: Vec<u8>,
        value: String,
        sent_at: Instant,
        now: Instant,
    ) -> Option<Step<LegacyAcquisition>> {
        let won = match &reply {
            // The key was deleted after our GET: our GETSET created it, nobody else holds it.
            Reply::Nil => true,
            Reply::Bulk(old) => {
                *old == read
                    || self
                        .unconfirmed
                        .iter()
                        .any(|(v, _)| v.as_bytes() == old.as_slice())
            }
            _ => return self.unexpected("legacy lock takeover (GETSET)", &reply, now),
        };
        if won {
            return Some(self.acquired(value, sent_at, valid_until(sent_at, self.ttl)));
        }
        // Another waiter took it over first, and we have just overwritten its value with ours
        // (the documented flaw). The key now shows our value, so the lock stays blocked until
        // our timestamp passes; we must never claim it.
        if let Reply::Bulk(old) = &reply
            && getset_expiry(old).is_none()
        {
            return self.unexpected("legacy lock value (GETSET)", &reply, now);
        }
        let ours_until = getset_expiry(value.as_bytes()).unwrap_or(0);
        let wall = self.clock.unix_ms_at(now);
        self.busy(
            Some(Duration::from_millis(ours_until.saturating_sub(wall))),
            now,
        )
    }
}
