//! Helpers shared by the integration tests. They panic on failure, as test code does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::RedisServer;

/// A throwaway redis-server; fails the test loudly if none can be started (the message says
/// how to install redis-server).
pub fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

/// A plain `redis` connection to `server`, for setting up and inspecting keys.
pub fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

/// A redlease client of `server` with short timeouts: 300 ms to connect, `io_timeout` per
/// reply, 1 s per release/extend/inspect.
pub fn client(server: &RedisServer, io_timeout: Duration) -> redlease::Client {
    redlease::Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(io_timeout)
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// Polls `cond` every 2 ms until it holds; fails the test after `limit`. For waiting on a
/// condition (a key expiring, a waiter joining a line), never as a blind sleep.
pub fn await_condition(limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every key with its type and full content: two snapshots are equal when nothing was
/// written in between.
pub fn snapshot(conn: &mut redis::Connection) -> BTreeMap<String, String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    keys.into_iter()
        .map(|k| {
            let t: String = redis::cmd("TYPE").arg(&k).query(conn).unwrap();
            let read = |c: &mut redis::Cmd, conn: &mut redis::Connection| {
                format!("{:?}", c.query::<redis::Value>(conn).unwrap())
            };
            let v = match t.as_str() {
                "string" => read(redis::cmd("GET").arg(&k), conn),
                "hash" => {
                    let m: BTreeMap<Vec<u8>, Vec<u8>> =
                        redis::cmd("HGETALL").arg(&k).query(conn).unwrap();
                    let m: Vec<_> = m
                        .iter()
                        .map(|(f, v)| (String::from_utf8_lossy(f), String::from_utf8_lossy(v)))
                        .collect();
                    format!("{m:?}")
                }
                "zset" => read(
                    redis::cmd("ZRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES"),
                    conn,
                ),
                "list" => read(redis::cmd("LRANGE").arg(&k).arg(0).arg(-1), conn),
                other => other.to_owned(),
            };
            (k, format!("{t}: {v}"))
        })
        .collect()
}

/// How many clients are subscribed to `channel` (`PUBSUB NUMSUB`).
pub fn pubsub_subscribers(conn: &mut redis::Connection, channel: &str) -> i64 {
    let n: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(conn)
        .unwrap();
    match n.get(1) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("{other:?}"),
    }
}

/// A small xorshift generator: the tests need no crate for a few random choices. The state
/// must not be zero (`Rng(seed | 1)`).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator seeded from the clock, and its seed (print it to replay a failure).
    pub fn seeded() -> (Self, u64) {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        (Rng(seed), seed)
    }

    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// The `p` quantile (0.0 to 1.0) of `sorted`, which must be sorted and not empty.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// A MONITOR connection: the commands clients send (not those their scripts run), as
/// they arrive.
#[derive(Debug)]
pub struct Monitor {
    reader: BufReader<TcpStream>,
    partial: String,
}

impl Monitor {
    /// Opens a connection to `server` and sends `MONITOR` on it.
    pub fn start(server: &RedisServer) -> Self {
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        s.write_all(b"MONITOR\r\n").unwrap();
        let mut m = Monitor {
            reader: BufReader::new(s),
            partial: String::new(),
        };
        let ok = m.next_line(Duration::from_secs(2));
        assert_eq!(ok.as_deref(), Some("+OK"));
        m
    }

    /// The next line the server sends within `limit`.
    pub fn next_line(&mut self, limit: Duration) -> Option<String> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.reader.get_ref().set_read_timeout(Some(left)).unwrap();
            match self.reader.read_line(&mut self.partial) {
                Ok(0) => panic!("the MONITOR connection closed"),
                Ok(_) if self.partial.ends_with('\n') => {
                    let line = std::mem::take(&mut self.partial);
                    return Some(line.trim_end().to_owned());
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// The next command a client sends within `limit`.
    pub fn next_command(&mut self, limit: Duration) -> Option<String> {
        let end = Instant::now() + limit;
        loop {
            let line = self.next_line(end.saturating_duration_since(Instant::now()))?;
            if !line.contains(" lua]") {
                return Some(line);
            }
        }
    }

    /// Every command clients send during `window`.
    pub fn commands_during(&mut self, window: Duration) -> Vec<String> {
        let end = Instant::now() + window;
        std::iter::from_fn(|| self.next_command(end.saturating_duration_since(Instant::now())))
            .collect()
    }

    /// Waits for the next command a client sends that contains `needle` (a command name, a
    /// script's SHA-1); fails the test after `limit`.
    pub fn await_command(&mut self, needle: &str, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let c = self
                .next_command(end.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|| panic!("no command containing {needle:?} within {limit:?}"));
            if c.contains(needle) {
                return;
            }
        }
    }
}

/// Whether the server is stuck (does not answer a PING within 20 ms).
pub fn server_is_busy(server: &RedisServer) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 7];
    s.read(&mut buf).is_err()
}

/// Fills zset `key` with `n` members `m<i>` whose time has passed (score 1 ms), and hash
/// `hash` with a field for each.
pub fn fill_ended(conn: &mut redis::Connection, key: &str, hash: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(key);
        let mut hset = redis::cmd("HSET");
        hset.arg(hash);
        for i in chunk {
            zadd.arg(1).arg(format!("m{i}"));
            hset.arg(format!("m{i}")).arg("x");
        }
        pipe.add_command(zadd).add_command(hset);
        let () = pipe
            .query(conn)
            .expect("testkit: filling ended entries failed");
    }
}

/// Puts `n` dead jobs `<prefix><i>` on queue `name`'s dead list, the last `tail` of them
/// dead by lease expiry, the others failed.
pub fn fill_dead(conn: &mut redis::Connection, name: &str, prefix: &str, n: usize, tail: usize) {
    let dead = format!("redlease:{{{name}}}:q:dead");
    let payloads = format!("redlease:{{{name}}}:q:payloads");
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let mut list = redis::cmd("RPUSH");
        list.arg(&dead);
        let mut hash = redis::cmd("HSET");
        hash.arg(&payloads);
        for &i in chunk {
            let kind = if i >= n - tail { "expired" } else { "failed" };
            let id = format!("{prefix}{i}");
            let mut record = id.clone().into_bytes();
            record.push(0xfe);
            list.arg(&id);
            hash.arg(&id)
                .arg("p")
                .arg(record)
                .arg(format!("1000 {kind}"));
        }
        let () = redis::pipe()
            .add_command(list)
            .add_command(hash)
            .query(conn)
            .expect("testkit: filling the dead list failed");
    }
}
