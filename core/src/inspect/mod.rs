//! Who holds a lock, and for how long: reading any kind of lock or semaphore by its name
//! ([`lock_info`]), listing them by pattern with `SCAN` ([`scan_locks`]), a forced release
//! that frees only the holder an operator saw ([`force_release`]), and the registry of live
//! clients that names a holder ([`registry`]).
//!
//! Every read here is one read-only script (an operator's ACL user may have read rights
//! only), sent with [`ScriptOp`] like any one-call operation: the caller drives it.
//!
//! ```text
//!   lock_info(name) ──lock_info.lua──► {fence, entry per kind found} ──► Done(LockInfo)
//!   scan_locks(pattern, cursor) ──scan_locks.lua (SCAN MATCH)──► Done(LockPage)
//!   force_release(name, prefix) ──force_release.lua──► Done(holds released)
//! ```
//!
//! **Naming a holder.** A holder's token is its secret (whoever knows it can release the
//! lock), so only its first [`SHOWN_PREFIX`] characters are ever returned. The blocking
//! driver makes each client's tokens start with the client's id ([`CLIENT_ID_LEN`] hex
//! digits, the rest random: 96 bits), so that the prefix names the client in the
//! [`registry`], and the rest tells its holds apart.
//!
//! A walk through it: a lease lock held with 4.2 s left and fence 17, one client subscribed
//! to its release channel.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Protocol, Reply, Response, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::inspect::{self, Primitive};
//! use redlease_core::lease::{LeaseKind, LockKind};
//!
//! let now = Instant::now();
//! let mut read = inspect::lock_info(&Keyspace::default(), "billing", now + Duration::from_secs(3)).unwrap();
//! let Step::Send(batch) = read.poll(now) else { unreachable!() };
//! let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
//! // {kind 1 (lease), holders (flat: token prefix, ms left, holds, role), no waiter record,
//! //  1 subscriber, no permit count}
//! let holders = Reply::Array(vec![bulk("1a2b3c4d9f8e7d6c"), Reply::Int(4200), Reply::Int(1), bulk("x")]);
//! let lease = Reply::Array(vec![Reply::Int(1), holders, Reply::Int(-1), Reply::Int(1), Reply::Int(-1)]);
//! read.handle(Response::reply(batch.requests[0].id, Reply::Array(vec![bulk("17"), lease])), now);
//! let Step::Done(Ok(info)) = read.poll(now) else { unreachable!() };
//! assert_eq!(info.fence, Some(17));
//! let kind = &info.kinds[0];
//! assert_eq!((kind.kind, kind.waiters, kind.subscribers), (Primitive::Lease, None, 1));
//! assert_eq!(kind.holders[0].token_prefix, "1a2b3c4d9f8e7d6c");
//! assert_eq!(kind.holders[0].client_id(), Some("1a2b3c4d"));
//! assert_eq!(kind.holders[0].kind, LeaseKind::Lock(LockKind::Lease));
//! assert_eq!(kind.holders[0].remaining, Some(Duration::from_millis(4200)));
//! ```

pub mod registry;

use std::time::{Duration, Instant};

use crate::error::{Error, InvalidArgument};
use crate::keys::{Keyspace, cat};
use crate::lease::{LeaseKind, LockKind, MAX_TOKEN_LEN, OpKind, ScriptOp, Target, pttl};
use crate::reply::Reply;
use crate::script;
use crate::script::prelude::{NOTIFY, NOW_MS};
use crate::script::{Script, ScriptCall};

/// How many characters of a holder's token are shown: the client id ([`CLIENT_ID_LEN`])
/// and 8 more (32 of the hold's 96 random bits), enough to tell one hold from the next
/// hold of the same client; the 64 bits never shown keep the token unguessable.
pub const SHOWN_PREFIX: usize = 16;

/// The length of a client id, the first characters of every token a client of the blocking
/// driver draws (hex digits).
pub const CLIENT_ID_LEN: usize = 8;

/// The shortest token prefix [`force_release`] accepts: a client id. Pass the whole prefix
/// [`lock_info`] showed ([`SHOWN_PREFIX`] characters): a prefix of just a client id matches
/// any hold of that client, also one it took after the operator looked.
pub const MIN_RELEASE_PREFIX: usize = CLIENT_ID_LEN;

/// `lua/lock_info.lua`
pub static LOCK_INFO: Script =
    script!("lock_info", [], include_str!("lua/lock_info.lua")).read_only();

/// `lua/force_release.lua`
pub static FORCE_RELEASE: Script = script!(
    "force_release",
    [NOW_MS, NOTIFY],
    include_str!("lua/force_release.lua")
);

/// `lua/scan_locks.lua`
pub static SCAN_LOCKS: Script =
    script!("scan_locks", [], include_str!("lua/scan_locks.lua")).read_only();

/// Every script of this module and of [`registry`].
pub static ALL: [&Script; 6] = [
    &LOCK_INFO,
    &FORCE_RELEASE,
    &SCAN_LOCKS,
    &registry::BEAT,
    &registry::LEAVE,
    &registry::READ,
];

/// The kinds of primitive a name can have keys of (one name may have several: a lease lock
/// and a semaphore of the same name are different keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Primitive {
    /// A lease lock (`<stem>:lock`).
    Lease,
    /// A reentrant lock (`<stem>:reentrant`).
    Reentrant,
    /// A fair lock (`<stem>:fair`, its line `<stem>:fair:queue`).
    Fair,
    /// A read-write lock (`<stem>:rw:*`).
    ReadWrite,
    /// A counting semaphore (`<stem>:sem:*`).
    Semaphore,
}

/// One hold of a lock or semaphore, as an operator may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The first [`SHOWN_PREFIX`] characters of the holder's token (of a reentrant lock:
    /// of its owner, `<client id>...:<thread>`), never the whole token.
    pub token_prefix: String,
    /// Time left on the hold by the server's clock (`None`: the key has no expiry).
    pub remaining: Option<Duration>,
    /// How many times the owner holds it (a reentrant lock; 1 otherwise).
    pub holds: u64,
    /// What is held: `Lock(Lease | Reentrant | Fair | Write | Read)` or `Permit`.
    pub kind: LeaseKind,
    /// The client holding it, from the [`registry`] (filled by
    /// [`LockInfo::name_holders`]; `None`: not named yet, or that client keeps no entry).
    pub client: Option<registry::ClientInfo>,
}

impl Holder {
    /// The id of the client that holds it (the token's first [`CLIENT_ID_LEN`] characters),
    /// to look up in the [`registry`]; `None` for a token too short to have one.
    pub fn client_id(&self) -> Option<&str> {
        self.token_prefix.get(..CLIENT_ID_LEN)
    }
}

/// What exists under a name for one kind of primitive.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindInfo {
    /// The kind.
    pub kind: Primitive,
    /// Live holders (a read-write lock: the writer, or the readers; a semaphore: its
    /// permits), in no particular order.
    pub holders: Vec<Holder>,
    /// Live waiters on record, for the kinds that keep a record of them: a fair lock's line,
    /// a read-write lock's waiting writers, a semaphore's line. `None` for the others (a
    /// lease or reentrant lock, whose waiters only listen: see
    /// [`subscribers`](Self::subscribers)).
    pub waiters: Option<u64>,
    /// Connections subscribed to the kind's release channel (`PUBSUB NUMSUB`, or
    /// `SHARDNUMSUB` for shard channels: on a Cluster, counted on the key's node only).
    /// The blocking driver has one listener connection per client (per shard), subscribed
    /// while any of its threads waits: this counts waiting clients, not waiting threads, and
    /// includes connections of other libraries subscribed to the same channel.
    pub subscribers: u64,
    /// A semaphore's permit count (`None`: not a semaphore, or none stored).
    pub permits: Option<u64>,
}

impl KindInfo {
    /// Permits in use (a semaphore's live holders).
    pub fn permits_used(&self) -> u64 {
        self.holders.len() as u64
    }
}

/// Everything [`lock_info`] found under a name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The name.
    pub name: String,
    /// The last fencing token issued under the name (one counter serves every kind of lock
    /// of a name); `None` when none was (or the counter is gone).
    pub fence: Option<u64>,
    /// One entry per kind whose keys exist, in the order of [`Primitive`]; empty when
    /// nothing is held or waited for under the name.
    pub kinds: Vec<KindInfo>,
}

impl LockInfo {
    /// Every holder of every kind.
    pub fn holders(&self) -> impl Iterator<Item = &Holder> {
        self.kinds.iter().flat_map(|k| k.holders.iter())
    }

    /// Names each holder by the live client of `clients` (from [`registry::read`]) whose
    /// id starts its token.
    pub fn name_holders(&mut self, clients: &[registry::ClientInfo]) {
        for holder in self.kinds.iter_mut().flat_map(|k| k.holders.iter_mut()) {
            holder.client = holder
                .client_id()
                .and_then(|id| clients.iter().find(|c| c.id == id))
                .cloned();
        }
    }
}

/// The keys of every kind of lock of one name, in the order the scripts take them, and the
/// release channels (as scripts are told them) of the lease, reentrant, fair, read-write
/// and semaphore kinds. The names are those of the kinds' own modules.
fn all_keys(keyspace: &Keyspace, name: &str) -> Result<(Vec<String>, [String; 5]), Error> {
    let stem = keyspace.stem(name)?;
    let key = |part: &str| cat(&[&stem, ":", part]);
    let keys = [
        "lock",
        "reentrant",
        "fair",
        "fair:queue",
        "fair:timeouts",
        "rw:writer",
        "rw:readers",
        "rw:writers-waiting",
        "sem:holders",
        "sem:waiters",
        "sem:timeouts",
        "sem:permits",
        "fence",
    ]
    .map(key)
    .to_vec();
    let channels = [
        "released",
        "reentrant:released",
        "fair:wake",
        "rw:released",
        "sem:wake",
    ]
    .map(|part| keyspace.notify_arg(&key(part)));
    Ok((keys, channels))
}

/// Reads a lock: a [`LockInfo`].
#[derive(Debug, Clone)]
pub struct ReadLockInfo {
    name: String,
}

/// Reads what exists under lock name `name` (any kind: lease, reentrant, fair, read-write,
/// semaphore), giving up at `deadline`: one read-only script, one round trip.
pub fn lock_info(
    keyspace: &Keyspace,
    name: &str,
    deadline: Instant,
) -> Result<ScriptOp<ReadLockInfo>, Error> {
    let (keys, channels) = all_keys(keyspace, name)?;
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut call = ScriptCall::new(&LOCK_INFO)
        .keys(&key_refs)
        .arg(SHOWN_PREFIX.to_string());
    for c in &channels {
        call = call.arg(c);
    }
    let target = Target::new(name, keys);
    Ok(ScriptOp::new(
        ReadLockInfo {
            name: name.to_owned(),
        },
        call,
        target,
        None,
        deadline,
    ))
}

fn text(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) => String::from_utf8(b.clone()).ok(),
        Reply::Status(s) => Some(s.clone()),
        _ => None,
    }
}

fn parse_kind(entry: &Reply) -> Option<KindInfo> {
    let [kind, holders, waiters, subscribers, permits] = entry.as_array()? else {
        return None;
    };
    let kind = match kind.as_int()? {
        1 => Primitive::Lease,
        2 => Primitive::Reentrant,
        3 => Primitive::Fair,
        4 => Primitive::ReadWrite,
        5 => Primitive::Semaphore,
        _ => return None,
    };
    let holders = holders
        .as_array()?
        .chunks(4)
        .map(|h| {
            let [token, ms, holds, role] = h else {
                return None;
            };
            let lease = match (kind, text(role)?.as_str()) {
                (Primitive::Lease, _) => LeaseKind::Lock(LockKind::Lease),
                (Primitive::Reentrant, _) => LeaseKind::Lock(LockKind::Reentrant),
                (Primitive::Fair, _) => LeaseKind::Lock(LockKind::Fair),
                (Primitive::ReadWrite, "w") => LeaseKind::Lock(LockKind::Write),
                (Primitive::ReadWrite, _) => LeaseKind::Lock(LockKind::Read),
                (Primitive::Semaphore, _) => LeaseKind::Permit,
            };
            Some(Holder {
                token_prefix: text(token)?,
                remaining: pttl(ms.as_int()?),
                holds: u64::try_from(holds.as_int()?).ok()?,
                kind: lease,
                client: None,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(KindInfo {
        kind,
        holders,
        waiters: u64::try_from(waiters.as_int()?).ok(),
        subscribers: u64::try_from(subscribers.as_int()?).unwrap_or(0),
        permits: u64::try_from(permits.as_int()?).ok(),
    })
}

impl OpKind for ReadLockInfo {
    type Output = LockInfo;
    const CONTEXT: &'static str = "lock info";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<LockInfo, Error>> {
        let [fence, entries @ ..] = reply.as_array()? else {
            return None;
        };
        let fence = match fence {
            Reply::Nil => None,
            // A foreign counter (not an integer) reads as none.
            other => other.as_int().and_then(|n| u64::try_from(n).ok()),
        };
        let kinds = entries.iter().map(parse_kind).collect::<Option<Vec<_>>>()?;
        Some(Ok(LockInfo {
            name: self.name.clone(),
            fence,
            kinds,
        }))
    }
}

/// A forced release: how many holds it released.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForceRelease;

impl OpKind for ForceRelease {
    type Output = u64;
    const CONTEXT: &'static str = "forced release";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<u64, Error>> {
        Some(Ok(u64::try_from(reply.as_int()?).ok()?))
    }
}

/// Checks a token prefix for [`force_release`]: [`MIN_RELEASE_PREFIX`] to
/// [`MAX_TOKEN_LEN`] bytes.
pub fn check_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.len() < MIN_RELEASE_PREFIX || prefix.len() > MAX_TOKEN_LEN {
        return Err(InvalidArgument::BadTokenPrefix {
            len: prefix.len(),
            min: MIN_RELEASE_PREFIX,
            max: MAX_TOKEN_LEN,
        }
        .into());
    }
    Ok(())
}

/// Releases by force every hold under lock name `name` whose token starts with
/// `token_prefix` (what [`lock_info`] showed: at least [`MIN_RELEASE_PREFIX`] characters,
/// else [`InvalidArgument::BadTokenPrefix`] before anything is sent), of any kind, waking
/// waiters as the kind's own release does; giving up at `deadline`. Yields how many holds
/// it released: 0 when the holder the operator saw no longer holds it (released, expired,
/// or the lock changed hands: a new holder's token has another prefix, so it is not
/// touched).
///
/// The holder is not told at once: its next renewal (or release) finds the hold gone, and
/// its guard reports the lease lost. Retried after a lost reply like any read: a retry
/// finds nothing left to release (0), so read 0 after a lost reply as "maybe released".
pub fn force_release(
    keyspace: &Keyspace,
    name: &str,
    token_prefix: &str,
    deadline: Instant,
) -> Result<ScriptOp<ForceRelease>, Error> {
    check_prefix(token_prefix)?;
    let (mut keys, channels) = all_keys(keyspace, name)?;
    // Not the fence counter: a forced release issues no fence.
    keys.pop();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut call = ScriptCall::new(&FORCE_RELEASE)
        .keys(&key_refs)
        .arg(token_prefix);
    for c in &channels {
        call = call.arg(c);
    }
    Ok(ScriptOp::new(
        ForceRelease,
        call,
        Target::new(name, keys),
        None,
        deadline,
    ))
}

/// One lock or semaphore found by [`scan_locks`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct FoundLock {
    /// Its name.
    pub name: String,
    /// What was found: `Lock(Lease | Reentrant | Fair)` held, `Lock(Write)` a writer holds
    /// a read-write lock, `Lock(Read)` readers hold it, `Permit` a semaphore (its permit
    /// count is stored, held or not).
    pub kind: LeaseKind,
}

/// One page of [`scan_locks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockPage {
    /// What this step found (possibly nothing: a step examines about `count` keys, of
    /// which none may be a lock's).
    pub locks: Vec<FoundLock>,
    /// Where the next page starts; `None` when the walk is over.
    pub next: Option<u64>,
}

/// Lists locks: one `SCAN` step.
#[derive(Debug, Clone)]
pub struct ScanLocks {
    prefix: String,
}

/// The longest pattern [`scan_locks`] takes, in bytes.
pub const MAX_PATTERN_LEN: usize = crate::keys::MAX_NAME_LEN;

/// The most keys one [`scan_locks`] step may examine.
pub const MAX_SCAN_COUNT: u32 = 100_000;

/// `s` with the glob characters of `SCAN MATCH` escaped (a key prefix or name matched
/// literally).
pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One step of a walk over the locks and semaphores whose name matches `pattern` (a
/// `SCAN MATCH` glob on the name: `*` any, `?` one character, `[abc]`, `\` escapes; `*`
/// for all), from `cursor` (0 to start; then the page's [`next`](LockPage::next)),
/// examining about `count` keys (1 to [`MAX_SCAN_COUNT`]), giving up at `deadline`.
///
/// `SCAN`, never `KEYS`: each step is short, whatever the size of the keyspace. As `SCAN`
/// promises, a walk from 0 to the end lists every lock held throughout the walk once per
/// key it has (see [`FoundLock::kind`]; a read-write lock held by a writer and by readers
/// at once is listed under both), and may list one twice if the server resized its table
/// meanwhile. One node: on a Cluster, send it to each master in turn (the blocking
/// driver's `Client::locks` does).
pub fn scan_locks(
    keyspace: &Keyspace,
    pattern: &str,
    cursor: u64,
    count: u32,
    deadline: Instant,
) -> Result<ScriptOp<ScanLocks>, Error> {
    if pattern.is_empty() || pattern.len() > MAX_PATTERN_LEN {
        return Err(InvalidArgument::Setting(format!(
            "the pattern must be 1 to {MAX_PATTERN_LEN} bytes, got {}",
            pattern.len()
        ))
        .into());
    }
    crate::limits::count("scan count", u64::from(count), 1, u64::from(MAX_SCAN_COUNT))?;
    let prefix = keyspace.prefix();
    let glob = cat(&[&glob_escape(prefix), ":{", pattern, "}:*"]);
    let call = ScriptCall::new(&SCAN_LOCKS)
        .arg(cursor.to_string())
        .arg(glob)
        .arg(count.to_string());
    Ok(ScriptOp::new(
        ScanLocks {
            prefix: prefix.to_owned(),
        },
        call,
        Target::new(pattern, Vec::<String>::new()),
        None,
        deadline,
    ))
}

/// The lock `key` is the key of, if it is one [`scan_locks`] lists.
fn found(prefix: &str, key: &str) -> Option<FoundLock> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{")?;
    // The part never contains `}`; a name may.
    let close = rest.rfind("}:")?;
    let (name, part) = (&rest[..close], &rest[close + 2..]);
    let kind = match part {
        "lock" => LeaseKind::Lock(LockKind::Lease),
        "reentrant" => LeaseKind::Lock(LockKind::Reentrant),
        "fair" => LeaseKind::Lock(LockKind::Fair),
        "rw:writer" => LeaseKind::Lock(LockKind::Write),
        "rw:readers" => LeaseKind::Lock(LockKind::Read),
        "sem:permits" => LeaseKind::Permit,
        _ => return None,
    };
    Some(FoundLock {
        name: name.to_owned(),
        kind,
    })
}

impl OpKind for ScanLocks {
    type Output = LockPage;
    const CONTEXT: &'static str = "lock listing";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<LockPage, Error>> {
        let [cursor, keys] = reply.as_array()? else {
            return None;
        };
        let cursor = u64::try_from(cursor.as_int()?).ok()?;
        let mut locks = Vec::new();
        for key in keys.as_array()? {
            if let Some(lock) = found(&self.prefix, &text(key)?) {
                locks.push(lock);
            }
        }
        Some(Ok(LockPage {
            locks,
            next: (cursor != 0).then_some(cursor),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{LockSpec, Token};
    use crate::semaphore::SemaphoreKeys;

    #[test]
    fn script_digests_match_and_the_prelude_is_exactly_what_they_call() {
        for s in ALL {
            let digest = sha1_smol::Sha1::from(s.source).digest().to_string();
            assert_eq!(digest, s.sha1, "digest of {}", s.name);
            crate::script::tests::check_prelude(s);
        }
    }

    /// The keys read are the keys every kind's own spec uses (one layout, two readers).
    #[test]
    fn the_keys_read_are_the_kinds_own() {
        let ks = Keyspace::new("app").unwrap();
        let (keys, channels) = all_keys(&ks, "n").unwrap();
        let (ttl, wait) = (Duration::from_secs(30), Duration::from_secs(5));
        let token = || Token::new("tok").unwrap();
        let has = |spec: LockSpec| {
            for key in spec.target.keys.iter() {
                assert!(keys.iter().any(|k| k == key), "{key}");
            }
            assert!(channels.contains(&spec.notify), "{}", spec.notify);
        };
        has(LockSpec::lease(&ks, "n", token(), ttl).unwrap());
        has(LockSpec::reentrant(&ks, "n", "o", token(), ttl).unwrap());
        has(LockSpec::fair(&ks, "n", token(), ttl, wait).unwrap());
        has(LockSpec::read(&ks, "n", token(), ttl).unwrap());
        has(LockSpec::write(&ks, "n", token(), ttl, wait).unwrap());
        has(SemaphoreKeys::new(&ks, "n")
            .unwrap()
            .permit(token(), ttl, 2, wait)
            .unwrap());
        assert_eq!(keys.len(), 13);
    }

    #[test]
    fn short_prefixes_are_refused_before_anything_is_sent() {
        let ks = Keyspace::default();
        let deadline = crate::testing::origin();
        for bad in ["", "1234567", &"a".repeat(MAX_TOKEN_LEN + 1)] {
            assert!(matches!(
                force_release(&ks, "n", bad, deadline),
                Err(Error::InvalidArgument(
                    InvalidArgument::BadTokenPrefix { .. }
                ))
            ));
        }
        assert!(force_release(&ks, "n", "12345678", deadline).is_ok());
        assert!(force_release(&ks, "", "12345678", deadline).is_err());
        assert!(scan_locks(&ks, "", 0, 10, deadline).is_err());
        assert!(scan_locks(&ks, "*", 0, 0, deadline).is_err());
        assert!(scan_locks(&ks, "*", 0, MAX_SCAN_COUNT + 1, deadline).is_err());
    }

    #[test]
    fn listed_keys_name_their_lock() {
        let f = |key| found("app", key);
        let lock = |name: &str, kind| {
            Some(FoundLock {
                name: name.into(),
                kind,
            })
        };
        assert_eq!(
            f("app:{a}:lock"),
            lock("a", LeaseKind::Lock(LockKind::Lease))
        );
        assert_eq!(
            f("app:{a}:b}:rw:readers"),
            lock("a}:b", LeaseKind::Lock(LockKind::Read))
        );
        assert_eq!(f("app:{s}:sem:permits"), lock("s", LeaseKind::Permit));
        assert_eq!(f("app:{a}:fence"), None);
        assert_eq!(f("app:{a}:fair:queue"), None);
        assert_eq!(f("other:{a}:lock"), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
