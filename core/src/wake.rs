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

/// The waiters of one pub/sub connection, by channel (see the module doc).
#[derive(Debug, Default)]
pub struct Registry {
    channels: HashMap<String, Channel>,
    next_waiter: u64,
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
