//! The read-write lock ([`LockKind::Read`], [`LockKind::Write`]): many readers at once, or
//! one writer. Readers are entries of `<stem>:rw:readers` with their own expiry (server
//! time); `<stem>:rw:writer` holds the writer's token; a writer that has to wait is noted in
//! `<stem>:rw:writers-waiting`, which holds back new readers so writers are not starved.
//!
//! ```text
//!   read:  Acquire ──read_acquire.lua──► {1,last writer's fence (0 if none)} ──► Done(Acquired)
//!                                        {0,pttl}: a writer holds or waits ──► Busy / Wait(any)
//!   write: Acquire ──write_acquire.lua─► {1,fence} ──► Done(Acquired)
//!                                        {0,pttl}: readers or a writer ──► noted as waiting,
//!                                        Wait(tagged "w": a release that may let a writer in)
//!          deadline passed ──► write_cancel.lua (no longer waiting) ──► Done(Timeout)
//! ```
//!
//! A walk through it: a reader gets the last writer's fence; a writer waits for it, is woken
//! by the reader's release and gets the next fence.
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
//! let ks = Keyspace::default();
//! let ttl = Duration::from_secs(30);
//! let now = Instant::now();
//! let read = LockSpec::read(&ks, "ledger", Token::from_random([1; 16]), ttl).unwrap();
//! let mut reader = Acquire::new(read, &AcquireOptions::default(), 1, now).unwrap();
//! let Step::Done(Ok(Acquisition::Acquired(held))) = answer(&mut reader, now, pair(1, 6))
//! else { unreachable!() };
//! assert_eq!(held.fence, 6);
//!
//! let write = LockSpec::write(&ks, "ledger", Token::from_random([2; 16]), ttl, Duration::from_secs(5)).unwrap();
//! let options = AcquireOptions { wait: Some(Duration::from_secs(5)), ..Default::default() };
//! let mut writer = Acquire::new(write, &options, 1, now).unwrap();
//! let Step::Wait(wait) = answer(&mut writer, now, pair(0, 30_000)) else { unreachable!() };
//! assert_eq!(wait.wake_on.unwrap().tag.as_deref(), Some("w"));
//! writer.wake(now);
//! let Step::Done(Ok(Acquisition::Acquired(lease))) = answer(&mut writer, now, pair(1, 7))
//! else { unreachable!() };
//! assert_eq!(lease.fence, 7);
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
    fn rw_keys(keyspace: &Keyspace, name: &str) -> Result<[String; 6], Error> {
        let stem = keyspace.stem(name)?;
        Ok([
            format!("{stem}:rw:writer"),
            format!("{stem}:rw:readers"),
            format!("{stem}:rw:writers-waiting"),
            format!("{stem}:fence"),
            format!("{stem}:rw:released"),
            format!("{stem}:undone"),
        ])
    }

    /// The read side of a read-write lock: readers are entries of `<stem>:rw:readers`, each
    /// with its own expiry (server time). A reader's fence is the fence of the last writer.
    pub fn read(
        keyspace: &Keyspace,
        name: &str,
        token: Token,
        ttl: Duration,
    ) -> Result<Self, Error> {
        validate_ttl("ttl", ttl)?;
        let [writer, readers, waiting, fence, channel, undone] = Self::rw_keys(keyspace, name)?;
        let notify = keyspace.notify_arg(&channel);
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Read),
            acquire: ScriptCall::new(&READ_ACQUIRE)
                .keys(&[&writer, &readers, &waiting, &fence, &undone])
                .owner_arg(&token)
                .arg(ms(ttl)),
            calls: LeaseCalls::new(
                ScriptCall::new(&READ_RELEASE)
                    .key(&readers)
                    .owner_arg(&token)
                    .arg(&notify),
                ScriptCall::new(&READ_EXTEND)
                    .key(&readers)
                    .owner_arg(&token),
                ScriptCall::new(&READ_INSPECT)
                    .key(&readers)
                    .owner_arg(&token),
            ),
            cancel: None,
            undo: Some(undoing(
                ScriptCall::new(&READ_RELEASE)
                    .key(&readers)
                    .owner_arg(&token)
                    .arg(&notify),
                &undone,
            )),
            queued: false,
            wake: WakeOn::any(&channel),
            notify: notify.clone(),
            fenced: true,
            target: Target {
                name: name.to_owned().into(),
                keys: vec![writer, readers, waiting, fence].into(),
            },
            token,
            ttl,
        })
    }

    /// The write side of a read-write lock: `<stem>:rw:writer` holds the token; a writer
    /// that has to wait is noted in `<stem>:rw:writers-waiting` (for `waiter_timeout` after
    /// its last attempt), which holds back new readers.
    pub fn write(
        keyspace: &Keyspace,
        name: &str,
        token: Token,
        ttl: Duration,
        waiter_timeout: Duration,
    ) -> Result<Self, Error> {
        validate_ttl("ttl", ttl)?;
        validate_ttl("waiter timeout", waiter_timeout)?;
        let [writer, readers, waiting, fence, channel, undone] = Self::rw_keys(keyspace, name)?;
        let notify = keyspace.notify_arg(&channel);
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Write),
            acquire: ScriptCall::new(&WRITE_ACQUIRE)
                .keys(&[&writer, &readers, &waiting, &fence, &undone])
                .owner_arg(&token)
                .arg(ms(ttl))
                .arg(ms(waiter_timeout))
                .arg("1"),
            calls: LeaseCalls::new(
                ScriptCall::new(&WRITE_RELEASE)
                    .key(&writer)
                    .owner_arg(&token)
                    .arg(&notify),
                ScriptCall::new(&EXTEND).key(&writer).owner_arg(&token),
                ScriptCall::new(&INSPECT).key(&writer).owner_arg(&token),
            ),
            cancel: Some(
                ScriptCall::new(&WRITE_CANCEL)
                    .key(&waiting)
                    .owner_arg(&token)
                    .arg(&notify),
            ),
            undo: Some(undoing(
                ScriptCall::new(&WRITE_RELEASE)
                    .key(&writer)
                    .owner_arg(&token)
                    .arg(&notify),
                &undone,
            )),
            queued: true,
            wake: WakeOn::tagged(&channel, "w"),
            notify: notify.clone(),
            fenced: true,
            target: Target {
                name: name.to_owned().into(),
                keys: vec![writer, readers, waiting, fence].into(),
            },
            token,
            ttl,
        })
    }
}
