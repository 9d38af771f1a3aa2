//! What differs between the kinds of lock: their keys, and the script calls that acquire,
//! release, extend, inspect and give up. The spec is shared; each kind makes its own in its
//! module ([`exclusive`](super::exclusive), [`reentrant`](super::reentrant),
//! [`fair`](super::fair), [`read_write`](super::read_write), and
//! [`semaphore`](crate::semaphore) for a permit). Every kind follows the reply conventions of
//! [`scripts`](super::scripts), so [`Acquire`](super::Acquire) and
//! [`ScriptOp`](super::ScriptOp) run them all.

use std::sync::Arc;
use std::time::Duration;

use super::{Token, UNDONE_KEEP};
use crate::protocol::WakeOn;
use crate::script::{Script, ScriptCall};

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

/// The primitive an operation is about, for error messages. Cloning it copies nothing (a
/// lease and each operation on it hold one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// The name the caller gave.
    pub name: Arc<str>,
    /// Its keys.
    pub keys: Keys,
}

impl Target {
    /// A target named `name` on `keys`.
    pub fn new(name: impl Into<Arc<str>>, keys: impl Into<Keys>) -> Self {
        Target {
            name: name.into(),
            keys: keys.into(),
        }
    }
}

/// The keys of a [`Target`], in order, in one allocation (every held lease keeps its
/// target's keys: one block instead of a slice and a string per key). Cloning copies
/// nothing.
///
/// ```
/// use redlease_core::lease::Keys;
/// let keys = Keys::from(vec!["a:{x}:lock".to_string(), "".to_string(), "12:b".to_string()]);
/// assert_eq!(keys.len(), 3);
/// assert_eq!(keys.first(), Some("a:{x}:lock"));
/// assert_eq!(keys.iter().collect::<Vec<_>>(), ["a:{x}:lock", "", "12:b"]);
/// assert_eq!(keys.join(", "), "a:{x}:lock, , 12:b");
/// ```
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Keys(
    /// Each key preceded by its length in bytes, in decimal, and a `:`.
    Arc<str>,
);

impl Keys {
    /// The keys, in order.
    pub fn iter(&self) -> KeysIter<'_> {
        KeysIter(&self.0)
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first key (it names the node of a Cluster that a lease's calls go to).
    pub fn first(&self) -> Option<&str> {
        self.iter().next()
    }

    /// The `i`-th key.
    pub fn get(&self, i: usize) -> Option<&str> {
        self.iter().nth(i)
    }

    /// The keys joined by `sep`.
    pub fn join(&self, sep: &str) -> String {
        self.iter().collect::<Vec<_>>().join(sep)
    }

    /// The keys, copied.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }

    /// Whether both are the same allocation (one is a clone of the other).
    pub fn ptr_eq(&self, other: &Keys) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<S: AsRef<str>> FromIterator<S> for Keys {
    fn from_iter<I: IntoIterator<Item = S>>(keys: I) -> Self {
        use std::fmt::Write;
        let mut text = String::with_capacity(128);
        for key in keys {
            let key = key.as_ref();
            // Writing to a String cannot fail.
            let _ = write!(text, "{}:", key.len());
            text.push_str(key);
        }
        Keys(text.into())
    }
}

impl From<Vec<String>> for Keys {
    fn from(keys: Vec<String>) -> Self {
        keys.iter().collect()
    }
}

impl From<&[&str]> for Keys {
    fn from(keys: &[&str]) -> Self {
        keys.iter().collect()
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Keys {
    type Item = &'a str;
    type IntoIter = KeysIter<'a>;

    fn into_iter(self) -> KeysIter<'a> {
        self.iter()
    }
}

/// The keys of a [`Keys`], in order.
#[derive(Debug, Clone)]
pub struct KeysIter<'a>(&'a str);

impl<'a> Iterator for KeysIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let (len, rest) = self.0.split_once(':')?;
        // Written by `from_iter`: a length that fits the rest. Anything else ends the keys.
        let split = len
            .parse()
            .ok()
            .and_then(|len| Some((rest.get(..len)?, rest.get(len..)?)));
        let Some((key, rest)) = split else {
            self.0 = "";
            return None;
        };
        self.0 = rest;
        Some(key)
    }
}

/// The owner-checked calls on a held lease: release, extend and inspect.
///
/// A lock's extend and inspect calls usually read a prefix of its release's keys and
/// arguments under another script ([`ScriptCall::sharing`]); such a call is kept as its
/// script and item count only (16 bytes instead of a whole [`ScriptCall`]), and rebuilt
/// when asked for. Every held lease keeps one of these.
#[derive(Clone)]
pub struct LeaseCalls {
    release: ScriptCall,
    extend: Sibling,
    inspect: Sibling,
}

/// The extend or inspect call of a [`LeaseCalls`].
#[derive(Clone)]
enum Sibling {
    /// The release's keys, arguments and bound values (its first `view` items, all if
    /// `None`) under `script`.
    Shares {
        script: &'static Script,
        view: Option<u16>,
    },
    /// A call of its own whose bound values are the release's
    /// ([`ScriptCall::binds_like`]): shared by every lease bound from one spec.
    Template(Arc<ScriptCall>),
    /// A call of its own, with its own bound values.
    Own(Box<ScriptCall>),
}

impl Sibling {
    fn of(call: ScriptCall, release: &ScriptCall) -> Sibling {
        match call.view_of(release) {
            Some(view) => Sibling::Shares {
                script: call.script(),
                view,
            },
            None if call.binds_like(release) => Sibling::Template(Arc::new(call)),
            None => Sibling::Own(Box::new(call)),
        }
    }

    fn call(&self, release: &ScriptCall) -> ScriptCall {
        match self {
            Sibling::Shares { script, view } => release.sibling(script, *view),
            Sibling::Template(call) => call.bound_as(release),
            Sibling::Own(call) => ScriptCall::clone(call),
        }
    }

    fn script(&self) -> &'static Script {
        match self {
            Sibling::Shares { script, .. } => script,
            Sibling::Template(call) => call.script(),
            Sibling::Own(call) => call.script(),
        }
    }

    /// The sibling of a release changed by `f`, which only changes bound values (and the
    /// spare capacity): one that takes them from the release follows it unchanged.
    fn rebound(&self, f: impl Fn(ScriptCall) -> ScriptCall) -> Sibling {
        match self {
            Sibling::Own(call) => Sibling::Own(Box::new(f(ScriptCall::clone(call)))),
            other => other.clone(),
        }
    }
}

impl LeaseCalls {
    /// The calls on a lease: `release` releases it (and announces the release), `extend`
    /// extends it (the new ttl in ms is appended as its last argument when sent),
    /// `inspect` reports whether the lease is ours and its time left.
    pub fn new(release: ScriptCall, extend: ScriptCall, inspect: ScriptCall) -> Self {
        LeaseCalls {
            extend: Sibling::of(extend, &release),
            inspect: Sibling::of(inspect, &release),
            release,
        }
    }

    /// Releases the lease (and announces the release).
    pub fn release(&self) -> &ScriptCall {
        &self.release
    }

    /// Extends the lease; append the new ttl in ms as the last argument.
    pub fn extend(&self) -> ScriptCall {
        self.extend.call(&self.release)
    }

    /// Reports whether the lease is ours and its time left.
    pub fn inspect(&self) -> ScriptCall {
        self.inspect.call(&self.release)
    }

    /// The script of the extend call (without building the call).
    pub fn extend_script(&self) -> &'static Script {
        self.extend.script()
    }

    /// The three calls, each changed by `f`.
    pub fn map(&self, f: impl Fn(ScriptCall) -> ScriptCall) -> LeaseCalls {
        LeaseCalls::new(f(self.release.clone()), f(self.extend()), f(self.inspect()))
    }

    /// How extend and inspect are kept: "shares" (a view of the release's items),
    /// "template" (a call of its own, bound as the release) or "own".
    #[cfg(test)]
    pub(crate) fn shapes(&self) -> [&'static str; 2] {
        [&self.extend, &self.inspect].map(|s| match s {
            Sibling::Shares { .. } => "shares",
            Sibling::Template(_) => "template",
            Sibling::Own(_) => "own",
        })
    }

    /// The same calls with no spare capacity in their keys and arguments
    /// ([`ScriptCall::compact`]).
    pub fn compact(self) -> LeaseCalls {
        let own = |sibling: Sibling| match sibling {
            Sibling::Own(call) => Sibling::Own(Box::new(call.compact())),
            Sibling::Template(call) => Sibling::Template(
                Arc::try_unwrap(call).map_or_else(|c| c, |c| Arc::new(c.compact())),
            ),
            shares => shares,
        };
        LeaseCalls {
            release: self.release.compact(),
            extend: own(self.extend),
            inspect: own(self.inspect),
        }
    }

    /// The same calls for another owner `token` ([`ScriptCall::with_token`]): a call that
    /// shares the release's items follows its token without being rebuilt.
    pub fn with_token(&self, token: &Token) -> LeaseCalls {
        self.rebound(|call| call.with_token(token))
    }

    /// The three calls changed by `f`, which only changes bound values
    /// ([`ScriptCall::with_token`], [`with_subject`](ScriptCall::with_subject),
    /// [`with_prior`](ScriptCall::with_prior)): only the release and calls of their own are
    /// changed; the others take their values from the release.
    pub(crate) fn rebound(&self, f: impl Fn(ScriptCall) -> ScriptCall) -> LeaseCalls {
        LeaseCalls {
            extend: self.extend.rebound(&f),
            inspect: self.inspect.rebound(&f),
            release: f(self.release.clone()),
        }
    }

    /// Whether all three calls have a subject slot ([`ScriptCall::subject_arg`]).
    fn have_subjects(&self) -> bool {
        let sibling = |s: &Sibling| match s {
            Sibling::Template(call) => call.has_subject_arg(),
            Sibling::Own(call) => call.has_subject_arg(),
            shares => shares.call(&self.release).has_subject_arg(),
        };
        self.release.has_subject_arg() && sibling(&self.extend) && sibling(&self.inspect)
    }

    /// The calls on a job's lease, with the job `id` bound as their first argument: held in
    /// the subject slot of calls built with one (a queue's take, copying nothing), inserted
    /// in the others.
    pub(crate) fn for_job(&self, id: &[u8]) -> LeaseCalls {
        let shared = Arc::new(id.to_vec());
        if self.have_subjects() {
            return self.rebound(|call| call.with_subject(&shared));
        }
        self.map(|call| {
            if call.has_subject_arg() {
                call.with_subject(&shared)
            } else {
                call.prepend_arg(id)
            }
        })
    }
}

/// Calls are equal when each of the three is ([`ScriptCall`]'s equality), however they are
/// kept.
impl PartialEq for LeaseCalls {
    fn eq(&self, other: &Self) -> bool {
        self.release == other.release
            && self.extend() == other.extend()
            && self.inspect() == other.inspect()
    }
}

impl Eq for LeaseCalls {}

impl std::fmt::Debug for LeaseCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseCalls")
            .field("release", &self.release)
            .field("extend", &self.extend())
            .field("inspect", &self.inspect())
            .finish()
    }
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
    /// its undo (which may travel on another connection), takes nothing. (Except an unfenced
    /// lease lock's first attempt, a bare `SET NX PX` that reads no record: see
    /// [`fenced`](Self::fenced).)
    pub undo: Option<ScriptCall>,
    /// Whether the acquire call's last argument says "join the line" (fair, write, permit).
    pub(crate) queued: bool,
    /// Which release messages wake a waiter.
    pub wake: WakeOn,
    /// The release channel as passed to scripts (see [`Keyspace::notify_arg`](crate::keys::Keyspace::notify_arg)).
    pub notify: String,
    /// Whether the acquisition issues a fencing token. `true` for every kind as built;
    /// only a lease lock may be made unfenced ([`LockSpec::fenced`]): its first attempt is
    /// then a bare `SET NX PX` (see [`Acquire`](super::Acquire)) and its lease's fence is 0.
    /// [`Acquire::new`](super::Acquire::new) refuses an unfenced spec of any other kind.
    pub fenced: bool,
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
    /// The same lock for another owner `token`: its script calls share their keys and
    /// arguments with this spec's (built once per lock, see
    /// [`ScriptCall::owner_arg`]), and only the token differs. `None` for a spec whose
    /// calls carry the token in another form (a reentrant lock's op ids, a queue's take spec
    /// not built by [`queue::take`](crate::queue::take)).
    pub fn with_token(&self, token: Token) -> Option<LockSpec> {
        let rebindable = match self.kind {
            LeaseKind::Lock(
                LockKind::Lease | LockKind::Fair | LockKind::Read | LockKind::Write,
            )
            | LeaseKind::Permit => self.acquire.has_owner_arg(),
            // A job's calls must all hold the token in its slot (and the id in theirs).
            LeaseKind::Job => {
                let calls = [
                    self.calls.release().clone(),
                    self.calls.extend(),
                    self.calls.inspect(),
                ];
                [&self.acquire]
                    .into_iter()
                    .chain(&calls)
                    .chain(&self.undo)
                    .all(ScriptCall::has_owner_arg)
                    && calls.iter().all(ScriptCall::has_subject_arg)
            }
            LeaseKind::Lock(LockKind::Reentrant) => false,
        };
        if !rebindable {
            return None;
        }
        let bind = |call: &ScriptCall| call.clone().with_token(&token);
        let wake = match &self.wake.tag {
            // A waiter woken by its own token (fair lock, semaphore).
            Some(tag) if tag == self.token.as_str() => {
                WakeOn::tagged(&self.wake.channel, token.as_str())
            }
            _ => self.wake.clone(),
        };
        Some(LockSpec {
            kind: self.kind,
            target: self.target.clone(),
            acquire: bind(&self.acquire),
            calls: self.calls.with_token(&token),
            cancel: self.cancel.as_ref().map(bind),
            undo: self.undo.as_ref().map(bind),
            queued: self.queued,
            wake,
            notify: self.notify.clone(),
            fenced: self.fenced,
            token,
            ttl: self.ttl,
        })
    }

    /// The same spec with no spare capacity in its calls' keys and arguments
    /// ([`ScriptCall::compact`]): for a spec kept and bound to many acquisitions, whose
    /// leases then hold its calls.
    pub fn compact(mut self) -> Self {
        self.acquire = self.acquire.compact();
        self.calls = self.calls.compact();
        self.cancel = self.cancel.map(ScriptCall::compact);
        self.undo = self.undo.map(ScriptCall::compact);
        self
    }

    /// The same lock, fenced or not (`on`). Only a lease lock ([`LockKind::Lease`]) can go
    /// without a fence; `fenced(false)` on any other kind is an
    /// [`InvalidArgument::Setting`](crate::InvalidArgument::Setting) error.
    ///
    /// An unfenced lease lock tries a bare `SET <lock> <token> NX PX <ttl>` first, with no
    /// script, and falls back to the acquire script for anything but `OK` (see
    /// [`Acquire`](super::Acquire)). What it gives up:
    /// - **No fencing token**: its lease's fence is 0, whoever grants it (fenced holders of
    ///   the same name still get increasing fences among themselves, and the two kinds
    ///   exclude each other; a grant by the script advances the counter, a grant by `SET`
    ///   does not).
    /// - **A late first attempt can leave the lock taken by nobody.** If that `SET`'s reply is
    ///   lost and the `SET` was only delayed, it takes the lock anyway when it reaches Redis
    ///   after the lock was freed (it reads no undone record): after the undo of an
    ///   acquisition that gave up (which deletes the key and records the token), or after
    ///   the release of the guard a later attempt was granted (which records it too). The key
    ///   then stays, held by no one, until its ttl ends. That costs liveness only: never two
    ///   holders at once. A fenced lock's attempts all read the record and take nothing.
    pub fn fenced(mut self, on: bool) -> Result<Self, crate::error::Error> {
        if !on && self.kind != LeaseKind::Lock(LockKind::Lease) {
            return Err(crate::error::InvalidArgument::Setting(format!(
                "only a lease lock can go without a fence (fenced(false)), not a {:?} lock",
                self.kind
            ))
            .into());
        }
        self.fenced = on;
        Ok(self)
    }

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
}
