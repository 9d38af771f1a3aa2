//! The one trait every machine implements, and what a machine can ask for.

use std::time::Instant;

use crate::command::Request;
use crate::error::Error;
use crate::reply::Response;

/// A sans-IO protocol: a value driven by its caller.
///
/// The contract, the same for every machine:
///
/// 1. Call [`poll`](Protocol::poll) with the current time.
/// 2. On [`Step::Send`], send every request (in order, to the node each names) and feed
///    each outcome back with [`handle`](Protocol::handle), a reply or a
///    [`TransportFailure`](crate::TransportFailure), in any order; then poll again.
/// 3. On [`Step::Wait`], poll again once `until` has passed; when a message arrives on
///    `wake_on` before that, call [`wake`](Protocol::wake) and poll at once. (Polling early
///    without a wake is harmless: the machine asks to wait again.)
/// 4. On [`Step::Done`], the machine is finished; polling it again yields
///    [`Error::Finished`].
///
/// There is no other case. Polling before every request of the last batch got its response
/// is a driver bug; the machine then asks to wait until the batch's deadline, and polled at or
/// after that deadline it ends with [`Error::Driver`].
///
/// Replies with an id the machine no longer waits for are ignored, so a driver may
/// deliver a late reply without harm. Nothing inside a machine reads a clock, touches the
/// network, sleeps or draws random numbers: time is the `now` argument, randomness is
/// passed in when the machine is created.
pub trait Protocol {
    /// What the machine yields when it is done.
    type Output;

    /// What the machine wants next.
    fn poll(&mut self, now: Instant) -> Step<Self::Output>;

    /// Feeds the outcome of one request sent after a [`Step::Send`].
    fn handle(&mut self, response: Response, now: Instant);

    /// Tells the machine that a message arrived on the channel its last [`Step::Wait`]
    /// named (or that one may have been missed): it should act now rather than at `until`.
    /// Machines that never name a channel keep this default, which ignores it.
    fn wake(&mut self, now: Instant) {
        let _ = now;
    }
}

/// What a machine wants next.
#[derive(Debug)]
#[must_use = "a step must be carried out for the machine to make progress"]
pub enum Step<T> {
    /// Send these requests, then feed back one [`Response`] for each.
    Send(Batch),
    /// Nothing to send until `until` (or a message on `wake_on`).
    Wait(Wait),
    /// The machine is finished.
    Done(Result<T, Error>),
}

/// Requests to send now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The requests, in the order they should be written.
    pub requests: Vec<Request>,
    /// When the machine stops caring for the answers: a driver should not block for a
    /// reply past this instant (it reports a [`FailureKind::NoReply`](crate::FailureKind)
    /// instead).
    pub deadline: Instant,
    /// How long the server may legitimately hold a reply back (a `WAIT`'s timeout): a driver
    /// waits that much longer than its usual reply timeout, within `deadline`.
    pub server_wait: std::time::Duration,
    /// Send on the connection the previous batch of this machine used (a `WAIT` vouches only
    /// for its own connection's writes). A driver that cannot must fail the requests as not
    /// sent rather than use another connection.
    pub same_connection: bool,
}

impl Batch {
    /// A batch of ordinary commands (the server answers at once).
    pub fn new(requests: Vec<Request>, deadline: Instant) -> Self {
        Batch {
            requests,
            deadline,
            server_wait: std::time::Duration::ZERO,
            same_connection: false,
        }
    }
}

/// A pause the machine asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// Poll again at this instant at the latest.
    pub until: Instant,
    /// A pub/sub channel whose messages may end the wait early (a release notification).
    /// Drivers that do not listen simply wait until `until`.
    pub wake_on: Option<WakeOn>,
    /// `Some(t)`: what the machine waits for cannot happen before `t` unless a message on
    /// `wake_on` comes or the data changes otherwise (another client's call, an eviction):
    /// `t` is the next instant the last answer changes by itself (the holder's ttl runs
    /// out, a delayed job falls due), at most the machine's deadline. `until` is earlier
    /// when the machine polls (a message may be lost on the way). A driver that sees every
    /// change to the data and every message (the in-process server) may sleep until `t`
    /// instead, going back to `until` when the data changes; every other driver waits
    /// until `until`. `None`: nothing is known; wait until `until`.
    pub unchanged_until: Option<Instant>,
}

impl Wait {
    /// A wait until `until`, woken by nothing, with nothing known about when things change.
    pub fn until(until: Instant) -> Self {
        Wait {
            until,
            wake_on: None,
            unchanged_until: None,
        }
    }
}

/// Which messages end a [`Wait`] early.
///
/// `channel` is the plain channel name (`<prefix>:{<name>}:released` for a lock,
/// `...:q:pushed` for a queue). A driver listens to it with `SUBSCRIBE`, or with
/// `SSUBSCRIBE` when the keyspace announces on shard channels
/// ([`Keyspace::with_sharded_pubsub`](crate::keys::Keyspace::with_sharded_pubsub): the
/// scripts then `SPUBLISH`, and a plain subscriber hears nothing). A message published
/// before the subscription took effect is never delivered: once the `SUBSCRIBE` (or
/// `SSUBSCRIBE`) is confirmed, call [`Protocol::wake`] once on every machine already
/// waiting on the channel, so that a release that fell in that gap is not missed (the
/// machine then simply tries again).
///
/// A driver routes each message on `channel` by its payload: the payload
/// [`WakeOn::ALL`] wakes every waiter of the channel; a payload equal to a waiter's `tag`
/// wakes that waiter; any other payload wakes one untagged waiter (the longest waiting), so a
/// release wakes one contender per client rather than a herd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeOn {
    /// The channel.
    pub channel: String,
    /// `Some(t)`: only messages whose payload is `t` (or [`WakeOn::ALL`]) concern this waiter.
    pub tag: Option<String>,
}

impl WakeOn {
    /// The payload that wakes every waiter of a channel.
    pub const ALL: &'static str = "*";

    /// Wake on any message of `channel` (one waiter per message).
    pub fn any(channel: &str) -> Self {
        WakeOn {
            channel: channel.to_owned(),
            tag: None,
        }
    }

    /// Wake only on messages of `channel` that name `tag` (or everyone).
    pub fn tagged(channel: &str, tag: &str) -> Self {
        WakeOn {
            channel: channel.to_owned(),
            tag: Some(tag.to_owned()),
        }
    }

    /// Whether a message (`channel`, `payload`) may wake this waiter: on its channel, and
    /// [`WakeOn::ALL`], its tag, or any payload for an untagged waiter. Enough for a driver
    /// with one waiter per channel; with several, the rule of one untagged waiter per
    /// message is [`wake::Registry`](crate::wake::Registry)'s.
    ///
    /// ```
    /// use redlease_core::WakeOn;
    ///
    /// let fair = WakeOn::tagged("app:{printer}:released", "a1");
    /// assert!(fair.concerns("app:{printer}:released", b"a1"));
    /// assert!(fair.concerns("app:{printer}:released", b"*"));
    /// assert!(!fair.concerns("app:{printer}:released", b"b2")); // the next in line is b2
    /// assert!(WakeOn::any("app:{report}:released").concerns("app:{report}:released", b"1"));
    /// assert!(!WakeOn::any("app:{report}:released").concerns("app:{other}:released", b"1"));
    /// ```
    pub fn concerns(&self, channel: &str, payload: &[u8]) -> bool {
        channel == self.channel
            && match &self.tag {
                None => true,
                Some(tag) => payload == Self::ALL.as_bytes() || payload == tag.as_bytes(),
            }
    }
}

/// What a machine says when it is polled while requests of its last batch are unanswered
/// (the driver should have fed every response first): wait until that batch's deadline,
/// by which every request must have its response; polled at or after it, the machine ends
/// with [`Error::Driver`]. So no poll ever yields a state a driver cannot act on.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Outstanding {
    /// The deadline of the last batch sent.
    deadline: Option<Instant>,
}

impl Outstanding {
    /// Notes the deadline of a batch the machine is about to yield.
    pub(crate) fn track<T>(&mut self, step: &Step<T>) {
        if let Step::Send(batch) = step {
            self.deadline = Some(batch.deadline);
        }
    }

    /// The step for a poll that found requests unanswered.
    pub(crate) fn step<T>(&self, now: Instant) -> Step<T> {
        match self.deadline {
            Some(until) if now < until => Step::Wait(Wait::until(until)),
            _ => Step::Done(Err(Error::Driver(
                "polled after the batch deadline with requests still unanswered: every request needs a response",
            ))),
        }
    }
}
