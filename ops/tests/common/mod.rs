//! What the ops tests share: a real redis-server with jobs, dead letters, a lock and a
//! semaphore in it; running the `redlease` binary; a small HTTP client for `serve`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use redlease::{Client, lock::LockGuard, queue::Retry};
use redlease_suite::RedisServer;
use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_redlease");

/// A server with: queue `emails` (1 ready, 2 dead: "smtp timeout" and "bad address"),
/// lock `billing` held, semaphore `api` with one holder.
pub struct World {
    pub server: RedisServer,
    pub client: Client,
    pub lock: LockGuard,
    pub permit: LockGuard,
}

pub fn world() -> World {
    let server = RedisServer::start().expect("redis-server");
    let client = Client::open(server.url().as_str()).expect("client");
    // A queue that counts its events (the per-minute rates the tool shows).
    let q = client.queue("emails").expect("queue").counting(true);
    for (i, reason) in ["smtp timeout", "bad address"].iter().enumerate() {
        q.push_unique(&format!("dead-{i}"), format!("to: user{i}@example.com"))
            .expect("push");
        let job = q
            .take(Duration::from_secs(5))
            .expect("take")
            .expect("a job");
        job.fail(reason, Retry::Never).expect("fail");
    }
    q.push_unique("ready-0", "hello").expect("push");
    let lock = client
        .lock("billing")
        .ttl(Duration::from_secs(60))
        .try_acquire()
        .expect("lock")
        .expect("free");
    let permit = client
        .semaphore("api", 3)
        .ttl(Duration::from_secs(60))
        .try_acquire()
        .expect("permit")
        .expect("free");
    World {
        server,
        client,
        lock,
        permit,
    }
}

/// Runs `redlease --url URL args...`.
pub fn run(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("run redlease")
}

/// `run`, expecting success and JSON on stdout.
pub fn run_json(url: &str, args: &[&str]) -> Value {
    let out = run(url, args);
    assert!(
        out.status.success(),
        "redlease {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// A running `redlease serve`, stopped when dropped.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redlease --url URL serve --listen 127.0.0.1:0 extra...` and waits for its address.
pub fn serve(url: &str, extra: &[&str]) -> Serve {
    let mut child = Command::new(BIN)
        .arg("--url")
        .arg(url)
        .args(["serve", "--listen", "127.0.0.1:0", "--interval", "0.2"])
        .args(extra)
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let serve = Serve { child, addr };
    // Until the first refresh is in.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = http(&serve.addr, "GET", "/api/overview", &[]);
        if status == 200 && body.contains("\"queues\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not refresh: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    serve
}

/// One HTTP/1.0 request; (status, body).
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut req = format!("{method} {path} HTTP/1.0\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("Host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Content-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Raw commands for the checks "in Redis".
pub fn redis_conn(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("url")
        .get_connection()
        .expect("connect")
}

/// [`world`] and every other kind of primitive beside it: a reentrant, a fair, a read, a
/// write, an unfenced, a legacy lock and a RedLock (on this one server); a rate limiter; queue `partner` with grouped jobs (group `acme` ready, group
/// `globex` paused, one dead grouped job); queue `mail` paused with a job in it; queue
/// `reports` with a schedule; queue `work` with a ready, a delayed and an in-flight job
/// (held by `in_hand`).
pub struct FullWorld {
    pub world: World,
    pub guards: Vec<LockGuard>,
    pub in_hand: redlease::queue::Job,
    /// A legacy lock `old-cron` held.
    pub legacy: redlease::lock::LegacyGuard,
    /// A RedLock `quorum` held on this one server.
    pub redlock: redlease::lock::RedLockGuard,
}

pub fn full_world() -> FullWorld {
    use redlease::{queue::PushOptions, queue::schedule::Schedule};
    let world = world();
    let c = &world.client;
    let ttl = Duration::from_secs(60);
    let guards = vec![
        c.reentrant_lock("config")
            .ttl(ttl)
            .try_acquire()
            .expect("reentrant")
            .expect("free"),
        c.fair_lock("fifo")
            .ttl(ttl)
            .try_acquire()
            .expect("fair")
            .expect("free"),
        c.read_lock("catalog")
            .ttl(ttl)
            .try_acquire()
            .expect("read")
            .expect("free"),
        c.write_lock("ledger")
            .ttl(ttl)
            .try_acquire()
            .expect("write")
            .expect("free"),
        c.lock("unfenced")
            .ttl(ttl)
            .fenced(false)
            .try_acquire()
            .expect("unfenced")
            .expect("free"),
    ];
    let legacy = c
        .legacy_lock("old-cron")
        .ttl(ttl)
        .try_acquire()
        .expect("legacy")
        .expect("free");
    let redlock = redlease::lock::RedLock::builder(&[world.server.url()])
        .build()
        .expect("redlock")
        .lock("quorum")
        .ttl(ttl)
        .try_acquire()
        .expect("redlock")
        .expect("free");
    let limiter = c
        .rate_limiter("outbound")
        .rate(10, Duration::from_secs(1))
        .build()
        .expect("limiter");
    assert!(limiter.try_acquire(1).expect("rate").allowed);

    let partner = c.queue("partner").expect("queue").counting(true);
    partner
        .push_with("doomed", PushOptions::new().group("acme"))
        .expect("push");
    let groups = partner.groups().expect("groups");
    let job = groups
        .take(Duration::from_secs(5))
        .expect("take")
        .expect("a grouped job");
    job.fail("partner down", Retry::Never).expect("fail");
    for i in 0..3 {
        partner
            .push_with(format!("sync {i}"), PushOptions::new().group("acme"))
            .expect("push");
        partner
            .push_with(format!("sync {i}"), PushOptions::new().group("globex"))
            .expect("push");
    }
    partner.pause_group("globex").expect("pause group");

    let mail = c.queue("mail").expect("queue");
    mail.push("to: ops@example.com").expect("push");
    mail.pause().expect("pause");

    let reports = c.queue("reports").expect("queue");
    reports
        .schedule(
            "every-minute",
            &Schedule::every(Duration::from_secs(60))
                .expect("schedule")
                .payload("sum"),
        )
        .expect("upsert");

    let work = c.queue("work").expect("queue");
    work.push("first").expect("push");
    let in_hand = work
        .take(Duration::from_secs(5))
        .expect("take")
        .expect("a job");
    work.push("second").expect("push");
    work.push_with("later", PushOptions::new().delay(Duration::from_secs(3600)))
        .expect("push");
    FullWorld {
        world,
        guards,
        in_hand,
        legacy,
        redlock,
    }
}
