//! The differential test of the in-process server (`redlease::memory::MemoryServer`) against
//! a real redis-server: seeded random sequences of redlease's own commands (every script,
//! with KEYS/ARGV built by the core's public constructors, several owners; and the plain
//! commands the driver and the legacy lock and RedLock send), each run on both, every reply
//! compared.
//!
//! Time. Both run on one grid of epochs `Q` apart: at epoch `j` a sequence's commands reach
//! Redis in one pipeline within `WINDOW` of the epoch's start, and the in-process server runs
//! them with its clock at exactly `j * Q` from the sequence's start. Every duration a
//! sequence uses (ttls, waiter timeouts, visibility, delays, backoffs) is `m * Q + Q / 3`, so
//! every expiry a script computes (`now + d`, `now + 2 * d`) falls at least `Q / 3` from any
//! epoch start: while `WINDOW < Q / 3`, each expiry is decided alike on both. An epoch whose
//! Redis pipeline overran `WINDOW` (a loaded machine) proves nothing: its sequences are run
//! again from the start under fresh keys. While more than a quarter of the last 40 pipelines
//! are late, the time scale doubles (`Q` 60 ms -> 120 ms ..., up to 960 ms) once the running
//! sequences are over: a loaded machine makes the test slower, never weaker. Values read from the clock are compared within a
//! tolerance (remaining ttls) or by order (fences, which hold the server clock in µs).
//!
//! The generator reads Redis' replies (job ids to ack, ...); the in-process server runs on a
//! second thread, behind, and its replies are compared there. A subscriber on each side
//! listens to every channel a sequence's scripts publish on (plain and shard channels): the
//! messages must be the same, in the same order.
//!
//! `MEMORY_DIFF_SEED=<n>` replays one sequence (a failure prints the line);
//! `MEMORY_DIFF_SEQUENCES=<n>` sets how many run (default 10,000), from seed
//! `MEMORY_DIFF_FIRST` (default 1).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redlease::core::keys::Keyspace;
use redlease::core::lease::{LockSpec, Token};
use redlease::core::queue::{self, NewJob, QueueKeys, QueueSettings};
use redlease::core::script::{Script, ScriptCall};
use redlease::core::semaphore::{self, SemaphoreKeys};
use redlease::core::{Command, ErrorReply, Protocol, Reply, Step};
use redlease::memory::MemoryServer;
use redlease_suite::testkit::server;

/// The time scale: 1 on a quiet machine; doubled (between sequences, never during one)
/// while most pipelines miss their window on a loaded one, so the test slows down instead of
/// proving nothing.
static SCALE: AtomicU64 = AtomicU64::new(1);
/// The largest time scale (epochs of 960 ms).
const MAX_SCALE: u64 = 16;

fn scale() -> u64 {
    SCALE.load(Ordering::Relaxed)
}

/// The epoch (ms): commands are sent at its start.
fn q() -> u64 {
    60 * scale()
}

/// How long after an epoch's start its last reply from Redis may come.
fn window() -> Duration {
    Duration::from_millis(15 * scale())
}

/// Remaining times may differ by the spread of arrival within an epoch, plus rounding.
fn tolerance() -> i64 {
    15 * scale() as i64 + 2
}
/// Sequences running at once (each its own keys and its own in-process server).
const CONCURRENT: usize = 160;

fn durations() -> [u64; 4] {
    let q = q();
    [q + q / 3, 2 * q + q / 3, 3 * q + q / 3, 4 * q + q / 3]
}

fn all_scripts() -> Vec<&'static Script> {
    let mut v: Vec<&'static Script> = redlease::core::lease::SCRIPTS.to_vec();
    v.extend(redlease::core::queue::scripts::ALL.iter().copied());
    v
}

// ---------------------------------------------------------------------------------------
// A small RESP client: pipelines commands, returns the core's Reply.

struct Resp {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

impl Resp {
    fn connect(port: u16) -> Resp {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis-server");
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Resp {
            input: BufReader::new(s.try_clone().unwrap()),
            out: s,
        }
    }

    fn pipeline(&mut self, commands: &[Command]) -> Vec<Reply> {
        let mut buf = Vec::new();
        for c in commands {
            buf.extend_from_slice(format!("*{}\r\n", c.args().len()).as_bytes());
            for a in c.args() {
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
        }
        self.out.write_all(&buf).unwrap();
        (0..commands.len()).map(|_| self.read()).collect()
    }

    fn line(&mut self) -> Vec<u8> {
        let mut l = Vec::new();
        self.input.read_until(b'\n', &mut l).unwrap();
        assert!(l.ends_with(b"\r\n"), "short read from redis: {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    fn read(&mut self) -> Reply {
        let l = self.line();
        let body = String::from_utf8_lossy(&l[1..]).into_owned();
        match l[0] {
            b'+' => Reply::Status(body),
            b'-' => Reply::Error(ErrorReply::parse(&body)),
            b':' => Reply::Int(body.parse().unwrap()),
            b'$' => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    return Reply::Nil;
                }
                let mut b = vec![0; n as usize + 2];
                std::io::Read::read_exact(&mut self.input, &mut b).unwrap();
                b.truncate(n as usize);
                Reply::Bulk(b)
            }
            b'*' => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    return Reply::Nil;
                }
                Reply::Array((0..n).map(|_| self.read()).collect())
            }
            other => panic!("unexpected RESP type {other}"),
        }
    }
}

/// Messages seen on channel, in order.
type Messages = Vec<(Vec<u8>, Vec<u8>)>;

/// A subscriber connection to redis-server: a thread reads what arrives; the test
/// subscribes a sequence's channels before it starts and collects its messages when it ends.
struct RedisSubscriber {
    out: TcpStream,
    seen: std::sync::Arc<(std::sync::Mutex<SubState>, std::sync::Condvar)>,
    pings: u64,
}

#[derive(Default)]
struct SubState {
    confirmed: HashSet<Vec<u8>>,
    messages: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    pongs: u64,
}

impl RedisSubscriber {
    fn connect(port: u16) -> RedisSubscriber {
        let mut conn = Resp::connect(port);
        conn.input.get_ref().set_read_timeout(None).unwrap();
        let seen = std::sync::Arc::new((
            std::sync::Mutex::new(SubState::default()),
            std::sync::Condvar::new(),
        ));
        let out = conn.out.try_clone().unwrap();
        let state = seen.clone();
        std::thread::spawn(move || {
            loop {
                let mut l = Vec::new();
                if conn
                    .input
                    .read_until(b'\n', &mut l)
                    .map_or(true, |n| n == 0)
                {
                    return; // closed at the end of the test
                }
                assert!(l.starts_with(b"*"), "subscriber got {l:?}");
                let n: usize = String::from_utf8_lossy(&l[1..l.len() - 2]).parse().unwrap();
                let items: Vec<Reply> = (0..n).map(|_| conn.read()).collect();
                let bulk = |r: &Reply| match r {
                    Reply::Bulk(b) => b.clone(),
                    other => panic!("subscriber got {other:?}"),
                };
                let (lock, cond) = &*state;
                let mut st = lock.lock().unwrap();
                match bulk(&items[0]).as_slice() {
                    b"subscribe" | b"ssubscribe" => {
                        st.confirmed.insert(bulk(&items[1]));
                    }
                    b"message" | b"smessage" => {
                        st.messages
                            .entry(bulk(&items[1]))
                            .or_default()
                            .push(bulk(&items[2]));
                    }
                    b"pong" => st.pongs += 1,
                    _ => {}
                }
                cond.notify_all();
            }
        });
        RedisSubscriber {
            out,
            seen,
            pings: 0,
        }
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.out.write_all(&buf).unwrap();
    }

    fn wait(&self, what: &str, mut done: impl FnMut(&SubState) -> bool) {
        let (lock, cond) = &*self.seen;
        let (_guard, timeout) = cond
            .wait_timeout_while(lock.lock().unwrap(), Duration::from_secs(20), |st| {
                !done(st)
            })
            .unwrap();
        assert!(!timeout.timed_out(), "redis-server never confirmed {what}");
    }

    /// Subscribes, and waits for the confirmations.
    fn subscribe(&mut self, channels: &[(String, bool)]) {
        for (c, sharded) in channels {
            let verb: &[u8] = if *sharded {
                b"SSUBSCRIBE"
            } else {
                b"SUBSCRIBE"
            };
            self.send(&[verb, c.as_bytes()]);
        }
        self.wait("a subscription", |st| {
            channels
                .iter()
                .all(|(c, _)| st.confirmed.contains(c.as_bytes()))
        });
    }

    /// Waits until every message published so far has arrived (a PING answered after them).
    fn drain(&mut self) {
        self.send(&[b"PING"]);
        self.pings += 1;
        let want = self.pings;
        self.wait("a ping", |st| st.pongs >= want);
    }

    /// Takes the messages of `channels` and unsubscribes them.
    fn take(&mut self, channels: &[(String, bool)]) -> Messages {
        let mut out = Vec::new();
        for (c, sharded) in channels {
            let verb: &[u8] = if *sharded {
                b"SUNSUBSCRIBE"
            } else {
                b"UNSUBSCRIBE"
            };
            self.send(&[verb, c.as_bytes()]);
            let mut st = self.seen.0.lock().unwrap();
            st.confirmed.remove(c.as_bytes());
            for m in st.messages.remove(c.as_bytes()).unwrap_or_default() {
                out.push((c.as_bytes().to_vec(), m));
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Comparison.

/// How a reply is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    /// Equal.
    Exact,
    /// An integer that is a remaining time (or negative: exact).
    Ms,
    /// `{flag, x}`: flag equal; x a fence when flag is 1, a remaining time otherwise.
    Acquire,
    /// `{flag, x}`: flag equal; x a remaining time.
    Inspect,
    /// A take: `{1, delivery, id, payload}` equal, or `{0, ms}` within tolerance.
    Take,
    /// A semaphore's state `{permits, {holder, ms left, ...}, waiters}`: holders compared
    /// as a set (holders whose permits expire within the same few ms may be listed in
    /// either order), their time left within tolerance.
    Semaphore,
}

/// `{token, ms, token, ms, ...}` sorted by token.
fn holders(r: &Reply) -> Option<Vec<(Reply, Reply)>> {
    let items = r.as_array()?;
    let mut pairs: Vec<(Reply, Reply)> = items
        .chunks(2)
        .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or(Reply::Nil)))
        .collect();
    pairs.sort_by_key(|(t, _)| format!("{t:?}"));
    Some(pairs)
}

/// Fences seen so far (each engine its own, sorted): a new fence must land at the same
/// place in both.
#[derive(Default)]
struct Fences {
    redis: Vec<i64>,
    memory: Vec<i64>,
}

impl Fences {
    fn same(&mut self, r: i64, m: i64) -> bool {
        if r < 1_000_000_000_000_000 || m < 1_000_000_000_000_000 {
            return r == m;
        }
        let pr = self.redis.binary_search(&r);
        let pm = self.memory.binary_search(&m);
        if let Err(i) = pr {
            self.redis.insert(i, r);
        }
        if let Err(i) = pm {
            self.memory.insert(i, m);
        }
        pr == pm
    }
}

fn close(r: &Reply, m: &Reply) -> bool {
    match (r.as_int(), m.as_int()) {
        (Some(a), Some(b)) if a >= 0 && b >= 0 => (a - b).abs() <= tolerance(),
        _ => r == m,
    }
}

fn same(cmp: Cmp, r: &Reply, m: &Reply, fences: &mut Fences) -> bool {
    let pair = |r: &Reply, m: &Reply| match (r, m) {
        (Reply::Array(a), Reply::Array(b)) if a.len() == b.len() => Some((a.clone(), b.clone())),
        _ => None,
    };
    match cmp {
        Cmp::Exact => r == m,
        Cmp::Ms => close(r, m),
        Cmp::Acquire | Cmp::Inspect => match pair(r, m) {
            Some((a, b)) if a.len() == 2 && a[0] == b[0] => {
                match (cmp, a[0].as_int(), a[1].as_int(), b[1].as_int()) {
                    (Cmp::Acquire, Some(1), Some(x), Some(y)) => fences.same(x, y),
                    _ => close(&a[1], &b[1]),
                }
            }
            _ => r == m,
        },
        Cmp::Semaphore => match pair(r, m) {
            Some((a, b)) if a.len() == 3 => {
                let (ha, hb) = (holders(&a[1]), holders(&b[1]));
                a[0] == b[0]
                    && a[2] == b[2]
                    && match (ha, hb) {
                        (Some(x), Some(y)) => {
                            x.len() == y.len()
                                && x.iter()
                                    .zip(&y)
                                    .all(|(p, q)| p.0 == q.0 && close(&p.1, &q.1))
                        }
                        _ => a[1] == b[1],
                    }
            }
            _ => r == m,
        },
        Cmp::Take => match pair(r, m) {
            Some((a, b)) if a.len() == 2 && a[0] == b[0] && a[0] == Reply::Int(0) => {
                close(&a[1], &b[1])
            }
            _ => r == m,
        },
    }
}

// ---------------------------------------------------------------------------------------
// Sequences.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn dur(&mut self) -> Duration {
        Duration::from_millis(*self.pick(&durations()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Lease,
    Reentrant,
    Fair,
    ReadWrite,
    Semaphore,
    Queue,
    Plain,
    /// The data commands scripts call, sent directly with odd arguments (negative
    /// indexes, exclusive and infinite bounds, fractional scores, wrong types).
    Data,
}

const FAMILIES: [Family; 8] = [
    Family::Lease,
    Family::Reentrant,
    Family::Fair,
    Family::ReadWrite,
    Family::Semaphore,
    Family::Queue,
    Family::Plain,
    Family::Data,
];

struct Op {
    command: Command,
    cmp: Cmp,
}

/// One sequence's generator state (it reads Redis' replies).
struct Seq {
    seed: u64,
    attempt: u32,
    rng: Rng,
    family: Family,
    keyspace: Keyspace,
    /// Epochs left.
    left: u32,
    /// Scripts already sent in this sequence (EVALSHA from then on).
    loaded: HashSet<&'static str>,
    /// Jobs taken: (id, token).
    taken: Vec<(String, String)>,
    /// Dead job ids seen.
    dead: Vec<String>,
    /// Reentrant acquisitions: (owner index, op token).
    ops: Vec<(usize, String)>,
    counter: u64,
    /// The queue's one duration (visibility, delay, backoff, extension): with one duration
    /// and at most one time-scored write per epoch, no two jobs fall due or run out in the
    /// same epoch, whose order Redis would decide by the millisecond each arrived in.
    queue_dur: Duration,
    /// A time-scored queue write was generated in this epoch.
    timed: bool,
    /// The ops of the current epoch, for reading their replies.
    pending: Vec<Op>,
    /// The channels its scripts publish on: (channel, shard channel).
    channels: Vec<(String, bool)>,
}

/// The channel a `notify` argument names (`{shard}` marks a shard channel).
fn channel(notify: &str) -> (String, bool) {
    match notify.strip_prefix("{shard}") {
        Some(c) => (c.to_owned(), true),
        None => (notify.to_owned(), false),
    }
}

const OWNERS: usize = 3;

impl Seq {
    fn new(seed: u64, attempt: u32) -> Seq {
        let mut rng = Rng(seed);
        let family = *rng.pick(&FAMILIES);
        let left = 5 + rng.below(6) as u32;
        let queue_dur = rng.dur();
        let sharded = rng.chance(30);
        Seq {
            queue_dur,
            timed: false,
            seed,
            attempt,
            rng,
            family,
            // Now and then release notifications go out on shard channels (SPUBLISH).
            keyspace: Keyspace::new(&format!("d{seed}a{attempt}"))
                .unwrap()
                .with_sharded_pubsub(sharded),
            left,
            loaded: HashSet::new(),
            taken: Vec::new(),
            dead: Vec::new(),
            ops: Vec::new(),
            counter: 0,
            pending: Vec::new(),
            channels: Vec::new(),
        }
        .with_channels()
    }

    fn with_channels(mut self) -> Seq {
        let (ks, t, d) = (&self.keyspace, Token::new("x").unwrap(), durations()[0]);
        let d = Duration::from_millis(d);
        let notify = match self.family {
            Family::Lease => LockSpec::lease(ks, "r", t, d).unwrap().notify,
            Family::Reentrant => LockSpec::reentrant(ks, "r", "x", t, d).unwrap().notify,
            Family::Fair => LockSpec::fair(ks, "r", t, d, d).unwrap().notify,
            Family::ReadWrite => LockSpec::read(ks, "r", t, d).unwrap().notify,
            Family::Semaphore => SemaphoreKeys::new(ks, "r").unwrap().notify,
            Family::Queue => {
                let keys = QueueKeys::new(ks, "r").unwrap();
                queue::take(&keys, t, &QueueSettings::default())
                    .unwrap()
                    .notify
            }
            Family::Plain | Family::Data => format!("{}:ch", ks.stem("r").unwrap()),
        };
        self.channels = vec![channel(&notify)];
        self
    }

    fn token(&self, owner: usize) -> Token {
        Token::new(format!("o{owner}")).unwrap()
    }

    fn fresh(&mut self, what: &str) -> String {
        self.counter += 1;
        format!("{what}{:04}", self.counter)
    }

    /// EVAL the first time this sequence uses a script, EVALSHA after.
    fn script(&mut self, call: &ScriptCall) -> Command {
        if self.loaded.insert(call.script().sha1) {
            call.eval()
        } else {
            call.evalsha()
        }
    }

    fn script_op(&mut self, call: &ScriptCall, cmp: Cmp) -> Op {
        Op {
            command: self.script(call),
            cmp,
        }
    }

    /// The EVALSHA a machine sends first, as EVAL if this sequence has not sent it yet.
    fn machine_op<P: Protocol>(&mut self, mut machine: P, cmp: Cmp) -> Op {
        let now = Instant::now();
        let Step::Send(batch) = machine.poll(now) else {
            panic!("the machine sends nothing")
        };
        let cmd = batch.requests[0].command.clone();
        let sha = String::from_utf8_lossy(&cmd.args()[1]).into_owned();
        let script = all_scripts()
            .into_iter()
            .find(|s| s.sha1 == sha)
            .expect("a known script");
        let command = if self.loaded.insert(script.sha1) {
            let mut c = Command::new("EVAL").arg(script.source);
            for a in &cmd.args()[2..] {
                c = c.arg(a);
            }
            c
        } else {
            cmd
        };
        Op { command, cmp }
    }

    fn plain(args: &[&str], cmp: Cmp) -> Op {
        let mut c = Command::new(args[0]);
        for a in &args[1..] {
            c = c.arg(a);
        }
        Op { command: c, cmp }
    }

    /// A key of the primitive made the wrong type (scripts must fail alike), or probed.
    fn poke(&mut self, keys: &[String]) -> Op {
        let key = self.rng.pick(keys).clone();
        match self.rng.below(10) {
            0..=3 => Self::plain(&["SET", &key, "garbage"], Cmp::Exact),
            4 => Self::plain(&["DEL", &key], Cmp::Exact),
            5 => Self::plain(&["RPUSH", &key, "x"], Cmp::Exact),
            6 => Self::plain(&["HSET", &key, "f", "1"], Cmp::Exact),
            7 => Self::plain(&["PTTL", &key], Cmp::Ms),
            8 => Self::plain(&["TYPE", &key], Cmp::Exact),
            _ => Self::plain(&["EXISTS", &key], Cmp::Exact),
        }
    }

    fn next_ops(&mut self) -> Vec<Op> {
        let n = if self.rng.chance(30) { 2 } else { 1 };
        self.timed = false;
        (0..n).map(|_| self.next_op()).collect()
    }

    fn lock_ops(&mut self, spec: LockSpec, poke_keys: &[String]) -> Op {
        let ttl = self.rng.dur().as_millis().to_string();
        match self.rng.below(20) {
            0..=6 => {
                let spec = if self.rng.chance(30) {
                    spec.trying_once()
                } else {
                    spec
                };
                self.script_op(&spec.acquire, Cmp::Acquire)
            }
            7..=9 => self.script_op(&spec.calls.release, Cmp::Exact),
            10..=11 => self.script_op(&spec.calls.extend.clone().arg(ttl), Cmp::Exact),
            12..=13 => self.script_op(&spec.calls.inspect, Cmp::Inspect),
            14 => match spec.undo.clone() {
                Some(u) => self.script_op(&u, Cmp::Exact),
                None => self.script_op(&spec.calls.inspect, Cmp::Inspect),
            },
            15..=16 => match spec.cancel.clone() {
                Some(c) => self.script_op(&c, Cmp::Exact),
                None => self.script_op(&spec.calls.release, Cmp::Exact),
            },
            17..=18 if self.rng.chance(40) => self.poke(poke_keys),
            _ => self.script_op(&spec.acquire, Cmp::Acquire),
        }
    }

    fn all_keys(spec: &LockSpec, extra: &[String]) -> Vec<String> {
        let mut k = spec.target.keys.clone();
        k.extend_from_slice(extra);
        k
    }

    fn next_op(&mut self) -> Op {
        let ks = self.keyspace.clone();
        let stem = ks.stem("r").unwrap();
        let undone = format!("{stem}:undone");
        let owner = self.rng.below(OWNERS);
        let ttl = self.rng.dur();
        let wt = self.rng.dur();
        match self.family {
            Family::Lease => {
                let spec = LockSpec::lease(&ks, "r", self.token(owner), ttl).unwrap();
                let keys = Self::all_keys(&spec, &[undone]);
                self.lock_ops(spec, &keys)
            }
            Family::Fair => {
                let spec = LockSpec::fair(&ks, "r", self.token(owner), ttl, wt).unwrap();
                let keys = Self::all_keys(&spec, &[undone]);
                self.lock_ops(spec, &keys)
            }
            Family::ReadWrite => {
                let spec = if self.rng.chance(50) {
                    LockSpec::read(&ks, "r", self.token(owner), ttl).unwrap()
                } else {
                    LockSpec::write(&ks, "r", self.token(owner), ttl, wt).unwrap()
                };
                let keys = Self::all_keys(&spec, &[undone]);
                self.lock_ops(spec, &keys)
            }
            Family::Semaphore => {
                let permits = 2;
                let sem = SemaphoreKeys::new(&ks, "r").unwrap();
                let spec = sem.permit(self.token(owner), ttl, permits, wt).unwrap();
                let keys = Self::all_keys(&spec, &[undone]);
                match self.rng.below(10) {
                    0 => {
                        let n = 1 + self.rng.below(3) as u64;
                        let op = semaphore::set_permits(&sem, n, Instant::now()).unwrap();
                        self.machine_op(op, Cmp::Exact)
                    }
                    1 => {
                        let op = semaphore::read(&sem, Instant::now());
                        self.machine_op(op, Cmp::Semaphore)
                    }
                    _ => self.lock_ops(spec, &keys),
                }
            }
            Family::Reentrant => {
                let who = format!("client{owner}:thread1");
                let reuse = !self.ops.is_empty() && self.rng.chance(50);
                let (who, op) = if reuse {
                    let (o, op) = self.rng.pick(&self.ops).clone();
                    (format!("client{o}:thread1"), op)
                } else {
                    let op = self.fresh("op");
                    self.ops.push((owner, op.clone()));
                    (who, op)
                };
                let spec =
                    LockSpec::reentrant(&ks, "r", &who, Token::new(op).unwrap(), ttl).unwrap();
                let keys = Self::all_keys(&spec, &[undone]);
                self.lock_ops(spec, &keys)
            }
            Family::Queue => self.queue_op(),
            Family::Plain => self.plain_op(),
            Family::Data => self.data_op(),
        }
    }

    fn queue_op(&mut self) -> Op {
        let keys = QueueKeys::new(&self.keyspace, "r").unwrap();
        let settings = QueueSettings {
            visibility: self.queue_dur,
            max_deliveries: 1 + self.rng.below(3) as u32,
        };
        let now = Instant::now();
        let pick = self.rng.below(20);
        // Takes (0..=8 below), delayed pushes, nacks with a backoff and extensions write
        // times: one per epoch.
        let timed = matches!(pick, 0..=13);
        if timed && self.timed {
            return self.machine_op(queue::stats(&keys, now), Cmp::Exact);
        }
        self.timed |= timed;
        match pick {
            0..=4 => {
                let n = 1 + self.rng.below(3);
                let jobs: Vec<NewJob> = (0..n)
                    .map(|_| {
                        // Now and then an id pushed before (a duplicate).
                        let id = if self.counter > 0 && self.rng.chance(15) {
                            format!("job{:04}", 1 + self.rng.below(self.counter as usize))
                        } else {
                            self.fresh("job")
                        };
                        let payload = (0..self.rng.below(5))
                            .map(|_| self.rng.next() as u8)
                            .collect();
                        NewJob { id, payload }
                    })
                    .collect();
                let priority = *self.rng.pick(&[0u8, 0, 5, 255]);
                let delay = if self.rng.chance(30) {
                    self.queue_dur
                } else {
                    Duration::ZERO
                };
                let op = queue::push(&keys, &jobs, priority, delay, now).unwrap();
                self.machine_op(op, Cmp::Exact)
            }
            5..=8 => {
                let token = self.fresh("tk");
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                self.script_op(&spec.acquire, Cmp::Take)
            }
            9..=10 if !self.taken.is_empty() => {
                let (id, token) = self.rng.pick(&self.taken).clone();
                self.script_op(&queue::ack_call(&keys, &id, &token), Cmp::Exact)
            }
            11..=12 if !self.taken.is_empty() => {
                let (id, token) = self.rng.pick(&self.taken).clone();
                let backoff = if self.rng.chance(50) {
                    self.queue_dur
                } else {
                    Duration::ZERO
                };
                let call = queue::nack(&keys, &id, &token, backoff, settings.max_deliveries);
                self.script_op(&call, Cmp::Exact)
            }
            13 if !self.taken.is_empty() => {
                let (id, token) = self.rng.pick(&self.taken).clone();
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                let ms = settings.visibility.as_millis().to_string();
                if self.rng.chance(50) {
                    let call = spec.calls.extend.prepend_arg(&id).arg(ms);
                    self.script_op(&call, Cmp::Exact)
                } else {
                    let call = spec.calls.inspect.prepend_arg(&id);
                    self.script_op(&call, Cmp::Inspect)
                }
            }
            14 if !self.taken.is_empty() => {
                let (_, token) = self.rng.pick(&self.taken).clone();
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                let undo = spec.undo.expect("a take has an undo");
                self.script_op(&undo, Cmp::Exact)
            }
            15 => self.machine_op(queue::stats(&keys, now), Cmp::Exact),
            16 => self.machine_op(queue::dead_jobs(&keys, 10, now), Cmp::Exact),
            17 => {
                // A dead job if one is known; else any id (requeue and forget say 0).
                let id = if !self.dead.is_empty() && self.rng.chance(70) {
                    self.rng.pick(&self.dead).clone()
                } else if !self.taken.is_empty() {
                    self.rng.pick(&self.taken).0.clone()
                } else {
                    "job0001".to_owned()
                };
                if self.rng.chance(50) {
                    self.machine_op(queue::requeue(&keys, &id, now), Cmp::Exact)
                } else {
                    let op = queue::delete_dead(&keys, Some(&id), now).unwrap();
                    self.machine_op(op, Cmp::Exact)
                }
            }
            18..=19 if self.rng.chance(40) => {
                let stem = self.keyspace.stem("r").unwrap();
                let all: Vec<String> = [
                    "ready",
                    "delayed",
                    "payloads",
                    "priorities",
                    "seq",
                    "inflight",
                    "leases",
                    "deliveries",
                    "dead",
                    "holders",
                    "bases",
                    "settled",
                    "undone",
                ]
                .iter()
                .map(|p| format!("{stem}:q:{p}"))
                .collect();
                self.poke(&all)
            }
            _ => self.machine_op(queue::stats(&keys, now), Cmp::Exact),
        }
    }

    /// What the legacy lock, RedLock and the driver send as plain commands.
    fn plain_op(&mut self) -> Op {
        let stem = self.keyspace.stem("r").unwrap();
        let key = format!("{stem}:{}", self.rng.pick(&["lock", "lock", "other"]));
        let ttl = self.rng.dur().as_millis().to_string();
        let owner = format!("o{}", self.rng.below(OWNERS));
        match self.rng.below(22) {
            0..=2 => Self::plain(&["SET", &key, &owner, "NX", "PX", &ttl], Cmp::Exact),
            17 => Self::plain(&["SET", &key, &owner, "XX", "GET", "EX", "1"], Cmp::Exact),
            18 => Self::plain(&["SET", &key, &owner, "KEEPTTL"], Cmp::Exact),
            19 => {
                // Not GT or LT: they compare two expiry times, which may fall in one
                // epoch, where only Redis' milliseconds would decide.
                let opt = *self.rng.pick(&["NX", "XX"]);
                Self::plain(&["PEXPIRE", &key, &ttl, opt], Cmp::Exact)
            }
            20 => Self::plain(&["TTL", &key], Cmp::Exact),
            21 => Self::plain(&["PERSIST", &key], Cmp::Exact),
            3 => Self::plain(&["GET", &key], Cmp::Exact),
            4 => Self::plain(&["DEL", &key], Cmp::Exact),
            5 => Self::plain(&["SETNX", &key, &owner], Cmp::Exact),
            6 => Self::plain(&["GETSET", &key, &owner], Cmp::Exact),
            7 => Self::plain(&["PEXPIRE", &key, &ttl], Cmp::Exact),
            8 => Self::plain(&["EXPIRE", &key, "1"], Cmp::Exact),
            9 => Self::plain(&["PTTL", &key], Cmp::Ms),
            10 => Self::plain(&["INCR", &key], Cmp::Exact),
            11 => Self::plain(&["EXISTS", &key], Cmp::Exact),
            12 => Self::plain(&["PUBLISH", &format!("{stem}:ch"), &owner], Cmp::Exact),
            13 => Self::plain(&["PING"], Cmp::Exact),
            14 => Self::plain(&["WAIT", "0", "0"], Cmp::Exact),
            15 => Self::plain(&["HSET", &key, "f", &owner], Cmp::Exact),
            _ => {
                let sha = format!("{:040x}", self.rng.next());
                Self::plain(&["EVALSHA", &sha, "1", &key], Cmp::Exact)
            }
        }
    }

    fn data_op(&mut self) -> Op {
        let stem = self.keyspace.stem("r").unwrap();
        let key = format!("{stem}:{}", self.rng.pick(&["a", "b", "c"]));
        let r = &mut self.rng;
        let int = |r: &mut Rng| {
            r.pick(&["0", "1", "2", "-1", "-2", "3", "10", "-10", "x", "01"])
                .to_string()
        };
        let score = |r: &mut Rng| {
            r.pick(&[
                "0",
                "1",
                "2.5",
                "-3",
                "0.1",
                "1e3",
                "inf",
                "-inf",
                "+inf",
                "(1",
                "(2.5",
                "nan",
                "x",
                "1099511627776",
            ])
            .to_string()
        };
        let member = |r: &mut Rng| r.pick(&["m1", "m2", "m3", "m4"]).to_string();
        let v: Vec<String> = match r.below(30) {
            0 => vec!["ZADD".into(), key, score(r), member(r)],
            1 => vec!["ZADD".into(), key, score(r), member(r), score(r), member(r)],
            2 => vec![
                "ZADD".into(),
                key,
                r.pick(&["XX", "NX", "GT", "LT", "CH", "INCR"]).to_string(),
                score(r),
                member(r),
            ],
            3 => vec!["ZSCORE".into(), key, member(r)],
            4 => vec!["ZREM".into(), key, member(r), member(r)],
            5 => vec!["ZCARD".into(), key],
            6 => vec!["ZRANGE".into(), key, int(r), int(r), "WITHSCORES".into()],
            7 => vec!["ZRANGE".into(), key, int(r), int(r)],
            8 => vec![
                "ZRANGEBYSCORE".into(),
                key,
                score(r),
                score(r),
                "WITHSCORES".into(),
            ],
            9 => vec![
                "ZRANGEBYSCORE".into(),
                key,
                score(r),
                score(r),
                "LIMIT".into(),
                int(r),
                int(r),
            ],
            10 => vec!["ZREMRANGEBYSCORE".into(), key, score(r), score(r)],
            11 => vec!["HSET".into(), key, member(r), int(r)],
            12 => vec!["HSETNX".into(), key, member(r), int(r)],
            13 => vec!["HGET".into(), key, member(r)],
            14 => vec!["HDEL".into(), key, member(r), member(r)],
            15 => vec!["HINCRBY".into(), key, member(r), int(r)],
            16 => vec!["HLEN".into(), key],
            17 => vec!["HEXISTS".into(), key, member(r)],
            18 => vec![
                r.pick(&["RPUSH", "LPUSH"]).to_string(),
                key,
                member(r),
                member(r),
            ],
            19 => vec!["LRANGE".into(), key, int(r), int(r)],
            20 => vec!["LINDEX".into(), key, int(r)],
            21 => vec!["LREM".into(), key, int(r), member(r)],
            22 => vec!["LPOS".into(), key, member(r)],
            23 => vec![
                "LPOS".into(),
                key,
                member(r),
                r.pick(&["RANK", "COUNT", "MAXLEN"]).to_string(),
                int(r),
            ],
            24 => vec!["LPOP".into(), key],
            25 => vec!["LLEN".into(), key],
            26 => vec!["SET".into(), key, int(r)],
            27 => vec!["INCR".into(), key],
            28 => vec!["GET".into(), key],
            _ => vec!["DEL".into(), key],
        };
        let args: Vec<&str> = v.iter().map(String::as_str).collect();
        Self::plain(&args, Cmp::Exact)
    }

    /// Learns from Redis' replies (jobs taken, dead jobs).
    fn observe(&mut self, op: &Op, reply: &Reply) {
        let Some(items) = reply.as_array() else {
            return;
        };
        let script = op
            .command
            .args()
            .get(1)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .unwrap_or_default();
        let is = |s: &Script| script == s.sha1 || script == s.source;
        if is(&queue::scripts::DEQUEUE)
            && let [Reply::Int(1), _, Reply::Bulk(id), _] = items
        {
            let token = String::from_utf8_lossy(&op.command.args()[15]).into_owned();
            self.taken
                .push((String::from_utf8_lossy(id).into_owned(), token));
        }
        if is(&queue::scripts::DEAD) {
            for chunk in items.chunks(3) {
                if let Reply::Bulk(id) = &chunk[0] {
                    self.dead.push(String::from_utf8_lossy(id).into_owned());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The in-process side: a thread with one server per sequence, behind the Redis side.

enum ToMemory {
    /// Run these commands at `epoch` and compare with Redis' replies.
    Epoch {
        seq: (u64, u32),
        epoch: u64,
        /// The epoch's length when the sequence was generated.
        q: u64,
        ops: Vec<(Command, Cmp, Reply)>,
        /// The channels to listen to (when the sequence starts).
        channels: Vec<(String, bool)>,
    },
    /// The sequence is over: compare the messages published on its channels (`None`: it
    /// was spoiled), drop its server.
    Done {
        seq: (u64, u32),
        messages: Option<Messages>,
    },
}

struct Mismatch {
    seed: u64,
    text: String,
}

struct MemSeq {
    server: MemoryServer,
    subscriber: redlease::memory::Subscriber,
    start_epoch: u64,
    fences: Fences,
    log: Vec<String>,
    failed: bool,
}

/// What the in-process side saw: commands compared, and how many replies of each kind.
#[derive(Default, Debug)]
struct Tally {
    commands: u64,
    /// Pub/sub messages compared.
    messages: u64,
    /// Scripts run (by name).
    scripts: HashSet<&'static str>,
    kinds: std::collections::BTreeMap<String, u64>,
}

impl Tally {
    fn count(&mut self, c: &Command, r: &Reply) {
        self.commands += 1;
        if let Some(body) = c.args().get(1) {
            let body = String::from_utf8_lossy(body);
            if let Some(s) = all_scripts()
                .into_iter()
                .find(|s| s.sha1 == body || s.source == body)
            {
                self.scripts.insert(s.name);
            }
        }
        let kind = match r {
            Reply::Error(e) => format!("error {}", e.code),
            Reply::Nil => "nil".into(),
            Reply::Array(a) => match a.first().and_then(Reply::as_int) {
                Some(n) if a.len() == 2 => format!("pair {}", n.signum()),
                _ => "array".into(),
            },
            Reply::Int(_) => "integer".into(),
            Reply::Bulk(_) => "bulk".into(),
            Reply::Status(_) => "status".into(),
        };
        *self.kinds.entry(kind).or_default() += 1;
    }
}

fn memory_side(rx: mpsc::Receiver<ToMemory>, out: mpsc::Sender<Mismatch>) -> Tally {
    let mut seqs: HashMap<(u64, u32), MemSeq> = HashMap::new();
    let mut tally = Tally::default();
    for msg in rx {
        match msg {
            ToMemory::Done { seq, messages } => {
                let (Some(s), Some(redis)) = (seqs.remove(&seq), messages) else {
                    continue;
                };
                let memory: Messages = std::iter::from_fn(|| s.subscriber.try_recv())
                    .map(|m| (m.channel, m.payload))
                    .collect();
                tally.messages += memory.len() as u64;
                if !s.failed && memory != redis {
                    let show = |m: &Messages| {
                        m.iter()
                            .map(|(c, p)| {
                                format!(
                                    "{}={}",
                                    String::from_utf8_lossy(c),
                                    String::from_utf8_lossy(p)
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    out.send(Mismatch {
                        seed: seq.0,
                        text: format!(
                            "seed {}: published messages differ\n  redis:  {}\n  memory: {}",
                            seq.0,
                            show(&redis),
                            show(&memory)
                        ),
                    })
                    .unwrap();
                }
            }
            ToMemory::Epoch {
                seq,
                epoch,
                q,
                ops,
                channels,
            } => {
                let s = seqs.entry(seq).or_insert_with(|| {
                    let server = MemoryServer::new();
                    let subscriber = server.subscriber();
                    for (c, sharded) in &channels {
                        if *sharded {
                            subscriber.ssubscribe(&[c]);
                        } else {
                            subscriber.subscribe(&[c]);
                        }
                    }
                    MemSeq {
                        server,
                        subscriber,
                        start_epoch: epoch,
                        fences: Fences::default(),
                        log: Vec::new(),
                        failed: false,
                    }
                });
                if s.failed {
                    continue;
                }
                let clock = s.server.clock();
                let at = Duration::from_millis((epoch - s.start_epoch) * q);
                clock.advance(at - clock.elapsed());
                for (command, cmp, redis) in ops {
                    let mem = s.server.execute(&command).expect("no fault injected");
                    tally.count(&command, &mem);
                    s.log.push(format!(
                        "  t+{:>5} ms {command:?}\n      redis:  {}\n      memory: {}",
                        at.as_millis(),
                        redis.describe(),
                        mem.describe()
                    ));
                    if !same(cmp, &redis, &mem, &mut s.fences) {
                        s.failed = true;
                        let tail = s.log.len().saturating_sub(12);
                        out.send(Mismatch {
                            seed: seq.0,
                            text: format!(
                                "seed {} ({cmp:?} comparison): replies differ; the last commands:\n{}",
                                seq.0,
                                s.log[tail..].join("\n")
                            ),
                        })
                        .unwrap();
                        break;
                    }
                }
            }
        }
    }
    tally
}

// ---------------------------------------------------------------------------------------

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

#[test]
fn memory_server_replies_as_redis_does() {
    let (seeds, replay): (Vec<u64>, bool) = match env_u64("MEMORY_DIFF_SEED") {
        Some(seed) => (vec![seed], true),
        None => {
            let n = env_u64("MEMORY_DIFF_SEQUENCES").unwrap_or(10_000);
            let first = env_u64("MEMORY_DIFF_FIRST").unwrap_or(1);
            ((first..first + n).collect(), false)
        }
    };
    let total = seeds.len();
    let redis = server();
    let mut conn = Resp::connect(redis.port());
    let mut subscriber = RedisSubscriber::connect(redis.port());
    let (to_mem, mem_rx) = mpsc::channel();
    let (mismatch_tx, mismatches) = mpsc::channel();
    let memory = std::thread::spawn(move || memory_side(mem_rx, mismatch_tx));

    let started = Instant::now();
    let mut queue: Vec<(u64, u32)> = seeds.iter().rev().map(|s| (*s, 0)).collect();
    let mut active: Vec<(Seq, u64)> = Vec::new(); // (sequence, its last epoch)
    let (mut done, mut spoiled_epochs, mut epochs, mut redis_commands) = (0usize, 0u64, 0u64, 0u64);
    let mut gave_up = Vec::new();
    let mut t0 = Instant::now() + Duration::from_millis(20);
    let mut epoch = 0u64;
    // Whether each of the last epochs was late, and whether the scale is to grow once the
    // running sequences are over.
    let mut recent: std::collections::VecDeque<bool> = Default::default();
    let mut rescaling = false;
    while !queue.is_empty() || !active.is_empty() {
        if rescaling && active.is_empty() {
            let late = recent.iter().filter(|l| **l).count();
            SCALE.store(scale() * 2, Ordering::Relaxed);
            println!(
                "memory_diff: {late} of the last {} pipelines were late: epochs of {} ms from now on",
                recent.len(),
                q()
            );
            recent.clear();
            rescaling = false;
            t0 = Instant::now() + Duration::from_millis(20);
            epoch = 0;
        }
        let mut starting = Vec::new();
        while active.len() < CONCURRENT
            && !rescaling
            && let Some((seed, attempt)) = queue.pop()
        {
            let seq = Seq::new(seed, attempt);
            starting.extend(seq.channels.iter().cloned());
            active.push((seq, 0));
        }
        subscriber.subscribe(&starting);
        // This epoch's commands, from every active sequence.
        let mut commands = Vec::new();
        for (seq, _) in &mut active {
            seq.pending = seq.next_ops();
            commands.extend(seq.pending.iter().map(|op| op.command.clone()));
        }
        // The next epoch that can still start on time.
        let now = Instant::now();
        let q = q();
        let due = |e: u64| t0 + Duration::from_millis(e * q);
        while due(epoch) < now + Duration::from_millis(1) {
            epoch += 1;
        }
        std::thread::sleep(due(epoch) - Instant::now());
        let replies = conn.pipeline(&commands);
        let late = Instant::now() - due(epoch) > window();
        epochs += 1;
        redis_commands += commands.len() as u64;
        if late {
            spoiled_epochs += 1;
        }
        recent.push_back(late);
        if recent.len() > 40 {
            recent.pop_front();
        }
        if recent.len() == 40
            && recent.iter().filter(|l| **l).count() > 10
            && scale() < MAX_SCALE
            && !replay
        {
            rescaling = true;
        }
        let mut replies = replies.into_iter();
        let mut still = Vec::new();
        if late || active.iter().any(|(s, _)| s.left == 1) {
            subscriber.drain();
        }
        for (mut seq, _) in active.drain(..) {
            let pending = std::mem::take(&mut seq.pending);
            let got: Vec<Reply> = replies.by_ref().take(pending.len()).collect();
            let key = (seq.seed, seq.attempt);
            if late {
                subscriber.take(&seq.channels);
                to_mem
                    .send(ToMemory::Done {
                        seq: key,
                        messages: None,
                    })
                    .unwrap();
                // Run it again later (the machine may stay busy for a while).
                if seq.attempt < 9 {
                    queue.insert(0, (seq.seed, seq.attempt + 1));
                } else {
                    gave_up.push(seq.seed);
                }
                continue;
            }
            for (op, reply) in pending.iter().zip(&got) {
                seq.observe(op, reply);
            }
            let ops = pending
                .into_iter()
                .zip(got)
                .map(|(op, r)| (op.command, op.cmp, r))
                .collect();
            to_mem
                .send(ToMemory::Epoch {
                    seq: key,
                    epoch,
                    q,
                    ops,
                    channels: seq.channels.clone(),
                })
                .unwrap();
            seq.left -= 1;
            if seq.left == 0 {
                let messages = Some(subscriber.take(&seq.channels));
                to_mem.send(ToMemory::Done { seq: key, messages }).unwrap();
                done += 1;
            } else {
                still.push((seq, epoch));
            }
        }
        active = still;
        epoch += 1;
    }
    drop(to_mem);
    let tally = memory.join().expect("the in-process side ran");
    let memory_commands = tally.commands;
    let failures: Vec<Mismatch> = mismatches.into_iter().collect();
    println!(
        "memory_diff: {done} sequences ({total} asked, {} given up after 10 late pipelines), \
         {redis_commands} commands on redis-server, {memory_commands} compared, {} pub/sub \
         messages compared, {epochs} epochs \
         ({spoiled_epochs} spoiled by a late pipeline and run again), epochs of {} ms at the end, {:.1} s",
        gave_up.len(),
        tally.messages,
        q(),
        started.elapsed().as_secs_f64()
    );
    println!("memory_diff: replies by kind {:?}", tally.kinds);
    for f in failures.iter().skip(1).take(8) {
        let last = f.text.lines().rev().take(3).collect::<Vec<_>>();
        println!(
            "also seed {}: {}",
            f.seed,
            last.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    if let Some(first) = failures.first() {
        let seeds: Vec<u64> = failures.iter().map(|f| f.seed).collect();
        panic!(
            "{} of {done} sequences differ (seeds {seeds:?}).\n{}\nreplay: MEMORY_DIFF_SEED={} cargo test --test memory_diff -- --nocapture",
            failures.len(),
            first.text,
            first.seed
        );
    }
    // The run reached the paths that matter: held and busy acquisitions, wrong types in
    // scripts, unknown scripts.
    if total >= 1000 {
        let missed: Vec<&str> = all_scripts()
            .iter()
            .map(|s| s.name)
            .filter(|n| !tally.scripts.contains(n))
            .collect();
        assert!(missed.is_empty(), "scripts never run: {missed:?}");
        for kind in [
            "pair 1",
            "pair 0",
            "error WRONGTYPE",
            "error NOSCRIPT",
            "error ERR",
            "nil",
        ] {
            assert!(
                tally.kinds.get(kind).copied().unwrap_or(0) >= 10,
                "too few replies of kind {kind:?}: {:?}",
                tally.kinds
            );
        }
    }
    // Sequences spoiled ten times over say the machine is too loaded to time Redis; 1 % are
    // tolerated, more would leave the test proving little.
    assert!(
        if replay {
            gave_up.is_empty()
        } else {
            gave_up.len() * 100 <= total
        },
        "{} of {total} sequences could not be timed on redis-server (seeds {:?}): the machine is too loaded",
        gave_up.len(),
        &gave_up[..gave_up.len().min(10)]
    );
}
