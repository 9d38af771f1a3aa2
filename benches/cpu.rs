//! Work per operation, for `scripts/cpu.sh` (issue 18): one scenario's cycles on one thread,
//! against a server the caller started. Not a throughput benchmark (`harness = false`; it
//! prints one line and exits).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ CPU_SCENARIO=lock CPU_CYCLES=2000 target/release/deps/cpu-<hash>
//! ```
//!
//! `CPU_SCENARIO` is one of
//! - `lock`: `try_acquire` + `release` of one lease lock (default client, default ttl);
//! - `lock_raw`: `SET key token NX PX 30000` + `EVAL <compare-and-delete>` on one plain
//!   connection (the baseline of `lock` and `semaphore`, as issue 18 defines it;
//!   `benches/redis.rs` sends the same script as `EVALSHA`);
//! - `unfenced`: `lock` with `fenced(false)`: the acquisition is a bare `SET NX PX`, the
//!   release as `lock`'s (baseline `lock_raw`);
//! - `lock_raw_fenced`: the raw fenced cycle, `EVALSHA` of a hand-written script doing `SET
//!   NX PX` and the counter's `INCR` ([`RAW_FENCED_ACQUIRE_SCRIPT`]), then the
//!   compare-and-delete `EVALSHA`, on one plain connection (issue 28: what the fence rule
//!   costs at the least; `scripts/cpu.sh` compares `lock` with it as `lock_vs_fenced`);
//! - `contended`: issue 31's contended lock: 8 threads (`CPU_THREADS`) looping on one lock
//!   (`acquire`, `GET` + `SET` of a counter on the thread's own plain connection, `release`);
//!   one cycle is 8 critical sections, whoever ran them (divide by 8: per critical section);
//! - `contended_raw`: the same with the raw polling lock (`SET NX PX` every 10 ms while
//!   taken, the compare-and-delete `EVALSHA`);
//! - `semaphore`: `try_acquire` + `release` of one permit of a 2-permit semaphore;
//! - `queue`: `push` + `try_take` + `ack` of one job (three round trips);
//! - `queue_counted`: the same on a queue that counts its events (`Queue::counting`);
//! - `queue_worker`: a busy worker's steady state, `push` of one job + `ack_and_take` of the
//!   job held (the ack that hands over the job just pushed): two round trips, as the
//!   baseline's;
//! - `queue_worker_counted`: the same on a queue that counts its events;
//! - `queue_raw`: `LPUSH` + `RPOP` of one payload (the baseline of `queue`);
//! - `redlock`: `try_acquire` + `release` of one RedLock over `CPU_REDLOCK_NODES` (default
//!   5) redis-servers this program starts (the `redlock5` bench's cycle; its baseline is
//!   `lock_raw`, one single-node cycle; the server at `REDIS_URL` only serves the
//!   commandstats);
//! - `redlock_raw`: the raw RedLock cycle over as many nodes, no library in between: `SET key
//!   token NX PX 10000` written to every node before any reply is read, then the
//!   compare-and-delete `EVAL` the same way, one plain connection per node (the ceiling of
//!   `redlock`, as the `redlock*` benches' `raw<n>_ratio`);
//! - `redlock_busy`: one failed `try_acquire` of a RedLock whose key another holder has on
//!   every node (a plain `SET` before the run): the contended attempt;
//! - `rate`: `try_acquire(1)` of a rate limiter that always allows it (1,000,000/s, burst
//!   1,000,000): one decision, one round trip;
//! - `rate_raw`: its baseline, a hand-written GCRA script ([`RAW_GCRA_SCRIPT`], the same as
//!   `benches/scenarios/rate.rs`'s) sent as `EVALSHA` on one plain connection;
//! - `redlock_raw_busy`: its raw floor, `SET key token NX PX 10000` written to every node
//!   before any reply is read, every reply nil, nothing else.
//!
//! The run: the client and connections are set up, `CPU_WARMUP` cycles (default 200) run
//! untimed, then `CONFIG RESETSTAT`, then `CPU_CYCLES` cycles (default 1000), then the
//! server's `INFO commandstats` and `INFO cpu` are read. It prints
//!
//! ```text
//! cycles <scenario> n=<cycles> server_usec=<n> server_cpu_usec=<n> [<command>=<calls>:<usec> ...]
//! ```
//!
//! `server_usec` is the time the server spent executing the commands the client sent, from
//! `INFO commandstats`: `EVAL`/`EVALSHA` (whose time includes the commands their script
//! calls, which commandstats also lists on their own lines: those are not added again) and
//! the plain commands of the scenario (`SET` for `lock_raw` and `unfenced`, `LPUSH`/`RPOP` for `queue_raw`,
//! the native compare-and-delete commands `DELIFEQ`/`DELEX` that no script calls).
//! `server_cpu_usec` is the server main thread's CPU time over the same cycles (`INFO cpu`:
//! user + system; parsing, replies and pub/sub included; coarser). The RedLock scenarios add
//! `node_calls=<n>`: the commands all their nodes ran over the measured cycles (their
//! `INFO commandstats` calls, reset with the `REDIS_URL` server's; a script's inner calls
//! counted too), and `node_commands=<command>:<calls>,...`.
//!
//! Instructions come from running the whole process under `valgrind --tool=callgrind` twice
//! with different `CPU_CYCLES`: the difference over the difference in cycles is the cost of
//! one cycle, set-up and warm-up cancelled (the script does this).

use std::hint::black_box;

#[path = "common/baselines.rs"]
mod baselines;
use baselines::*;

/// The payload of every job (and of the raw queue's element), as in `benches/redis.rs`.
const JOB_PAYLOAD: &[u8] = b"bench-job-payload-0123456789abcd";

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("cpu: {name}={v} is not a number")),
        Err(_) => default,
    }
}

fn main() {
    let url = std::env::var("REDIS_URL").expect("cpu: set REDIS_URL (scripts/cpu.sh does)");
    let scenario = std::env::var("CPU_SCENARIO").expect("cpu: set CPU_SCENARIO");
    let warmup = env_number("CPU_WARMUP", 200);
    let cycles = env_number("CPU_CYCLES", 1000);
    let mut admin = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("cpu: cannot connect");
    let name = format!("cpu-{scenario}-{}", std::process::id());
    // Servers started for a scenario (RedLock's nodes), stopped when `main` ends.
    let mut nodes_kept: Vec<redlease_suite::RedisServer> = Vec::new();
    // Connections to those nodes, for their commandstats.
    let mut node_admins: Vec<redis::Connection> = Vec::new();
    let mut cycle: Box<dyn FnMut()> = match scenario.as_str() {
        "lock" | "unfenced" | "semaphore" => {
            let client = redlease::Client::builder(&url)
                .build()
                .expect("cpu: cannot build the client");
            let client: &'static redlease::Client = Box::leak(Box::new(client));
            let lock = match scenario.as_str() {
                "lock" => client.lock(&name),
                "unfenced" => client.lock(&name).fenced(false),
                _ => client.semaphore(&name, 2),
            };
            Box::new(move || {
                let guard = lock
                    .try_acquire()
                    .expect("cpu: try_acquire failed")
                    .expect("cpu: the lock was busy");
                black_box(guard.fence());
                guard.release().expect("cpu: release failed");
            })
        }
        "redlock" => {
            let (servers, urls) = redlock_nodes();
            node_admins = node_connections(&urls);
            let red = redlease::lock::RedLock::builder(&urls)
                .node_timeout(std::time::Duration::from_millis(200))
                .build()
                .expect("cpu: cannot build the RedLock client");
            // The servers stop at the end of `main`.
            nodes_kept = servers;
            let red: &'static redlease::lock::RedLock = Box::leak(Box::new(red));
            let lock = red.lock(&name).ttl(std::time::Duration::from_secs(10));
            Box::new(move || {
                let guard = lock
                    .try_acquire()
                    .expect("cpu: RedLock try_acquire failed")
                    .expect("cpu: the RedLock was busy");
                black_box(guard.granted());
                guard.release().expect("cpu: RedLock release failed");
            })
        }
        "queue" | "queue_counted" => {
            let client = redlease::Client::builder(&url)
                .build()
                .expect("cpu: cannot build the client");
            // queue_counted: the same cycle on a queue that counts its events per minute.
            let queue = client
                .queue(&name)
                .expect("cpu: bad queue name")
                .counting(scenario == "queue_counted");
            Box::new(move || {
                queue.push(JOB_PAYLOAD).expect("cpu: push failed");
                let job = queue
                    .try_take()
                    .expect("cpu: take failed")
                    .expect("cpu: the queue was empty right after a push");
                black_box(job.payload());
                job.ack().expect("cpu: ack failed");
            })
        }
        "queue_worker" | "queue_worker_counted" => {
            let client = redlease::Client::builder(&url)
                .build()
                .expect("cpu: cannot build the client");
            // queue_worker_counted: the same cycle on a queue that counts its events.
            let queue = client
                .queue(&name)
                .expect("cpu: bad queue name")
                .counting(scenario == "queue_worker_counted");
            queue.push(JOB_PAYLOAD).expect("cpu: push failed");
            let first = queue
                .try_take()
                .expect("cpu: take failed")
                .expect("cpu: the queue was empty right after a push");
            // Kept in an `Option` so that the cycle can move the job into its ack.
            let mut held = Some(first);
            Box::new(move || {
                queue.push(JOB_PAYLOAD).expect("cpu: push failed");
                let job = held.take().expect("cpu: no job held");
                let out = job.ack_and_take();
                out.ack.expect("cpu: ack failed");
                let next = out
                    .next
                    .expect("cpu: nothing handed over right after a push");
                black_box(next.payload());
                held = Some(next);
            })
        }
        "rate" => {
            let client = redlease::Client::builder(&url)
                .build()
                .expect("cpu: cannot build the client");
            let limiter = client
                .rate_limiter(&name)
                .rate(1_000_000, std::time::Duration::from_secs(1))
                .burst(1_000_000)
                .build()
                .expect("cpu: bad rate limiter");
            Box::new(move || {
                let d = limiter.try_acquire(1).expect("cpu: try_acquire failed");
                assert!(d.allowed, "cpu: the rate limiter denied");
                black_box(d.remaining);
            })
        }
        "rate_raw" => {
            let mut con = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .expect("cpu: cannot connect");
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RAW_GCRA_SCRIPT)
                .query(&mut con)
                .expect("cpu: SCRIPT LOAD failed");
            Box::new(move || {
                let d: Vec<i64> = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(&name)
                    .arg(1)
                    .arg(1_000_000)
                    .arg(1)
                    .query(&mut con)
                    .expect("cpu: EVALSHA failed");
                assert_eq!(d[0], 1, "cpu: the raw limiter denied");
                black_box(d[1]);
            })
        }
        "contended" | "contended_raw" => contended(&url, &name, scenario == "contended_raw"),
        "lock_raw" => {
            let mut con = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .expect("cpu: cannot connect");
            let mut n = 0u64;
            Box::new(move || {
                n += 1;
                let token = format!("raw-{n}");
                let set: Option<String> = redis::cmd("SET")
                    .arg(&name)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query(&mut con)
                    .expect("cpu: SET NX failed");
                assert_eq!(set.as_deref(), Some("OK"), "cpu: the raw key was taken");
                let deleted: i64 = redis::cmd("EVAL")
                    .arg(RAW_RELEASE_SCRIPT)
                    .arg(1)
                    .arg(&name)
                    .arg(&token)
                    .query(&mut con)
                    .expect("cpu: EVAL failed");
                assert_eq!(deleted, 1, "cpu: compare-and-delete did not delete");
            })
        }
        "lock_raw_fenced" => {
            let mut con = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .expect("cpu: cannot connect");
            let acquire: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RAW_FENCED_ACQUIRE_SCRIPT)
                .query(&mut con)
                .expect("cpu: SCRIPT LOAD failed");
            let release: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RAW_RELEASE_SCRIPT)
                .query(&mut con)
                .expect("cpu: SCRIPT LOAD failed");
            let counter = format!("{name}:fence");
            let mut n = 0u64;
            Box::new(move || {
                n += 1;
                let token = format!("raw-{n}");
                let fence: i64 = redis::cmd("EVALSHA")
                    .arg(&acquire)
                    .arg(2)
                    .arg(&name)
                    .arg(&counter)
                    .arg(&token)
                    .arg(30_000)
                    .query(&mut con)
                    .expect("cpu: fenced EVALSHA failed");
                assert!(fence > 0, "cpu: the raw fenced key was taken");
                let deleted: i64 = redis::cmd("EVALSHA")
                    .arg(&release)
                    .arg(1)
                    .arg(&name)
                    .arg(&token)
                    .query(&mut con)
                    .expect("cpu: EVALSHA failed");
                assert_eq!(deleted, 1, "cpu: compare-and-delete did not delete");
            })
        }
        "redlock_busy" => {
            let (servers, urls) = redlock_nodes();
            // Another holder's key on every node, for the whole run.
            let key = format!("redlease:{{{name}}}:lock");
            for con in &mut node_connections(&urls) {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg("another-holder")
                    .query(con)
                    .expect("cpu: cannot hold the key on a node");
            }
            node_admins = node_connections(&urls);
            let red = redlease::lock::RedLock::builder(&urls)
                .node_timeout(std::time::Duration::from_millis(200))
                .build()
                .expect("cpu: cannot build the RedLock client");
            nodes_kept = servers;
            let red: &'static redlease::lock::RedLock = Box::leak(Box::new(red));
            let lock = red.lock(&name).ttl(std::time::Duration::from_secs(10));
            Box::new(move || {
                let got = lock.try_acquire().expect("cpu: RedLock try_acquire failed");
                assert!(got.is_none(), "cpu: the busy RedLock was granted");
            })
        }
        "redlock_raw_busy" => {
            let (servers, urls) = redlock_nodes();
            let mut cons = node_connections(&urls);
            for con in &mut cons {
                let _: () = redis::cmd("SET")
                    .arg(&name)
                    .arg("another-holder")
                    .query(con)
                    .expect("cpu: cannot hold the key on a node");
            }
            node_admins = node_connections(&urls);
            nodes_kept = servers;
            let mut n = 0u64;
            Box::new(move || {
                n += 1;
                let set = redis::cmd("SET")
                    .arg(&name)
                    .arg(format!("raw-{n}"))
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .get_packed_command();
                for reply in raw_round(&mut cons, &set) {
                    assert_eq!(reply, redis::Value::Nil, "cpu: the raw key was free");
                }
            })
        }
        "redlock_raw" => {
            let (servers, urls) = redlock_nodes();
            node_admins = node_connections(&urls);
            nodes_kept = servers;
            let mut cons = node_connections(&urls);
            let mut n = 0u64;
            let round = raw_round;
            Box::new(move || {
                n += 1;
                let token = format!("raw-{n}");
                let set = redis::cmd("SET")
                    .arg(&name)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .get_packed_command();
                for reply in round(&mut cons, &set) {
                    assert_eq!(reply, redis::Value::Okay, "cpu: the raw key was taken");
                }
                let del = redis::cmd("EVAL")
                    .arg(RAW_RELEASE_SCRIPT)
                    .arg(1)
                    .arg(&name)
                    .arg(&token)
                    .get_packed_command();
                for reply in round(&mut cons, &del) {
                    assert_eq!(
                        reply,
                        redis::Value::Int(1),
                        "cpu: compare-and-delete failed"
                    );
                }
            })
        }
        "queue_raw" => {
            let mut con = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .expect("cpu: cannot connect");
            Box::new(move || {
                let len: i64 = redis::cmd("LPUSH")
                    .arg(&name)
                    .arg(JOB_PAYLOAD)
                    .query(&mut con)
                    .expect("cpu: LPUSH failed");
                assert_eq!(len, 1, "cpu: the raw queue was not empty");
                let popped: Option<Vec<u8>> = redis::cmd("RPOP")
                    .arg(&name)
                    .query(&mut con)
                    .expect("cpu: RPOP failed");
                assert_eq!(popped.as_deref(), Some(JOB_PAYLOAD), "cpu: RPOP mismatch");
            })
        }
        other => panic!("cpu: unknown CPU_SCENARIO {other}"),
    };
    for _ in 0..warmup {
        cycle();
    }
    for con in std::iter::once(&mut admin).chain(node_admins.iter_mut()) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(con)
            .expect("cpu: CONFIG RESETSTAT failed");
    }
    let cpu_before = server_cpu_usec(&mut admin);
    for _ in 0..cycles {
        cycle();
    }
    let cpu_after = server_cpu_usec(&mut admin);
    // The commands the client sends itself (besides scripts).
    let direct: &[&str] = match scenario.as_str() {
        "lock_raw" => &["set"],
        // Its acquisition is the client's own SET (no script calls SET in its cycle).
        "unfenced" => &["set", "delifeq", "delex"],
        "queue_raw" => &["lpush", "rpop"],
        _ => &["delifeq", "delex"],
    };
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut admin)
        .expect("cpu: INFO commandstats failed");
    // Lines look like `cmdstat_evalsha:calls=2000,usec=13100,usec_per_call=6.55,...`.
    let mut total_usec = 0u64;
    let mut detail = Vec::new();
    for line in info.lines() {
        let Some((command, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        // The measurement's own commands.
        if command == "info" || command.starts_with("config") {
            continue;
        }
        let field = |key: &str| -> u64 {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let (calls, usec) = (field("calls"), field("usec"));
        if command.starts_with("eval") || direct.contains(&command) {
            total_usec += usec;
        }
        detail.push(format!("{command}={calls}:{usec}"));
    }
    let mut node_line = String::new();
    if !node_admins.is_empty() {
        let mut calls = std::collections::BTreeMap::<String, u64>::new();
        for con in &mut node_admins {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(con)
                .expect("cpu: INFO commandstats failed on a node");
            for (command, stats) in info
                .lines()
                .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
            {
                if command == "info" || command.starts_with("config") {
                    continue;
                }
                let n: u64 = stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                *calls.entry(command.to_owned()).or_default() += n;
            }
        }
        let total: u64 = calls.values().sum();
        let each: Vec<String> = calls.iter().map(|(c, n)| format!("{c}:{n}")).collect();
        node_line = format!(" node_calls={total} node_commands={}", each.join(","));
    }
    println!(
        "cycles {scenario} n={cycles} server_usec={total_usec} server_cpu_usec={}{node_line} {}",
        cpu_after.saturating_sub(cpu_before),
        detail.join(" ")
    );
    drop(cycle);
    drop(nodes_kept);
}

/// One plain connection to each of `urls`.
fn node_connections(urls: &[String]) -> Vec<redis::Connection> {
    urls.iter()
        .map(|u| {
            redis::Client::open(u.as_str())
                .and_then(|c| c.get_connection())
                .expect("cpu: cannot connect to a node")
        })
        .collect()
}

/// Writes `packed` to every node, then reads every node's reply, in node order.
fn raw_round(cons: &mut [redis::Connection], packed: &[u8]) -> Vec<redis::Value> {
    for con in cons.iter_mut() {
        con.send_packed_command(packed)
            .expect("cpu: raw RedLock write failed");
    }
    cons.iter_mut()
        .map(|con| con.recv_response().expect("cpu: raw RedLock reply failed"))
        .collect()
}

/// `CPU_REDLOCK_NODES` (default 5) redis-servers started for the RedLock scenarios, and
/// their URLs.
fn redlock_nodes() -> (Vec<redlease_suite::RedisServer>, Vec<String>) {
    let nodes = env_number("CPU_REDLOCK_NODES", 5);
    let servers: Vec<redlease_suite::RedisServer> = (0..nodes)
        .map(|_| redlease_suite::RedisServer::start().expect("cpu: cannot start a node"))
        .collect();
    let urls = servers
        .iter()
        .map(redlease_suite::RedisServer::url)
        .collect();
    (servers, urls)
}

/// The server main thread's CPU time (user + system), in microseconds.
fn server_cpu_usec(admin: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(admin)
        .expect("cpu: INFO cpu failed");
    let seconds = |key: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    // Redis 6.2+ and Valkey report the main thread on its own; older servers the process.
    let main = seconds("used_cpu_user_main_thread") + seconds("used_cpu_sys_main_thread");
    let process = seconds("used_cpu_user") + seconds("used_cpu_sys");
    let s = if main > 0.0 { main } else { process };
    (s * 1e6).round() as u64
}

/// The `contended` and `contended_raw` scenarios: `CPU_THREADS` (default 8) threads looping
/// on critical sections of one lock until the process ends; a cycle waits until 8 more
/// critical sections were done.
fn contended(url: &str, name: &str, raw: bool) -> Box<dyn FnMut()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Condvar, Mutex};
    let threads = env_number("CPU_THREADS", 8);
    let done: &'static (Mutex<u64>, Condvar) = Box::leak(Box::new((Mutex::new(0), Condvar::new())));
    let client: &'static redlease::Client = Box::leak(Box::new(
        redlease::Client::builder(url)
            .build()
            .expect("cpu: cannot build the client"),
    ));
    let serial: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    for _ in 0..threads {
        let url = url.to_owned();
        let name = name.to_owned();
        std::thread::spawn(move || {
            let connect = || {
                redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("cpu: cannot connect")
            };
            let (mut con, mut lock_con) = (connect(), connect());
            let counter = format!("{name}:counter");
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RAW_RELEASE_SCRIPT)
                .query(&mut lock_con)
                .expect("cpu: SCRIPT LOAD failed");
            let lock = client.lock(&name).wait(std::time::Duration::from_secs(60));
            let section = |con: &mut redis::Connection| {
                let n: Option<u64> = redis::cmd("GET")
                    .arg(&counter)
                    .query(con)
                    .expect("cpu: GET failed");
                let _: () = redis::cmd("SET")
                    .arg(&counter)
                    .arg(n.unwrap_or(0) + 1)
                    .query(con)
                    .expect("cpu: SET failed");
            };
            loop {
                if raw {
                    let token = format!("raw-{}", serial.fetch_add(1, Ordering::Relaxed));
                    loop {
                        let set: Option<String> = redis::cmd("SET")
                            .arg(&name)
                            .arg(&token)
                            .arg("NX")
                            .arg("PX")
                            .arg(30_000)
                            .query(&mut lock_con)
                            .expect("cpu: SET NX failed");
                        if set.is_some() {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    section(&mut con);
                    let _: i64 = redis::cmd("EVALSHA")
                        .arg(&sha)
                        .arg(1)
                        .arg(&name)
                        .arg(&token)
                        .query(&mut lock_con)
                        .expect("cpu: EVALSHA failed");
                } else {
                    let guard = lock.acquire().expect("cpu: acquire failed");
                    section(&mut con);
                    guard.release().expect("cpu: release failed");
                }
                let mut n = done.0.lock().unwrap_or_else(|e| e.into_inner());
                *n += 1;
                done.1.notify_all();
            }
        });
    }
    let mut target = 0u64;
    Box::new(move || {
        target += 8;
        let n = done.0.lock().unwrap_or_else(|e| e.into_inner());
        let _n = done
            .1
            .wait_while(n, |n| *n < target)
            .unwrap_or_else(|e| e.into_inner());
    })
}
