//! Pub/sub: subscribers with their own queue of messages, fed by PUBLISH and SPUBLISH
//! (from scripts or sent directly).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::Shared;

/// A message a subscriber received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The channel it was published on.
    pub channel: Vec<u8>,
    /// The payload.
    pub payload: Vec<u8>,
    /// Published with `SPUBLISH` to a shard channel (received through `SSUBSCRIBE`).
    pub sharded: bool,
}

struct Entry {
    channels: HashSet<Vec<u8>>,
    shard_channels: HashSet<Vec<u8>>,
    tx: Sender<Message>,
}

/// Who listens to what.
#[derive(Default)]
pub(crate) struct PubSub {
    subscribers: HashMap<u64, Entry>,
    next_id: u64,
    /// Deliveries still to drop (a fault).
    pub(crate) drop_next: u64,
    /// Deliveries dropped so far.
    pub(crate) dropped: u64,
}

impl PubSub {
    /// Delivers to every subscriber of `channel` (of its kind); returns how many there are,
    /// as Redis does (dropped deliveries count: the loss is on the way).
    pub(crate) fn publish(&mut self, channel: &[u8], payload: &[u8], sharded: bool) -> usize {
        let mut n = 0;
        for e in self.subscribers.values() {
            let set = if sharded {
                &e.shard_channels
            } else {
                &e.channels
            };
            if !set.contains(channel) {
                continue;
            }
            n += 1;
            if self.drop_next > 0 {
                self.drop_next -= 1;
                self.dropped += 1;
                continue;
            }
            // A receiver dropped without unsubscribing is gone: nothing to deliver to.
            let _ = e.tx.send(Message {
                channel: channel.to_vec(),
                payload: payload.to_vec(),
                sharded,
            });
        }
        n
    }

    /// How many subscribers listen to `channel` (of its kind): `PUBSUB NUMSUB`, or
    /// `SHARDNUMSUB` for shard channels.
    pub(crate) fn numsub(&self, channel: &[u8], sharded: bool) -> usize {
        self.subscribers
            .values()
            .filter(|e| {
                if sharded {
                    e.shard_channels.contains(channel)
                } else {
                    e.channels.contains(channel)
                }
            })
            .count()
    }

    fn add(&mut self) -> (u64, Receiver<Message>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.next_id += 1;
        self.subscribers.insert(
            self.next_id,
            Entry {
                channels: HashSet::new(),
                shard_channels: HashSet::new(),
                tx,
            },
        );
        (self.next_id, rx)
    }

    /// Cuts every subscriber's connection (a restart): their receivers disconnect.
    pub(crate) fn disconnect_all(&mut self) {
        self.subscribers.clear();
    }
}

/// One subscriber connection to a [`MemoryServer`](super::MemoryServer): the channels it
/// listens to and the queue of messages it received. Dropping it unsubscribes.
///
/// A server restart cuts it ([`is_connected`](Self::is_connected) turns false, the
/// receiver disconnects): make a new one, as a client reconnects and subscribes again.
pub struct Subscriber {
    shared: Arc<Shared>,
    id: u64,
    rx: Receiver<Message>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").field("id", &self.id).finish()
    }
}

impl Subscriber {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let (id, rx) = shared.state().pubsub.add();
        Subscriber { shared, id, rx }
    }

    fn update(&self, f: impl FnOnce(&mut Entry)) -> bool {
        let mut state = self.shared.state();
        match state.pubsub.subscribers.get_mut(&self.id) {
            Some(e) => {
                f(e);
                true
            }
            None => false,
        }
    }

    /// Listens to `channels` (`SUBSCRIBE`). False if the connection was cut.
    pub fn subscribe<C: AsRef<[u8]>>(&self, channels: &[C]) -> bool {
        self.update(|e| {
            e.channels
                .extend(channels.iter().map(|c| c.as_ref().to_vec()))
        })
    }

    /// Stops listening to `channels` (`UNSUBSCRIBE`). False if the connection was cut.
    pub fn unsubscribe<C: AsRef<[u8]>>(&self, channels: &[C]) -> bool {
        self.update(|e| {
            for c in channels {
                e.channels.remove(c.as_ref());
            }
        })
    }

    /// Listens to shard channels (`SSUBSCRIBE`). False if the connection was cut.
    pub fn ssubscribe<C: AsRef<[u8]>>(&self, channels: &[C]) -> bool {
        self.update(|e| {
            e.shard_channels
                .extend(channels.iter().map(|c| c.as_ref().to_vec()))
        })
    }

    /// Stops listening to shard channels (`SUNSUBSCRIBE`). False if the connection was cut.
    pub fn sunsubscribe<C: AsRef<[u8]>>(&self, channels: &[C]) -> bool {
        self.update(|e| {
            for c in channels {
                e.shard_channels.remove(c.as_ref());
            }
        })
    }

    /// Whether the connection still stands (a restart cuts it).
    pub fn is_connected(&self) -> bool {
        self.shared
            .state()
            .pubsub
            .subscribers
            .contains_key(&self.id)
    }

    /// The next message received, if any (`None` also once cut and drained).
    pub fn try_recv(&self) -> Option<Message> {
        self.rx.try_recv().ok()
    }

    /// The queue of received messages, to wait on with a deadline (`recv_deadline`, or in a
    /// `select!` beside other channels). It disconnects when the server cuts the connection.
    pub fn receiver(&self) -> &Receiver<Message> {
        &self.rx
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.shared.state().pubsub.subscribers.remove(&self.id);
    }
}
