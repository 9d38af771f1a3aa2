//! The lease lock: `SET`-style ownership by a random token, with an expiry (the lease) and a
//! fencing token issued in the same round trip.
//!
//! ```text
//!              Acquire                      ScriptOp<Extend>
//!   (try once, or wait with backoff)      (owner-checked PEXPIRE)
//!   Idle ──EVALSHA acquire──► Sent ──{1,fence}──► Done(Acquired(Lease)) ──► ... ──► ScriptOp<Release>
//!                 ▲             │                                              (owner-checked DEL
//!                 │      {0,pttl}│ / transport failure                           + PUBLISH)
//!                 └── Wait(until retry, wake on release channel) ◄─┘
//!   deadline passed: Timeout;  a lost reply then a final failure: Cleanup (owner-checked
//!   release of the key we may hold) then Unavailable.
//! ```
//!
//! Every script compares the caller's token, so every call can be retried after a lost
//! reply: a retried acquisition finds its own token and returns the fence it was issued
//! (unless the fence counter was lost, evicted or deleted: then a higher one, from the server
//! clock floor).
//!
//! Each kind of lock has its own module with its graph ([`exclusive`], [`reentrant`],
//! [`fair`], [`read_write`]; a semaphore permit: [`crate::semaphore`]; a queue job:
//! [`crate::queue`]); all run on [`Acquire`] and [`ScriptOp`].
//!
//! A walk through the failure side of that graph: trying once, the acquisition's reply is
//! lost twice; the acquisition may have taken the lock, so it undoes it (owner-checked)
//! before it reports `Unavailable`.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Error, FailureKind, Protocol, Reply, Response, Step, TransportFailure};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::{Acquire, AcquireOptions, LockSpec, Token};
//!
//! let ttl = Duration::from_secs(30);
//! let spec = LockSpec::lease(&Keyspace::default(), "billing", Token::from_random([8; 16]), ttl).unwrap();
//! let now = Instant::now();
//! let mut acquire = Acquire::new(spec, &AcquireOptions::default(), 1, now).unwrap();
//! for _ in 0..2 {
//!     let Step::Send(batch) = acquire.poll(now) else { unreachable!() };
//!     let lost = TransportFailure::no_reply("read timed out");
//!     acquire.handle(Response::failed(batch.requests[0].id, lost), now);
//! }
//! // Cleanup: the owner-checked undo of what a lost attempt may have taken.
//! let Step::Send(undo) = acquire.poll(now) else { unreachable!() };
//! acquire.handle(Response::reply(undo.requests[0].id, Reply::Int(1)), now);
//! let Step::Done(Err(Error::Unavailable { attempts, last })) = acquire.poll(now)
//! else { unreachable!() };
//! assert_eq!((attempts, last.kind), (2, FailureKind::NoReply));
//! ```

mod acquire;
pub mod exclusive;
pub mod fair;
pub mod native;
mod ops;
pub mod read_write;
pub mod reentrant;
pub mod scripts;
pub(crate) mod spec;
mod undo;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use acquire::{Acquire, AcquireOptions, Acquisition, DEFAULT_RETRY_INITIAL, DEFAULT_RETRY_MAX};
pub use native::{NativeDelete, NativeRelease};
pub use ops::{Extend, Inspect, LeaseState, OpKind, Release, ScriptOp};
pub use scripts::ALL as SCRIPTS;
pub use spec::{Keys, KeysIter, LeaseCalls, LeaseKind, LockKind, LockSpec, Target};
pub use undo::Undo;

use crate::backoff::saturating_add;
use crate::error::{Error, InvalidArgument};
use crate::reply::{ErrorReply, Reply};

/// The longest lease accepted: [`crate::limits::MAX_DURATION`] (100 years), which keeps
/// `server time + ttl` an exact plain integer inside every script.
pub const MAX_TTL: Duration = crate::limits::MAX_DURATION;

/// How long the server remembers an acquisition that was undone after its reply was lost
/// (`<stem>:undone`): if that acquisition was only delayed and reaches the server after its
/// undo (which may travel on another connection), it takes nothing. A delay longer than this
/// could still leave an ownerless key until its ttl ends.
pub const UNDONE_KEEP: Duration = Duration::from_secs(600);

/// The longest owner token accepted, in bytes.
pub const MAX_TOKEN_LEN: usize = 256;

/// The secret that proves ownership of a lease: random bytes supplied by the driver,
/// hex-encoded. Cloning it copies nothing (a lease's calls each hold it), and it is one
/// pointer wide (8 bytes; a held lease and each of its calls keep one): a token of up to
/// 32 bytes, as every random one is, lives in that one allocation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(Arc<TokenText>);

/// The text of a [`Token`]: inline up to [`SHORT_TOKEN`] bytes (the zero-filled rest takes
/// no part in comparisons, since a text of that length is always stored inline), else boxed.
#[derive(PartialEq, Eq, Hash)]
enum TokenText {
    Short { len: u8, bytes: [u8; SHORT_TOKEN] },
    Long(Box<str>),
}

/// The longest token kept inline: a random token's 32 hex digits.
const SHORT_TOKEN: usize = 32;

impl Token {
    /// A token from random bytes (the driver draws 16 from the OS).
    pub fn from_random(bytes: [u8; 16]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = [0u8; SHORT_TOKEN];
        for (i, b) in bytes.into_iter().enumerate() {
            s[2 * i] = HEX[usize::from(b >> 4)];
            s[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        Token(Arc::new(TokenText::Short {
            len: SHORT_TOKEN as u8,
            bytes: s,
        }))
    }

    /// A token of a client whose id is `client` (its first
    /// [`CLIENT_ID_LEN`](crate::inspect::CLIENT_ID_LEN) hex digits, the same in every token the
    /// client draws), then `random` (96 bits, 24 hex digits): as unguessable as anyone needs
    /// (the prefix an operator is shown, [`SHOWN_PREFIX`](crate::inspect::SHOWN_PREFIX)
    /// digits, leaves 64 of them unseen), and the prefix names the holder in the
    /// [`registry`](crate::inspect::registry).
    ///
    /// ```
    /// use redlease_core::lease::Token;
    /// let t = Token::of_client([0x1a, 0x2b, 0x3c, 0x4d], [0xff; 12]);
    /// assert_eq!(t.as_str(), "1a2b3c4dffffffffffffffffffffffff");
    /// ```
    pub fn of_client(client: [u8; 4], random: [u8; 12]) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&client);
        bytes[4..].copy_from_slice(&random);
        Token::from_random(bytes)
    }

    /// A token chosen by the caller (1 to [`MAX_TOKEN_LEN`] bytes).
    pub fn new(token: impl Into<String>) -> Result<Self, Error> {
        let token = token.into();
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(InvalidArgument::BadToken {
                len: token.len(),
                max: MAX_TOKEN_LEN,
            }
            .into());
        }
        let text = match u8::try_from(token.len()) {
            Ok(len) if usize::from(len) <= SHORT_TOKEN => {
                let mut bytes = [0u8; SHORT_TOKEN];
                bytes[..token.len()].copy_from_slice(token.as_bytes());
                TokenText::Short { len, bytes }
            }
            _ => TokenText::Long(token.into_boxed_str()),
        };
        Ok(Token(Arc::new(text)))
    }

    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        match &*self.0 {
            // Copied from a `str` (or hex digits) whole: always UTF-8.
            TokenText::Short { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            TokenText::Long(text) => text,
        }
    }

    /// The token as bytes (what a call sends), without [`as_str`](Self::as_str)'s UTF-8
    /// check.
    pub fn as_bytes(&self) -> &[u8] {
        match &*self.0 {
            TokenText::Short { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            TokenText::Long(text) => text.as_bytes(),
        }
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Enough to tell tokens apart in logs (a client's tokens share their first 8
        // characters, its id: 4 more tell its holds apart), not enough to forge a release.
        let shown: String = self.as_str().chars().take(12).collect();
        write!(f, "Token({shown}..)")
    }
}

/// A lease we were granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// What the lease is held on (a lock of some kind, a permit, a job).
    pub kind: LeaseKind,
    /// The lock's name and keys.
    pub target: Target,
    /// Our owner token (for a reentrant lock, the acquisition's op id).
    pub token: Token,
    /// The fencing token: strictly greater than that of every earlier acquisition of this
    /// lock name (for a read hold: the fence of the last writer the server knows, 0 if none).
    /// Pass it to the protected resource so it can reject a stale holder.
    ///
    /// It is `max(counter + 1, server clock in µs)`, so it stays above every earlier fence
    /// even when the server lost the counter (restart without persistence, an older
    /// snapshot, failover to a lagging replica), provided the clock of the server issuing it
    /// reads later than the clock of the server that issued the earlier ones did then
    /// (see `docs/guarantees.md`). Always below 2^53.
    pub fence: u64,
    /// The lease length.
    pub ttl: Duration,
    /// When the successful acquisition was sent (the lease can only have started later).
    pub acquired_at: Instant,
    /// Until when the lease is safely ours by the local clock: the send time of the last
    /// acquisition or extension plus the ttl, less a clock-drift allowance (see [`drift`]).
    pub valid_until: Instant,
    /// How many acquisition attempts it took (1 when the lock was free at once).
    pub attempts: u32,
    /// Whether an earlier attempt of the acquisition went unanswered (its reply was lost):
    /// that attempt may still reach Redis after this lease is settled, so the call that
    /// settles it (the release; a job's ack or nack) also records the token as undone (for
    /// [`UNDONE_KEEP`]), and the late attempt then takes nothing. The acquisition sets it,
    /// and its [`calls`](Self::calls)' release records the token already.
    pub unanswered: bool,
    /// The owner-checked calls on this lease.
    pub calls: LeaseCalls,
    /// Further values the acquisition returned (for a job: its id and payload).
    pub data: Vec<Vec<u8>>,
}

impl Lease {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.target.name
    }

    /// The time left before `valid_until`, zero once it has passed.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }
}

/// The clock-drift allowance subtracted from a lease's validity: 1 % of the ttl plus 2 ms
/// (the RedLock rule), so that a lease is considered over slightly before Redis expires it.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The instant until which a lease granted by a command sent at `sent_at` is safely ours.
pub fn valid_until(sent_at: Instant, ttl: Duration) -> Instant {
    saturating_add(sent_at, ttl.saturating_sub(drift(ttl)))
}

/// Checks a lease length: [`crate::limits::MIN_TTL`] (10 ms) to [`MAX_TTL`] (100 years);
/// returns it in whole milliseconds.
pub fn validate_ttl(what: &'static str, ttl: Duration) -> Result<u64, Error> {
    crate::limits::ttl(what, ttl)
}

/// Turns an error reply into the error the caller sees.
pub(crate) fn error_from_reply(target: &Target, e: ErrorReply) -> Error {
    if e.is("WRONGTYPE") {
        Error::WrongType {
            name: target.name.to_string(),
            keys: target.keys.join(", "),
            message: e.message,
        }
    } else {
        Error::Redis {
            code: e.code,
            message: e.message,
        }
    }
}

/// An integer pair `{a, b}` from a script.
pub(crate) fn int_pair(reply: &Reply) -> Option<(i64, i64)> {
    match reply.as_array()? {
        [a, b] => Some((a.as_int()?, b.as_int()?)),
        _ => None,
    }
}

/// `{a, b, bulk...}`: an integer pair followed by bulk strings.
pub(crate) fn int_pair_and_data(reply: &Reply) -> Option<(i64, i64, Vec<Vec<u8>>)> {
    match reply.as_array()? {
        [a, b, rest @ ..] => {
            let data = rest
                .iter()
                .map(|r| match r {
                    Reply::Bulk(b) => Some(b.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((a.as_int()?, b.as_int()?, data))
        }
        _ => None,
    }
}

/// A PTTL reply as a duration (`None` for "no expiry" or "no key").
pub(crate) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_and_validated() {
        let t = Token::from_random([0xab; 16]);
        assert_eq!(t.as_str(), "ab".repeat(16));
        assert!(format!("{t:?}").starts_with("Token(ababab"));
        assert!(Token::new("").is_err());
        assert!(Token::new("x".repeat(MAX_TOKEN_LEN + 1)).is_err());
        assert!(Token::new("me").is_ok());
        // Inline and boxed texts read back whole, and compare by text.
        for text in [
            "me",
            &"x".repeat(32),
            &"y".repeat(33),
            &"z".repeat(MAX_TOKEN_LEN),
        ] {
            let t = Token::new(text).unwrap();
            assert_eq!(t.as_str(), text);
            assert_eq!(t, Token::new(text).unwrap());
        }
        assert_ne!(Token::new("ab").unwrap(), Token::new("abc").unwrap());
        assert_eq!(Token::new("ab".repeat(16)).unwrap(), t);
    }

    /// A token is one pointer wide, and so is a missing one: a held lease and each of its
    /// calls keep one.
    #[test]
    fn tokens_are_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Token>(), 8);
        assert_eq!(std::mem::size_of::<Option<Token>>(), 8);
        // Every held lease keeps one (issue 18: memory per held lease; 344 with a two-word
        // token, 48 bytes of it in its three calls).
        let size = std::mem::size_of::<Lease>();
        assert!(size <= 288, "{size}");
    }

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl("ttl", Duration::ZERO).is_err());
        assert!(validate_ttl("ttl", Duration::from_micros(999)).is_err());
        assert!(validate_ttl("ttl", Duration::from_millis(3)).is_err());
        assert_eq!(validate_ttl("ttl", Duration::from_millis(10)), Ok(10));
        assert!(validate_ttl("ttl", MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(validate_ttl("ttl", Duration::MAX).is_err());
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
    }
}

#[cfg(test)]
mod machine_tests;
