//! What differs between the kinds of lock: their keys, and the script calls that acquire,
//! release, extend, inspect and give up. Every kind follows the reply conventions of
//! [`scripts`](super::scripts), so [`Acquire`](super::Acquire) and
//! [`ScriptOp`](super::ScriptOp) run them all.

use std::time::Duration;

use super::scripts::*;
use super::{Token, UNDONE_KEEP, validate_ttl};
use crate::error::Error;
use crate::keys::{Keyspace, LockKeys};
use crate::protocol::WakeOn;
use crate::script::ScriptCall;

/// The kinds of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// An exclusive lease (`SET NX PX` semantics), the default.
    Lease,
    /// Exclusive, but the same owner (client + thread) may hold it several times and must
    /// release as often (a hash of owner -> hold count).
    Reentrant,
    /// Exclusive, granted in the order waiters started waiting.
    Fair,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock; waiting writers hold back new readers.
    Write,
}

/// What a lease is held on. The acquisition machine ([`Acquire`](super::Acquire)) and the
/// one-call operations ([`ScriptOp`](super::ScriptOp)) serve all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseKind {
    /// A lock of the given kind.
    Lock(LockKind),
    /// A permit of a fair counting semaphore (see [`crate::semaphore`]).
    Permit,
    /// A job taken from a reliable queue (see [`crate::queue`]): its lease is the visibility
    /// timeout. The acquisition returns the job id and payload; the calls get the id bound as
    /// their first argument.
    Job,
}

impl From<LockKind> for LeaseKind {
    fn from(kind: LockKind) -> Self {
        LeaseKind::Lock(kind)
    }
}

/// The primitive an operation is about, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The name the caller gave.
    pub name: String,
    /// Its keys.
    pub keys: Vec<String>,
}

/// The owner-checked calls on a held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseCalls {
    /// Releases the lease (and announces the release).
    pub release: ScriptCall,
    /// Extends the lease; the new ttl in ms is appended as the last argument.
    pub extend: ScriptCall,
    /// Reports whether the lease is ours and its time left.
    pub inspect: ScriptCall,
}

/// Everything an acquisition of one lock needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSpec {
    /// What the lease is held on.
    pub kind: LeaseKind,
    /// Name and keys.
    pub target: Target,
    /// The owner token (for a reentrant lock, this acquisition's op id).
    pub token: Token,
    /// The lease length.
    pub ttl: Duration,
    /// The acquisition call.
    pub acquire: ScriptCall,
    /// The calls on the lease once held.
    pub calls: LeaseCalls,
    /// Sent when a waiting acquisition gives up (leave a fair queue, stop holding back
    /// readers).
    pub cancel: Option<ScriptCall>,
    /// Undoes this very acquisition when its outcome is unknown or refused (a lost reply,
    /// too few replicas): the release, except for a reentrant lock, where it takes back only
    /// the hold this acquisition counted (never an outer hold of the same owner). It also
    /// records the token in `<stem>:undone` for [`UNDONE_KEEP`], and every acquire script
    /// refuses a recorded token: an attempt that was only delayed, and reaches Redis after
    /// its undo (which may travel on another connection), takes nothing.
    pub undo: Option<ScriptCall>,
    /// Whether the acquire call's last argument says "join the line" (fair, write, permit).
    pub(crate) queued: bool,
    /// Which release messages wake a waiter.
    pub wake: WakeOn,
    /// The release channel as passed to scripts (see [`Keyspace::notify_arg`]).
    pub notify: String,
}

pub(crate) fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

/// The undo of an acquisition: `call` plus the set of undone acquisitions (its last key) and
/// how long to remember this one (its last argument).
pub(crate) fn undoing(call: ScriptCall, undone: &str) -> ScriptCall {
    call.key(undone).arg(ms(UNDONE_KEEP))
}

impl LockSpec {
    /// The same lock for an acquisition that tries once: it does not take a place in a line
    /// (fair queue, waiting writers, semaphore waiters), so a failed try leaves nothing behind
    /// and wakes nobody.
    pub fn trying_once(mut self) -> Self {
        if self.queued {
            self.acquire = self.acquire.with_last_arg("0");
            self.cancel = None;
        }
        self
    }

    /// An exclusive lease lock: `<stem>:lock` holds the token, `<stem>:fence` the counter.
    pub fn lease(
        keyspace: &Keyspace,
        name: &str,
        token: Token,
        ttl: Duration,
    ) -> Result<Self, Error> {
        validate_ttl("ttl", ttl)?;
        let keys = LockKeys::new(keyspace, name)?;
        let undone = format!("{}:undone", keyspace.stem(name)?);
        let t = token.as_str();
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Lease),
            acquire: ScriptCall::new(&ACQUIRE)
                .keys(&[&keys.lock, &keys.fence, &undone])
                .arg(t)
                .arg(ms(ttl)),
            calls: LeaseCalls {
                release: ScriptCall::new(&RELEASE)
                    .key(&keys.lock)
                    .arg(t)
                    .arg(&keys.notify),
                extend: ScriptCall::new(&EXTEND).key(&keys.lock).arg(t),
                inspect: ScriptCall::new(&INSPECT).key(&keys.lock).arg(t),
            },
            cancel: None,
            undo: Some(undoing(
                ScriptCall::new(&RELEASE)
                    .key(&keys.lock)
                    .arg(t)
                    .arg(&keys.notify),
                &undone,
            )),
            queued: false,
            wake: WakeOn::any(&keys.channel),
            notify: keys.notify.clone(),
            target: Target {
                name: keys.name.clone(),
                keys: vec![keys.lock, keys.fence],
            },
            token,
            ttl,
        })
    }

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
            calls: LeaseCalls {
                release: ScriptCall::new(&REENTRANT_RELEASE)
                    .key(&hash)
                    .arg(owner)
                    .arg(release_op)
                    .arg(&notify),
                extend: ScriptCall::new(&REENTRANT_EXTEND).key(&hash).arg(owner),
                inspect: ScriptCall::new(&REENTRANT_INSPECT).key(&hash).arg(owner),
            },
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
            target: Target {
                name: name.to_owned(),
                keys: vec![hash, fence],
            },
            token: op,
            ttl,
        })
    }

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
        let t = token.as_str();
        let three = |script| {
            ScriptCall::new(script)
                .keys(&[&lock, &queue, &timeouts])
                .arg(t)
                .arg(&notify)
        };
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Fair),
            acquire: ScriptCall::new(&FAIR_ACQUIRE)
                .keys(&[&lock, &queue, &timeouts, &fence, &undone])
                .arg(t)
                .arg(ms(ttl))
                .arg(ms(waiter_timeout))
                .arg("1"),
            calls: LeaseCalls {
                release: three(&FAIR_RELEASE),
                extend: ScriptCall::new(&EXTEND).key(&lock).arg(t),
                inspect: ScriptCall::new(&INSPECT).key(&lock).arg(t),
            },
            cancel: Some(three(&FAIR_CANCEL)),
            undo: Some(undoing(three(&FAIR_RELEASE), &undone)),
            queued: true,
            wake: WakeOn::tagged(&channel, t),
            notify: notify.clone(),
            target: Target {
                name: name.to_owned(),
                keys: vec![lock, queue, timeouts, fence],
            },
            token,
            ttl,
        })
    }

    /// The spec of one permit of semaphore `name`; see
    /// [`SemaphoreKeys::permit`](crate::semaphore::SemaphoreKeys::permit).
    // TODO(rename): remove after merge
    #[doc(hidden)]
    pub fn permit(
        keyspace: &Keyspace,
        name: &str,
        token: Token,
        ttl: Duration,
        permits: u64,
        waiter_timeout: Duration,
    ) -> Result<Self, Error> {
        crate::semaphore::SemaphoreKeys::new(keyspace, name)?.permit(
            token,
            ttl,
            permits,
            waiter_timeout,
        )
    }

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
        let t = token.as_str();
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Read),
            acquire: ScriptCall::new(&READ_ACQUIRE)
                .keys(&[&writer, &readers, &waiting, &fence, &undone])
                .arg(t)
                .arg(ms(ttl)),
            calls: LeaseCalls {
                release: ScriptCall::new(&READ_RELEASE)
                    .key(&readers)
                    .arg(t)
                    .arg(&notify),
                extend: ScriptCall::new(&READ_EXTEND).key(&readers).arg(t),
                inspect: ScriptCall::new(&READ_INSPECT).key(&readers).arg(t),
            },
            cancel: None,
            undo: Some(undoing(
                ScriptCall::new(&READ_RELEASE)
                    .key(&readers)
                    .arg(t)
                    .arg(&notify),
                &undone,
            )),
            queued: false,
            wake: WakeOn::any(&channel),
            notify: notify.clone(),
            target: Target {
                name: name.to_owned(),
                keys: vec![writer, readers, waiting, fence],
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
        let t = token.as_str();
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Write),
            acquire: ScriptCall::new(&WRITE_ACQUIRE)
                .keys(&[&writer, &readers, &waiting, &fence, &undone])
                .arg(t)
                .arg(ms(ttl))
                .arg(ms(waiter_timeout))
                .arg("1"),
            calls: LeaseCalls {
                release: ScriptCall::new(&WRITE_RELEASE)
                    .key(&writer)
                    .arg(t)
                    .arg(&notify),
                extend: ScriptCall::new(&EXTEND).key(&writer).arg(t),
                inspect: ScriptCall::new(&INSPECT).key(&writer).arg(t),
            },
            cancel: Some(
                ScriptCall::new(&WRITE_CANCEL)
                    .key(&waiting)
                    .arg(t)
                    .arg(&notify),
            ),
            undo: Some(undoing(
                ScriptCall::new(&WRITE_RELEASE)
                    .key(&writer)
                    .arg(t)
                    .arg(&notify),
                &undone,
            )),
            queued: true,
            wake: WakeOn::tagged(&channel, "w"),
            notify: notify.clone(),
            target: Target {
                name: name.to_owned(),
                keys: vec![writer, readers, waiting, fence],
            },
            token,
            ttl,
        })
    }
}
