//! An in-process Redis for tests: [`MemoryServer`] executes the commands redlease sends
//! (the plain ones and its own Lua scripts, run in Lua 5.1 as Redis runs them) on a
//! [`MemoryClock`] the test advances, with faults a test can inject. Behind the cargo feature
//! `memory` (off by default; meant for dev-dependencies).
//!
//! [`MemoryServer::client`] (or [`Client::in_memory`](crate::Client::in_memory)) is a
//! [`Client`](crate::Client) of it: the whole blocking API with no socket, every timer of
//! the client (ttls, waits, backoff, the watchdog's renewals) on the server's
//! [`MemoryClock`] (see [`clock`] for how time moves), release messages through the
//! server's own subscribers. Several clients of one server play several processes;
//! [`RedLock::in_memory`](crate::lock::RedLock::in_memory) runs RedLock over several servers.
//!
//! ```
//! use std::time::Duration;
//! use redlease::memory::MemoryServer;
//!
//! # fn main() -> Result<(), redlease::Error> {
//! let server = MemoryServer::new();
//! let (a, b) = (server.client(), server.client());
//! let held = a.lock("report").ttl(Duration::from_secs(30)).acquire()?;
//! // b waits 10 s of the server's clock, then gives up (in microseconds of real time).
//! assert!(b.lock("report").wait(Duration::from_secs(10)).acquire().is_err());
//! // a's watchdog renewed the lease meanwhile; an hour later it still holds.
//! server.clock().advance(Duration::from_secs(3600));
//! assert!(!held.is_lost());
//! # Ok(()) }
//! ```
//!
//! The server speaks the core's own types: a [`Command`] in, a [`Reply`] out (or a
//! [`MemoryFault`] that a driver maps to a [`TransportFailure`]). Its behaviour is checked
//! against a real redis-server by the differential test `tests/memory_diff.rs`.
//!
//! What it keeps: strings, hashes, sorted sets and lists, each key with an expiry in ms; the
//! script cache (`EVALSHA` of an unknown script answers `NOSCRIPT`, as after a restart);
//! subscribers ([`Subscriber`]) that receive what `PUBLISH`/`SPUBLISH` send. What it does not
//! do: a command it does not implement is an error reply naming it (never a silent wrong
//! answer); `WAIT` answers 0 at once (there are no replicas); it reads no real clock: `TIME`
//! and key expiry follow the [`MemoryClock`].
//!
//! ```
//! use std::time::Duration;
//! use redlease::memory::MemoryServer;
//! use redlease_core::Reply;
//!
//! let server = MemoryServer::new();
//! assert_eq!(server.call(&["SET", "k", "v", "NX", "PX", "1000"]).unwrap(), Reply::Status("OK".into()));
//! server.clock().advance(Duration::from_millis(600));
//! assert_eq!(server.call(&["PTTL", "k"]).unwrap(), Reply::Int(400));
//! server.clock().advance(Duration::from_millis(401));
//! assert_eq!(server.call(&["GET", "k"]).unwrap(), Reply::Nil);
//! ```

pub mod clock;
mod commands;
mod keyspace;
mod listen;
mod lua;
mod pubsub;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use redlease_core::{Command, Reply, TransportFailure};

pub use clock::{MemoryClock, RunError};
pub use pubsub::{Message, Subscriber};

use commands::{Ctx, err, parse_int};
use keyspace::Db;
use lua::LuaEngine;
use pubsub::PubSub;

/// Why a command got no reply from the in-process server (a fault the test injected).
///
/// To the client all but [`Refused`](Self::Refused) look like a connection that hung: the
/// reply never comes, so a driver maps them to
/// [`FailureKind::NoReply`](redlease_core::FailureKind::NoReply) (see
/// [`to_transport_failure`](Self::to_transport_failure)); only the test knows whether the
/// command ran. A refused connection is
/// [`FailureKind::NotSent`](redlease_core::FailureKind::NotSent): nothing ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryFault {
    /// The request was lost on the way: the command did not run.
    RequestLost,
    /// The command ran; its reply was lost.
    ReplyLost,
    /// The server is paused ([`MemoryServer::pause`]): the command did not run.
    Paused,
    /// The server refuses connections ([`MemoryServer::refuse_connections`]): the command
    /// was not sent.
    Refused,
}

impl MemoryFault {
    /// The transport failure a client sees: not sent when refused, otherwise no reply (the
    /// outcome is unknown to it).
    pub fn to_transport_failure(self) -> TransportFailure {
        match self {
            MemoryFault::Refused => TransportFailure::not_sent(self.to_string()),
            _ => TransportFailure::no_reply(self.to_string()),
        }
    }
}

impl From<MemoryFault> for TransportFailure {
    fn from(f: MemoryFault) -> Self {
        f.to_transport_failure()
    }
}

impl fmt::Display for MemoryFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryFault::RequestLost => "in-process server: the request was lost (injected fault)",
            MemoryFault::ReplyLost => "in-process server: the reply was lost (injected fault)",
            MemoryFault::Paused => "in-process server: paused, no reply (injected fault)",
            MemoryFault::Refused => "in-process server: connection refused (injected fault)",
        })
    }
}

impl std::error::Error for MemoryFault {}

/// When an injected lost reply strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// The request is lost: the command does not run.
    BeforeRun,
    /// The command runs; its reply is lost.
    AfterRun,
}

type Matcher = Box<dyn Fn(&Command) -> bool + Send>;

struct LossRule {
    when: Loss,
    matches: Matcher,
}

/// The server's data at one moment (what a restart from a persisted copy gets back).
#[derive(Debug, Clone)]
pub struct Snapshot {
    db: Db,
}

pub(crate) struct State {
    db: Db,
    /// The script cache: SHA-1 -> source.
    scripts: HashMap<String, String>,
    lua: Option<LuaEngine>,
    pub(crate) pubsub: PubSub,
    paused: bool,
    refusing: bool,
    losses: VecDeque<LossRule>,
    /// Whether a script may touch only the keys it declares (unless it begins with
    /// `redlease_core::script::prelude::UNDECLARED_KEYS`).
    strict_keys: bool,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    clock: MemoryClock,
    /// Clients made so far (each seeds its randomness with its number).
    clients: std::sync::atomic::AtomicU64,
    /// [`State::version`] as of the last command (read without the lock by waiters).
    version: std::sync::atomic::AtomicU64,
    /// The RESP listeners ([`MemoryServer::listen`]), stopped when the server is dropped.
    listeners: Mutex<Vec<listen::Stop>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let listeners = self.listeners.get_mut().unwrap_or_else(|p| p.into_inner());
        for l in listeners.drain(..) {
            l.stop();
        }
    }
}

impl Shared {
    /// The state; a panic in another thread while it held the lock leaves nothing
    /// half-written that matters to a test server, so poisoning is ignored.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes `state`'s version after a change (called with the lock held): a waiter that
    /// sleeps past its poll because nothing would change is told (see
    /// [`MemoryClock`]'s waits).
    pub(crate) fn note_changes(&self, state: &State) {
        let now = state.version();
        if self.version.swap(now, std::sync::atomic::Ordering::SeqCst) != now {
            self.clock.kick_hinted(now);
        }
    }

    /// The version of the data as of the last command.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An in-process Redis (see the [module docs](self)). Clones are handles to the same server.
#[derive(Clone)]
pub struct MemoryServer {
    shared: Arc<Shared>,
}

impl fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryServer")
            .field("clock", &self.shared.clock.now())
            .finish()
    }
}

impl Default for MemoryServer {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryServer {
    /// An empty server on a new [`MemoryClock`].
    pub fn new() -> Self {
        Self::with_clock(MemoryClock::new())
    }

    /// An empty server on `clock` (share one clock between several servers).
    pub fn with_clock(clock: MemoryClock) -> Self {
        MemoryServer {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    db: Db::default(),
                    scripts: HashMap::new(),
                    lua: None,
                    pubsub: PubSub::default(),
                    paused: false,
                    refusing: false,
                    losses: VecDeque::new(),
                    strict_keys: true,
                }),
                clock,
                clients: std::sync::atomic::AtomicU64::new(0),
                version: std::sync::atomic::AtomicU64::new(0),
                listeners: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The number of the next client of this server (1, 2, ...).
    pub(crate) fn next_client(&self) -> u64 {
        self.shared
            .clients
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// The data's version as of the last command (see [`State::version`]).
    pub(crate) fn version(&self) -> u64 {
        self.shared.version()
    }

    /// Whether two handles are the same server.
    pub fn same_server(&self, other: &MemoryServer) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The server's clock (a clone: advancing it advances the server).
    pub fn clock(&self) -> MemoryClock {
        self.shared.clock.clone()
    }

    /// Executes one command (its node is not looked at: one server is one node) and
    /// returns Redis' reply, or the injected fault that swallowed it.
    pub fn execute(&self, command: &Command) -> Result<Reply, MemoryFault> {
        let mut state = self.shared.state();
        self.execute_locked(&mut state, command)
    }

    /// Executes one command, and says the data's version right after it (what a waiter
    /// compares with later to know whether anything changed since this reply).
    pub(crate) fn execute_seen(&self, command: &Command) -> (Result<Reply, MemoryFault>, u64) {
        let mut state = self.shared.state();
        let result = self.execute_locked(&mut state, command);
        (result, state.version())
    }

    fn execute_locked(&self, state: &mut State, command: &Command) -> Result<Reply, MemoryFault> {
        if state.refusing {
            return Err(MemoryFault::Refused);
        }
        if state.paused {
            return Err(MemoryFault::Paused);
        }
        let loss = state
            .losses
            .iter()
            .position(|rule| (rule.matches)(command))
            .and_then(|i| state.losses.remove(i))
            .map(|rule| rule.when);
        if loss == Some(Loss::BeforeRun) {
            return Err(MemoryFault::RequestLost);
        }
        let reply = state.run(&command.args().to_vec(), self.shared.clock.unix_micros());
        self.shared.note_changes(state);
        match loss {
            Some(_) => Err(MemoryFault::ReplyLost),
            None => Ok(reply),
        }
    }

    /// Executes a command given as its arguments (the name first): a shorthand for tests.
    pub fn call<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Reply, MemoryFault> {
        let Some((name, rest)) = args.split_first() else {
            return Ok(err("ERR empty command"));
        };
        let mut command = Command::new(&String::from_utf8_lossy(name.as_ref()));
        for a in rest {
            command = command.arg(a);
        }
        self.execute(&command)
    }

    /// Serves this server over TCP on a free loopback port and returns its URL
    /// (`redis://127.0.0.1:<port>/`), for any Redis client: an application's own `redis`
    /// calls in a test run on the same data as its locks and queues, and a
    /// [`Client::open`](crate::Client::open) of that URL works too (its waiters poll: the
    /// listener does not serve `SUBSCRIBE`).
    ///
    /// It speaks RESP2 and answers the commands the server implements (the module docs
    /// list them; any other is an error reply naming it), plus what clients send on
    /// connecting: `CLIENT ...` (accepted and ignored), `SELECT 0`, `INFO` (a few lines:
    /// `redis_version:7.0.0`), `QUIT`. A fault that swallows a reply
    /// ([`lose_next_reply`](Self::lose_next_reply), [`pause`](Self::pause),
    /// [`refuse_connections`](Self::refuse_connections)) closes that connection instead.
    /// Time is still the [`MemoryClock`]'s: keys expire as the test moves it, not in real
    /// time. The listening thread and every connection end when the last handle of the
    /// server is dropped. Call it again for another port.
    ///
    /// ```
    /// use redlease::memory::MemoryServer;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = MemoryServer::new();
    /// let url = server.listen()?;
    /// let mut conn = redis::Client::open(url.as_str())?.get_connection()?;
    /// let _: () = redis::cmd("SET").arg("stock").arg(10).query(&mut conn)?;
    /// assert_eq!(server.call(&["GET", "stock"])?, redlease_core::Reply::Bulk(b"10".to_vec()));
    /// # Ok(()) }
    /// ```
    pub fn listen(&self) -> std::io::Result<String> {
        let addr = listen::listen(self)?;
        Ok(format!("redis://{addr}/"))
    }

    /// A new subscriber connection.
    pub fn subscriber(&self) -> Subscriber {
        Subscriber::new(self.shared.clone())
    }

    /// Loses the reply of the next command (before it runs, or after), whatever it is.
    pub fn lose_next_reply(&self, when: Loss) {
        self.lose_next_reply_if(when, |_| true);
    }

    /// Loses the reply of the next command for which `matches` is true (before it runs, or
    /// after). Rules queue up: each strikes once, the oldest matching one first.
    ///
    /// ```
    /// use redlease::memory::{Loss, MemoryFault, MemoryServer};
    ///
    /// let server = MemoryServer::new();
    /// server.lose_next_reply_if(Loss::AfterRun, |c| c.name() == "SET");
    /// assert!(server.call(&["GET", "k"]).is_ok());
    /// assert_eq!(server.call(&["SET", "k", "v"]), Err(MemoryFault::ReplyLost));
    /// // It ran:
    /// assert_eq!(server.call(&["GET", "k"]).unwrap(), redlease_core::Reply::Bulk(b"v".to_vec()));
    /// ```
    pub fn lose_next_reply_if(
        &self,
        when: Loss,
        matches: impl Fn(&Command) -> bool + Send + 'static,
    ) {
        self.shared.state().losses.push_back(LossRule {
            when,
            matches: Box::new(matches),
        });
    }

    /// Whether a script may touch only the keys it declares in `KEYS` (`true`, the
    /// default, as Dragonfly does): a script that touches another key fails with `ERR
    /// script tried accessing undeclared key`, unless its first line is
    /// [`UNDECLARED_KEYS`](redlease_core::script::prelude::UNDECLARED_KEYS) (Dragonfly's
    /// flag). `false` runs any key, as Redis and Valkey do.
    pub fn strict_keys(&self, strict: bool) {
        self.shared.state().strict_keys = strict;
    }

    /// Pauses the server: every command fails with [`MemoryFault::Paused`] without running
    /// (as if the connection hung) until [`resume`](Self::resume) or a restart.
    pub fn pause(&self) {
        self.shared.state().paused = true;
    }

    /// Ends a [`pause`](Self::pause).
    pub fn resume(&self) {
        self.shared.state().paused = false;
    }

    /// Refuses connections (`true`), as a server that is down does, or accepts them again
    /// (`false`): every command fails with [`MemoryFault::Refused`] without running, and every
    /// subscriber is cut.
    pub fn refuse_connections(&self, refuse: bool) {
        let mut state = self.shared.state();
        state.refusing = refuse;
        if refuse {
            state.pubsub.disconnect_all();
        }
        self.shared.note_changes(&state);
    }

    /// Whether the server is paused.
    pub fn is_paused(&self) -> bool {
        self.shared.state().paused
    }

    /// A copy of the data now (what a persisted save would hold).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            db: self.shared.state().db.clone(),
        }
    }

    /// Restarts the server with the data of `snapshot` (keys whose expiry passed since are
    /// gone): the script cache is empty (the next `EVALSHA` answers `NOSCRIPT`), every
    /// subscriber is cut, a pause ends.
    pub fn restart_from(&self, snapshot: &Snapshot) {
        self.restart(snapshot.db.clone());
    }

    /// Restarts the server with no data at all (nothing was persisted).
    pub fn restart_empty(&self) {
        self.restart(Db::default());
    }

    fn restart(&self, db: Db) {
        let mut state = self.shared.state();
        let mut db = db;
        db.follow(&state.db);
        state.db = db;
        state.scripts.clear();
        state.pubsub.disconnect_all();
        state.paused = false;
        self.shared.note_changes(&state);
    }

    /// Evicts `key` as a `maxmemory` policy would; true if it was there.
    pub fn evict(&self, key: impl AsRef<[u8]>) -> bool {
        let now = self.shared.clock.unix_ms();
        let mut state = self.shared.state();
        let evicted = state.db.remove(key.as_ref(), now);
        self.shared.note_changes(&state);
        evicted
    }

    /// Drops the next `n` pub/sub deliveries (one per subscriber reached): `PUBLISH` still
    /// counts those subscribers, as Redis does for a message lost on the way.
    pub fn drop_next_messages(&self, n: u64) {
        self.shared.state().pubsub.drop_next = n;
    }

    /// How many pub/sub deliveries were dropped so far.
    pub fn dropped_messages(&self) -> u64 {
        self.shared.state().pubsub.dropped
    }

    /// Every live key, sorted (for assertions).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let now = self.shared.clock.unix_ms();
        self.shared.state().db.keys(now)
    }
}

fn sha1_hex(source: &[u8]) -> String {
    sha1_smol::Sha1::from(source).digest().to_string()
}

impl State {
    /// Counts every change to the data and every message dropped on the way: a waiter
    /// that saw one number and sees another may have missed a change.
    pub(crate) fn version(&self) -> u64 {
        self.db.version().wrapping_add(self.pubsub.dropped)
    }

    /// Runs one command at server time `now_us`.
    fn run(&mut self, args: &[Vec<u8>], now_us: i64) -> Reply {
        let name = args
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
            .unwrap_or_default();
        match name.as_str() {
            "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" => self.eval(&name, &args[1..], now_us),
            "SCRIPT" => self.script(&args[1..]),
            _ => {
                let mut ctx = Ctx {
                    db: &mut self.db,
                    pubsub: &mut self.pubsub,
                    now_us,
                    in_script: false,
                    read_only: false,
                    declared: None,
                };
                commands::run(&mut ctx, args)
            }
        }
    }

    fn script(&mut self, a: &[Vec<u8>]) -> Reply {
        let sub = a
            .first()
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
            .unwrap_or_default();
        match (sub.as_str(), a.len()) {
            ("LOAD", 2) => {
                let source = String::from_utf8_lossy(&a[1]).into_owned();
                let sha = sha1_hex(&a[1]);
                self.scripts.insert(sha.clone(), source);
                Reply::Bulk(sha.into_bytes())
            }
            ("EXISTS", n) if n >= 2 => Reply::Array(
                a[1..]
                    .iter()
                    .map(|s| {
                        let sha = String::from_utf8_lossy(s).to_ascii_lowercase();
                        Reply::Int(i64::from(self.scripts.contains_key(&sha)))
                    })
                    .collect(),
            ),
            ("FLUSH", _) => {
                self.scripts.clear();
                Reply::Status("OK".into())
            }
            ("LOAD" | "EXISTS", _) | ("", _) => err(&format!(
                "ERR wrong number of arguments for 'script|{}' command",
                sub.to_ascii_lowercase()
            )),
            _ => commands::unknown(&format!("SCRIPT {sub}"), false),
        }
    }

    fn eval(&mut self, name: &str, a: &[Vec<u8>], now_us: i64) -> Reply {
        if a.len() < 2 {
            return err(&format!(
                "ERR wrong number of arguments for '{}' command",
                name.to_ascii_lowercase()
            ));
        }
        let Some(numkeys) = parse_int(&a[1]) else {
            return err("ERR value is not an integer or out of range");
        };
        if numkeys < 0 {
            return err("ERR Number of keys can't be negative");
        }
        let rest = &a[2..];
        let Some(numkeys) = usize::try_from(numkeys).ok().filter(|n| *n <= rest.len()) else {
            return err("ERR Number of keys can't be greater than number of args");
        };
        let read_only = name.ends_with("_RO");
        let (sha, source) = if name.starts_with("EVAL_") || name == "EVAL" {
            let sha = sha1_hex(&a[0]);
            let source = String::from_utf8_lossy(&a[0]).into_owned();
            self.scripts.insert(sha.clone(), source.clone());
            (sha, source)
        } else {
            let sha = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
            match self.scripts.get(&sha) {
                Some(source) => (sha, source.clone()),
                None => return err("NOSCRIPT No matching script. Please use EVAL."),
            }
        };
        if self.lua.is_none() {
            match LuaEngine::new() {
                Ok(engine) => self.lua = Some(engine),
                Err(e) => {
                    return err(&format!(
                        "ERR the in-process server's Lua interpreter did not start: {e}"
                    ));
                }
            }
        }
        let Some(engine) = self.lua.as_mut() else {
            return err("ERR the in-process server's Lua interpreter did not start");
        };
        let keys = &rest[..numkeys];
        let strict = self.strict_keys
            && !source.starts_with(redlease_core::script::prelude::UNDECLARED_KEYS);
        let mut ctx = Ctx {
            db: &mut self.db,
            pubsub: &mut self.pubsub,
            now_us,
            in_script: true,
            read_only,
            declared: strict.then_some(keys),
        };
        engine.eval(&sha, &source, keys, &rest[numkeys..], &mut ctx)
    }
}
