//! Lua scripts as constants with their SHA-1, and the EVALSHA call that falls back to EVAL
//! when the server does not know the script (after a restart, a failover or `SCRIPT FLUSH`).

use std::num::NonZeroU32;
use std::sync::Arc;

use crate::command::{Command, NodeId, Request, RequestId, RequestIds};
use crate::lease::Token;
use crate::reply::{ErrorReply, Reply, Response, TransportFailure};

/// A Lua script and its SHA-1 (hex, lower case).
///
/// Scripts are built at compile time by [`script!`](crate::script!): the parts of the shared
/// [`prelude`] a script uses, then its own body, and the digest of the whole computed by a
/// `const fn` SHA-1 ([`sha1_hex`]). Nothing is hashed or loaded at run time: a call is sent
/// as `EVALSHA` and resent as `EVAL` when the server answers `NOSCRIPT`.
///
/// A script that writes nothing is marked [`read_only`](Self::read_only): it is sent as
/// `EVALSHA_RO` (Redis 7.0+, Valkey), which a user whose key rights are read-only
/// (`%R~<prefix>:*`) may run, and which the server itself holds to writing nothing. A
/// server without it (Redis 6.2: "unknown command") or a user not granted it (`NOPERM` naming
/// `evalsha_ro`) gets the same call again as `EVALSHA` ([`is_read_only_refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script {
    /// A short name for diagnostics.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    /// SHA-1 of `source`, as Redis computes it for `EVALSHA`.
    pub sha1: &'static str,
    /// Whether the script writes nothing: sent as `EVALSHA_RO` / `EVAL_RO`.
    pub read_only: bool,
}

impl Script {
    /// This script marked as writing nothing (see [`Script`]).
    pub const fn read_only(self) -> Script {
        Script {
            read_only: true,
            ..self
        }
    }
}

/// The commands that write (Redis's `write` flag) among those the library's scripts call:
/// a [`read_only`](Script::read_only) script calls none of them (a unit test checks each),
/// and the in-process server refuses them under `EVALSHA_RO` / `EVAL_RO` as Redis does.
pub const WRITE_COMMANDS: &[&str] = &[
    "APPEND",
    "DECR",
    "DECRBY",
    "DEL",
    "EXPIRE",
    "EXPIREAT",
    "GETDEL",
    "GETEX",
    "GETSET",
    "HDEL",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HMSET",
    "HSET",
    "HSETNX",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "LMOVE",
    "LPOP",
    "LPUSH",
    "LREM",
    "LSET",
    "LTRIM",
    "MSET",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PSETEX",
    "RENAME",
    "RPOP",
    "RPOPLPUSH",
    "RPUSH",
    "SADD",
    "SET",
    "SETEX",
    "SETNX",
    "SREM",
    "UNLINK",
    "XADD",
    "ZADD",
    "ZINCRBY",
    "ZPOPMAX",
    "ZPOPMIN",
    "ZREM",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
];

/// Whether `e` answers an `EVALSHA_RO` / `EVAL_RO` that the server does not have (Redis
/// before 7.0: `ERR unknown command 'evalsha_ro'`) or that the user may not run (`NOPERM
/// ... 'evalsha_ro' command`): the call is then sent again as `EVALSHA` / `EVAL`. A
/// `NOPERM` about the keys, or an error from inside the script, is not such a refusal.
pub fn is_read_only_refusal(e: &ErrorReply) -> bool {
    let message = e.message.to_ascii_lowercase();
    let names_it = message.contains("evalsha_ro") || message.contains("eval_ro");
    names_it
        && ((e.is("ERR") && message.starts_with("unknown command"))
            || (e.is("NOPERM") && message.contains("command")))
}

/// The Lua prelude shared by the scripts: each part defines local functions, and a script
/// is its parts (in the order given to [`script!`](crate::script!)) followed by its body, or
/// its body with the parts spliced in after a line `--@prelude` ([`PRELUDE_MARK`]).
/// Only the parts a script calls are included (a unit test checks both ways), so that no
/// script pays for closures it never uses: each local function is created on every call
/// (measured on Redis 7.0 with `scripts/cpu.sh`-style callgrind runs: the prelude cost the
/// lease acquire script about 2,500 server instructions of 45,000, its release about 600).
/// That is why a script whose fast path needs none of them puts the mark inside the branch
/// that does (Lua scopes the functions to that block), and why the hottest scripts (the
/// lease acquire, the permit acquire) spell their few helper steps out in their body
/// instead (`tests/scripts.rs` holds both forms to the same table of cases).
pub mod prelude {
    /// The first line of a script that touches keys it does not declare in `KEYS` (each of
    /// them shares the declared keys' hash tag, so Redis and Valkey run it, and Cluster
    /// routes it): per-minute counts, a group's own keys, keys named after the dead list.
    /// Dragonfly, which refuses undeclared keys by default, runs a script that begins with
    /// it; the in-process server, strict about keys by default, lets it through too and
    /// refuses an undeclared key to any other script.
    pub const UNDECLARED_KEYS: &str = "--!df flags=allow-undeclared-keys\n";
    /// `notify(channel, message)`: `PUBLISH`, or `SPUBLISH` for a channel given as
    /// `{shard}<name>` (Redis Cluster shard channels).
    pub const NOTIFY: &str = include_str!("lua/prelude/notify.lua");
    /// `now_ms()`: the server's clock (`TIME`) in milliseconds since the epoch.
    pub const NOW_MS: &str = include_str!("lua/prelude/now_ms.lua");
    /// `now_ms_up()`: the server's clock in milliseconds since the epoch rounded up (for a
    /// due time that is never early), then rounded down (as `now_ms()`).
    pub const NOW_MS_UP: &str = include_str!("lua/prelude/now_ms_up.lua");
    /// `now_us()`: the server's clock (`TIME`) in microseconds since the epoch, and the
    /// `TIME` reply it was read from.
    pub const NOW_US: &str = include_str!("lua/prelude/now_us.lua");
    /// `fence_counter(key, text)` (the counter's value, or an error reply to return) and
    /// `issue_fence(key, counter, us, t)`: the fence floor `max(counter + 1, server µs)`
    /// (`t`: the `TIME` reply of `us`, whose digits spare formatting the fence).
    pub const FENCE: &str = include_str!("lua/prelude/fence.lua");
    /// `undone(key, token)`: whether an acquisition was undone after its reply was lost.
    /// Needs [`NOW_MS`] before it.
    pub const UNDONE: &str = include_str!("lua/prelude/undone.lua");
    /// `remember(key, member, now, keep)`: a zset of members remembered for `keep` ms
    /// (undone acquisitions, settled deliveries).
    pub const REMEMBER: &str = include_str!("lua/prelude/remember.lua");
    /// `bad_sequence(key)` (an error reply when the queue's sequence counter is not an
    /// integer) and `ready_score(priority, seq_key)`: the ready set's score, higher
    /// priorities first, then first in first out.
    pub const READY: &str = include_str!("lua/prelude/ready.lua");
    /// `gcra(key, now, interval, tolerance, cost)` (a rate limiter's decision on the
    /// theoretical arrival time kept in `key`, reading only) and `gcra_store(key, tat, now)`
    /// (keeps it until it passes): the engine of [`rate`](crate::rate), for any script that
    /// limits a rate.
    pub const GCRA: &str = include_str!("lua/prelude/gcra.lua");
    /// `dedup_clear(map, of, id)`: a job that is gone drops its deduplication entry
    /// ([`queue::dedup`](crate::queue::dedup)); for every script that removes a job.
    pub const DEDUP: &str = include_str!("lua/prelude/dedup.lua");
    /// `dedup_release(map, of, id, payloads, priorities, ready, seq, now)`: as
    /// `dedup_clear`, and a keep-latest follow-up parked behind the job is made ready, its
    /// enqueue time `now` ([`queue::dedup`](crate::queue::dedup)); for the scripts that ack
    /// a job. Needs [`READY`] before it.
    pub const DEDUP_RELEASE: &str = include_str!("lua/prelude/dedup_release.lua");
}

/// The line after which [`script!`](crate::script!) splices a script's prelude parts into its
/// body (a Lua comment, kept in the source); without it the parts come first.
pub const PRELUDE_MARK: &str = "--@prelude\n";

/// Where the prelude parts go in `body`: just after [`PRELUDE_MARK`], else at 0.
#[doc(hidden)]
pub const fn splice_at(body: &str) -> usize {
    let (b, m) = (body.as_bytes(), PRELUDE_MARK.as_bytes());
    let mut at = 0;
    while at + m.len() <= b.len() {
        let mut j = 0;
        while j < m.len() && b[at + j] == m[j] {
            j += 1;
        }
        if j == m.len() && (at == 0 || b[at - 1] == b'\n') {
            return at + m.len();
        }
        at += 1;
    }
    0
}

/// `body` with `parts` joined and spliced in at [`splice_at`] (for [`script!`](crate::script!));
/// `N` is their total length.
#[doc(hidden)]
pub const fn assemble<const N: usize>(parts: &[&str], body: &str) -> [u8; N] {
    let at = splice_at(body);
    let b = body.as_bytes();
    let mut out = [0u8; N];
    let mut n = 0;
    let mut i = 0;
    while i < at && n < N {
        out[n] = b[i];
        n += 1;
        i += 1;
    }
    let mut p = 0;
    while p < parts.len() {
        let bytes = parts[p].as_bytes();
        let mut j = 0;
        while j < bytes.len() && n < N {
            out[n] = bytes[j];
            n += 1;
            j += 1;
        }
        p += 1;
    }
    while i < b.len() && n < N {
        out[n] = b[i];
        n += 1;
        i += 1;
    }
    out
}

/// The length of `parts` joined (for [`script!`](crate::script!)).
#[doc(hidden)]
pub const fn joined_len(parts: &[&str]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < parts.len() {
        len += parts[i].len();
        i += 1;
    }
    len
}

/// Text built at compile time from valid UTF-8 (joined `&str`s, or hex digits).
#[doc(hidden)]
#[allow(clippy::panic)] // Evaluated in constants only: a failure is a compile error.
pub const fn utf8(bytes: &'static [u8]) -> &'static str {
    match core::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(_) => panic!("script text is not UTF-8"),
    }
}

/// The SHA-1 of `data` in lower-case hex, as Redis names a script for `EVALSHA`; a
/// `const fn`, so that script digests are computed when the crate is compiled.
pub const fn sha1_hex(data: &[u8]) -> [u8; 40] {
    let digest = sha1(data);
    let mut out = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        out[2 * i] = hex_digit(digest[i] >> 4);
        out[2 * i + 1] = hex_digit(digest[i] & 0xf);
        i += 1;
    }
    out
}

const fn hex_digit(n: u8) -> u8 {
    if n < 10 { b'0' + n } else { b'a' + n - 10 }
}

/// SHA-1 (FIPS 180-4) of `data`.
const fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let len = data.len();
    // The message, a 0x80 byte, zeros, then the length in bits (8 bytes): whole blocks.
    let total = (len + 9).div_ceil(64) * 64;
    let bits = (len as u64).wrapping_mul(8);
    let mut block = 0;
    while block < total {
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 16 {
            let mut word = 0u32;
            let mut b = 0;
            while b < 4 {
                let at = block + 4 * t + b;
                let byte = if at < len {
                    data[at]
                } else if at == len {
                    0x80
                } else if at >= total - 8 {
                    (bits >> (8 * (total - 1 - at))) as u8
                } else {
                    0
                };
                word = (word << 8) | byte as u32;
                b += 1;
            }
            w[t] = word;
            t += 1;
        }
        while t < 80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
            t += 1;
        }
        let (mut a, mut b, mut c, mut d, mut e) = (h[0], h[1], h[2], h[3], h[4]);
        t = 0;
        while t < 80 {
            let (f, k) = if t < 20 {
                ((b & c) | (!b & d), 0x5A82_7999)
            } else if t < 40 {
                (b ^ c ^ d, 0x6ED9_EBA1)
            } else if t < 60 {
                ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
            } else {
                (b ^ c ^ d, 0xCA62_C1D6)
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(w[t]);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = temp;
            t += 1;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
        block += 64;
    }
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 5 {
        let bytes = h[i].to_be_bytes();
        out[4 * i] = bytes[0];
        out[4 * i + 1] = bytes[1];
        out[4 * i + 2] = bytes[2];
        out[4 * i + 3] = bytes[3];
        i += 1;
    }
    out
}

/// Builds a [`Script`] at compile time: `script!(name, [prelude parts...], body)`, where
/// the parts are constants of [`prelude`] and the body is usually
/// `include_str!("lua/<name>.lua")`. The source is the parts then the body, or, when the
/// body has a line `--@prelude` ([`PRELUDE_MARK`]), the body with the parts spliced in
/// after that line (so that only the branch that needs them creates their closures); the
/// SHA-1 is computed from it by [`sha1_hex`].
///
/// ```
/// use redlease_core::script::{prelude::NOW_MS, Script};
/// static NOW: Script = redlease_core::script!("now", [NOW_MS], "return now_ms()\n");
/// assert!(NOW.source.starts_with(NOW_MS) && NOW.source.ends_with("return now_ms()\n"));
/// assert_eq!(NOW.sha1.len(), 40);
/// static LATE: Script = redlease_core::script!(
///     "late",
///     [NOW_MS],
///     "if ARGV[1] then\n--@prelude\nreturn now_ms()\nend\nreturn 0\n"
/// );
/// assert_eq!(
///     LATE.source,
///     format!("if ARGV[1] then\n--@prelude\n{NOW_MS}return now_ms()\nend\nreturn 0\n")
/// );
/// ```
#[macro_export]
macro_rules! script {
    ($name:expr, [$($part:expr),* $(,)?], $body:expr $(,)?) => {{
        const PARTS: &[&str] = &[$($part,)*];
        const BODY: &str = $body;
        const LEN: usize = $crate::script::joined_len(PARTS) + BODY.len();
        const SOURCE: [u8; LEN] = $crate::script::assemble::<LEN>(PARTS, BODY);
        const SHA1: [u8; 40] = $crate::script::sha1_hex(&SOURCE);
        $crate::script::Script {
            name: $name,
            source: $crate::script::utf8(&SOURCE),
            sha1: $crate::script::utf8(&SHA1),
            read_only: false,
        }
    }};
}

/// One invocation of a script: keys and arguments, on one node.
///
/// Cloning is cheap (the keys and arguments are shared, copied only when a clone is changed):
/// a lock's calls are cloned into its lease and into each operation on it. The owner token
/// may be held apart from the shared arguments ([`owner_arg`](Self::owner_arg)), so that the
/// calls of one lock are built once and bound to each acquisition's token without copying
/// ([`LockSpec::with_token`](crate::lease::LockSpec::with_token)).
#[derive(Debug, Clone)]
pub struct ScriptCall {
    script: &'static Script,
    parts: Arc<Parts>,
    /// The value of the owner-token argument ([`Parts::slot`]), if the call has one.
    token: Option<Token>,
    /// The value of the subject argument ([`Parts::subject`]), if the call has one and it
    /// is bound.
    subject: Option<Arc<Vec<u8>>>,
    /// The value of the prior-token argument ([`Parts::prior`]), if the call has one.
    prior: Option<Token>,
    node: NodeId,
    /// How many of the shared items this call uses, when fewer than all: a call made by
    /// [`sharing`](Self::sharing) reads a prefix of another call's keys and arguments.
    view: Option<u16>,
}

/// Calls are equal when they call the same script on the same node with the same keys and
/// arguments, however those were put together.
impl PartialEq for ScriptCall {
    fn eq(&self, other: &Self) -> bool {
        self.script == other.script
            && self.node == other.node
            && self.parts.keys == other.parts.keys
            && self.len() == other.len()
            && (0..self.len()).all(|i| self.item(i) == other.item(i))
    }
}

impl Eq for ScriptCall {}

/// The keys and arguments of a [`ScriptCall`], in one buffer, each framed as a RESP bulk
/// string (as a [`Command`] keeps its arguments, so that a call becomes a command by copying
/// runs of items): item `i` is framed in `bytes[ends[i - 1]..ends[i]]` (from 0 for the
/// first); the first `keys` items are the keys. A lock's calls are built once and shared by
/// its acquisitions: one buffer instead of one allocation per key and argument.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Parts {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    keys: usize,
    /// The item that is the owner token: empty in `bytes`, its value is the call's `token`.
    slot: Pos,
    /// The item bound per use (a job's id, [`ScriptCall::subject_arg`]): empty in `bytes`,
    /// its value is the call's `subject`.
    subject: Pos,
    /// The item that is a second token bound per use ([`ScriptCall::prior_arg`]): empty in
    /// `bytes`, its value is the call's `prior`.
    prior: Pos,
}

/// The index of a slot among a call's items, if it has one, in 4 bytes (an
/// `Option<usize>` takes 16): the three slots of [`Parts`] are kept by every held lease.
/// An index that does not fit in a `u32` (more than 4 billion items, which no call can
/// hold in memory) cannot be a slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pos(Option<NonZeroU32>);

impl Pos {
    /// No slot.
    const NONE: Pos = Pos(None);

    /// The slot at item `i`.
    fn at(i: usize) -> Pos {
        Pos(i
            .checked_add(1)
            .and_then(|n| u32::try_from(n).ok())
            .and_then(NonZeroU32::new))
    }

    /// Its item index, if any.
    fn get(self) -> Option<usize> {
        self.0.map(|n| n.get() as usize - 1)
    }

    /// The slot, if it is among the first `len` items.
    fn below(self, len: usize) -> Option<usize> {
        self.get().filter(|&i| i < len)
    }

    /// Follows an item inserted at `i`: a slot at or after it moves up by one.
    fn shift_from(&mut self, i: usize) {
        if let Some(at) = self.get().filter(|&at| at >= i) {
            *self = Pos::at(at + 1);
        }
    }

    /// Clears the slot if it is item `i` (replaced by a plain value).
    fn clear_at(&mut self, i: usize) {
        if self.get() == Some(i) {
            *self = Pos::NONE;
        }
    }
}

impl Parts {
    fn start(&self, i: usize) -> usize {
        if i == 0 { 0 } else { self.ends[i - 1] }
    }

    /// Item `i`, unframed.
    fn item(&self, i: usize) -> &[u8] {
        // Items are framed by `insert` and `replace`: always read back.
        crate::command::unframe(&self.bytes[self.start(i)..self.ends[i]]).map_or(&[], |(v, _)| v)
    }

    /// Inserts `value` as item `i` (0 ..= len).
    fn insert(&mut self, i: usize, value: &[u8]) {
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(160);
            self.ends.reserve(8);
        }
        for slot in [&mut self.slot, &mut self.subject, &mut self.prior] {
            slot.shift_from(i);
        }
        if i == self.ends.len() {
            // Appending: the usual case.
            crate::command::frame(&mut self.bytes, value);
            self.ends.push(self.bytes.len());
            return;
        }
        let mut framed = Vec::with_capacity(value.len() + 16);
        crate::command::frame(&mut framed, value);
        let n = framed.len();
        let at = self.start(i);
        let len = self.bytes.len();
        self.bytes.resize(len + n, 0);
        self.bytes.copy_within(at..len, at + n);
        self.bytes[at..at + n].copy_from_slice(&framed);
        self.ends.insert(i, at);
        for end in &mut self.ends[i..] {
            *end += n;
        }
    }

    /// Replaces item `i` (< len) with `value` (the token slot becomes a plain argument).
    fn replace(&mut self, i: usize, value: &[u8]) {
        for slot in [&mut self.slot, &mut self.subject, &mut self.prior] {
            slot.clear_at(i);
        }
        let mut framed = Vec::with_capacity(value.len() + 16);
        crate::command::frame(&mut framed, value);
        let (start, end) = (self.start(i), self.ends[i]);
        let (old, new) = (end - start, framed.len());
        let len = self.bytes.len();
        if new > old {
            self.bytes.resize(len + new - old, 0);
            self.bytes.copy_within(end..len, start + new);
        } else if new < old {
            self.bytes.copy_within(end..len, start + new);
            self.bytes.truncate(len - (old - new));
        }
        self.bytes[start..start + new].copy_from_slice(&framed);
        for e in &mut self.ends[i..] {
            *e = *e - old + new;
        }
    }
}

impl ScriptCall {
    /// A call of `script` on the primary node.
    pub fn new(script: &'static Script) -> Self {
        ScriptCall {
            script,
            parts: Arc::default(),
            token: None,
            subject: None,
            prior: None,
            node: NodeId::PRIMARY,
            view: None,
        }
    }

    /// A call of `script` on the first `args` arguments of this one (and all its keys, its
    /// bound token and subject), sharing them: nothing is copied until one of the two is
    /// changed. A lock's release, extend and inspect calls differ only in their script and
    /// in the release's trailing arguments, so a held lease keeps one set of keys for the
    /// three. `args` beyond this call's arguments takes them all.
    pub fn sharing(&self, script: &'static Script, args: usize) -> ScriptCall {
        let len = self.parts.keys.saturating_add(args).min(self.len());
        let mut call = self.sibling(script, None);
        if len < self.parts.ends.len() {
            match u16::try_from(len) {
                Ok(len) => call.view = Some(len),
                // Too many items to count in a view: a copy of the prefix.
                Err(_) => call.own_prefix(len),
            }
        }
        call
    }

    /// How `self` reads `base`'s keys and arguments, if it reads nothing else: the same
    /// items (shared, or equal to a prefix of `base`'s with its slots in the same places),
    /// bound values and node, only its script and its count of items differing.
    /// `Some(view)` then rebuilds `self` as [`base.sibling(script, view)`](Self::sibling).
    pub(crate) fn view_of(&self, base: &ScriptCall) -> Option<Option<u16>> {
        let same_subject = match (&self.subject, &base.subject) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        if !(self.node == base.node
            && self.token == base.token
            && self.prior == base.prior
            && same_subject)
        {
            return None;
        }
        if Arc::ptr_eq(&self.parts, &base.parts) {
            return Some(self.view);
        }
        // Built apart: the same if its items are a prefix of `base`'s, slots in the same
        // places (so that rebinding `base` rebinds it).
        let len = self.len();
        let slots =
            |c: &ScriptCall| [c.parts.slot, c.parts.subject, c.parts.prior].map(|p| p.below(len));
        let same = self.parts.keys == base.parts.keys
            && len <= base.len()
            && slots(self) == slots(base)
            && (0..len).all(|i| self.is_slot(i) || self.parts.item(i) == base.parts.item(i));
        if !same {
            return None;
        }
        if len == base.parts.ends.len() {
            Some(None)
        } else {
            u16::try_from(len).ok().map(Some)
        }
    }

    /// The call of `script` on the first `view` items (all if `None`) of this call's keys
    /// and arguments, with its bound values and node: the inverse of
    /// [`view_of`](Self::view_of).
    pub(crate) fn sibling(&self, script: &'static Script, view: Option<u16>) -> ScriptCall {
        ScriptCall {
            script,
            parts: Arc::clone(&self.parts),
            token: self.token.clone(),
            subject: self.subject.clone(),
            prior: self.prior.clone(),
            node: self.node,
            view,
        }
    }

    /// Whether each value `self` binds in a slot (owner token, subject, prior token) is
    /// bound by `base` too, to the same value: then `self` may take its bound values from
    /// `base` ([`bound_as`](Self::bound_as)), and rebinding `base` rebinds it.
    pub(crate) fn binds_like(&self, base: &ScriptCall) -> bool {
        (!self.has_owner_arg() || (base.has_owner_arg() && self.token == base.token))
            && (!self.has_subject_arg() || (base.has_subject_arg() && self.subject == base.subject))
            && (!self.has_prior_arg() || (base.has_prior_arg() && self.prior == base.prior))
    }

    /// This call with the bound values of `base` (see [`binds_like`](Self::binds_like)).
    pub(crate) fn bound_as(&self, base: &ScriptCall) -> ScriptCall {
        ScriptCall {
            script: self.script,
            parts: Arc::clone(&self.parts),
            token: base.token.clone(),
            subject: base.subject.clone(),
            prior: base.prior.clone(),
            node: self.node,
            view: self.view,
        }
    }

    /// Makes the first `len` items the call's own (copied), dropping the others.
    fn own_prefix(&mut self, len: usize) {
        let end = if len == 0 {
            0
        } else {
            self.parts.ends[len - 1]
        };
        let mut bytes = Vec::with_capacity(end + 64);
        bytes.extend_from_slice(&self.parts.bytes[..end]);
        let mut ends = Vec::with_capacity(len + 4);
        ends.extend_from_slice(&self.parts.ends[..len]);
        self.parts = Arc::new(Parts {
            bytes,
            ends,
            keys: self.parts.keys,
            slot: self.parts.slot.below(len).map_or(Pos::NONE, Pos::at),
            subject: self.parts.subject.below(len).map_or(Pos::NONE, Pos::at),
            prior: self.parts.prior.below(len).map_or(Pos::NONE, Pos::at),
        });
        self.view = None;
    }

    /// How many items (keys, then arguments) the call has.
    fn len(&self) -> usize {
        self.view.map_or(self.parts.ends.len(), usize::from)
    }

    /// The call's last key, if it has keys.
    pub fn last_key(&self) -> Option<&[u8]> {
        let keys = self.parts.keys.min(self.len());
        keys.checked_sub(1).map(|i| self.item(i))
    }

    /// How many arguments the call has.
    fn arg_count(&self) -> usize {
        self.len() - self.parts.keys
    }

    /// The owner-token slot, if within the call's items.
    fn slot(&self) -> Option<usize> {
        self.parts.slot.below(self.len())
    }

    /// The subject slot, if within the call's items.
    fn subject_slot(&self) -> Option<usize> {
        self.parts.subject.below(self.len())
    }

    /// The prior-token slot, if within the call's items.
    fn prior_slot(&self) -> Option<usize> {
        self.parts.prior.below(self.len())
    }

    /// Whether item `i` is one of the slots bound per use.
    fn is_slot(&self, i: usize) -> bool {
        self.slot() == Some(i) || self.subject_slot() == Some(i) || self.prior_slot() == Some(i)
    }

    /// The items to change, copied first if shared (only the call's own, for a prefix).
    fn parts(&mut self) -> &mut Parts {
        if let Some(len) = self.view {
            self.own_prefix(usize::from(len));
        }
        Arc::make_mut(&mut self.parts)
    }

    /// Item `i` (a key, then the arguments), the bound values in their slots.
    fn item(&self, i: usize) -> &[u8] {
        match (&self.token, &self.subject, &self.prior) {
            (Some(token), _, _) if self.slot() == Some(i) => token.as_bytes(),
            (_, Some(subject), _) if self.subject_slot() == Some(i) => subject,
            (_, _, Some(prior)) if self.prior_slot() == Some(i) => prior.as_bytes(),
            _ => self.parts.item(i),
        }
    }

    /// Adds a key.
    pub fn key(mut self, key: &str) -> Self {
        let parts = self.parts();
        parts.insert(parts.keys, key.as_bytes());
        parts.keys += 1;
        self
    }

    /// Adds keys, in order.
    pub fn keys(mut self, keys: &[&str]) -> Self {
        for key in keys {
            self = self.key(key);
        }
        self
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        let parts = self.parts();
        parts.insert(parts.ends.len(), arg.as_ref());
        self
    }

    /// Adds the owner token as an argument, held apart from the others so that
    /// [`with_token`](Self::with_token) can bind another without copying the call. A call
    /// has at most one: a second one is added as a plain argument.
    pub fn owner_arg(mut self, token: &Token) -> Self {
        if self.has_owner_arg() {
            return self.arg(token.as_str());
        }
        let parts = self.parts();
        let at = parts.ends.len();
        parts.insert(at, b"");
        parts.slot = Pos::at(at);
        self.token = Some(token.clone());
        self
    }

    /// The same call with `token` in place of the one its [`owner_arg`](Self::owner_arg)
    /// added (nothing is copied); unchanged if it has none.
    pub fn with_token(mut self, token: &Token) -> Self {
        if self.has_owner_arg() {
            self.token = Some(token.clone());
        }
        self
    }

    /// Whether the call has an owner-token argument added by [`owner_arg`](Self::owner_arg).
    pub fn has_owner_arg(&self) -> bool {
        self.slot().is_some()
    }

    /// Adds an argument whose value is bound per use with
    /// [`with_subject`](Self::with_subject) (a job's id, known once the job is taken), held
    /// apart from the shared arguments so that binding it copies nothing. Empty until bound.
    /// A call has at most one: a second call of this adds nothing.
    pub fn subject_arg(mut self) -> Self {
        if self.has_subject_arg() {
            return self;
        }
        let parts = self.parts();
        let at = parts.ends.len();
        parts.insert(at, b"");
        parts.subject = Pos::at(at);
        self
    }

    /// The same call with `subject` as the argument its [`subject_arg`](Self::subject_arg)
    /// added (nothing is copied); unchanged if it has none.
    pub fn with_subject(mut self, subject: &Arc<Vec<u8>>) -> Self {
        if self.has_subject_arg() {
            self.subject = Some(Arc::clone(subject));
        }
        self
    }

    /// Whether the call has an argument added by [`subject_arg`](Self::subject_arg).
    pub fn has_subject_arg(&self) -> bool {
        self.subject_slot().is_some()
    }

    /// Adds a second token as an argument, bound per use with
    /// [`with_prior`](Self::with_prior) like the owner token: the token of a previous holder
    /// (the finished job's, in an ack that also takes the next job for the owner token), held
    /// apart from the shared arguments so that binding it copies nothing. A call has at most
    /// one: a second one is added as a plain argument.
    pub fn prior_arg(mut self, token: &Token) -> Self {
        if self.has_prior_arg() {
            return self.arg(token.as_str());
        }
        let parts = self.parts();
        let at = parts.ends.len();
        parts.insert(at, b"");
        parts.prior = Pos::at(at);
        self.prior = Some(token.clone());
        self
    }

    /// The same call with `token` as the argument its [`prior_arg`](Self::prior_arg) added
    /// (nothing is copied); unchanged if it has none.
    pub fn with_prior(mut self, token: &Token) -> Self {
        if self.has_prior_arg() {
            self.prior = Some(token.clone());
        }
        self
    }

    /// Whether the call has an argument added by [`prior_arg`](Self::prior_arg).
    pub fn has_prior_arg(&self) -> bool {
        self.prior_slot().is_some()
    }

    /// Inserts an argument before the others (binds a value known only later, such as the
    /// id of a job taken from a queue).
    pub fn prepend_arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        let parts = self.parts();
        parts.insert(parts.keys, arg.as_ref());
        self
    }

    /// Replaces argument `index` (0: the first after the keys), if there is one.
    pub fn with_arg(mut self, index: usize, arg: impl AsRef<[u8]>) -> Self {
        if index < self.arg_count() {
            let i = self.parts.keys + index;
            if !self.is_slot(i) && self.parts.item(i) == arg.as_ref() {
                return self;
            }
            self.parts().replace(i, arg.as_ref());
        }
        self
    }

    /// Replaces the last argument.
    pub fn with_last_arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        if self.arg_count() > 0 {
            let i = self.len() - 1;
            if !self.is_slot(i) && self.parts.item(i) == arg.as_ref() {
                // Already so: keep sharing the arguments.
                return self;
            }
            self.parts().replace(i, arg.as_ref());
        }
        self
    }

    /// Targets another node.
    pub fn on(mut self, node: NodeId) -> Self {
        self.node = node;
        self
    }

    /// The same call with no spare capacity in its keys and arguments, if nothing else
    /// shares them (a call kept for long, such as a held lease's, costs only its bytes).
    pub fn compact(mut self) -> Self {
        if let Some(parts) = Arc::get_mut(&mut self.parts) {
            parts.bytes.shrink_to_fit();
            parts.ends.shrink_to_fit();
        }
        self
    }

    /// Whether `self` and `other` share their keys and arguments (nothing was copied).
    #[cfg(test)]
    pub(crate) fn shares_parts_with(&self, other: &ScriptCall) -> bool {
        Arc::ptr_eq(&self.parts, &other.parts)
    }

    /// The node the call targets.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The script called.
    pub fn script(&self) -> &'static Script {
        self.script
    }

    fn command(&self, verb: &str, body: &str) -> Command {
        let parts = &*self.parts;
        let len = self.len();
        let token = self.token.as_ref().map_or(0, |t| t.as_bytes().len());
        let subject = self.subject.as_ref().map_or(0, |s| s.len());
        let prior = self.prior.as_ref().map_or(0, |t| t.as_bytes().len());
        let shared = if len == 0 { 0 } else { parts.ends[len - 1] };
        let bytes = body.len() + 4 + shared + token + subject + prior;
        let mut cmd = Command::with_bytes(verb, 2 + 3, bytes)
            .arg(body)
            .int_arg(parts.keys as u64)
            .on(self.node);
        fn token_bytes(t: &Token) -> &[u8] {
            t.as_bytes()
        }
        // The bound slots in item order; the items between them are copied framed, one run
        // at a time.
        let mut slots = [
            self.slot().zip(self.token.as_ref().map(token_bytes)),
            self.subject_slot()
                .zip(self.subject.as_deref().map(Vec::as_slice)),
            self.prior_slot().zip(self.prior.as_ref().map(token_bytes)),
        ];
        slots.sort_unstable_by_key(|s| s.map_or(usize::MAX, |(at, _)| at));
        let (mut item, mut start) = (0, 0);
        for &(at, value) in slots.iter().flatten() {
            let from = parts.start(at);
            cmd.push_framed(&parts.bytes[start..from], at - item);
            cmd = cmd.arg(value);
            (item, start) = (at + 1, parts.ends[at]);
        }
        cmd.push_framed(&parts.bytes[start..shared], len - item);
        cmd
    }

    /// `EVALSHA sha1 numkeys keys... args...`
    pub fn evalsha(&self) -> Command {
        self.command("EVALSHA", self.script.sha1)
    }

    /// `EVAL source numkeys keys... args...`
    pub fn eval(&self) -> Command {
        self.command("EVAL", self.script.source)
    }

    /// `EVALSHA_RO sha1 numkeys keys... args...` (Redis 7.0+, Valkey): for a
    /// [`read_only`](Script::read_only) script.
    pub fn evalsha_ro(&self) -> Command {
        self.command("EVALSHA_RO", self.script.sha1)
    }

    /// `EVAL_RO source numkeys keys... args...` (Redis 7.0+, Valkey).
    pub fn eval_ro(&self) -> Command {
        self.command("EVAL_RO", self.script.source)
    }
}

/// Where one script exchange stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    /// `ro`: sent as `EVALSHA_RO` / `EVAL_RO` (a read-only script, until refused).
    Ready {
        eval: bool,
        ro: bool,
    },
    Sent {
        id: RequestId,
        eval: bool,
        ro: bool,
    },
    Answered(Result<Reply, TransportFailure>),
}

/// What an exchange wants next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Send this request.
    Send(Request),
    /// The request is in flight.
    Awaiting,
    /// The answer (never a NOSCRIPT error: that is handled here).
    Answered(Result<Reply, TransportFailure>),
    /// Nothing started.
    Idle,
}

/// Runs one script call to its answer: sends EVALSHA, and on a `NOSCRIPT` error reply
/// sends the same call once as EVAL (which also loads the script for later calls). A
/// read-only script goes as `EVALSHA_RO` / `EVAL_RO`, and once more as the plain command
/// when the server or the user refuses that ([`is_read_only_refusal`]).
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    call: ScriptCall,
    state: State,
}

impl Exchange {
    pub(crate) fn new(call: ScriptCall) -> Self {
        Exchange {
            call,
            state: State::Idle,
        }
    }

    /// Starts (or restarts, for a retry) the call.
    pub(crate) fn start(&mut self) {
        self.state = State::Ready {
            eval: false,
            ro: self.call.script.read_only,
        };
    }

    pub(crate) fn poll(&mut self, ids: &mut RequestIds) -> Progress {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => Progress::Idle,
            State::Ready { eval, ro } => {
                let id = ids.next();
                let command = match (eval, ro) {
                    (false, false) => self.call.evalsha(),
                    (true, false) => self.call.eval(),
                    (false, true) => self.call.evalsha_ro(),
                    (true, true) => self.call.eval_ro(),
                };
                self.state = State::Sent { id, eval, ro };
                Progress::Send(Request { id, command })
            }
            sent @ State::Sent { .. } => {
                self.state = sent;
                Progress::Awaiting
            }
            State::Answered(result) => Progress::Answered(result),
        }
    }

    /// Takes the outcome of a request; returns whether it was the one in flight.
    pub(crate) fn handle(&mut self, input: Response) -> bool {
        let State::Sent { id, eval, ro } = self.state else {
            return false;
        };
        if input.id != id {
            return false;
        }
        self.state = match input.result {
            Ok(Reply::Error(e)) if e.is("NOSCRIPT") && !eval => State::Ready { eval: true, ro },
            Ok(Reply::Error(e)) if ro && is_read_only_refusal(&e) => {
                State::Ready { eval, ro: false }
            }
            other => State::Answered(other),
        };
        true
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::reply::ErrorReply;

    /// Every prelude part and the functions it defines.
    const PARTS: [(&str, &[&str]); 16] = [
        (prelude::NOTIFY, &["notify"]),
        (prelude::NOW_MS, &["now_ms"]),
        (prelude::NOW_MS_UP, &["now_ms_up"]),
        (prelude::NOW_US, &["now_us"]),
        (prelude::FENCE, &["fence_counter", "issue_fence"]),
        (prelude::UNDONE, &["undone"]),
        (prelude::REMEMBER, &["remember"]),
        (prelude::READY, &["bad_sequence", "ready_score"]),
        (prelude::GCRA, &["gcra", "gcra_store"]),
        (prelude::DEDUP, &["dedup_clear"]),
        (prelude::DEDUP_RELEASE, &["dedup_release"]),
        (crate::queue::scripts::COUNT, &["counting", "count"]),
        (crate::queue::scripts::INSPECT, &["job_fields"]),
        (
            crate::queue::scripts::DEAD_LIST,
            &["erase_dead", "dead_keep", "trim_dead"],
        ),
        (crate::queue::scripts::BURY, &["bury"]),
        (crate::queue::scripts::REVIVE, &["revive"]),
    ];

    /// Whether `text` calls `function` (a call, not a longer name ending the same way).
    fn calls(text: &str, function: &str) -> bool {
        let call = format!("{function}(");
        text.match_indices(&call).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !text[..at].ends_with("local function ")
        })
    }

    /// Every script of a module's `ALL`: its digest is its source's SHA-1, and it includes
    /// exactly the prelude it calls ([`check_prelude`]).
    pub(crate) fn check_scripts(all: &[&Script]) {
        assert!(!all.is_empty(), "no scripts to check");
        for s in all {
            let digest = sha1_smol::Sha1::from(s.source).digest().to_string();
            assert_eq!(digest, s.sha1, "digest of {}", s.name);
            check_prelude(s);
            if s.read_only {
                check_read_only(s);
            }
        }
    }

    /// A script marked read-only calls no command that writes (the server would refuse it
    /// under `EVALSHA_RO`), and names every command it calls literally (so that this check
    /// sees them all).
    fn check_read_only(s: &Script) {
        let mut seen = 0;
        for call in ["redis.call(", "redis.pcall("] {
            for (at, _) in s.source.match_indices(call) {
                let rest = &s.source[at + call.len()..];
                let name = rest
                    .strip_prefix('\'')
                    .and_then(|r| r.split('\'').next())
                    .unwrap_or_else(|| panic!("{}: a call whose command is not literal", s.name));
                assert!(
                    !WRITE_COMMANDS.contains(&name.to_ascii_uppercase().as_str()),
                    "{} is read-only but calls {name}",
                    s.name
                );
                seen += 1;
            }
        }
        assert!(seen > 0, "{}: no calls seen", s.name);
    }

    #[test]
    fn a_script_that_writes_fails_the_read_only_check() {
        static WRITER: Script = Script {
            name: "writer",
            source: "redis.call('GET', KEYS[1]) return redis.call('HSET', KEYS[1], 'a', 'b')",
            sha1: "0000000000000000000000000000000000000000",
            read_only: true,
        };
        let refused = std::panic::catch_unwind(|| check_read_only(&WRITER));
        assert!(refused.is_err());
        static READER: Script = Script {
            name: "reader",
            source: "return redis.call('HGET', KEYS[1], 'a')",
            sha1: "0000000000000000000000000000000000000000",
            read_only: true,
        };
        check_read_only(&READER);
    }

    /// A script defines each prelude function at most once, only if it calls it, and
    /// before the code that calls it (the body, or a later part).
    pub(crate) fn check_prelude(script: &Script) {
        let source = script.source;
        for (part, functions) in PARTS {
            let Some(function) = functions.first() else {
                continue;
            };
            let defined = source
                .matches(&format!("local function {function}("))
                .count();
            assert!(
                defined <= 1,
                "{}: {function} defined {defined} times",
                script.name
            );
            let Some(at) = source.find(part) else {
                assert_eq!(
                    defined, 0,
                    "{}: {function} defined outside its part",
                    script.name
                );
                for f in functions {
                    assert!(
                        !calls(source, f),
                        "{} calls {f} without its prelude part",
                        script.name
                    );
                }
                continue;
            };
            let after = &source[at + part.len()..];
            assert!(
                functions.iter().any(|f| calls(after, f)),
                "{} includes the part defining {functions:?} but never calls it",
                script.name
            );
            assert!(
                functions.iter().all(|f| !calls(&source[..at], f)),
                "{} calls one of {functions:?} before its definition",
                script.name
            );
        }
    }

    #[test]
    fn sha1_matches_a_reference_at_every_padding_boundary() {
        for len in [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000, 4099] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let expected = sha1_smol::Sha1::from(&data).digest().to_string();
            assert_eq!(sha1_hex(&data), expected.as_bytes(), "length {len}");
        }
    }

    #[test]
    fn the_prelude_check_catches_a_missing_and_an_unused_part() {
        static MISSING: Script = crate::script!("missing", [], "return now_ms()\n");
        static UNUSED: Script = crate::script!("unused", [prelude::NOTIFY], "return 1\n");
        static GOOD: Script = crate::script!("good", [prelude::NOW_MS], "return now_ms()\n");
        check_prelude(&GOOD);
        for bad in [&MISSING, &UNUSED] {
            let caught = std::panic::catch_unwind(|| check_prelude(bad));
            assert!(caught.is_err(), "{} passed", bad.name);
        }
    }

    static ECHO: Script = Script {
        name: "echo",
        source: "return ARGV[1]",
        sha1: "0000000000000000000000000000000000000000",
        read_only: false,
    };

    #[test]
    fn clones_share_their_arguments_until_one_is_changed() {
        let a = ScriptCall::new(&ECHO).keys(&["k1", "k2"]).arg("v");
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.parts, &b.parts), "a clone copies nothing");
        let c = b.clone().prepend_arg("id").with_last_arg("w");
        assert!(!Arc::ptr_eq(&a.parts, &c.parts));
        let tail = |call: &ScriptCall| {
            call.evalsha()
                .args()
                .skip(2)
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        };
        let bytes = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(tail(&a), bytes(&["2", "k1", "k2", "v"]));
        assert_eq!(tail(&b), tail(&a));
        assert_eq!(tail(&c), bytes(&["2", "k1", "k2", "id", "w"]));
        // Keys added after arguments still go before them; replacing resizes in place.
        let d = a
            .clone()
            .key("k3")
            .with_arg(0, "longer value")
            .with_arg(9, "none")
            .arg("");
        assert_eq!(
            tail(&d),
            bytes(&["3", "k1", "k2", "k3", "longer value", ""])
        );
        let e = d.with_arg(0, "v").with_last_arg("last");
        assert_eq!(tail(&e), bytes(&["3", "k1", "k2", "k3", "v", "last"]));
        assert_eq!(
            tail(&ScriptCall::new(&ECHO).with_last_arg("x")),
            bytes(&["0"])
        );
    }

    /// A read-only script goes as `EVALSHA_RO` (and `EVAL_RO` after `NOSCRIPT`); refused as
    /// unknown (Redis 6.2) or not granted (`NOPERM` naming it), it goes again as the plain
    /// command; a refusal of its keys, or an error from inside it, is its answer.
    #[test]
    fn a_read_only_script_goes_as_evalsha_ro_and_again_plain_when_refused() {
        static READER: Script = Script {
            name: "reader",
            source: "return redis.call('GET', KEYS[1])",
            sha1: "2222222222222222222222222222222222222222",
            read_only: true,
        };
        let mut ids = RequestIds::default();
        let send = |ex: &mut Exchange, ids: &mut RequestIds| match ex.poll(ids) {
            Progress::Send(r) => r,
            other => panic!("expected a request, got {other:?}"),
        };
        let error = |code: &str, message: &str| Reply::Error(ErrorReply::new(code, message));
        let refusals = [
            error(
                "ERR",
                "unknown command `evalsha_ro`, with args beginning with: `2222`, `1`, `k`, ",
            ),
            error(
                "NOPERM",
                "this user has no permissions to run the 'evalsha_ro' command",
            ),
            error(
                "NOPERM",
                "User u has no permissions to run the 'evalsha_ro' command",
            ),
        ];
        for refusal in refusals {
            let mut ex = Exchange::new(ScriptCall::new(&READER).key("k"));
            ex.start();
            let first = send(&mut ex, &mut ids);
            assert_eq!(first.command.name(), "EVALSHA_RO");
            assert_eq!(&first.command.args()[3], b"k");
            assert!(ex.handle(Response::reply(first.id, refusal.clone())));
            let second = send(&mut ex, &mut ids);
            assert_eq!(second.command.name(), "EVALSHA", "after {refusal:?}");
            assert!(ex.handle(Response::reply(
                second.id,
                Reply::Error(ErrorReply::new("NOSCRIPT", "No matching script."))
            )));
            // Plain from then on: the EVAL after a NOSCRIPT too.
            let third = send(&mut ex, &mut ids);
            assert_eq!(third.command.name(), "EVAL");
            assert!(ex.handle(Response::reply(third.id, Reply::Nil)));
            assert_eq!(ex.poll(&mut ids), Progress::Answered(Ok(Reply::Nil)));
        }
        // NOSCRIPT to EVALSHA_RO: EVAL_RO.
        let mut ex = Exchange::new(ScriptCall::new(&READER).key("k"));
        ex.start();
        let first = send(&mut ex, &mut ids);
        assert!(ex.handle(Response::reply(
            first.id,
            Reply::Error(ErrorReply::new("NOSCRIPT", "No matching script."))
        )));
        let second = send(&mut ex, &mut ids);
        assert_eq!(second.command.name(), "EVAL_RO");
        assert_eq!(&second.command.args()[1], READER.source.as_bytes());
        // Not a refusal of the command: the answer as it is.
        for answer in [
            error(
                "NOPERM",
                "this user has no permissions to access one of the keys used as arguments",
            ),
            error(
                "ERR",
                "Write commands are not allowed from read-only scripts. script: 2222",
            ),
            error(
                "ERR",
                "unknown command `evalsha`, with args beginning with: ",
            ),
        ] {
            let mut ex = Exchange::new(ScriptCall::new(&READER).key("k"));
            ex.start();
            let first = send(&mut ex, &mut ids);
            assert!(ex.handle(Response::reply(first.id, answer.clone())));
            assert_eq!(ex.poll(&mut ids), Progress::Answered(Ok(answer)));
        }
        // A script that writes goes as EVALSHA, as it always did.
        let mut ex = Exchange::new(ScriptCall::new(&ECHO).key("k"));
        ex.start();
        assert_eq!(send(&mut ex, &mut ids).command.name(), "EVALSHA");
    }

    #[test]
    fn noscript_is_answered_by_one_eval() {
        let mut ids = RequestIds::default();
        let mut ex = Exchange::new(ScriptCall::new(&ECHO).key("k").arg("v"));
        assert_eq!(ex.poll(&mut ids), Progress::Idle);
        ex.start();
        let Progress::Send(first) = ex.poll(&mut ids) else {
            panic!("expected a request")
        };
        assert_eq!(first.command.name(), "EVALSHA");
        assert_eq!(
            first.command.args().to_vec()[1..],
            [
                b"0000000000000000000000000000000000000000".to_vec(),
                b"1".to_vec(),
                b"k".to_vec(),
                b"v".to_vec()
            ]
        );
        assert_eq!(ex.poll(&mut ids), Progress::Awaiting);
        assert!(ex.handle(Response::reply(
            first.id,
            Reply::Error(ErrorReply::new("NOSCRIPT", "No matching script."))
        )));
        let Progress::Send(second) = ex.poll(&mut ids) else {
            panic!("expected the EVAL")
        };
        assert_eq!(second.command.name(), "EVAL");
        assert_eq!(&second.command.args()[1], b"return ARGV[1]");
        // A late duplicate of the first reply is ignored.
        assert!(!ex.handle(Response::reply(first.id, Reply::Nil)));
        // A NOSCRIPT to the EVAL itself is an answer, not a loop.
        assert!(ex.handle(Response::reply(
            second.id,
            Reply::Error(ErrorReply::new("NOSCRIPT", "again"))
        )));
        assert!(matches!(
            ex.poll(&mut ids),
            Progress::Answered(Ok(Reply::Error(_)))
        ));
        assert_eq!(ex.poll(&mut ids), Progress::Idle);
    }
}

#[cfg(test)]
mod owner_arg_tests {
    use super::*;

    static ECHO: Script = Script {
        name: "echo",
        source: "return ARGV[1]",
        sha1: "0000000000000000000000000000000000000000",
        read_only: false,
    };

    fn wire(call: &ScriptCall) -> Vec<String> {
        call.evalsha()
            .args()
            .skip(2)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn the_shared_parts_keep_their_slots_in_four_bytes_each() {
        // Every held lease keeps one `Parts` (issue 18: memory per held lease).
        assert!(
            std::mem::size_of::<Parts>() <= 72,
            "{}",
            std::mem::size_of::<Parts>()
        );
        assert_eq!(Pos::at(0).get(), Some(0));
        assert_eq!(Pos::at(7).below(8), Some(7));
        assert_eq!(Pos::at(7).below(7), None);
        assert_eq!(Pos::at(usize::MAX), Pos::NONE);
        let mut p = Pos::at(2);
        p.shift_from(3);
        assert_eq!(p.get(), Some(2));
        p.shift_from(2);
        assert_eq!(p.get(), Some(3));
        p.clear_at(2);
        assert_eq!(p.get(), Some(3));
        p.clear_at(3);
        assert_eq!(p, Pos::NONE);
        // Slots follow items inserted before them and read back bound.
        let t = Token::new("tok").unwrap();
        let call = ScriptCall::new(&ECHO)
            .arg("x")
            .owner_arg(&t)
            .subject_arg()
            .prior_arg(&t)
            .prepend_arg("first")
            .key("k");
        assert_eq!(wire(&call), ["1", "k", "first", "x", "tok", "", "tok"]);
    }

    #[test]
    fn the_subject_is_bound_without_copying_and_reads_as_a_prepended_argument() {
        let (a, b) = (Token::new("tok-a").unwrap(), Token::new("tok-b").unwrap());
        let template = ScriptCall::new(&ECHO)
            .key("k1")
            .subject_arg()
            .owner_arg(&a)
            .arg("x");
        assert!(template.has_subject_arg() && template.has_owner_arg());
        let id = Arc::new(b"job-7".to_vec());
        let bound = template.clone().with_token(&b).with_subject(&id);
        assert!(
            Arc::ptr_eq(&template.parts, &bound.parts),
            "binding copies nothing"
        );
        assert_eq!(wire(&bound), ["1", "k1", "job-7", "tok-b", "x"]);
        assert_eq!(
            bound,
            ScriptCall::new(&ECHO)
                .key("k1")
                .owner_arg(&b)
                .arg("x")
                .prepend_arg("job-7")
        );
        // Appending after binding keeps both slots.
        let extended = bound.clone().arg("ttl");
        assert_eq!(wire(&extended), ["1", "k1", "job-7", "tok-b", "x", "ttl"]);
        // A key added later moves the subject slot along.
        let moved = bound.key("k2");
        assert_eq!(wire(&moved), ["2", "k1", "k2", "job-7", "tok-b", "x"]);
        // Replacing the slot makes it a plain argument.
        let replaced = template.with_subject(&id).with_arg(0, "plain");
        assert!(!replaced.has_subject_arg());
        assert_eq!(wire(&replaced), ["1", "k1", "plain", "tok-a", "x"]);
    }

    #[test]
    fn the_prior_token_is_a_third_slot_bound_without_copying() {
        let (p, a, b) = (
            Token::new("tok-p").unwrap(),
            Token::new("tok-a").unwrap(),
            Token::new("tok-b").unwrap(),
        );
        let template = ScriptCall::new(&ECHO)
            .key("k1")
            .subject_arg()
            .prior_arg(&p)
            .arg("keep")
            .owner_arg(&p)
            .arg("x");
        assert!(template.has_prior_arg() && template.has_subject_arg());
        assert_eq!(
            wire(&template),
            ["1", "k1", "", "tok-p", "keep", "tok-p", "x"]
        );
        let id = Arc::new(b"job-7".to_vec());
        let bound = template
            .clone()
            .with_subject(&id)
            .with_token(&b)
            .with_prior(&a);
        assert!(bound.shares_parts_with(&template), "binding copies nothing");
        assert_eq!(
            wire(&bound),
            ["1", "k1", "job-7", "tok-a", "keep", "tok-b", "x"]
        );
        // The same arguments as a call built plainly.
        assert_eq!(
            bound,
            ScriptCall::new(&ECHO)
                .key("k1")
                .arg("job-7")
                .arg("tok-a")
                .arg("keep")
                .arg("tok-b")
                .arg("x")
        );
        // A prefix that ends before the slot neither sends nor reports it.
        let short = bound.sharing(&ECHO, 1);
        assert!(!short.has_prior_arg());
        assert_eq!(wire(&short), ["1", "k1", "job-7"]);
        assert_eq!(
            wire(&bound.sharing(&ECHO, 2)),
            ["1", "k1", "job-7", "tok-a"]
        );
        // Edits of the other arguments keep the slot; a key moves it along.
        let edited = bound.clone().with_arg(2, "kept").key("k2");
        assert!(edited.has_prior_arg());
        assert_eq!(
            wire(&edited.with_prior(&b)),
            ["2", "k1", "k2", "job-7", "tok-b", "kept", "tok-b", "x"]
        );
        // Replacing the slot makes it a plain argument that a later binding leaves alone.
        let replaced = bound.clone().with_arg(1, "plain");
        assert!(!replaced.has_prior_arg());
        assert_eq!(
            wire(&replaced.with_prior(&p)),
            ["1", "k1", "job-7", "plain", "keep", "tok-b", "x"]
        );
        // A call without the slot is unchanged by a binding; a second slot is a plain argument.
        let plain = ScriptCall::new(&ECHO).key("k1").arg("x");
        assert_eq!(plain.clone().with_prior(&a), plain);
        let twice = ScriptCall::new(&ECHO).prior_arg(&a).prior_arg(&b);
        assert_eq!(wire(&twice.with_prior(&p)), ["0", "tok-p", "tok-b"]);
    }

    #[test]
    fn a_sharing_call_reads_a_prefix_and_copies_only_when_changed() {
        let (a, b) = (Token::new("tok-a").unwrap(), Token::new("tok-b").unwrap());
        static OTHER: Script = Script {
            name: "other",
            source: "return 2",
            sha1: "1111111111111111111111111111111111111111",
            read_only: false,
        };
        let full = ScriptCall::new(&ECHO)
            .key("k1")
            .owner_arg(&a)
            .arg("notify")
            .compact();
        let short = full.sharing(&OTHER, 1);
        assert!(short.shares_parts_with(&full), "sharing copies nothing");
        assert_eq!(short.script().name, "other");
        assert_eq!(wire(&short), ["1", "k1", "tok-a"]);
        assert_eq!(wire(&full), ["1", "k1", "tok-a", "notify"]);
        assert!(short.has_owner_arg());
        assert_eq!(
            short,
            ScriptCall::new(&OTHER).key("k1").owner_arg(&a),
            "equal to the same call built on its own"
        );
        assert_ne!(short.clone().with_token(&b), short);
        // Rebinding keeps sharing; the token stays in its slot.
        let rebound = short.clone().with_token(&b);
        assert!(rebound.shares_parts_with(&full));
        assert_eq!(wire(&rebound), ["1", "k1", "tok-b"]);
        // An argument appended to the prefix goes after it, in a copy of the prefix only.
        let extended = rebound.arg("30000");
        assert!(!extended.shares_parts_with(&full));
        assert_eq!(wire(&extended), ["1", "k1", "tok-b", "30000"]);
        assert_eq!(
            wire(&full),
            ["1", "k1", "tok-a", "notify"],
            "the source is untouched"
        );
        // The last argument of a prefix is its own; a prefix without the token slot has none.
        assert_eq!(wire(&short.clone().with_last_arg("x")), ["1", "k1", "x"]);
        let keys_only = full.sharing(&OTHER, 0);
        assert!(!keys_only.has_owner_arg());
        assert_eq!(wire(&keys_only.clone().with_token(&b)), ["1", "k1"]);
        assert_eq!(wire(&keys_only.owner_arg(&b)), ["1", "k1", "tok-b"]);
        // Asking for more arguments than there are shares them all.
        assert_eq!(wire(&full.sharing(&OTHER, 9)), wire(&full));
        // Keys added to a prefix still go before its arguments.
        assert_eq!(wire(&short.key("k2")), ["2", "k1", "k2", "tok-a"]);
    }

    #[test]
    fn a_compacted_call_keeps_no_spare_capacity_unless_shared() {
        let call = ScriptCall::new(&ECHO).key("k1").arg("x");
        assert!(call.parts.bytes.capacity() > call.parts.bytes.len());
        let same = call.clone().compact();
        assert!(
            Arc::ptr_eq(&call.parts, &same.parts),
            "a shared call is left alone"
        );
        assert!(same.parts.bytes.capacity() > same.parts.bytes.len());
        drop(call);
        let compact = same.compact();
        assert_eq!(compact.parts.bytes.capacity(), compact.parts.bytes.len());
        assert_eq!(compact.parts.ends.capacity(), compact.parts.ends.len());
        assert_eq!(wire(&compact), ["1", "k1", "x"]);
    }

    #[test]
    fn a_call_becomes_a_command_framed_as_redis_reads_it() {
        let (a, p) = (Token::new("tok-a").unwrap(), Token::new("tok-p").unwrap());
        let long = "v".repeat(300);
        let call = ScriptCall::new(&ECHO)
            .key("k1")
            .prior_arg(&p)
            .subject_arg()
            .arg("x")
            .owner_arg(&a)
            .prepend_arg(&long)
            .key("k2")
            .with_arg(3, "y".repeat(120))
            .with_subject(&Arc::new(b"job\r\n1".to_vec()));
        let cmd = call.evalsha();
        let args: Vec<Vec<u8>> = cmd.args().to_vec();
        let y = "y".repeat(120);
        let want: Vec<&[u8]> = vec![
            b"EVALSHA",
            ECHO.sha1.as_bytes(),
            b"2",
            b"k1",
            b"k2",
            long.as_bytes(),
            b"tok-p",
            b"job\r\n1",
            y.as_bytes(),
            b"tok-a",
        ];
        assert_eq!(args, want);
        // The framing is the one RESP reads: each argument as `$<len>\r\n<bytes>\r\n`.
        let mut framed = Vec::new();
        for w in &want {
            framed.extend(format!("${}\r\n", w.len()).bytes());
            framed.extend_from_slice(w);
            framed.extend(b"\r\n");
        }
        assert_eq!(cmd.framed(), framed.as_slice());
        assert_eq!(call.eval().args().len(), want.len());
        // A token longer than a random one (kept apart from the short, inline ones).
        let long_token = Token::new("t".repeat(40)).unwrap();
        let cmd = call.with_token(&long_token).evalsha();
        assert_eq!(cmd.args().last(), Some("t".repeat(40).as_bytes()));
    }

    #[test]
    fn the_owner_token_keeps_its_place_through_edits_and_rebinding() {
        let (a, b) = (Token::new("tok-a").unwrap(), Token::new("tok-b").unwrap());
        let call = ScriptCall::new(&ECHO).key("k1").owner_arg(&a).arg("x");
        assert_eq!(wire(&call), ["1", "k1", "tok-a", "x"]);
        // Keys and prepended arguments move the slot along.
        let moved = call.clone().key("k2").prepend_arg("id").with_token(&b);
        assert_eq!(wire(&moved), ["2", "k1", "k2", "id", "tok-b", "x"]);
        assert!(Arc::ptr_eq(&call.parts, &call.clone().with_token(&b).parts));
        // Equal to the same call built with the token as a plain argument.
        assert_eq!(
            moved,
            ScriptCall::new(&ECHO)
                .keys(&["k1", "k2"])
                .arg("id")
                .arg("tok-b")
                .arg("x")
        );
        // Replacing the slot makes it a plain argument that rebinding leaves alone.
        let replaced = call.clone().with_arg(0, "plain").with_token(&b);
        assert_eq!(wire(&replaced), ["1", "k1", "plain", "x"]);
        assert!(!replaced.has_owner_arg());
        // A second owner argument is a plain one; a call without one ignores a token.
        let twice = call.clone().owner_arg(&b).with_token(&b);
        assert_eq!(wire(&twice), ["1", "k1", "tok-b", "x", "tok-b"]);
        let none = ScriptCall::new(&ECHO).arg("v").with_token(&b);
        assert_eq!(wire(&none), ["0", "v"]);
        // An unchanged last argument keeps the arguments shared.
        let same = call.clone().with_last_arg("x");
        assert!(Arc::ptr_eq(&call.parts, &same.parts));
    }
}
