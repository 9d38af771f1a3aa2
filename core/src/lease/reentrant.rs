//! The reentrant lock ([`LockKind::Reentrant`]): exclusive, but the same owner (client id +
//! thread) may hold it several times and releases as often. `<stem>:reentrant` is a hash of
//! owner -> hold count (plus the fence); every acquisition and release carries its own op id,
//! so a retry after a lost reply is not counted twice.
//!
//! ```text
//!   Acquire ──reentrant_acquire.lua──► {1,fence}: held by us (count + 1) ──► Done(Acquired)
//!      ▲                               {0,pttl}: another owner holds it ──► Busy / Wait
//!      └── wake (any message on <stem>:reentrant:released) or until ◄──────────┘
//!   held: ScriptOp<Release> (count - 1; the last release deletes and publishes)
//!         ScriptOp<Extend> (never shortens the key while an outer hold may want it longer)
//!   undo after a lost reply: reentrant_undo.lua takes back only this op's hold
//! ```
//!
//! A walk through it: an owner acquires twice (one fence for both holds) and releases twice.
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
//! let mut holds = Vec::new();
//! for op in [1, 2] {
//!     let spec = LockSpec::reentrant(&ks, "cache", "client7:thread1", Token::from_random([op; 16]), ttl).unwrap();
//!     let mut acquire = Acquire::new(spec, &AcquireOptions::default(), 1, now).unwrap();
//!     let Step::Done(Ok(Acquisition::Acquired(lease))) = answer(&mut acquire, now, pair(1, 4))
//!     else { unreachable!() };
//!     holds.push(lease);
//! }
//! assert!(holds.iter().all(|l| l.fence == 4));
//! for lease in holds.iter().rev() {
//!     let mut release = ScriptOp::release(lease, now + Duration::from_secs(1));
//!     assert!(matches!(answer(&mut release, now, Reply::Int(1)), Step::Done(Ok(()))));
//! }
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
    /// A reentrant lock held by `owner` (client id + thread): `<stem>:reentrant` is a hash
    /// of owner -> hold count. `op` identifies this acquisition (and its release), so a retry
    /// after a lost reply is not counted twice.
    pub fn reentrant(
        keyspace: &Keyspace,
        name: &str,
        owner: &str,
        op: Token,
        ttl: Duration,
    ) -> Result<Self, Error> {
        validate_ttl("ttl", ttl)?;
        let stem = keyspace.stem(name)?;
        let (hash, fence, channel, undone) = (
            format!("{stem}:reentrant"),
            format!("{stem}:fence"),
            format!("{stem}:reentrant:released"),
            format!("{stem}:undone"),
        );
        let notify = keyspace.notify_arg(&channel);
        let release_op = format!("r{}", op.as_str());
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Reentrant),
            acquire: ScriptCall::new(&REENTRANT_ACQUIRE)
                .keys(&[&hash, &fence, &undone])
                .arg(owner)
                .arg(op.as_str())
                .arg(ms(ttl)),
            calls: LeaseCalls::new(
                ScriptCall::new(&REENTRANT_RELEASE)
                    .key(&hash)
                    .arg(owner)
                    .arg(release_op)
                    .arg(&notify),
                ScriptCall::new(&REENTRANT_EXTEND).key(&hash).arg(owner),
                ScriptCall::new(&REENTRANT_INSPECT).key(&hash).arg(owner),
            ),
            cancel: None,
            undo: Some(undoing(
                ScriptCall::new(&REENTRANT_UNDO)
                    .key(&hash)
                    .arg(owner)
                    .arg(op.as_str())
                    .arg(&notify),
                &undone,
            )),
            queued: false,
            wake: WakeOn::any(&channel),
            notify: notify.clone(),
            fenced: true,
            target: Target {
                name: name.to_owned().into(),
                keys: vec![hash, fence].into(),
            },
            token: op,
            ttl,
        })
    }
}
