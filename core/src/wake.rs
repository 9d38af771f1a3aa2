//! The wake rules of a pub/sub listener, as pure state: which waiters a release message
//! wakes, when a freshly registered waiter must re-check at once, which channels to
//! (un)subscribe and on which shard. No socket, no thread, no clock: epochs and instants
//! are inputs. The blocking driver's listener thread does the I/O around a [`Registry`];
//! an embedder's async listener can use it the same way (see docs/embedding.md).
//!
//! # State
//!
//! A [`Registry`] holds one entry per channel: its waiters in registration order (each
//! with its tag and at most one *pending* wake, delivered but not yet taken), whether a
//! subscription was requested on the current connection, the epoch at which it was
//! confirmed (`None`: not subscribed), the epoch of its last message, and since when it
//! has had no waiter. The driver keeps one epoch counter (shared by all shard
//! connections of a cluster) and bumps it on every confirmation and message.
//!
//! ```text
//!  register ──► [unsubscribed] ── confirmed(epoch) ──► [subscribed] ── message ──► wake
//!                     ▲                                      │
//!                     └──────── disconnected / unsubscribed ─┘
//!  no waiter for `linger` ──► idle() drops the channel: UNSUBSCRIBE
//! ```
//!
//! # Rules
//!
//! - **Fair wake by token.** A message whose payload is a waiter's tag wakes exactly the
//!   waiters with that tag (the next in a fair queue).
//! - **Broadcast.** The payload [`WakeOn::ALL`] wakes every waiter of the channel.
//! - **Wake one.** Any other payload wakes the longest-waiting untagged waiter without a
//!   pending wake: a release wakes one thread per client, not a herd. A waiter that leaves
//!   with an untaken wake passes it on ([`Registry::unregister`]).
//! - **Register after attempt (no gap).** The driver notes the epoch when it sends the
//!   attempt that found the lock held. A waiter registering afterwards is woken at once
//!   if its channel was subscribed but not confirmed before that epoch, or had a message
//!   since (a release it may have missed). An unsubscribed channel's confirmation wakes
//!   all its waiters ([`Wake::Subscribed`]): a release before SUBSCRIBE took effect is
//!   never heard.
//! - **Held here.** While a lock is held by this client ([`Registry::hold`] to
//!   [`Registry::unhold`]: the driver's guard of a lease lock, ended before its release is
//!   sent), a plain release message on its channel wakes nobody: that release was taken by
//!   our own holder (it can only be a release before our grant, or one by another holder
//!   after our lease ran out), and a waiter's attempt now would find the lock held. Our
//!   holder's own release announces the lock free again. A message held back this way is
//!   owed: `unhold` wakes one waiter for it (the lease may have run out, so our release
//!   may announce nothing). A driver also leaves a waiter woken while the lock is held here
//!   asleep ([`Registry::held`]): the next release wakes it.
//! - **A returning holder keeps its turn.** A thread that releases a lock and takes it back
//!   at once (a loop of critical sections) would lose most races to the waiter its release
//!   woke, and make it retry in vain when it wins. When the last holder came back within
//!   [`MAX_GRACE`] last time, a waiter woken by its release waits [`Registry::grace`]
//!   (about twice that holder's time to come back) before its attempt, and sleeps on if
//!   the lock is held here again by then. One wake per release still; no attempt that
//!   can only fail.
//! - **An attempt in flight counts as held.** A thread's first attempt of an acquisition
//!   is held here from its send ([`Registry::attempt`]) to its reply: granted, it is the
//!   hold; refused, [`Registry::attempt_failed`] ends it (waking one waiter for a message
//!   held back meanwhile). A returning holder's attempt is in flight when its own
//!   release's message arrives: the waiter it would wake could only lose the race.
//! - **Patience.** A waiter defers to holders here (held, in flight, returning) for at
//!   most [`PATIENCE`] since its last attempt; after that, if a holder here released the
//!   lock meanwhile ([`Registry::released_since`]), the next release message or the end
//!   of its retry pause sends its attempt at once (no grace). A loop of critical sections
//!   on one thread keeps the lock, as a polling lock's holder does, and every waiter still
//!   tries about once per [`PATIENCE`], as a lock polled that often would; a lease held
//!   all along is not asked again before its release.
//! - **Reconnect.** [`Registry::disconnected`] forgets every confirmation;
//!   [`Registry::connected`] lists the channels to subscribe again; their new
//!   confirmations (at a newer epoch) wake every waiter.
//! - **Shard routing.** On a cluster each channel is served by the node owning its slot
//!   ([`node_for_slot`], cached by [`RouteCache`]); shard channels are subscribed one
//!   per command ([`subscription_commands`]).
//!
//! # Example
//!
//! ```
//! use redlease_core::WakeOn;
//! use redlease_core::wake::{Registry, Wake};
//!
//! let on = WakeOn { channel: "rl:{jobs}:released".into(), tag: None };
//! let mut epoch = 0; // the driver's counter, bumped on every confirmation and message
//! let mut registry = Registry::new();
//!
//! // An attempt found the lock held (sent at `epoch`); its waiter registers.
//! let w = registry.register(&on, Some(epoch));
//! assert_eq!(w.subscribe.as_deref(), Some("rl:{jobs}:released")); // send SUBSCRIBE
//! assert!(!w.wake_now);
//! // The confirmation wakes it: a release before the SUBSCRIBE took effect was missed.
//! epoch += 1;
//! assert_eq!(registry.confirmed(&on.channel, epoch), vec![(w.id, Wake::Subscribed)]);
//! assert_eq!(registry.take(&on.channel, w.id), Some(Wake::Subscribed));
//! // The retry finds the lock still held (sent at `epoch`): the waiter sleeps until a release.
//! epoch += 1;
//! assert_eq!(registry.message(&on.channel, None, epoch), vec![w.id]);
//! ```

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::WakeOn;

/// Why a waiter is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A release message (or a possibly missed one): retry now.
    Message,
    /// The subscription is confirmed; from now on no message is missed.
    Subscribed,
}

/// A registered waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u64);

/// What [`Registry::register`] asks of the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// The new waiter.
    pub id: WaiterId,
    /// The waiter must re-check at once (a wake is pending for it).
    pub wake_now: bool,
    /// Send a subscription for this channel (none was requested on this connection).
    pub subscribe: Option<String>,
}

#[derive(Debug)]
struct Slot {
    id: WaiterId,
    tag: Option<String>,
    pending: Option<Wake>,
}

#[derive(Debug, Default)]
struct Channel {
    waiters: VecDeque<Slot>,
    requested: bool,
    confirmed: Option<u64>,
    last_message: u64,
    idle_since: Option<Instant>,
}

impl Channel {
    /// Sets a pending wake on `slot` if it has none; true if it was set.
    fn ring(slot: &mut Slot, why: Wake) -> bool {
        if slot.pending.is_some() {
            return false;
        }
        slot.pending = Some(why);
        true
    }

    /// The longest-waiting untagged waiter without a pending wake.
    fn wake_one(&mut self) -> Option<WaiterId> {
        let slot = self
            .waiters
            .iter_mut()
            .find(|s| s.tag.is_none() && s.pending.is_none())?;
        slot.pending = Some(Wake::Message);
        Some(slot.id)
    }
}

/// The longest a woken waiter leaves a released lock to a returning holder
/// ([`Registry::grace`]).
pub const MAX_GRACE: Duration = Duration::from_micros(500);

/// The longest a waiter defers to holders of its own client (see the module doc's
/// *Patience*) before it attempts anyway.
pub const PATIENCE: Duration = Duration::from_millis(100);

/// The shortest grace: about one local round trip.
const MIN_GRACE: Duration = Duration::from_micros(50);

/// The locks held by this client on one channel (see the module doc's *Held here*).
#[derive(Debug, Default)]
struct Holds {
    count: u32,
    /// A release message was held back while held.
    owed: bool,
    /// Who released last, and when.
    last: Option<(u64, Instant)>,
    /// The last hold was taken by the thread that released just before, within
    /// [`MAX_GRACE`]: it comes back.
    returning: bool,
    /// How long it took to come back (smoothed).
    return_time: Duration,
}

/// The waiters of one pub/sub connection, by channel (see the module doc).
#[derive(Debug, Default)]
pub struct Registry {
    channels: HashMap<String, Channel>,
    next_waiter: u64,
    /// Channels whose lock this client holds, kept apart from `channels` (a hold needs no
    /// subscription).
    holds: HashMap<String, Holds>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers a waiter on `on`. `sent_epoch` is the epoch noted when the attempt that
    /// found the lock held was sent (`None`: unknown, re-check at once if subscribed).
    pub fn register(&mut self, on: &WakeOn, sent_epoch: Option<u64>) -> Registered {
        self.next_waiter += 1;
        let id = WaiterId(self.next_waiter);
        let entry = self.channels.entry(on.channel.clone()).or_default();
        entry.idle_since = None;
        let wake_now = match (entry.confirmed, sent_epoch) {
            // Subscribed before the attempt, and no message since: nothing was missed.
            (Some(c), Some(s)) if c <= s && entry.last_message <= s => false,
            // Subscribed, but the attempt may have raced a release: retry once now.
            (Some(_), _) => true,
            // Not subscribed yet: the confirmation wakes this waiter.
            (None, _) => false,
        };
        entry.waiters.push_back(Slot {
            id,
            tag: on.tag.clone(),
            pending: wake_now.then_some(Wake::Message),
        });
        let subscribe = (!entry.requested).then(|| on.channel.clone());
        entry.requested = true;
        Registered {
            id,
            wake_now,
            subscribe,
        }
    }

    /// Takes the pending wake of a waiter (it woke and consumed it).
    pub fn take(&mut self, channel: &str, id: WaiterId) -> Option<Wake> {
        let entry = self.channels.get_mut(channel)?;
        entry
            .waiters
            .iter_mut()
            .find(|s| s.id == id)?
            .pending
            .take()
    }

    /// Removes a waiter (it timed out, was served or gave up) at `now`. If it leaves with
    /// an untaken [`Wake::Message`] and no tag, the wake passes to the next untagged
    /// waiter, returned here: ring it.
    pub fn unregister(&mut self, channel: &str, id: WaiterId, now: Instant) -> Option<WaiterId> {
        let entry = self.channels.get_mut(channel)?;
        let at = entry.waiters.iter().position(|s| s.id == id)?;
        let slot = entry.waiters.remove(at)?;
        let passed = if slot.pending == Some(Wake::Message) && slot.tag.is_none() {
            entry.wake_one()
        } else {
            None
        };
        if entry.waiters.is_empty() {
            entry.idle_since = Some(now);
        }
        passed
    }

    /// A subscription to `channel` was confirmed at `epoch`: every waiter of it is woken
    /// (those without a pending wake are returned).
    pub fn confirmed(&mut self, channel: &str, epoch: u64) -> Vec<(WaiterId, Wake)> {
        let Some(entry) = self.channels.get_mut(channel) else {
            return Vec::new();
        };
        entry.confirmed = Some(epoch);
        entry
            .waiters
            .iter_mut()
            .filter_map(|s| Channel::ring(s, Wake::Subscribed).then_some((s.id, Wake::Subscribed)))
            .collect()
    }

    /// The server confirmed an unsubscription of `channel` (if it was requested again
    /// meanwhile, its subscription follows).
    pub fn unsubscribed(&mut self, channel: &str) {
        if let Some(entry) = self.channels.get_mut(channel) {
            entry.confirmed = None;
        }
    }

    /// A message with `payload` arrived on `channel` at `epoch`: the waiters to wake.
    pub fn message(&mut self, channel: &str, payload: Option<&[u8]>, epoch: u64) -> Vec<WaiterId> {
        let Some(entry) = self.channels.get_mut(channel) else {
            return Vec::new();
        };
        entry.last_message = epoch;
        let plain = payload.is_none_or(|p| {
            p != WakeOn::ALL.as_bytes()
                && !entry
                    .waiters
                    .iter()
                    .any(|s| s.tag.as_deref().map(str::as_bytes) == Some(p))
        });
        if plain && let Some(h) = self.holds.get_mut(channel).filter(|h| h.count > 0) {
            // Held here: our holder's release announces it again.
            h.owed = true;
            return Vec::new();
        }
        let tagged = |s: &Slot, p: &[u8]| s.tag.as_deref().map(str::as_bytes) == Some(p);
        match payload {
            Some(p) if p == WakeOn::ALL.as_bytes() => entry
                .waiters
                .iter_mut()
                .filter_map(|s| Channel::ring(s, Wake::Message).then_some(s.id))
                .collect(),
            Some(p) if entry.waiters.iter().any(|s| tagged(s, p)) => entry
                .waiters
                .iter_mut()
                .filter(|s| tagged(s, p))
                .filter_map(|s| Channel::ring(s, Wake::Message).then_some(s.id))
                .collect(),
            _ => entry.wake_one().into_iter().collect(),
        }
    }

    /// This client now holds the lock announced on `channel` (its grant came back): until
    /// [`unhold`](Self::unhold), a plain release message there wakes nobody.
    ///
    /// `holder` names the thread (any number the driver picks), `now` is when the grant
    /// came back: a holder that releases and takes the lock again within [`MAX_GRACE`] is
    /// *returning* (a loop around a critical section), and waiters woken by its releases
    /// leave it a moment to come back ([`grace`](Self::grace)).
    pub fn hold(&mut self, channel: &str, holder: u64, now: Instant) {
        let h = match self.holds.get_mut(channel) {
            Some(h) => h,
            None => self.holds.entry(channel.to_owned()).or_default(),
        };
        h.count += 1;
        let back = h.last.and_then(|(who, at)| {
            let took = now.saturating_duration_since(at);
            (who == holder && took <= MAX_GRACE).then_some(took)
        });
        h.returning = back.is_some();
        if let Some(took) = back {
            h.return_time = if h.return_time.is_zero() {
                took
            } else {
                (h.return_time * 3 + took) / 4
            };
        }
    }

    /// This client is about to release (or has lost) a lock it held on `channel`: call it
    /// before the release is sent, so that the release's own message wakes a waiter. If a
    /// message was held back meanwhile and no other hold is left, one waiter is woken for it
    /// (returned: ring it). An `unhold` without a `hold` does nothing.
    pub fn unhold(&mut self, channel: &str, holder: u64, now: Instant) -> Option<WaiterId> {
        let h = self.holds.get_mut(channel).filter(|h| h.count > 0)?;
        h.count -= 1;
        if h.count > 0 {
            return None;
        }
        h.last = Some((holder, now));
        let owed = std::mem::take(&mut h.owed);
        if owed {
            self.channels.get_mut(channel)?.wake_one()
        } else {
            None
        }
    }

    /// A thread of this client sends its first attempt at the lock announced on `channel`:
    /// until its reply, the lock counts as held here (as [`hold`](Self::hold) from `now`,
    /// see the module doc's *An attempt in flight counts as held*). Granted, the hold goes
    /// on (no second `hold`); refused or failed, [`attempt_failed`](Self::attempt_failed).
    pub fn attempt(&mut self, channel: &str, holder: u64, now: Instant) {
        self.hold(channel, holder, now);
    }

    /// The attempt of [`attempt`](Self::attempt) was not granted (the lock is held
    /// elsewhere, or the reply never came): no longer held for it. If a message was held
    /// back meanwhile and no other hold is left, one waiter is woken for it (returned:
    /// ring it). Unlike [`unhold`](Self::unhold), no release is recorded.
    pub fn attempt_failed(&mut self, channel: &str) -> Option<WaiterId> {
        let h = self.holds.get_mut(channel).filter(|h| h.count > 0)?;
        h.count -= 1;
        if h.count > 0 || !std::mem::take(&mut h.owed) {
            return None;
        }
        self.channels.get_mut(channel)?.wake_one()
    }

    /// [`unhold`](Self::unhold) before a release that announces itself when it succeeds:
    /// a message held back meanwhile wakes nobody yet. Returns whether one was (then call
    /// [`release_ended`](Self::release_ended) with the release's outcome). While this
    /// client held the lock, a release message was either one from before its grant (its
    /// own previous release, the usual case in a loop of critical sections: that message
    /// arrives while the next attempt is in flight) or one by a holder after this one's
    /// lease ran out; in the second case this release finds the lock not ours and
    /// announces nothing.
    pub fn release_begun(&mut self, channel: &str, holder: u64, now: Instant) -> bool {
        let Some(h) = self.holds.get_mut(channel).filter(|h| h.count > 0) else {
            return false;
        };
        h.count -= 1;
        if h.count > 0 {
            return false;
        }
        h.last = Some((holder, now));
        std::mem::take(&mut h.owed)
    }

    /// The release after [`release_begun`](Self::release_begun) said a message was owed:
    /// `announced`, it released and its own message wakes a waiter (the owed one was
    /// stale); else one waiter is woken for the owed message (returned: ring it), or, if
    /// the lock is held here again, its release owes it.
    pub fn release_ended(&mut self, channel: &str, announced: bool) -> Option<WaiterId> {
        if announced {
            return None;
        }
        if let Some(h) = self.holds.get_mut(channel).filter(|h| h.count > 0) {
            h.owed = true;
            return None;
        }
        self.channels.get_mut(channel)?.wake_one()
    }

    /// Whether a holder of this client released the lock on `channel` after `at` (see the
    /// module doc's *Patience*: a waiter out of patience attempts only if the lock changed
    /// hands here since its last attempt; one lease held all along would still refuse it).
    pub fn released_since(&self, channel: &str, at: Instant) -> bool {
        self.holds
            .get(channel)
            .and_then(|h| h.last)
            .is_some_and(|(_, last)| last > at)
    }

    /// Whether this client holds the lock announced on `channel`: a waiter woken now would
    /// find it held; it may sleep on until the next release.
    pub fn held(&self, channel: &str) -> bool {
        self.holds.get(channel).is_some_and(|h| h.count > 0)
    }

    /// Until when a waiter woken by a release on `channel` at `now` leaves the lock to its
    /// last holder, when that holder is returning (it took the lock back within
    /// [`MAX_GRACE`] of its release last time): twice its usual time to come back, within
    /// `[50 µs, MAX_GRACE]` of the release. `None`: attempt at once. A returning holder
    /// re-takes a lock it just left in about one round trip; a woken waiter racing it would
    /// mostly find it taken, costing a round trip and a wake-up each time, and leaving the
    /// lock idle while it is handed over. After the grace the waiter re-checks
    /// ([`held`](Self::held)): held again, it sleeps on until the next release.
    pub fn grace(&self, channel: &str, now: Instant) -> Option<Instant> {
        let h = self.holds.get(channel)?;
        if h.count > 0 || !h.returning {
            return None;
        }
        let (_, at) = h.last?;
        let until = at + (h.return_time * 2).clamp(MIN_GRACE, MAX_GRACE);
        (now < until).then_some(until)
    }

    /// A (new) connection is up: the channels to subscribe on it (everything waited on or
    /// lingering), each now marked requested and unconfirmed.
    pub fn connected(&mut self) -> Vec<String> {
        for entry in self.channels.values_mut() {
            entry.requested = true;
            entry.confirmed = None;
        }
        self.channels.keys().cloned().collect()
    }

    /// The connection is gone: nothing is subscribed any more. Waiters keep waiting on
    /// their own deadlines; the next confirmation wakes them.
    pub fn disconnected(&mut self) {
        for entry in self.channels.values_mut() {
            entry.requested = false;
            entry.confirmed = None;
        }
    }

    /// Drops the channels without waiters for longer than `linger` at `now`: the
    /// channels to unsubscribe.
    pub fn idle(&mut self, now: Instant, linger: Duration) -> Vec<String> {
        let idle: Vec<String> = self
            .channels
            .iter()
            .filter(|(_, c)| {
                c.waiters.is_empty()
                    && c.idle_since
                        .is_some_and(|t| now.saturating_duration_since(t) > linger)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in &idle {
            self.channels.remove(name);
        }
        // What is remembered of a lock no longer held here.
        self.holds.retain(|_, h| {
            h.count > 0
                || h.owed
                || h.last
                    .is_some_and(|(_, at)| now.saturating_duration_since(at) <= linger)
        });
        idle
    }

    /// How many channels are subscribed or lingering.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }
}

/// The (un)subscription commands for `channels`: one command per channel when `sharded`
/// (`SSUBSCRIBE`/`SUNSUBSCRIBE`: shard channels of different slots cannot share one),
/// else all in one (`SUBSCRIBE`/`UNSUBSCRIBE`). Each command is its arguments.
pub fn subscription_commands(
    sharded: bool,
    subscribe: bool,
    channels: &[String],
) -> Vec<Vec<String>> {
    if channels.is_empty() {
        return Vec::new();
    }
    let cmd = match (sharded, subscribe) {
        (true, true) => "SSUBSCRIBE",
        (true, false) => "SUNSUBSCRIBE",
        (false, true) => "SUBSCRIBE",
        (false, false) => "UNSUBSCRIBE",
    };
    if sharded {
        channels
            .iter()
            .map(|c| vec![cmd.to_owned(), c.clone()])
            .collect()
    } else {
        let mut args = vec![cmd.to_owned()];
        args.extend(channels.iter().cloned());
        vec![args]
    }
}

/// A cluster node's host and port.
pub type NodeAddr = (String, u16);

/// One slot range of `CLUSTER SLOTS` and its master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub lo: i64,
    /// Last slot (inclusive).
    pub hi: i64,
    /// The master serving the range.
    pub master: NodeAddr,
}

/// The master serving `slot`, if a range covers it.
pub fn node_for_slot(slot: i64, ranges: &[SlotRange]) -> Option<NodeAddr> {
    ranges
        .iter()
        .find(|r| (r.lo..=r.hi).contains(&slot))
        .map(|r| r.master.clone())
}

/// Learned channel -> node routes, each trusted for a time-to-live (after a resharding,
/// a moved slot's waiters move to its new node once the route has expired).
#[derive(Debug)]
pub struct RouteCache {
    ttl: Duration,
    routes: HashMap<String, (NodeAddr, Instant)>,
}

impl RouteCache {
    /// An empty cache whose routes are trusted for `ttl`.
    pub fn new(ttl: Duration) -> RouteCache {
        RouteCache {
            ttl,
            routes: HashMap::new(),
        }
    }

    /// The node learned for `channel`, if learned less than the ttl before `now`.
    pub fn get(&self, channel: &str, now: Instant) -> Option<NodeAddr> {
        let (node, at) = self.routes.get(channel)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| node.clone())
    }

    /// Records that `node` serves `channel`, as of `now`.
    pub fn learn(&mut self, channel: &str, node: NodeAddr, now: Instant) {
        self.routes.insert(channel.to_owned(), (node, now));
    }
}

#[cfg(test)]
mod tests;
