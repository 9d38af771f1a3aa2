//! The fair lock ([`LockKind::Fair`]): exclusive, granted in the order waiters started
//! waiting. `<stem>:fair` holds the token, `<stem>:fair:queue` lists the waiters and
//! `<stem>:fair:timeouts` drops a waiter that stopped asking; a release wakes only the next
//! waiter (its token is the message).
//!
//! ```text
//!   Acquire ──fair_acquire.lua──► {1,fence}: first in line and free ──► Done(Acquired)
//!      ▲                          {0,pttl}: in line (joined or kept) ──► Wait(tagged: our token)
//!      └── wake (a release naming our token) or until ◄───────────────────────┘
//!   deadline passed ──► fair_cancel.lua (leave the line) ──► Done(Timeout)
//!   try once: never joins the line, Busy at once
//! ```
//!
//! A walk through it: the waiter queues, its deadline passes, it leaves the line and times out.
//!
//! ```
//! # use std::time::{Duration, Instant};
//! # use redlease_core::{Protocol, Reply, Response, Step};
//! # use redlease_core::keys::Keyspace;
//! # use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LockSpec, ScriptOp, Token};
//! // Answers the one request the machine sends as Redis would, and polls again.
//! fn answer<P: Protocol>(m: &mut P, now: Instant, reply: Reply) -> Step<P::Output> {
//!     let Step::Send(batch) = m.poll(now) else { panic!("expected a send") };
//!     m.handle(Response::reply(batch.requests[0].id, reply), now);
//!     m.poll(now)
//! }
//! let pair = |a, b| Reply::Array(vec![Reply::Int(a), Reply::Int(b)]);
//! # use redlease_core::Error;
//! let ks = Keyspace::default();
//! let token = Token::from_random([5; 16]);
//! let (ttl, waiter_timeout) = (Duration::from_secs(30), Duration::from_secs(5));
//! let spec = LockSpec::fair(&ks, "payroll", token.clone(), ttl, waiter_timeout).unwrap();
//! let options = AcquireOptions { wait: Some(Duration::from_millis(100)), ..Default::default() };
//! let start = Instant::now();
//! let mut acquire = Acquire::new(spec, &options, 1, start).unwrap();
//!
//! let Step::Wait(wait) = answer(&mut acquire, start, pair(0, 900)) else { unreachable!() };
//! assert_eq!(wait.wake_on.unwrap().tag.as_deref(), Some(token.as_str()));
//! // The deadline passes with the lock still held: one last try, then leave the line.
//! let late = start + Duration::from_millis(150);
//! let Step::Send(cancel) = answer(&mut acquire, late, pair(0, 700)) else { unreachable!() };
//! assert_eq!(cancel.requests[0].command.name(), "EVALSHA");
//! acquire.handle(Response::reply(cancel.requests[0].id, Reply::Int(1)), late);
//! assert!(matches!(acquire.poll(late), Step::Done(Err(Error::Timeout { attempts: 2, .. }))));
//! ```

use std::time::Duration;

use super::scripts::*;
use super::spec::{ms, undoing};
use super::{LeaseCalls, LeaseKind, LockKind, LockSpec, Target, Token, validate_ttl};
use crate::error::Error;
use crate::keys::Keyspace;
use crate::protocol::WakeOn;
use crate::script::ScriptCall;

impl LockSpec {
    /// A fair lock: `<stem>:fair` holds the token, `<stem>:fair:queue` lists the waiters in
    /// order and `<stem>:fair:timeouts` drops a waiter that stopped asking for
    /// `waiter_timeout`. A release wakes only the next waiter.
    pub fn fair(
        keyspace: &Keyspace,
        name: &str,
        token: Token,
        ttl: Duration,
        waiter_timeout: Duration,
    ) -> Result<Self, Error> {
        validate_ttl("ttl", ttl)?;
        validate_ttl("waiter timeout", waiter_timeout)?;
        let stem = keyspace.stem(name)?;
        let lock = format!("{stem}:fair");
        let queue = format!("{stem}:fair:queue");
        let timeouts = format!("{stem}:fair:timeouts");
        let fence = format!("{stem}:fence");
        let undone = format!("{stem}:undone");
        let channel = format!("{stem}:fair:wake");
        let notify = keyspace.notify_arg(&channel);
        let three = |script| {
            ScriptCall::new(script)
                .keys(&[&lock, &queue, &timeouts])
                .owner_arg(&token)
                .arg(&notify)
        };
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Fair),
            acquire: ScriptCall::new(&FAIR_ACQUIRE)
                .keys(&[&lock, &queue, &timeouts, &fence, &undone])
                .owner_arg(&token)
                .arg(ms(ttl))
                .arg(ms(waiter_timeout))
                .arg("1"),
            calls: LeaseCalls::new(
                three(&FAIR_RELEASE),
                ScriptCall::new(&EXTEND).key(&lock).owner_arg(&token),
                ScriptCall::new(&INSPECT).key(&lock).owner_arg(&token),
            ),
            cancel: Some(three(&FAIR_CANCEL)),
            undo: Some(undoing(three(&FAIR_RELEASE), &undone)),
            queued: true,
            wake: WakeOn::tagged(&channel, token.as_str()),
            notify: notify.clone(),
            fenced: true,
            target: Target {
                name: name.to_owned().into(),
                keys: vec![lock, queue, timeouts, fence].into(),
            },
            token,
            ttl,
        })
    }
}
