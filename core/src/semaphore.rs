//! The fair counting semaphore: at most `permits` holders at once, each with its own permit
//! timeout, served in the order they started waiting. Every decision runs in one script on the
//! server's clock, so client clock skew can neither steal nor extend a permit.
//!
//! A permit is a lease of kind [`LeaseKind::Permit`]: it is acquired by the shared
//! acquisition machine ([`Acquire`](crate::lease::Acquire)) from the spec
//! [`SemaphoreKeys::permit`] makes, and released, extended or inspected with
//! [`ScriptOp`] like any lease. The count itself is read and set with
//! [`read`] and [`set_permits`].
//!
//! ```text
//!   Acquire ──EVALSHA permit_acquire──► Sent ────0────► Done(Acquired(permit, fence 0))
//!      ▲                                  │                  │ ScriptOp<Extend> (watchdog)
//!      │                          {0,ms}: │ full; we joined  ▼
//!      │                          the line (waiters, FIFO)  ScriptOp<Release>
//!      └── Wait(retry, wake on <stem>:sem:wake tagged       (permit_release: wakes the
//!           with our token) ◄─────────────┘                  next waiter by its token)
//!   deadline passed: permit_cancel (leave the line) then Timeout.
//!   trying once (LockSpec::trying_once): never joins the line; Busy at once.
//! ```
//!
//! A walk through that graph with scripted replies: the semaphore is full, the waiter is woken
//! by a release naming its token, gets its permit, and releases it.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Protocol, Reply, Response, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LeaseKind, ScriptOp, Token};
//! use redlease_core::semaphore::SemaphoreKeys;
//!
//! let keys = SemaphoreKeys::new(&Keyspace::default(), "api").unwrap();
//! let token = Token::from_random([1; 16]);
//! let (ttl, waiter_timeout) = (Duration::from_secs(10), Duration::from_secs(5));
//! let spec = keys.permit(token.clone(), ttl, 3, waiter_timeout).unwrap();
//! let options = AcquireOptions { wait: Some(Duration::from_secs(2)), ..Default::default() };
//! let mut now = Instant::now();
//! let mut acquire = Acquire::new(spec, &options, 7, now).unwrap();
//!
//! // Sent: the acquisition script.
//! let Step::Send(batch) = acquire.poll(now) else { unreachable!() };
//! // {0, ms}: all three permits are held; we are in line.
//! let busy = Reply::Array(vec![Reply::Int(0), Reply::Int(40)]);
//! acquire.handle(Response::reply(batch.requests[0].id, busy), now);
//! let Step::Wait(wait) = acquire.poll(now) else { unreachable!() };
//! let wake_on = wait.wake_on.unwrap();
//! assert_eq!(wake_on.channel, keys.channel);
//! assert_eq!(wake_on.tag.as_deref(), Some(token.as_str()));
//!
//! // A release names our token: wake, and try again at once.
//! now += Duration::from_millis(3);
//! acquire.wake(now);
//! let Step::Send(batch) = acquire.poll(now) else { unreachable!() };
//! // Granted: the script answers 0 (a permit's fence).
//! let granted = Reply::Int(0);
//! acquire.handle(Response::reply(batch.requests[0].id, granted), now);
//! let Step::Done(Ok(Acquisition::Acquired(permit))) = acquire.poll(now) else { unreachable!() };
//! assert_eq!((permit.kind, permit.fence), (LeaseKind::Permit, 0));
//!
//! // Release: 1 = it was ours.
//! let mut release = ScriptOp::release(&permit, now + Duration::from_secs(1));
//! let Step::Send(batch) = release.poll(now) else { unreachable!() };
//! release.handle(Response::reply(batch.requests[0].id, Reply::Int(1)), now);
//! assert!(matches!(release.poll(now), Step::Done(Ok(()))));
//! ```

use std::time::{Duration, Instant};

use crate::error::Error;
use crate::keys::{Keyspace, cat};
use crate::lease::scripts::{
    PERMIT_ACQUIRE, PERMIT_CANCEL, PERMIT_RELEASE, READ_EXTEND, READ_INSPECT, SEMAPHORE_SET,
    SEMAPHORE_STATE,
};
use crate::lease::spec::{ms, undoing};
use crate::lease::{
    LeaseCalls, LeaseKind, LockSpec, OpKind, ScriptOp, Target, Token, pttl, validate_ttl,
};
use crate::protocol::WakeOn;
use crate::reply::Reply;
use crate::script::ScriptCall;

/// The keys of the semaphore `name`: `<stem>:sem:holders` (holders with their own expiry, in
/// server time), `<stem>:sem:waiters` and `<stem>:sem:timeouts` (the line, and when each
/// waiter is dropped if it stops asking), `<stem>:sem:permits` (the count), and the wake
/// channel `<stem>:sem:wake`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreKeys {
    /// The name the caller gave.
    pub name: String,
    /// Sorted set of holder token -> expiry (server ms).
    pub holders: String,
    /// Sorted set of waiting tokens, in arrival order.
    pub waiters: String,
    /// Sorted set of waiting token -> when it is dropped from the line.
    pub timeouts: String,
    /// The permit count.
    pub count: String,
    /// Acquisitions undone after a lost reply (see [`LockSpec::undo`]).
    pub undone: String,
    /// The channel releases announce on (plain name).
    pub channel: String,
    /// The channel as passed to scripts (see [`Keyspace::notify_arg`]).
    pub notify: String,
}

impl SemaphoreKeys {
    /// The keys of semaphore `name` (an empty or too long name is refused).
    pub fn new(keyspace: &Keyspace, name: &str) -> Result<Self, Error> {
        let stem = keyspace.stem(name)?;
        let channel = cat(&[&stem, ":sem:wake"]);
        Ok(SemaphoreKeys {
            name: name.to_owned(),
            holders: cat(&[&stem, ":sem:holders"]),
            waiters: cat(&[&stem, ":sem:waiters"]),
            timeouts: cat(&[&stem, ":sem:timeouts"]),
            count: cat(&[&stem, ":sem:permits"]),
            undone: cat(&[&stem, ":undone"]),
            notify: keyspace.notify_arg(&channel),
            channel,
        })
    }

    /// What acquiring one permit needs (1 to [`MAX_PERMITS`](crate::limits::MAX_PERMITS)
    /// permits; `ttl` is the permit timeout): a holder is dropped once its permit expires,
    /// a waiter after `waiter_timeout` without an attempt, and the count is set to `permits`
    /// by the first acquisition if none is stored (see [`set_permits`]). A permit's fence
    /// is 0: permits are not exclusive.
    pub fn permit(
        &self,
        token: Token,
        ttl: Duration,
        permits: u64,
        waiter_timeout: Duration,
    ) -> Result<LockSpec, Error> {
        validate_ttl("permit timeout", ttl)?;
        validate_ttl("waiter timeout", waiter_timeout)?;
        crate::limits::permits(permits)?;
        let SemaphoreKeys {
            name,
            holders,
            waiters,
            timeouts,
            count,
            undone,
            channel,
            notify,
        } = self;
        let four = |script| {
            ScriptCall::new(script)
                .keys(&[holders, waiters, timeouts, count])
                .owner_arg(&token)
                .arg(notify)
        };
        Ok(LockSpec {
            kind: LeaseKind::Permit,
            acquire: ScriptCall::new(&PERMIT_ACQUIRE)
                .keys(&[holders, waiters, timeouts, count, undone])
                .owner_arg(&token)
                .arg(ms(ttl))
                .arg(ms(waiter_timeout))
                .arg(permits.to_string())
                .arg("1"),
            calls: LeaseCalls::new(
                four(&PERMIT_RELEASE),
                ScriptCall::new(&READ_EXTEND).key(holders).owner_arg(&token),
                ScriptCall::new(&READ_INSPECT)
                    .key(holders)
                    .owner_arg(&token),
            ),
            cancel: Some(four(&PERMIT_CANCEL)),
            undo: Some(undoing(four(&PERMIT_RELEASE), undone)),
            queued: true,
            wake: WakeOn::tagged(channel, token.as_str()),
            notify: notify.clone(),
            fenced: true,
            target: Target {
                name: name.clone().into(),
                keys: vec![
                    holders.clone(),
                    waiters.clone(),
                    timeouts.clone(),
                    count.clone(),
                ]
                .into(),
            },
            token,
            ttl,
        })
    }

    fn target(&self) -> Target {
        Target {
            name: self.name.clone().into(),
            keys: vec![
                self.holders.clone(),
                self.waiters.clone(),
                self.timeouts.clone(),
                self.count.clone(),
            ]
            .into(),
        }
    }
}

/// Set a semaphore's permit count. Yields the previous count (`None`: none was set).
#[derive(Debug, Clone, Copy, Default)]
pub struct SetPermits;

/// Read a semaphore. Yields a [`SemaphoreState`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadSemaphore;

/// A semaphore as Redis sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreState {
    /// The permit count (`None`: not set yet; the first acquisition sets it).
    pub permits: Option<u64>,
    /// Live holders: their token and the time left on their permit.
    pub holders: Vec<(String, Duration)>,
    /// Live waiters, in the order they will be served.
    pub waiters: Vec<String>,
}

impl OpKind for SetPermits {
    type Output = Option<u64>;
    const CONTEXT: &'static str = "semaphore permit count";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Option<u64>, Error>> {
        let before = reply.as_int()?;
        Some(Ok(u64::try_from(before).ok()))
    }
}

fn text(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) => String::from_utf8(b.clone()).ok(),
        Reply::Status(s) => Some(s.clone()),
        _ => None,
    }
}

impl OpKind for ReadSemaphore {
    type Output = SemaphoreState;
    const CONTEXT: &'static str = "semaphore state";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<SemaphoreState, Error>> {
        let [permits, holders, waiters] = reply.as_array()? else {
            return None;
        };
        let holders = holders
            .as_array()?
            .chunks(2)
            .map(|pair| match pair {
                [token, ms] => Some((text(token)?, pttl(ms.as_int()?)?)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let waiters = waiters
            .as_array()?
            .iter()
            .map(text)
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(SemaphoreState {
            permits: u64::try_from(permits.as_int()?).ok(),
            holders,
            waiters,
        }))
    }
}

/// Sets the permit count of the semaphore `keys` name, giving up at `deadline`: 1 to
/// [`MAX_PERMITS`](crate::limits::MAX_PERMITS), anything else is refused before anything is
/// sent. Yields the previous count.
pub fn set_permits(
    keys: &SemaphoreKeys,
    permits: u64,
    deadline: Instant,
) -> Result<ScriptOp<SetPermits>, Error> {
    crate::limits::permits(permits)?;
    let call = ScriptCall::new(&SEMAPHORE_SET)
        .key(&keys.holders)
        .key(&keys.waiters)
        .key(&keys.count)
        .arg(permits.to_string())
        .arg(&keys.notify);
    Ok(ScriptOp::new(
        SetPermits,
        call,
        keys.target(),
        None,
        deadline,
    ))
}

/// Reads the semaphore `keys` name (count, live holders, live waiters), giving up at
/// `deadline`.
pub fn read(keys: &SemaphoreKeys, deadline: Instant) -> ScriptOp<ReadSemaphore> {
    let call = ScriptCall::new(&SEMAPHORE_STATE)
        .key(&keys.holders)
        .key(&keys.waiters)
        .key(&keys.timeouts)
        .key(&keys.count);
    ScriptOp::new(ReadSemaphore, call, keys.target(), None, deadline)
}
