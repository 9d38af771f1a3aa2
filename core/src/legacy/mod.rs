//! The legacy lock, for servers and proxies that have neither `SET ... NX PX` nor scripting.
//!
//! It is built from plain commands only: `SETNX`, `GET`, `GETSET`, `DEL`, `PEXPIRE` and `PTTL`
//! (no `EVAL`/`EVALSHA`, no `MULTI`/`WATCH`, no `SET` options). **Prefer the
//! [lease lock](crate::lease) wherever the server allows it**: it is atomic where these
//! algorithms are not, judges expiry by the server's clock, and issues fencing tokens. The
//! legacy lock exists for the servers where that is impossible, and this page states exactly
//! what it cannot guarantee.
//!
//! Both algorithms ([`LegacyAlgorithm`]) use one string key, `<prefix>:{<name>}:legacy`
//! ([`LegacyKeys`]), and an owner token of 32 hex characters drawn by the driver.
//!
//! # `GetSet`: SETNX + GETSET takeover of an expired lock
//!
//! The value is `<expiry_unix_ms>:<token>` ([`getset_value`]): the lock's end by the wall clock
//! of the host that wrote it. The key itself never expires in Redis; the timestamp is the
//! expiry. (Deliberately no `PEXPIRE` safety net: the timestamp alone decides, as in the classic
//! algorithm; a crashed holder's key is taken over once its timestamp has passed, and a
//! takeover would otherwise have to race a Redis expiry as well.)
//!
//! ```text
//!   Start ──SETNX key v──► 1 ──────────────────────────────────────────────► Acquired
//!     ▲                    0 ──GET key──► nil ─────────────────────────────► Start (at once)
//!     │                                   our v (a SETNX whose reply was lost) ► Acquired
//!     │                                   expiry not passed ───────────────► Busy
//!     │                                   expiry passed ──GETSET key v'──► old = what we read,
//!     │                                                                    or nil ► Acquired
//!     │                                                                    other ─► Busy (v'
//!     │                                                                    overwrote the winner)
//!     └──── Wait (backoff with jitter, capped by the holder's time left) ◄── Busy, when waiting
//!   Busy when trying once; Timeout at the deadline; garbage in the key: UnexpectedReply.
//! ```
//!
//! # `SetNxExpire`: SETNX + PEXPIRE, repairing a key left without expiry
//!
//! The value is the token; the expiry is Redis's own (`PEXPIRE`), set in a second round trip.
//!
//! ```text
//!   Start ──SETNX key token──► 1 ──PEXPIRE key ttl──► 1 ─────────────────────► Acquired
//!     ▲                        │                      0 (the key vanished) ──► Start
//!     │                        0 ──GET key, PTTL key──► nil / -2 ────────────► Start (at once)
//!     │                                                our token, ttl left ──► Acquired
//!     │                                                our token, -1 ──PEXPIRE key ttl──► Acquired
//!     │                                                other, ttl left ──────► Busy
//!     │                                                other, -1 ──PEXPIRE key ttl (repair)──► Busy
//!     └──── Wait (backoff with jitter, capped by the holder's time left) ◄──── Busy, when waiting
//! ```
//!
//! # Release (both): `GET`, then `DEL` if still ours
//!
//! ```text
//!   GET key ──► our value (GetSet: and its expiry not passed by the local clock) ──DEL──► Ok
//!               nil ──► NotOwner(Expired)      another value ──► NotOwner(Taken)
//!               our value, expired (GetSet) ──► NotOwner(Expired), not deleted
//! ```
//!
//! A walk through the `GetSet` graph with scripted replies: the key holds a lock that expired
//! a second ago, we take it over with `GETSET`, then release it.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Batch, Protocol, Reply, Response, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::Token;
//! use redlease_core::legacy::*;
//!
//! // Answers the one request of `batch` as Redis would, and polls again.
//! fn feed<P: Protocol>(m: &mut P, batch: &Batch, reply: Reply, now: Instant) -> Step<P::Output> {
//!     m.handle(Response::reply(batch.requests[0].id, reply), now);
//!     m.poll(now)
//! }
//! let keys = LegacyKeys::new(&Keyspace::default(), "nightly").unwrap();
//! let (now, unix_ms) = (Instant::now(), 1_800_000_000_000);
//! let token = Token::from_random([9; 16]);
//! let mut acquire =
//!     LegacyAcquire::new(keys, token.clone(), &LegacyOptions::default(), 1, now, unix_ms).unwrap();
//! let expired = getset_value(unix_ms - 1000, &Token::new("old-holder").unwrap());
//!
//! let Step::Send(setnx) = acquire.poll(now) else { unreachable!() };
//! assert_eq!(setnx.requests[0].command.name(), "SETNX");
//! let Step::Send(get) = feed(&mut acquire, &setnx, Reply::Int(0), now) else { unreachable!() };
//! let Step::Send(getset) = feed(&mut acquire, &get, Reply::Bulk(expired.clone().into()), now)
//! else { unreachable!() };
//! assert_eq!(getset.requests[0].command.name(), "GETSET");
//! let Step::Done(Ok(LegacyAcquisition::Acquired(lease))) =
//!     feed(&mut acquire, &getset, Reply::Bulk(expired.into()), now)
//! else { unreachable!() };
//! assert_eq!(lease.value, getset_value(unix_ms + 30_000, &token));
//!
//! let mut release = LegacyRelease::new(&lease, now + Duration::from_secs(1), now, unix_ms);
//! let Step::Send(get) = release.poll(now) else { unreachable!() };
//! let Step::Send(del) = feed(&mut release, &get, Reply::Bulk(lease.value.clone().into()), now)
//! else { unreachable!() };
//! assert_eq!(del.requests[0].command.name(), "DEL");
//! assert!(matches!(feed(&mut release, &del, Reply::Int(1), now), Step::Done(Ok(()))));
//! ```
//!
//! # What these algorithms cannot guarantee
//!
//! - **Clock agreement (GetSet).** Expiry is judged by each contender's wall clock against the
//!   timestamp another host wrote. A contender whose clock runs ahead takes the lock over early,
//!   while its holder still works; nothing here can detect that. Keep the hosts' clocks
//!   synchronised (NTP) and the ttl far above their worst disagreement. The drift allowance
//!   subtracted from `valid_until` covers clock *rate* drift, not an offset between hosts.
//! - **A stale holder's release racing a takeover.** Release is two round trips, `GET` then
//!   `DEL`, with no atomic compare-and-delete: if the lock expires between them (by its
//!   timestamp or its Redis ttl) and another contender takes it, the `DEL` deletes the new
//!   holder's key. Release well before `valid_until`.
//! - **The GETSET overwrite flaw.** When several waiters take over the same expired lock, each
//!   `GETSET` writes before it can know whether it won: every loser has overwritten the winner's
//!   value with its own. The winner still holds the lock (its `GETSET` returned the expired
//!   value), but the key now shows a loser's value: the winner's release reports
//!   [`LossReason::Taken`](crate::LossReason) and deletes nothing, and the lock stays blocked
//!   until the loser's timestamp passes (at most one ttl later).
//! - **A takeover whose reply was lost is treated as lost.** After a `GETSET` without reply we
//!   cannot know whether it won (another waiter may have swapped first), so it is never claimed:
//!   no two holders because of us, at the price of the lock staying blocked until that value's
//!   timestamp passes. (A lost `SETNX` reply is resolved exactly: `SETNX` only succeeds on a
//!   free key, so finding our own value means we hold the lock.)
//! - **SetNxExpire's two round trips.** A holder that dies between `SETNX` and `PEXPIRE` leaves a
//!   key without expiry; the next contender to see it gives it a ttl (the repair). The repair is
//!   not atomic with the `PTTL` that saw it: it can land right after a live holder's own
//!   `PEXPIRE` and reset the key's ttl to the contender's. Use one ttl for all users of a lock
//!   name, and the repair only ever restarts an equal lease.
//! - **No fencing token, no watchdog.** There is no atomic way to issue a counter with the lock,
//!   and renewing would mean a `GETSET` of a new timestamp (or an unchecked `PEXPIRE`) that
//!   races with takeovers exactly as above; a legacy lock lasts one ttl. Choose a ttl longer
//!   than the critical section.

mod acquire;
mod release;

use std::time::{Duration, Instant};

pub use acquire::{LegacyAcquire, LegacyAcquisition, LegacyOptions};
pub use release::LegacyRelease;

use crate::command::{Request, RequestId, RequestIds};
use crate::error::Error;
use crate::keys::Keyspace;
use crate::lease::Token;
use crate::reply::{ErrorReply, Reply, Response, TransportFailure};

/// Which legacy algorithm a lock uses. All users of one lock name must use the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LegacyAlgorithm {
    /// `SETNX` of `<expiry_unix_ms>:<token>`; an expired lock is taken over with `GETSET`.
    /// Needs no key expiry support at all, but depends on the hosts' clocks agreeing.
    #[default]
    GetSet,
    /// `SETNX` of the token, then `PEXPIRE`; a key found without expiry is given one.
    /// Expiry is Redis's own, so clocks do not matter; needs `PEXPIRE` and `PTTL`.
    SetNxExpire,
}

impl LegacyAlgorithm {
    /// The algorithm's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            LegacyAlgorithm::GetSet => "SETNX + GETSET",
            LegacyAlgorithm::SetNxExpire => "SETNX + EXPIRE",
        }
    }
}

/// The key of one legacy lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyKeys {
    /// The lock's name as the caller gave it.
    pub name: String,
    /// The lock key, `<prefix>:{<name>}:legacy`: a string holding the owner's value.
    pub lock: String,
}

impl LegacyKeys {
    /// The key of legacy lock `name` in `keyspace` (the name is checked as every name is).
    pub fn new(keyspace: &Keyspace, name: &str) -> Result<Self, Error> {
        let stem = keyspace.stem(name)?;
        Ok(LegacyKeys {
            name: name.to_owned(),
            lock: format!("{stem}:legacy"),
        })
    }
}

/// The wall clock as a machine sees it: one reading of Unix time taken by the driver together
/// with an [`Instant`], from which later wall times are derived (the core reads no clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    instant: Instant,
    unix_ms: u64,
}

impl WallClock {
    /// At `instant` the Unix time was `unix_ms` milliseconds.
    pub fn new(instant: Instant, unix_ms: u64) -> Self {
        WallClock { instant, unix_ms }
    }

    /// The Unix time in milliseconds at `at` (saturating at 0 and `u64::MAX`).
    pub fn unix_ms_at(&self, at: Instant) -> u64 {
        if at >= self.instant {
            self.unix_ms.saturating_add(millis(at - self.instant))
        } else {
            self.unix_ms.saturating_sub(millis(self.instant - at))
        }
    }
}

/// A lock acquired with one of the legacy algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyLease {
    /// The lock's key.
    pub keys: LegacyKeys,
    /// The algorithm that acquired it (and that releases it).
    pub algorithm: LegacyAlgorithm,
    /// Our owner token.
    pub token: Token,
    /// The exact value we wrote into the key: `<expiry_unix_ms>:<token>` (GetSet) or the token
    /// (SetNxExpire). Release deletes the key only while it holds this value.
    pub value: String,
    /// The lock's length.
    pub ttl: Duration,
    /// When the command that gave us the lock was sent.
    pub acquired_at: Instant,
    /// How many `SETNX` attempts it took (1 when the lock was free at once).
    pub attempts: u32,
    /// Until when the lock is safely ours by the local clock: the send time of the command
    /// that gave it to us plus the ttl (or the ttl Redis reported), less the drift allowance
    /// of [`crate::lease::drift`].
    pub valid_until: Instant,
}

impl LegacyLease {
    /// The time left before `valid_until`, zero once it has passed.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }

    /// The expiry written in the value (GetSet), in Unix milliseconds.
    pub fn expires_at_unix_ms(&self) -> Option<u64> {
        match self.algorithm {
            LegacyAlgorithm::GetSet => getset_expiry(self.value.as_bytes()),
            LegacyAlgorithm::SetNxExpire => None,
        }
    }
}

/// The GetSet value of a lock held by `token` until `expiry_unix_ms`:
/// `<expiry_unix_ms>:<token>`.
pub fn getset_value(expiry_unix_ms: u64, token: &Token) -> String {
    format!("{expiry_unix_ms}:{}", token.as_str())
}

/// The expiry of a GetSet value, or `None` when `value` is not `<decimal ms>:<token>`
/// (foreign data in the key).
pub fn getset_expiry(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?;
    let (ms, token) = s.split_once(':')?;
    if ms.is_empty() || token.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ms.parse().ok()
}

/// A duration in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Turns an error reply into the error the caller sees.
fn error_from_reply(keys: &LegacyKeys, e: ErrorReply) -> Error {
    if e.is("WRONGTYPE") {
        Error::WrongType {
            name: keys.name.clone(),
            keys: keys.lock.clone(),
            message: e.message,
        }
    } else {
        Error::Redis {
            code: e.code,
            message: e.message,
        }
    }
}

/// The requests of one step (plain commands, one or two pipelined) and their outcomes as they
/// come back. Starting a step forgets the previous one, so late replies are ignored.
#[derive(Debug, Default)]
struct InFlight {
    ids: RequestIds,
    slots: Vec<(RequestId, Option<Result<Reply, TransportFailure>>)>,
}

impl InFlight {
    /// Requests numbered on from `ids`.
    fn continuing(ids: RequestIds) -> Self {
        InFlight {
            ids,
            slots: Vec::new(),
        }
    }

    /// The id counter, for a machine that takes over from this one.
    fn ids(&self) -> RequestIds {
        self.ids.clone()
    }

    /// Starts a step: gives each command an id.
    fn start(&mut self, commands: Vec<crate::command::Command>) -> Vec<Request> {
        self.slots.clear();
        commands
            .into_iter()
            .map(|command| {
                let id = self.ids.next();
                self.slots.push((id, None));
                Request { id, command }
            })
            .collect()
    }

    /// Takes the outcome of one request (ignored unless it belongs to the current step and is
    /// the first answer to it).
    fn handle(&mut self, input: Response) {
        if let Some((_, slot)) = self
            .slots
            .iter_mut()
            .find(|(id, slot)| *id == input.id && slot.is_none())
        {
            *slot = Some(input.result);
        }
    }

    /// Every outcome of the step, in request order, once all are in (the step is then over);
    /// `None` while some are still owed.
    fn take(&mut self) -> Option<Vec<Result<Reply, TransportFailure>>> {
        if self.slots.iter().any(|(_, slot)| slot.is_none()) {
            return None;
        }
        Some(
            std::mem::take(&mut self.slots)
                .into_iter()
                .filter_map(|(_, slot)| slot)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests;
