//! The differential test of the in-process server (`redlease::memory::MemoryServer`) against
//! a real redis-server: seeded random sequences of redlease's own commands (every script,
//! with KEYS/ARGV built by the core's public constructors, several owners; and the plain
//! commands the driver and the legacy lock and RedLock send), each run on both, every reply
//! compared.
//!
//! Time. Both run on one grid of epochs `Q` apart: at epoch `j` a sequence's commands reach
//! Redis in one pipeline within `WINDOW` (`Q / 4`) of the epoch's start, and the in-process
//! server runs them with its clock at exactly `j * Q` from the sequence's start. Every
//! duration a sequence uses (ttls, waiter timeouts, visibility, delays, backoffs) is
//! `m * Q + Q / 3`, and the whole seconds of `EXPIRE` and `SET .. EX` are chosen to fall in
//! the middle third of an epoch too (`Grid::secs`), so every expiry (`now + d`,
//! `now + 2 * d`) falls at least `Q / 3` from any epoch start: while `WINDOW < Q / 3`, each
//! expiry is decided alike on both. An epoch whose Redis pipeline overran `WINDOW` (a loaded
//! machine) proves nothing: its sequences are run again from the start under fresh keys.
//! While more than 6 of the last 40 pipelines are late, the time scale doubles (`Q` 60 ms ->
//! 120 ms ..., up to 960 ms) once the running sequences are over: a loaded machine makes the
//! test slower, never weaker; a sequence is given up only after ten late pipelines on the
//! largest grid. Values read from the clock are compared within a tolerance (remaining ttls
//! in ms; `TTL`'s rounded seconds against the in-process server's own remaining ms) or by
//! order (fences, which hold the server clock in µs), always with the tolerance of the grid
//! the sequence ran on. Two more tests hold pipelines back until late in their window (half
//! of them at random; or from a fixed epoch of the sequence that once failed), so that
//! sequences meet the widest spread of arrival times the grid accepts.
//!
//! The generator reads Redis' replies (job ids to ack, ...); the in-process server runs on a
//! second thread, behind, and its replies are compared there. A subscriber on each side
//! listens to every channel a sequence's scripts publish on (plain and shard channels): the
//! messages must be the same, in the same order.
//!
//! `MEMORY_DIFF_SEED=<n>` replays one sequence and `MEMORY_DIFF_SCALE=<n>` sets the grid it
//! starts on (1, 2, 4, 8 or 16; a failure prints the line with both, and each epoch's
//! arrival time on Redis); `MEMORY_DIFF_SEQUENCES=<n>` sets how many run (default 10,000),
//! from seed `MEMORY_DIFF_FIRST` (default 1).
//!
//! Every test here that runs redis-server is named `memory_server_replies_as_redis_does*`:
//! the in-process server answers as Redis 7.0 does, and scripts/matrix.sh skips that name
//! on the other servers.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redlease::core::inspect::{self, registry};
use redlease::core::keys::Keyspace;
use redlease::core::lease::{LockSpec, Token};
use redlease::core::queue::batch;
use redlease::core::queue::cancel::{self, CancelledJobs};
use redlease::core::queue::dead::{self, DeadAction, DeadFilter, DeadRetention, DeathCause};
use redlease::core::queue::groups::{self, GroupLimits, LimitsOf};
use redlease::core::queue::pause::{self, PauseScope};
use redlease::core::queue::schedule::{self, Schedule};
use redlease::core::queue::{self, NewJob, QueueKeys, QueueSettings};
use redlease::core::rate::{self, RateLimit, RateLimiterSpec};
use redlease::core::script::{Script, ScriptCall};
use redlease::core::semaphore::{self, SemaphoreKeys};
use redlease::core::{Command, ErrorReply, Protocol, Reply, Step};
use redlease::memory::MemoryServer;
use redlease_suite::testkit::server;

/// The largest time scale (epochs of 960 ms).
const MAX_SCALE: u64 = 16;

/// The time grid of a run: scale 1 on a quiet machine; doubled (between sequences, never
/// during one) while more than [`LATE_PER_40`] of the last 40 pipelines miss their window
/// on a loaded one, so the test slows down instead of proving nothing. A sequence keeps the grid it was generated on, and every
/// comparison of its replies uses that grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grid {
    scale: u64,
}

impl Grid {
    /// The epoch (ms): commands are sent at its start.
    fn q(self) -> u64 {
        60 * self.scale
    }

    /// How long after an epoch's start its last reply from Redis may come.
    fn window(self) -> Duration {
        Duration::from_millis(15 * self.scale)
    }

    /// Remaining times may differ by the spread of arrival within an epoch, plus rounding.
    fn tolerance(self) -> i64 {
        15 * self.scale as i64 + 2
    }

    /// The durations a sequence uses: `m * Q + Q / 3`.
    fn durations(self) -> [u64; 4] {
        let q = self.q();
        [q + q / 3, 2 * q + q / 3, 3 * q + q / 3, 4 * q + q / 3]
    }

    /// The expiry in whole seconds that `EXPIRE` and `SET .. EX` use: the fewest seconds
    /// that fall between `Q / 3` and `2 * Q / 3` past an epoch start, as far from any
    /// epoch start as the durations (1 s on grids of 60 and 120 ms: 1000 = 16 * 60 + 40
    /// = 8 * 120 + 40; 2 s on 240 ms, 4 s on 480 ms, 8 s on 960 ms). A fixed 1 s falls
    /// 40 ms past an epoch start on every grid, closer than the window from 240 ms on:
    /// a key would expire before its check on Redis and after it in memory.
    fn secs(self) -> u64 {
        let q = self.q();
        (1..)
            .find(|s| (q / 3..=2 * q / 3).contains(&(s * 1000 % q)))
            .expect("some whole number of seconds falls in the middle third of an epoch")
    }
}

/// The grid grows when more than this many of the last 40 pipelines were late. A late
/// pipeline spoils every running sequence (5 to 10 epochs each): with a share `p` of late
/// pipelines a sequence gets through with odds `(1 - p)^7.5`, half of them at `p` = 9 %,
/// when doubling the epochs costs half the speed; past about 15 % a larger grid is faster.
const LATE_PER_40: usize = 6;

/// Sequences running at once (each its own keys and its own in-process server).
const CONCURRENT: usize = 160;

fn all_scripts() -> Vec<&'static Script> {
    let mut v: Vec<&'static Script> = redlease::core::lease::SCRIPTS.to_vec();
    v.extend(redlease::core::queue::scripts::ALL.iter().copied());
    v.extend(redlease::core::rate::scripts::ALL.iter().copied());
    v.extend(redlease::core::queue::groups::ALL.iter().copied());
    v.extend(redlease::core::queue::schedule::ALL.iter().copied());
    v.extend(redlease::core::inspect::ALL.iter().copied());
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
    /// `{flag, x}`: flag equal; x a fence when flag is 1, a remaining time otherwise. A bare
    /// integer (the lease acquire's grant) is a fence.
    Acquire,
    /// `{flag, x}`: flag equal; x a remaining time.
    Inspect,
    /// A server time stamp (a pause's ms): nil on both, or a bulk string on both.
    Stamp,
    /// A batch take: `{0, job, ...}` equal, or `{ms}` within tolerance.
    Batch,
    /// A take: `{1, delivery, id, payload}` equal, or `{0, ms}` within tolerance.
    Take,
    /// An ack and take: `{ack, ...}`, the ack equal and the rest compared as a take.
    AckTake,
    /// `TTL`: whole seconds, rounded (`(ms + 500) / 1000`), or negative (exact). Remaining
    /// times that differ within the tolerance may round to seconds one apart when a
    /// rounding boundary lies between them: compared against the in-process server's
    /// remaining time in ms, read at the same instant.
    Secs,
    /// A semaphore's state `{permits, {holder, ms left, ...}, waiters}`: holders compared
    /// as a set (holders whose permits expire within the same few ms may be listed in
    /// either order), their time left within tolerance.
    Semaphore,
    /// A rate limiter's decision `{allowed, remaining, retry µs, reset µs, server µs}`: the
    /// first two equal, the times within tolerance (in µs), the server's clock not compared
    /// (each side has its own).
    Rate,
    /// Queue stats `{ready, delayed, in flight, dead, oldest age ms, least lease left ms}`:
    /// the counts equal, the times within tolerance.
    Stats,
    /// An inspection's reply (`{now, ...}`: a page of jobs or one job): every value that is a
    /// time on the server's clock (within a day of the reply's `now`) compared as its
    /// distance from `now`, within tolerance; everything else equal.
    Jobs,
    /// Per-minute counts `{minute, {event, n, ...}, ...}`: each event's sum over the minutes
    /// equal (a minute's end may fall between the two servers' runs of the same events).
    Counts,
    /// A schedule script's reply: `{code, next, server ms}` (upsert) or `{code, server ms,
    /// version, spec, next}` (advance), all equal but the server's clock; anything else
    /// equal.
    Schedule,
    /// A hash read whole (`HGETALL`): the same fields and values, in any order.
    Hash,
    /// The dead list `{id, deliveries, payload, reason, '<server ms> <kind>' or ''}...`:
    /// all equal but the time of death (each server's own clock).
    Dead,
    /// `lock_info`: `{fence, {kind, holders, waiters, subscribers, permits}...}`, the fence
    /// as fences compare, holders (token, ms left, holds, role) as a set by token, their
    /// time left within tolerance, the rest equal.
    Info,
    /// A registry heartbeat's server time: an integer on both sides (each its own clock).
    Clock,
    /// The registry read: `{server ms, id, until ms, entry...}`: the same ids in the same
    /// order, each entry's record (after its heartbeat time) equal; the times each side's.
    Clients,
    /// A whole `SCAN` in one step (`{cursor, keys}`): the same cursor, the same keys in any
    /// order (each server walks its own table).
    Scan,
}

/// `lock_info`'s replies alike (see [`Cmp::Info`]).
fn same_info(r: &Reply, m: &Reply, fences: &mut Fences, tolerance: i64) -> bool {
    let (Some(a), Some(b)) = (r.as_array(), m.as_array()) else {
        return r == m;
    };
    if a.len() != b.len() || a.is_empty() {
        return false;
    }
    let fence = match (&a[0], &b[0]) {
        (Reply::Nil, Reply::Nil) => true,
        (x, y) => match (x.as_int(), y.as_int()) {
            (Some(x), Some(y)) => fences.same(x, y),
            _ => x == y,
        },
    };
    let entry = |x: &Reply, y: &Reply| {
        let (Some(x), Some(y)) = (x.as_array(), y.as_array()) else {
            return false;
        };
        if x.len() != 5 || y.len() != 5 || x[0] != y[0] || x[2..] != y[2..] {
            return false;
        }
        let sorted = |h: &Reply| {
            let mut v: Vec<Vec<Reply>> = h.as_array()?.chunks(4).map(<[Reply]>::to_vec).collect();
            v.sort_by_key(|c| format!("{:?}", c[0]));
            Some(v)
        };
        match (sorted(&x[1]), sorted(&y[1])) {
            (Some(p), Some(q)) => {
                p.len() == q.len()
                    && p.iter().zip(&q).all(|(p, q)| {
                        p.len() == 4
                            && q.len() == 4
                            && p[0] == q[0]
                            && close(&p[1], &q[1], tolerance)
                            && p[2..] == q[2..]
                    })
            }
            _ => false,
        }
    };
    fence && a[1..].iter().zip(&b[1..]).all(|(x, y)| entry(x, y))
}

/// The registry reads alike (see [`Cmp::Clients`]).
fn same_clients(r: &Reply, m: &Reply) -> bool {
    let (Some(a), Some(b)) = (r.as_array(), m.as_array()) else {
        return r == m;
    };
    let record = |e: &Reply| match e {
        Reply::Bulk(b) => b.splitn(2, |c| *c == b'\n').nth(1).map(<[u8]>::to_vec),
        _ => None,
    };
    a.len() == b.len()
        && !a.is_empty()
        && a[0].as_int().is_some()
        && b[0].as_int().is_some()
        && a[1..].chunks(3).zip(b[1..].chunks(3)).all(|(x, y)| {
            x.len() == 3
                && y.len() == 3
                && x[0] == y[0]
                && x[1].as_int().is_some()
                && y[1].as_int().is_some()
                && record(&x[2]).is_some()
                && record(&x[2]) == record(&y[2])
        })
}

/// `r`'s values that are times within a day of the first (the server's `now`), as their
/// distance from it; nested arrays alike.
fn relative(items: &[Reply], now: i64) -> Vec<Reply> {
    items
        .iter()
        .map(|x| match x {
            Reply::Array(a) => Reply::Array(relative(a, now)),
            _ => match x.as_int() {
                Some(v) if (v - now).abs() < 86_400_000 => Reply::Int(v - now),
                _ => x.clone(),
            },
        })
        .collect()
}

/// Whether two replies made relative agree: times within `tolerance`, the rest equal.
fn same_relative(a: &[Reply], b: &[Reply], tolerance: i64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Reply::Array(p), Reply::Array(q)) => same_relative(p, q, tolerance),
            (Reply::Int(p), Reply::Int(q)) if x != y => (p - q).abs() <= tolerance,
            _ => x == y,
        })
}

/// Per-minute counts summed by event.
fn count_sums(r: &Reply) -> Option<Vec<(String, i64)>> {
    let mut sums: HashMap<String, i64> = HashMap::new();
    for c in r.as_array()?.chunks(2) {
        for f in c.get(1)?.as_array()?.chunks(2) {
            let Reply::Bulk(e) = &f[0] else { return None };
            *sums
                .entry(String::from_utf8_lossy(e).into_owned())
                .or_default() += f.get(1)?.as_int()?;
        }
    }
    let mut out: Vec<_> = sums.into_iter().filter(|(_, n)| *n != 0).collect();
    out.sort();
    Some(out)
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

fn close(r: &Reply, m: &Reply, tolerance: i64) -> bool {
    match (r.as_int(), m.as_int()) {
        (Some(a), Some(b)) if a >= 0 && b >= 0 => (a - b).abs() <= tolerance,
        _ => r == m,
    }
}

/// Whether two takes' replies of a handed job agree (`lua/reclaim.lua`'s `handed`): after
/// the first flag, delivery, id, payload, attempt and timeout, the hold limit left within
/// the tolerance, then the enqueue time (each server's own clock) and the wait within the
/// tolerance; a grouped take's booked rate slot (a tenth item, µs from the take) within the
/// tolerance too, its enqueue time and wait then possibly both empty.
fn same_job(a: &[Reply], b: &[Reply], tolerance: i64) -> bool {
    let empty = |r: &Reply| matches!(r, Reply::Bulk(t) if t.is_empty());
    match a.len() {
        7 if b.len() == 7 => a[..6] == b[..6] && close(&a[6], &b[6], tolerance),
        9 if b.len() == 9 => {
            a[..6] == b[..6]
                && close(&a[6], &b[6], tolerance)
                && a[7].as_int().is_some()
                && b[7].as_int().is_some()
                && close(&a[8], &b[8], tolerance)
        }
        10 if b.len() == 10 => {
            let at = (empty(&a[7]) && empty(&b[7]) && empty(&a[8]) && empty(&b[8]))
                || (a[7].as_int().is_some()
                    && b[7].as_int().is_some()
                    && close(&a[8], &b[8], tolerance));
            let start = match (a[9].as_int(), b[9].as_int()) {
                (Some(x), Some(y)) => (x - y).abs() <= tolerance * 1000,
                _ => false,
            };
            a[..6] == b[..6] && close(&a[6], &b[6], tolerance) && at && start
        }
        _ => a == b,
    }
}

/// Whether Redis' `TTL` reply `r` and the in-process server's `m` agree, where `exact` is
/// the in-process server's `PTTL` of the key at the same instant: `m` is `exact` rounded
/// as Redis rounds it, and `r` is some remaining time within the tolerance of `exact`
/// rounded so (a key alive on one side is alive on the other: the grid decides expiries
/// alike).
fn same_secs(r: &Reply, m: &Reply, exact: &Reply, tolerance: i64) -> bool {
    let (Some(r), Some(m), Some(exact)) = (r.as_int(), m.as_int(), exact.as_int()) else {
        return false;
    };
    if exact < 0 {
        return r == exact && m == exact;
    }
    let round = |ms: i64| (ms.max(0) + 500) / 1000;
    m == round(exact) && (round(exact - tolerance)..=round(exact + tolerance)).contains(&r)
}

/// Whether Redis' reply `r` and the in-process server's `m` agree, for a command run on
/// `grid` (its tolerance, not the one of the grid the run has reached since); `exact` is
/// what [`Cmp::Secs`] compares with.
fn same(
    cmp: Cmp,
    r: &Reply,
    m: &Reply,
    exact: Option<&Reply>,
    fences: &mut Fences,
    grid: Grid,
) -> bool {
    let tolerance = grid.tolerance();
    let close = |r: &Reply, m: &Reply| close(r, m, tolerance);
    let pair = |r: &Reply, m: &Reply| match (r, m) {
        (Reply::Array(a), Reply::Array(b)) if a.len() == b.len() => Some((a.clone(), b.clone())),
        _ => None,
    };
    match cmp {
        Cmp::Exact => r == m,
        Cmp::Secs => exact.is_some_and(|e| same_secs(r, m, e, tolerance)),
        Cmp::Ms => close(r, m),
        Cmp::Acquire if matches!((r, m), (Reply::Int(_), Reply::Int(_))) => {
            matches!((r, m), (Reply::Int(x), Reply::Int(y)) if fences.same(*x, *y))
        }
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
        Cmp::Rate => match pair(r, m) {
            Some((a, b)) if a.len() == 5 => {
                let us = |x: &Reply, y: &Reply| match (x.as_int(), y.as_int()) {
                    (Some(x), Some(y)) if x >= 0 && y >= 0 => (x - y).abs() <= tolerance * 1000,
                    _ => false,
                };
                a[..2] == b[..2] && us(&a[2], &b[2]) && us(&a[3], &b[3]) && a[4] != Reply::Nil
            }
            _ => r == m,
        },
        Cmp::Stamp => {
            matches!(
                (r, m),
                (Reply::Nil, Reply::Nil) | (Reply::Bulk(_), Reply::Bulk(_))
            ) || r == m
        }
        Cmp::Batch => match pair(r, m) {
            Some((a, b)) if a.len() == 1 => close(&a[0], &b[0]),
            // The jobs taken: each compared as a take's.
            Some((a, b)) => {
                a[0] == b[0]
                    && a[1..].iter().zip(&b[1..]).all(|(x, y)| match (x, y) {
                        (Reply::Array(x), Reply::Array(y)) if x.len() == y.len() => {
                            same_job(x, y, tolerance)
                        }
                        _ => x == y,
                    })
            }
            _ => r == m,
        },
        Cmp::Take => match pair(r, m) {
            Some((a, b)) if a.len() == 2 && a[0] == b[0] && a[0] == Reply::Int(0) => {
                close(&a[1], &b[1])
            }
            Some((a, b)) if a.len() >= 7 => same_job(&a, &b, tolerance),
            _ => r == m,
        },
        Cmp::Schedule => match pair(r, m) {
            Some((a, b)) if a.len() == 3 => a[..2] == b[..2],
            Some((a, b)) if a.len() == 5 => a[0] == b[0] && a[2..] == b[2..],
            _ => r == m,
        },
        Cmp::Hash => match (holders(r), holders(m)) {
            (Some(x), Some(y)) => x == y,
            _ => r == m,
        },
        Cmp::Info => same_info(r, m, fences, tolerance),
        Cmp::Dead => match pair(r, m) {
            Some((a, b)) if a.len() % 5 == 0 => a.chunks(5).zip(b.chunks(5)).all(|(x, y)| {
                let kind = |r: &Reply| match r {
                    Reply::Bulk(t) => Some(
                        t.iter()
                            .skip_while(|c| c.is_ascii_digit())
                            .copied()
                            .collect::<Vec<u8>>(),
                    ),
                    _ => None,
                };
                x[..4] == y[..4] && kind(&x[4]).is_some() && kind(&x[4]) == kind(&y[4])
            }),
            _ => r == m,
        },
        Cmp::Clock => matches!((r, m), (Reply::Int(_), Reply::Int(_))) || r == m,
        Cmp::Clients => same_clients(r, m),
        Cmp::Scan => match pair(r, m) {
            Some((a, b)) if a.len() == 2 && a[0] == b[0] => {
                let sorted = |x: &Reply| {
                    let mut v = x.as_array().map(<[Reply]>::to_vec).unwrap_or_default();
                    v.sort_by_key(|k| format!("{k:?}"));
                    v
                };
                sorted(&a[1]) == sorted(&b[1])
            }
            _ => r == m,
        },
        Cmp::AckTake => match pair(r, m) {
            Some((a, b)) if a.len() == 3 && a[..2] == b[..2] && a[1] == Reply::Int(0) => {
                close(&a[2], &b[2])
            }
            Some((a, b)) if a.len() >= 7 => same_job(&a, &b, tolerance),
            _ => r == m,
        },
        Cmp::Stats => match pair(r, m) {
            Some((a, b)) if a.len() == 6 => {
                a[..4] == b[..4] && close(&a[4], &b[4]) && close(&a[5], &b[5])
            }
            _ => r == m,
        },
        Cmp::Jobs => match pair(r, m) {
            Some((a, b)) if !a.is_empty() => match (a[0].as_int(), b[0].as_int()) {
                (Some(x), Some(y)) => {
                    same_relative(&relative(&a[1..], x), &relative(&b[1..], y), tolerance)
                }
                _ => false,
            },
            _ => r == m,
        },
        Cmp::Counts => match (count_sums(r), count_sums(m)) {
            (Some(a), Some(b)) => a == b,
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

    fn dur(&mut self, grid: Grid) -> Duration {
        Duration::from_millis(*self.pick(&grid.durations()))
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
    /// A rate limiter's decisions, peeks and resets (its keys poked now and then).
    Rate,
    /// The data commands scripts call, sent directly with odd arguments (negative
    /// indexes, exclusive and infinite bounds, fractional scores, wrong types).
    Data,
    /// A queue's job groups: pushes into groups, fair takes under limits, acks, nacks,
    /// "rate limited" answers, limit changes.
    Groups,
}

const FAMILIES: [Family; 10] = [
    Family::Lease,
    Family::Reentrant,
    Family::Fair,
    Family::ReadWrite,
    Family::Semaphore,
    Family::Queue,
    Family::Plain,
    Family::Data,
    Family::Rate,
    Family::Groups,
];

struct Op {
    command: Command,
    cmp: Cmp,
}

/// One sequence's generator state (it reads Redis' replies).
struct Seq {
    seed: u64,
    attempt: u32,
    /// The grid it runs on.
    grid: Grid,
    rng: Rng,
    family: Family,
    keyspace: Keyspace,
    /// Epochs left.
    left: u32,
    /// Epochs run.
    ran: u32,
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
    fn new(seed: u64, attempt: u32, grid: Grid) -> Seq {
        let mut rng = Rng(seed);
        let family = *rng.pick(&FAMILIES);
        let left = 5 + rng.below(6) as u32;
        let queue_dur = rng.dur(grid);
        let sharded = rng.chance(30);
        Seq {
            queue_dur,
            timed: false,
            seed,
            attempt,
            grid,
            rng,
            family,
            // Now and then release notifications go out on shard channels (SPUBLISH).
            keyspace: Keyspace::new(&format!("d{seed}a{attempt}"))
                .unwrap()
                .with_sharded_pubsub(sharded),
            left,
            ran: 0,
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
        let (ks, t, d) = (
            &self.keyspace,
            Token::new("x").unwrap(),
            self.grid.durations()[0],
        );
        let d = Duration::from_millis(d);
        let notify = match self.family {
            Family::Lease => LockSpec::lease(ks, "r", t, d).unwrap().notify,
            Family::Reentrant => LockSpec::reentrant(ks, "r", "x", t, d).unwrap().notify,
            Family::Fair => LockSpec::fair(ks, "r", t, d, d).unwrap().notify,
            Family::ReadWrite => LockSpec::read(ks, "r", t, d).unwrap().notify,
            Family::Semaphore => SemaphoreKeys::new(ks, "r").unwrap().notify,
            Family::Queue => {
                let keys = QueueKeys::new(ks, "r").unwrap().with_counts(true);
                queue::take(&keys, t, &QueueSettings::default())
                    .unwrap()
                    .notify
            }
            Family::Groups => {
                let keys = QueueKeys::grouped(ks, "r").unwrap();
                queue::take(&keys, t, &QueueSettings::default())
                    .unwrap()
                    .notify
            }
            Family::Plain | Family::Data | Family::Rate => {
                format!("{}:ch", ks.stem("r").unwrap())
            }
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
            for a in cmd.args().skip(2) {
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

    /// The inspection scripts on this sequence's lock `r` (any kind) and its registry of
    /// clients: read it, release by force the holds of `owner`, a client's heartbeat, leave
    /// or the registry read.
    fn inspect_op(&mut self, owner: usize) -> Op {
        let ks = self.keyspace.clone();
        match self.rng.below(7) {
            0..=1 => {
                let op = inspect::lock_info(&ks, "r", Instant::now()).unwrap();
                self.machine_op(op, Cmp::Info)
            }
            2 => {
                // The tokens here are short (`o<n>`): the call is built by hand, with the
                // whole token as its prefix (the machine asks for 8 characters at least).
                let stem = ks.stem("r").unwrap();
                let key = |part: &str| format!("{stem}:{part}");
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
                ]
                .map(key);
                let channels = [
                    "released",
                    "reentrant:released",
                    "fair:wake",
                    "rw:released",
                    "sem:wake",
                ]
                .map(|c| ks.notify_arg(&key(c)));
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                let mut call = ScriptCall::new(&inspect::FORCE_RELEASE)
                    .keys(&refs)
                    .arg(self.token(owner).as_str());
                for c in &channels {
                    call = call.arg(c);
                }
                self.script_op(&call, Cmp::Exact)
            }
            3 => {
                let record = registry::ClientRecord::new("diff", "h", 1, "0", 0).unwrap();
                let keep = Duration::from_millis(self.rng.dur(self.grid).as_millis() as u64);
                let id = format!("c{owner}");
                let op = registry::beat(&ks, &id, keep, &record, Instant::now()).unwrap();
                self.machine_op(op, Cmp::Clock)
            }
            4 => {
                let op = registry::leave(&ks, &format!("c{owner}"), Instant::now());
                self.machine_op(op, Cmp::Exact)
            }
            5 => self.machine_op(registry::read(&ks, Instant::now()), Cmp::Clients),
            _ => {
                // The whole walk in one step: Redis examines every key of its (shared)
                // table when COUNT exceeds them, so both sides answer cursor 0 and this
                // sequence's keys.
                let op = inspect::scan_locks(&ks, "*", 0, 100_000, Instant::now()).unwrap();
                self.machine_op(op, Cmp::Scan)
            }
        }
    }

    fn lock_ops(&mut self, spec: LockSpec, poke_keys: &[String]) -> Op {
        let ttl = self.rng.dur(self.grid).as_millis().to_string();
        let owner = self.rng.below(OWNERS);
        match self.rng.below(22) {
            20..=21 => self.inspect_op(owner),
            0..=6 => {
                let spec = if self.rng.chance(30) {
                    spec.trying_once()
                } else {
                    spec
                };
                self.script_op(&spec.acquire, Cmp::Acquire)
            }
            7..=9 => self.script_op(spec.calls.release(), Cmp::Exact),
            10..=11 => self.script_op(&spec.calls.extend().arg(ttl), Cmp::Exact),
            12..=13 => self.script_op(&spec.calls.inspect(), Cmp::Inspect),
            14 => match spec.undo.clone() {
                Some(u) => self.script_op(&u, Cmp::Exact),
                None => self.script_op(&spec.calls.inspect(), Cmp::Inspect),
            },
            15..=16 => match spec.cancel.clone() {
                Some(c) => self.script_op(&c, Cmp::Exact),
                None => self.script_op(spec.calls.release(), Cmp::Exact),
            },
            17..=18 if self.rng.chance(40) => self.poke(poke_keys),
            _ => self.script_op(&spec.acquire, Cmp::Acquire),
        }
    }

    fn all_keys(spec: &LockSpec, extra: &[String]) -> Vec<String> {
        let mut k = spec.target.keys.to_vec();
        k.extend_from_slice(extra);
        k
    }

    fn next_op(&mut self) -> Op {
        let ks = self.keyspace.clone();
        let stem = ks.stem("r").unwrap();
        let undone = format!("{stem}:undone");
        let owner = self.rng.below(OWNERS);
        let ttl = self.rng.dur(self.grid);
        let wt = self.rng.dur(self.grid);
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
            Family::Rate => self.rate_op(),
            Family::Groups => self.group_op(),
        }
    }

    /// A rate limiter whose interval (600 s) is far longer than any sequence: every
    /// decision depends on the units taken since the key was set, never on when within the
    /// grid's window a command arrived (the times it answers are compared within tolerance).
    fn rate_op(&mut self) -> Op {
        let burst = 1 + self.rng.below(4) as u64;
        let limit = RateLimit::new(1, Duration::from_secs(600), burst).unwrap();
        let spec = RateLimiterSpec::new(&self.keyspace, "r", limit).unwrap();
        let deadline = Instant::now() + Duration::from_secs(1);
        match self.rng.below(10) {
            0..=5 => {
                let cost = self.rng.below(burst as usize + 1) as u64;
                let op = rate::try_acquire(&spec, cost, deadline).unwrap();
                self.machine_op(op, Cmp::Rate)
            }
            6..=7 => self.machine_op(rate::peek(&spec, deadline), Cmp::Rate),
            8 => self.machine_op(rate::reset(&spec, deadline), Cmp::Exact),
            _ => self.poke(&[spec.key().to_owned()]),
        }
    }

    /// A queue's groups: the same shape as [`Seq::queue_op`] on the grouped keys, with
    /// limits (a concurrency of 1 or 2, a rate of 1 per 10 min: decisions that do not
    /// depend on where in the grid's window a command lands).
    fn group_op(&mut self) -> Op {
        let keys = QueueKeys::grouped(&self.keyspace, "r").unwrap();
        let settings = QueueSettings {
            visibility: self.queue_dur,
            max_deliveries: 1 + self.rng.below(3) as u32,
            ..QueueSettings::default()
        };
        let now = Instant::now();
        let pick = self.rng.below(20);
        let timed = matches!(pick, 0..=13);
        if timed && self.timed {
            return self.machine_op(queue::stats(&keys, now), Cmp::Stats);
        }
        self.timed |= timed;
        let group = *self.rng.pick(&["a", "b", "c"]);
        match pick {
            0..=4 => {
                let n = 1 + self.rng.below(3);
                let jobs: Vec<NewJob> = (0..n)
                    .map(|_| NewJob {
                        id: self.fresh("job"),
                        payload: vec![self.rng.next() as u8],
                    })
                    .collect();
                let priority = *self.rng.pick(&[0u8, 0, 5]);
                let delay = if self.rng.chance(20) {
                    self.queue_dur
                } else {
                    Duration::ZERO
                };
                let op = groups::push(&keys, group, &jobs, priority, delay, now).unwrap();
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
            11 if !self.taken.is_empty() => {
                let (id, token) = self.rng.pick(&self.taken).clone();
                let call = queue::nack(&keys, &id, &token, Duration::ZERO, settings.max_deliveries);
                self.script_op(&call, Cmp::Exact)
            }
            12 if !self.taken.is_empty() => {
                let (id, token) = self.rng.pick(&self.taken).clone();
                let call = groups::rate_limited(&keys, &id, &token, self.queue_dur).unwrap();
                self.script_op(&call, Cmp::Exact)
            }
            13 if !self.taken.is_empty() => {
                let (_, token) = self.rng.pick(&self.taken).clone();
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                let undo = spec.undo.expect("a take has an undo");
                self.script_op(&undo, Cmp::Exact)
            }
            14..=16 => {
                let limits = match self.rng.below(4) {
                    0 => None,
                    1 => Some(GroupLimits::new().concurrency(1 + self.rng.below(2) as u32)),
                    2 => Some(GroupLimits::new().max_size(2)),
                    _ => Some(
                        GroupLimits::new().rate(
                            RateLimit::new(
                                1,
                                Duration::from_secs(600),
                                1 + self.rng.below(3) as u64,
                            )
                            .unwrap(),
                        ),
                    ),
                };
                let of = match self.rng.below(3) {
                    0 => LimitsOf::EveryGroup,
                    1 => LimitsOf::Group(group),
                    _ => LimitsOf::Queue,
                };
                let op = groups::set_limits(&keys, of, limits, now).unwrap();
                self.machine_op(op, Cmp::Exact)
            }
            17 => self.machine_op(queue::dead_jobs(&keys, 10, now), Cmp::Dead),
            18 if self.rng.chance(30) => {
                let stem = self.keyspace.stem("r").unwrap();
                let all: Vec<String> = [
                    "ready", "payloads", "inflight", "leases", "ring", "blocked", "full", "limits",
                    "turn", "rate", "r:a", "i:b", "t:c",
                ]
                .iter()
                .map(|p| format!("{stem}:q:g:{p}"))
                .collect();
                self.poke(&all)
            }
            19 if self.rng.chance(50) => {
                let count = 1 + self.rng.below(3) as u32;
                let op = groups::group_page(&keys, groups::GroupCursor::START, count, now).unwrap();
                self.machine_op(op, Cmp::Exact)
            }
            _ => self.machine_op(queue::stats(&keys, now), Cmp::Stats),
        }
    }

    /// Schedules on queue `s` (so that their far-future occurrences never change what
    /// a take on queue `r` answers), with due times in 2096: every decision is the same
    /// whatever either side's clock reads (each answers with its own, not compared).
    fn schedule_op(&mut self) -> Op {
        let keys = QueueKeys::new(&self.keyspace, "s").unwrap();
        let now = Instant::now();
        let name = *self.rng.pick(&["a", "b"]);
        let base: u64 = 4_000_000_000_000;
        let period = *self.rng.pick(&[1000u64, 2000]);
        let payload = *self.rng.pick(&["x", "y"]);
        let every = Schedule::every(Duration::from_millis(period))
            .unwrap()
            .starting_at_ms(base)
            .payload(payload)
            .priority(*self.rng.pick(&[0u8, 7]));
        let due = base + self.rng.below(4) as u64 * period;
        match self.rng.below(12) {
            0..=3 => {
                let from = match self.rng.below(10) {
                    0 => None,
                    1 => Some((0, None)),
                    _ => Some((0, Some(due))),
                };
                let op = schedule::upsert(&keys, name, &every, from, now).unwrap();
                self.machine_op(op, Cmp::Schedule)
            }
            4..=7 => {
                let version = self.rng.pick(&["1", "2", "3"]).to_string();
                let computed = if self.rng.chance(30) {
                    None
                } else {
                    Some((version.as_str(), due, Some(due + period)))
                };
                let op = schedule::advance(&keys, name, due, computed, now).unwrap();
                self.machine_op(op, Cmp::Schedule)
            }
            8 => self.machine_op(schedule::remove(&keys, name, now).unwrap(), Cmp::Exact),
            9 => self.machine_op(schedule::list(&keys, now), Cmp::Hash),
            // The epoch is each side's own clock: a stamp on both, or nil on both.
            10 => self.machine_op(schedule::epoch(&keys, now), Cmp::Stamp),
            _ => {
                let stem = self.keyspace.stem("s").unwrap();
                let all: Vec<String> = ["schedules", "delayed", "payloads", "priorities", "ready"]
                    .iter()
                    .map(|p| format!("{stem}:q:{p}"))
                    .collect();
                self.poke(&all)
            }
        }
    }

    fn queue_op(&mut self) -> Op {
        if self.rng.chance(15) {
            return self.schedule_op();
        }
        let keys = QueueKeys::new(&self.keyspace, "r")
            .unwrap()
            .with_counts(true);
        let settings = QueueSettings {
            visibility: self.queue_dur,
            max_deliveries: 1 + self.rng.below(3) as u32,
            ..QueueSettings::default()
        };
        let now = Instant::now();
        let pick = self.rng.below(23);
        // Takes (0..=8 below), delayed pushes, nacks with a backoff and extensions write
        // times: one per epoch.
        let timed = matches!(pick, 0..=13);
        if timed && self.timed {
            return self.machine_op(queue::stats(&keys, now), Cmp::Stats);
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
                if self.rng.chance(40) {
                    return self.dedup_push(&keys, priority, delay);
                }
                // Now and then jobs with their own timeout (kept with their base).
                let op = if self.rng.chance(25) {
                    let timeout = Duration::from_millis(1 + self.rng.below(500) as u64);
                    queue::push_with_timeout(&keys, &jobs, priority, delay, timeout, now).unwrap()
                } else {
                    queue::push(&keys, &jobs, priority, delay, now).unwrap()
                };
                self.machine_op(op, Cmp::Exact)
            }
            5..=8 if self.rng.chance(30) => {
                // A batch take of 1 to 4 jobs (now and then with a token that took before:
                // its retry).
                let tokens = (0..1 + self.rng.below(4))
                    .map(|_| {
                        let t = if !self.taken.is_empty() && self.rng.chance(15) {
                            self.rng.pick(&self.taken).1.clone()
                        } else {
                            self.fresh("tk")
                        };
                        Token::new(t).unwrap()
                    })
                    .collect();
                let take = batch::TakeBatch::new(&keys, tokens, &settings, now).unwrap();
                self.machine_op(take, Cmp::Batch)
            }
            5..=8 => {
                let token = self.fresh("tk");
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                self.script_op(&spec.acquire, Cmp::Take)
            }
            9..=10 if !self.taken.is_empty() => {
                let (id, token) = self.rng.pick(&self.taken).clone();
                if self.rng.chance(20) {
                    // Up to three acks in one call (a job twice now and then).
                    let mut jobs = vec![(id, token)];
                    for _ in 0..self.rng.below(3) {
                        jobs.push(self.rng.pick(&self.taken).clone());
                    }
                    let pairs: Vec<(&str, &str)> =
                        jobs.iter().map(|(i, t)| (i.as_str(), t.as_str())).collect();
                    self.script_op(&batch::ack_many_call(&keys, &pairs), Cmp::Exact)
                } else if self.rng.chance(50) {
                    self.script_op(&queue::ack_call(&keys, &id, &token), Cmp::Exact)
                } else {
                    // Ack and take the next job, for a fresh token (or, now and then, a
                    // token that took before: its retry).
                    let next = if self.rng.chance(20) {
                        self.rng.pick(&self.taken).1.clone()
                    } else {
                        self.fresh("tk")
                    };
                    let call = queue::ack_and_take_call(&keys, &id, &token, &next, &settings);
                    self.script_op(&call, Cmp::AckTake)
                }
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
                let held = token.clone();
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                let ms = settings.visibility.as_millis().to_string();
                if self.rng.chance(25) {
                    // A cancel (of a job in flight, waiting, or gone), or the check of a
                    // cancelled delivery; the extension of a cancelled one answers -3.
                    if self.rng.chance(60) {
                        let jobs = *self.rng.pick(&[CancelledJobs::Dead, CancelledJobs::Remove]);
                        let op = cancel::cancel(&keys, &id, "why", jobs, now).unwrap();
                        self.machine_op(op, Cmp::Exact)
                    } else {
                        self.machine_op(cancel::cancel_message(&keys, &held, now), Cmp::Exact)
                    }
                } else if self.rng.chance(50) {
                    let call = spec.calls.extend().prepend_arg(&id).arg(ms);
                    self.script_op(&call, Cmp::Exact)
                } else {
                    let call = spec.calls.inspect().prepend_arg(&id);
                    self.script_op(&call, Cmp::Inspect)
                }
            }
            14 if !self.taken.is_empty() => {
                let (_, token) = self.rng.pick(&self.taken).clone();
                let spec = queue::take(&keys, Token::new(token).unwrap(), &settings).unwrap();
                let undo = spec.undo.expect("a take has an undo");
                self.script_op(&undo, Cmp::Exact)
            }
            15 if self.rng.chance(60) => {
                // Pause, resume, read the pause of the queue or a group; or drain.
                let scope = if self.rng.chance(70) {
                    PauseScope::Queue
                } else {
                    PauseScope::Group(self.rng.pick(&["a", "b"]).to_string())
                };
                match self.rng.below(4) {
                    0 => self.machine_op(pause::pause(&keys, &scope, now).unwrap(), Cmp::Exact),
                    1 => self.machine_op(pause::resume(&keys, &scope, now).unwrap(), Cmp::Exact),
                    2 => {
                        let op = pause::paused_at(&keys, &scope, now).unwrap();
                        self.machine_op(op, Cmp::Stamp)
                    }
                    _ if !self.timed => {
                        self.timed = true;
                        let drain =
                            pause::Drain::new(&keys, Duration::ZERO, Duration::from_secs(1), now);
                        self.machine_op(drain, Cmp::Inspect)
                    }
                    _ => self.machine_op(queue::stats(&keys, now), Cmp::Stats),
                }
            }
            15 => self.machine_op(queue::stats(&keys, now), Cmp::Stats),
            16 => self.machine_op(queue::dead_jobs(&keys, 10, now), Cmp::Dead),
            17 => {
                // A dead job if one is known; else any id (requeue and forget say 0).
                let id = if !self.dead.is_empty() && self.rng.chance(70) {
                    self.rng.pick(&self.dead).clone()
                } else if !self.taken.is_empty() {
                    self.rng.pick(&self.taken).0.clone()
                } else {
                    "job0001".to_owned()
                };
                match self.rng.below(6) {
                    0 | 1 => self.machine_op(queue::requeue(&keys, &id, now), Cmp::Exact),
                    2 | 3 => {
                        let op = queue::delete_dead(&keys, &id, now).unwrap();
                        self.machine_op(op, Cmp::Exact)
                    }
                    4 => {
                        // A bulk action on a page, by cause or reason.
                        let filter = match self.rng.below(3) {
                            0 => DeadFilter::new(),
                            1 => DeadFilter::new().cause(DeathCause::LeaseExpired),
                            _ => DeadFilter::new().cause(DeathCause::Failed),
                        };
                        let action = if self.rng.chance(50) {
                            DeadAction::Requeue
                        } else {
                            DeadAction::Delete
                        };
                        let (from, limit) =
                            (self.rng.below(2) as u64, 1 + self.rng.below(3) as u64);
                        // A page's call id, now and then one used before (answered from
                        // its record).
                        let call = format!("p{}", self.rng.below(50));
                        if self.rng.chance(20) {
                            let op = dead::purge_page(&keys, &call, now).unwrap();
                            return self.machine_op(op, Cmp::Exact);
                        }
                        let op = dead::act(&keys, action, &filter, from, 1000, limit, &call, now)
                            .unwrap();
                        self.machine_op(op, Cmp::Exact)
                    }
                    _ => {
                        // The retention: a small count (so that deaths trim), read back, or
                        // the defaults.
                        let set = match self.rng.below(3) {
                            0 => None,
                            1 => Some(DeadRetention::DEFAULT),
                            _ => Some(DeadRetention {
                                max_jobs: Some(1 + self.rng.below(3) as u64),
                                max_age: None,
                            }),
                        };
                        self.machine_op(dead::retention(&keys, set, now).unwrap(), Cmp::Exact)
                    }
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
                    "cancelled",
                    "cancel_messages",
                    "dedup",
                    "dedup_of",
                    "throttle",
                    "throttled",
                    "paused",
                    "reasons",
                    "dead_keep",
                ]
                .iter()
                .map(|p| format!("{stem}:q:{p}"))
                .collect();
                self.poke(&all)
            }
            20 => {
                let state = *self.rng.pick(&queue::inspect::JobStatus::LISTABLE);
                let limit = 1 + self.rng.below(4);
                let op = queue::inspect::list_jobs(&keys, state, None, limit, now).unwrap();
                self.machine_op(op, Cmp::Jobs)
            }
            21 => {
                let id = if !self.taken.is_empty() && self.rng.chance(70) {
                    self.rng.pick(&self.taken).0.clone()
                } else {
                    format!("job{:04}", 1 + self.rng.below(self.counter.max(1) as usize))
                };
                self.machine_op(queue::inspect::job_info(&keys, &id, now), Cmp::Jobs)
            }
            22 => {
                // Half an hour either side of this machine's clock, which both servers' are
                // near (the in-process one starts at it: see `memory_side`).
                let wall = std::time::SystemTime::now();
                let half = Duration::from_secs(1800);
                let op = queue::inspect::counts(&keys, wall - half, wall + half, now).unwrap();
                self.machine_op(op, Cmp::Counts)
            }
            _ => self.machine_op(queue::stats(&keys, now), Cmp::Stats),
        }
    }

    /// A push with a dedup id (one of three, so that pushes meet) in a random mode.
    fn dedup_push(&mut self, keys: &QueueKeys, priority: u8, delay: Duration) -> Op {
        let [d1, ..] = self.grid.durations();
        let mode = match self.rng.below(5) {
            0 => queue::Dedup::UntilDone { dead_blocks: true },
            1 => queue::Dedup::UntilDone { dead_blocks: false },
            2 => queue::Dedup::Throttle(Duration::from_millis(d1)),
            // The queue's one duration for both (see `queue_dur`): a debounced job falls
            // due one duration after a push, as every delayed job does, never in the epoch
            // of another's due time (seed 4525 drew a 160 ms debounce due in the epoch of a
            // job delayed 400 ms, and the two servers' milliseconds ordered them apart).
            3 => queue::Dedup::Debounce {
                delay: self.queue_dur,
                max_wait: self.queue_dur,
            },
            _ => queue::Dedup::KeepLatest,
        };
        let dedup_id = format!("d{}", self.rng.below(3));
        let job = Token::new(self.fresh("dj")).unwrap();
        let payload = vec![self.rng.next() as u8];
        let op = queue::push_dedup(
            keys,
            &dedup_id,
            &job,
            payload,
            mode,
            priority,
            delay,
            Instant::now(),
        )
        .unwrap();
        self.machine_op(op, Cmp::Exact)
    }

    /// What the legacy lock, RedLock and the driver send as plain commands.
    fn plain_op(&mut self) -> Op {
        let stem = self.keyspace.stem("r").unwrap();
        let key = format!("{stem}:{}", self.rng.pick(&["lock", "lock", "other"]));
        let ttl = self.rng.dur(self.grid).as_millis().to_string();
        let owner = format!("o{}", self.rng.below(OWNERS));
        let secs = self.grid.secs().to_string();
        match self.rng.below(22) {
            0..=2 => Self::plain(&["SET", &key, &owner, "NX", "PX", &ttl], Cmp::Exact),
            17 => Self::plain(&["SET", &key, &owner, "XX", "GET", "EX", &secs], Cmp::Exact),
            18 => Self::plain(&["SET", &key, &owner, "KEEPTTL"], Cmp::Exact),
            19 => {
                // Not GT or LT: they compare two expiry times, which may fall in one
                // epoch, where only Redis' milliseconds would decide.
                let opt = *self.rng.pick(&["NX", "XX"]);
                Self::plain(&["PEXPIRE", &key, &ttl, opt], Cmp::Exact)
            }
            20 => Self::plain(&["TTL", &key], Cmp::Secs),
            21 => Self::plain(&["PERSIST", &key], Cmp::Exact),
            3 => Self::plain(&["GET", &key], Cmp::Exact),
            4 => Self::plain(&["DEL", &key], Cmp::Exact),
            5 => Self::plain(&["SETNX", &key, &owner], Cmp::Exact),
            6 => Self::plain(&["GETSET", &key, &owner], Cmp::Exact),
            7 => Self::plain(&["PEXPIRE", &key, &ttl], Cmp::Exact),
            8 => Self::plain(&["EXPIRE", &key, &secs], Cmp::Exact),
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
            && let [Reply::Int(1), _, Reply::Bulk(id), _, ..] = items
        {
            let token = String::from_utf8_lossy(&op.command.args()[18]).into_owned();
            self.taken
                .push((String::from_utf8_lossy(id).into_owned(), token));
        }
        if is(&groups::GROUP_TAKE)
            && let [Reply::Int(1), _, Reply::Bulk(id), ..] = items
        {
            let token = String::from_utf8_lossy(&op.command.args()[23]).into_owned();
            self.taken
                .push((String::from_utf8_lossy(id).into_owned(), token));
        }
        if is(&queue::scripts::ACK_TAKE)
            && let [_, Reply::Int(1..), Reply::Bulk(id), _, ..] = items
        {
            // EVALSHA, sha, 18, the 18 keys, id, token, keep, then the next token.
            let token = String::from_utf8_lossy(&op.command.args()[24]).into_owned();
            self.taken
                .push((String::from_utf8_lossy(id).into_owned(), token));
        }
        if is(&queue::scripts::TAKE_BATCH) {
            for job in items.iter().skip(1) {
                if let Some([Reply::Int(i), _, Reply::Bulk(id), ..]) = job.as_array()
                    && let Some(token) = usize::try_from(*i)
                        .ok()
                        .and_then(|i| op.command.args().nth(19 + i))
                {
                    self.taken.push((
                        String::from_utf8_lossy(id).into_owned(),
                        String::from_utf8_lossy(token).into_owned(),
                    ));
                }
            }
        }
        if is(&queue::scripts::DEAD) {
            // (id, deliveries, payload, reason, death record) per dead job.
            for chunk in items.chunks(5) {
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
        /// The grid the sequence was generated on.
        grid: Grid,
        /// How long after the epoch's start Redis' last reply came (for the log).
        arrival: Duration,
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
    /// The grid's scale the sequence ran on (to replay it on the same grid).
    scale: u64,
    text: String,
}

struct MemSeq {
    grid: Grid,
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
                        scale: s.grid.scale,
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
                grid,
                arrival,
                ops,
                channels,
            } => {
                let s = seqs.entry(seq).or_insert_with(|| {
                    // Its clock starts at this machine's (a whole second), as Redis' reads:
                    // the per-minute counts are kept by the minute of the server's clock.
                    let wall = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .expect("after 1970");
                    let clock = redlease::memory::MemoryClock::starting_at(Duration::from_secs(
                        wall.as_secs(),
                    ));
                    let server = MemoryServer::with_clock(clock);
                    let subscriber = server.subscriber();
                    for (c, sharded) in &channels {
                        if *sharded {
                            subscriber.ssubscribe(&[c]);
                        } else {
                            subscriber.subscribe(&[c]);
                        }
                    }
                    MemSeq {
                        grid,
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
                let at = Duration::from_millis((epoch - s.start_epoch) * grid.q());
                clock.advance(at - clock.elapsed());
                for (command, cmp, redis) in ops {
                    let mem = s.server.execute(&command).expect("no fault injected");
                    tally.count(&command, &mem);
                    // What TTL rounded, read at the same instant (PTTL changes nothing).
                    let exact = (cmp == Cmp::Secs).then(|| {
                        let key = &command.args()[1];
                        let pttl = Command::new("PTTL").arg(key);
                        s.server.execute(&pttl).expect("no fault injected")
                    });
                    s.log.push(format!(
                        "  t+{:>5} ms (redis' replies by +{} ms) {command:?}\n      redis:  {}\n      memory: {}{}",
                        at.as_millis(),
                        arrival.as_millis(),
                        redis.describe(),
                        mem.describe(),
                        exact
                            .as_ref()
                            .map(|e| format!(" (PTTL {})", e.describe()))
                            .unwrap_or_default()
                    ));
                    if !same(cmp, &redis, &mem, exact.as_ref(), &mut s.fences, grid) {
                        s.failed = true;
                        let tail = s.log.len().saturating_sub(12);
                        out.send(Mismatch {
                            seed: seq.0,
                            scale: grid.scale,
                            text: format!(
                                "seed {} ({cmp:?} comparison, epochs of {} ms, window {} ms, tolerance {} ms): replies differ; the last commands:\n{}",
                                seq.0,
                                grid.q(),
                                grid.window().as_millis(),
                                grid.tolerance(),
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

/// What one run does.
struct Settings {
    /// The test (for the replay line).
    test: &'static str,
    seeds: Vec<u64>,
    /// One sequence asked by `MEMORY_DIFF_SEED`: the grid stays where it starts.
    replay: bool,
    /// The grid it starts on.
    grid: Grid,
    /// Which pipelines are held back until late in their window.
    hold: Hold,
}

/// Which pipelines are held back until 4/5 of their window (sent at once otherwise), so
/// that sequences see the widest spread of arrival times the grid accepts.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// None.
    Never,
    /// A fixed pseudo-random half of the epochs.
    Half,
    /// From the `n`-th epoch of the oldest running sequence on (counted from 0; for a run
    /// of one sequence: a fixed place in it, also when it runs again).
    From(u32),
}

impl Settings {
    /// The run a test asks for, unless the environment says otherwise
    /// (`MEMORY_DIFF_SEED`, `MEMORY_DIFF_SEQUENCES`, `MEMORY_DIFF_FIRST`,
    /// `MEMORY_DIFF_SCALE`).
    fn new(test: &'static str, first: u64, sequences: u64, scale: u64, hold: Hold) -> Self {
        let (seeds, replay) = match env_u64("MEMORY_DIFF_SEED") {
            Some(seed) => (vec![seed], true),
            None => {
                let n = env_u64("MEMORY_DIFF_SEQUENCES").unwrap_or(sequences);
                let first = env_u64("MEMORY_DIFF_FIRST").unwrap_or(first);
                ((first..first + n).collect(), false)
            }
        };
        let scale = env_u64("MEMORY_DIFF_SCALE").unwrap_or(scale);
        assert!(
            scale.is_power_of_two() && scale <= MAX_SCALE,
            "MEMORY_DIFF_SCALE must be 1, 2, 4, 8 or 16, got {scale}"
        );
        Settings {
            test,
            seeds,
            replay,
            grid: Grid { scale },
            hold,
        }
    }
}

impl Hold {
    /// Whether the pipeline of `epoch` is held back, `ran` epochs into the oldest running
    /// sequence.
    fn holds(self, epoch: u64, ran: u32) -> bool {
        match self {
            Hold::Never => false,
            Hold::Half => Rng(epoch ^ 0x5eed).next() % 2 == 1,
            Hold::From(n) => ran >= n,
        }
    }
}

/// One run at a time: the tests of this file share the machine's timing.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn memory_server_replies_as_redis_does() {
    run(Settings::new(
        "memory_server_replies_as_redis_does",
        1,
        10_000,
        1,
        Hold::Never,
    ));
}

/// The grid's promise, tested at its edges: replies agree wherever in its window each
/// pipeline arrives. Half of the pipelines (on a fixed pattern) are held back until late in
/// their window, the others go at once, so sequences see the widest spread of arrival
/// times between their epochs; on larger grids too (their windows are wider), where the
/// commands counted in seconds (`EXPIRE`, `EX`, `TTL`) meet the grid differently.
#[test]
fn memory_server_replies_as_redis_does_wherever_in_its_window_a_pipeline_arrives() {
    for scale in [1, 2, 4] {
        run(Settings::new(
            "memory_server_replies_as_redis_does_wherever_in_its_window_a_pipeline_arrives",
            100_001,
            480,
            scale,
            Hold::Half,
        ));
    }
}

/// The flake seen once under load ("1 of 10000 sequences differ (seed 4319)"), made
/// certain: seed 4319 sets `EXPIRE lock 1` at its 4th epoch and reads `TTL lock` at its
/// 8th. Sent at once, then held back to 4/5 of the window: on 120 ms epochs the key had
/// 520 ms left in memory and 496 ms on Redis (`TTL` 1 and 0, rounded at 500 ms); on
/// 240 ms epochs a 1 s expiry fell 40 ms past the epoch start, inside the 60 ms window
/// (`TTL` 0 in memory, the key already gone on Redis: -2).
#[test]
fn memory_server_replies_as_redis_does_to_a_ttl_read_late_on_larger_grids() {
    for scale in [2, 4] {
        run(Settings {
            test: "memory_server_replies_as_redis_does_to_a_ttl_read_late_on_larger_grids",
            seeds: vec![4319],
            replay: false,
            grid: Grid { scale },
            hold: Hold::From(5),
        });
    }
}

fn run(settings: Settings) {
    let _one = ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Settings {
        test,
        seeds,
        replay,
        mut grid,
        hold,
    } = settings;
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
    // How many times each sequence was spoiled on the largest grid (or on the grid of a
    // replay, which does not grow): ten times there, it is given up.
    let mut spoiled_on_last_grid: HashMap<u64, u32> = HashMap::new();
    let mut t0 = Instant::now() + Duration::from_millis(20);
    let mut epoch = 0u64;
    // Whether each of the last epochs was late, and whether the scale is to grow once the
    // running sequences are over.
    let mut recent: std::collections::VecDeque<bool> = Default::default();
    let mut rescaling = false;
    while !queue.is_empty() || !active.is_empty() {
        if rescaling && active.is_empty() {
            let late = recent.iter().filter(|l| **l).count();
            grid.scale *= 2;
            println!(
                "memory_diff: {late} of the last {} pipelines were late: epochs of {} ms from now on",
                recent.len(),
                grid.q()
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
            let seq = Seq::new(seed, attempt, grid);
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
        let q = grid.q();
        let due = |e: u64| t0 + Duration::from_millis(e * q);
        while due(epoch) < now + Duration::from_millis(1) {
            epoch += 1;
        }
        let ran = active.iter().map(|(s, _)| s.ran).max().unwrap_or(0);
        let send_at = if hold.holds(epoch, ran) {
            due(epoch) + grid.window() * 4 / 5
        } else {
            due(epoch)
        };
        std::thread::sleep(send_at.saturating_duration_since(Instant::now()));
        let replies = conn.pipeline(&commands);
        let arrival = Instant::now() - due(epoch);
        let late = arrival > grid.window();
        epochs += 1;
        redis_commands += commands.len() as u64;
        if late {
            spoiled_epochs += 1;
        }
        recent.push_back(late);
        if recent.len() > 40 {
            recent.pop_front();
        }
        if recent.iter().filter(|l| **l).count() > LATE_PER_40 && grid.scale < MAX_SCALE && !replay
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
                // Run it again later (the machine may stay busy for a while), on a larger
                // grid if the machine stays busy: given up only when the grid cannot grow.
                let spoiled = spoiled_on_last_grid.entry(seq.seed).or_default();
                if replay || grid.scale == MAX_SCALE {
                    *spoiled += 1;
                }
                if *spoiled < 10 {
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
                    grid,
                    arrival,
                    ops,
                    channels: seq.channels.clone(),
                })
                .unwrap();
            seq.left -= 1;
            seq.ran += 1;
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
        "memory_diff: {done} sequences ({total} asked, {} given up after 10 late pipelines on the largest grid), \
         {redis_commands} commands on redis-server, {memory_commands} compared, {} pub/sub \
         messages compared, {epochs} epochs \
         ({spoiled_epochs} spoiled by a late pipeline and run again), epochs of {} ms at the end, {:.1} s",
        gave_up.len(),
        tally.messages,
        grid.q(),
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
            "{} of {done} sequences differ (seeds {seeds:?}).\n{}\nreplay: MEMORY_DIFF_SEED={} MEMORY_DIFF_SCALE={} cargo test --test memory_diff {test} -- --exact --nocapture",
            failures.len(),
            first.text,
            first.seed,
            first.scale
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

/// The plain commands' whole-second expiries are decided alike at every time scale: they
/// fall more than a window from every epoch start. (A fixed 1 s fell 40 ms past one at
/// epochs of 240 ms, inside their 60 ms window: seed 8882's TTL differed on a loaded run.)
/// From 120 ms epochs on they also fall within a sequence's reach (at most 9 epochs after
/// they are set), so that such keys are seen to expire on both sides.
#[test]
fn whole_second_expiries_stay_a_window_from_every_epoch_start_at_every_scale() {
    let mut scale = 1;
    while scale <= MAX_SCALE {
        let grid = Grid { scale };
        let (q, window) = (grid.q(), grid.window().as_millis() as u64);
        let ms = 1000 * grid.secs();
        let past = ms % q;
        assert!(
            past > window && q - past > window,
            "scale {scale}: {ms} ms falls {past} ms past an epoch start ({q} ms epochs, {window} ms window)"
        );
        assert!(
            scale == 1 || ms < 9 * q,
            "scale {scale}: {ms} ms outlasts every sequence ({q} ms epochs)"
        );
        scale *= 2;
    }
}
