//! The lease lock against real redis-server processes started by the tests.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::{Client, Error, InvalidArgument, LossReason, lock::LeaseState};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

/// Starts `client`'s listener (it starts with the first wait): the locks its threads hold
/// count as held here from then on.
fn start_listener(client: &Client) {
    let warm = client.lock("warm").try_acquire().unwrap().unwrap();
    let waited = client
        .lock("warm")
        .wait(Duration::from_millis(20))
        .acquire();
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    warm.release().unwrap();
}

#[test]
fn mutual_exclusion_8_threads_x_500_sections() {
    let server = server();
    let client = client(&server);
    let threads = 8;
    let rounds = 500;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let client = client.clone();
            let barrier = barrier.clone();
            let mut conn = raw(&server);
            thread::spawn(move || {
                barrier.wait();
                let mut fences = Vec::with_capacity(rounds);
                let mut last_fence = 0;
                for _ in 0..rounds {
                    let guard = client
                        .lock("counter")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .unwrap();
                    assert!(guard.fence() > last_fence, "fences increase");
                    last_fence = guard.fence();
                    fences.push(last_fence);
                    // A non-atomic read-modify-write: only the lock keeps it exact.
                    let n: i64 = conn.get::<_, Option<i64>>("count").unwrap().unwrap_or(0);
                    let _: () = conn.set("count", n + 1).unwrap();
                    guard.release().unwrap();
                }
                fences
            })
        })
        .collect();
    let mut fences: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let mut conn = raw(&server);
    let count: i64 = conn.get("count").unwrap();
    assert_eq!(count, (threads * rounds) as i64);
    // One fence per acquisition, no repeats; the counter holds the last one issued.
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), threads * rounds);
    let fence: u64 = conn.get("redlease:{counter}:fence").unwrap();
    assert_eq!(Some(&fence), fences.last());
    let exists: bool = conn.exists("redlease:{counter}:lock").unwrap();
    assert!(!exists, "the last release deleted the lock key");
}

#[test]
fn an_expired_holder_loses_to_the_next_and_cannot_release_its_lock() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    let old = a
        .lock("report")
        // Long enough to still be held at the check below on a loaded machine.
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .expect("free lock");
    assert!(b.lock("report").try_acquire().unwrap().is_none(), "held");
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        !conn.exists::<_, bool>("redlease:{report}:lock").unwrap()
    });
    // Before anyone else takes it, the stale holder's view: expired.
    assert_eq!(old.inspect().unwrap(), LeaseState::Expired);
    let new = b
        .lock("report")
        .try_acquire()
        .unwrap()
        .expect("expired lock is free");
    assert!(
        new.fence() > old.fence(),
        "{} > {}",
        new.fence(),
        old.fence()
    );
    assert!(matches!(
        old.inspect().unwrap(),
        LeaseState::Taken { remaining: Some(_) }
    ));
    match old.release() {
        Err(Error::NotOwner { name, reason }) => {
            assert_eq!(name, "report");
            assert_eq!(reason, LossReason::Taken);
        }
        other => panic!("stale release must report not-owner, got {other:?}"),
    }
    // The new holder's key was left alone.
    assert!(matches!(
        new.inspect().unwrap(),
        LeaseState::Held { remaining: Some(_) }
    ));
    new.release().unwrap();
}

#[test]
fn release_after_expiry_with_no_new_holder_says_expired() {
    let server = server();
    let c = client(&server);
    let guard = c
        .lock("lapsed")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        !conn.exists::<_, bool>("redlease:{lapsed}:lock").unwrap()
    });
    assert!(matches!(
        guard.release(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
}

#[test]
fn extend_keeps_the_lease_and_fails_once_lost() {
    let server = server();
    let c = client(&server);
    let mut guard = c
        .lock("long")
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .unwrap()
        .unwrap();
    let before = guard.valid_until();
    guard.extend_to(Duration::from_secs(20)).unwrap();
    assert!(guard.valid_until() > before + Duration::from_secs(10));
    let LeaseState::Held {
        remaining: Some(left),
    } = guard.inspect().unwrap()
    else {
        panic!("held")
    };
    assert!(left > Duration::from_secs(19), "{left:?}");
    let _: () = raw(&server).del("redlease:{long}:lock").unwrap();
    assert!(matches!(
        guard.extend(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
    assert!(matches!(
        guard.extend_to(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn with_lock_runs_the_closure_exclusively_and_releases() {
    let server = server();
    let c = client(&server);
    let mut fence = 0;
    let out = c
        .lock("closure")
        .with_lock(|g| {
            assert!(c.lock("closure").try_acquire().unwrap().is_none());
            fence = g.fence();
            g.fence() + 100
        })
        .unwrap();
    assert_eq!(out, fence + 100);
    assert!(
        c.lock("closure").try_acquire().unwrap().is_some(),
        "released after the closure"
    );
}

#[test]
fn dropping_a_guard_releases_it() {
    let server = server();
    let c = client(&server);
    {
        let _g = c.lock("scoped").try_acquire().unwrap().unwrap();
        assert!(c.lock("scoped").try_acquire().unwrap().is_none());
    }
    assert!(c.lock("scoped").try_acquire().unwrap().is_some());
}

#[test]
fn acquire_waits_and_gets_the_lock_when_the_holder_releases() {
    let server = server();
    let c = client(&server);
    let held = c.lock("handover").try_acquire().unwrap().unwrap();
    let c2 = c.clone();
    let waiter = thread::spawn(move || c2.lock("handover").wait(Duration::from_secs(10)).acquire());
    // The waiter is polling (no notifications yet): let it find the lock busy at least once.
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .unwrap();
        evalsha_calls(&stats) >= 3
    });
    let fence = held.fence();
    held.release().unwrap();
    let got = waiter.join().unwrap().unwrap();
    assert!(got.fence() > fence);
}

fn evalsha_calls(stats: &str) -> u64 {
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn acquire_times_out_at_its_deadline_with_a_typed_error() {
    let server = server();
    let c = client(&server);
    let _held = c.lock("busy").try_acquire().unwrap().unwrap();
    let start = Instant::now();
    let err = c
        .lock("busy")
        .wait(Duration::from_millis(300))
        .acquire()
        .unwrap_err();
    let took = start.elapsed();
    match err {
        Error::Timeout {
            name,
            waited,
            attempts,
        } => {
            assert_eq!(name, "busy");
            assert!(waited >= Duration::from_millis(300));
            assert!(attempts >= 3, "{attempts}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn every_operation_survives_script_flush() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let flush = |conn: &mut redis::Connection| {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(conn).unwrap();
    };
    flush(&mut conn);
    let mut g = c.lock("flushed").try_acquire().unwrap().unwrap();
    let first = g.fence();
    flush(&mut conn);
    g.extend().unwrap();
    flush(&mut conn);
    assert!(matches!(g.inspect().unwrap(), LeaseState::Held { .. }));
    flush(&mut conn);
    g.release().unwrap();
    flush(&mut conn);
    let g = c
        .lock("flushed")
        .wait(Duration::from_secs(1))
        .acquire()
        .unwrap();
    assert!(g.fence() > first);
    flush(&mut conn);
    drop(g);
    assert!(
        c.lock("flushed").try_acquire().unwrap().is_some(),
        "drop released after a flush"
    );
}

#[test]
fn bad_input_gets_typed_errors_and_writes_nothing() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    assert!(matches!(
        c.lock("").try_acquire(),
        Err(Error::InvalidArgument(InvalidArgument::EmptyName))
    ));
    assert!(matches!(
        c.lock("").acquire(),
        Err(Error::InvalidArgument(InvalidArgument::EmptyName))
    ));
    assert!(matches!(
        c.lock("x").ttl(Duration::ZERO).try_acquire(),
        Err(Error::InvalidArgument(
            InvalidArgument::DurationTooShort { .. }
        ))
    ));
    assert!(matches!(
        c.lock("x").ttl(Duration::from_micros(300)).try_acquire(),
        Err(Error::InvalidArgument(
            InvalidArgument::DurationTooShort { .. }
        ))
    ));
    assert!(matches!(
        c.lock("x").ttl(Duration::from_secs(u64::MAX)).try_acquire(),
        Err(Error::InvalidArgument(
            InvalidArgument::DurationTooLong { .. }
        ))
    ));
    assert!(matches!(
        c.lock(&"n".repeat(5000)).try_acquire(),
        Err(Error::InvalidArgument(InvalidArgument::NameTooLong { .. }))
    ));
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0, "nothing written for rejected input");

    // The lock key holds a hash: WRONGTYPE, and neither the hash nor the fence is touched.
    let _: () = conn.hset("redlease:{typed}:lock", "f", "v").unwrap();
    let err = c.lock("typed").try_acquire().unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { name, .. } if name == "typed"),
        "{err:?}"
    );
    assert!(err.to_string().contains("redlease:{typed}:lock"), "{err}");
    let err = c
        .lock("typed")
        .wait(Duration::from_secs(1))
        .acquire()
        .unwrap_err();
    assert!(
        matches!(err, Error::WrongType { .. }),
        "waiting does not retry a WRONGTYPE"
    );
    let v: String = conn.hget("redlease:{typed}:lock", "f").unwrap();
    assert_eq!(v, "v");
    let fence_exists: bool = conn.exists("redlease:{typed}:fence").unwrap();
    assert!(!fence_exists, "no fence issued");

    // A fence counter that is not an integer: a Redis error, and the lock is not taken.
    let _: () = conn.set("redlease:{badfence}:fence", "abc").unwrap();
    let err = c.lock("badfence").try_acquire().unwrap_err();
    assert!(
        matches!(&err, Error::Redis { code, .. } if code == "ERR"),
        "{err:?}"
    );
    let lock_exists: bool = conn.exists("redlease:{badfence}:lock").unwrap();
    assert!(!lock_exists, "nothing half-written");

    // A fence counter of the wrong type: WRONGTYPE, and the lock is not left taken.
    let _: () = conn.hset("redlease:{hashfence}:fence", "f", "v").unwrap();
    let err = c.lock("hashfence").try_acquire().unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let lock_exists: bool = conn.exists("redlease:{hashfence}:lock").unwrap();
    assert!(!lock_exists, "the SET was undone");

    // Bad client settings.
    assert!(matches!(
        Client::builder("not a url").build(),
        Err(Error::InvalidArgument(InvalidArgument::Setting(_)))
    ));
    assert!(Client::builder(server.url()).pool_size(0).build().is_err());
    assert!(
        Client::builder(server.url())
            .key_prefix("")
            .build()
            .is_err()
    );
    assert!(
        Client::builder(server.url())
            .io_timeout(Duration::ZERO)
            .build()
            .is_err()
    );
}

#[test]
fn key_prefix_is_honoured() {
    let server = server();
    let c = Client::builder(server.url())
        .key_prefix("app")
        .build()
        .unwrap();
    let _g = c.lock("p").try_acquire().unwrap().unwrap();
    let exists: bool = raw(&server).exists("app:{p}:lock").unwrap();
    assert!(exists);
}

#[test]
fn redis_going_away_gives_errors_within_deadlines_then_recovers() {
    let mut server = server();
    let c = client(&server);
    let guard = c.lock("outage").try_acquire().unwrap().unwrap();
    server.kill();

    let start = Instant::now();
    let err = guard.release().unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "release gave up within its op timeout"
    );

    let start = Instant::now();
    let err = c.lock("outage").try_acquire().unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );

    let start = Instant::now();
    let err = c
        .lock("outage")
        .wait(Duration::from_millis(500))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    // The wait plus at most one connect timeout for the attempt in flight; twice that for
    // a loaded machine.
    assert!(
        start.elapsed() < Duration::from_millis(500 + 300) * 2,
        "{:?}",
        start.elapsed()
    );

    {
        // A guard dropped while Redis is down: drop returns within the op timeout.
        server.restart().unwrap();
        let g = c
            .lock("drop-down")
            .wait(Duration::from_secs(5))
            .acquire()
            .unwrap();
        server.kill();
        let start = Instant::now();
        drop(g);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
    }

    server.restart().unwrap();
    // The same client works again: the pool replaces broken connections.
    let g = c
        .lock("outage")
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    assert!(
        g.fence() > 1,
        "even a fresh server issues fences floored by its clock (docs/guarantees.md)"
    );
    g.release().unwrap();
    assert!(c.lock("outage").try_acquire().unwrap().is_some());
}

#[test]
fn a_frozen_server_times_out_instead_of_hanging() {
    let server = server();
    let c = client(&server);
    let guard = c.lock("frozen").try_acquire().unwrap().unwrap();
    server.pause().unwrap();
    let start = Instant::now();
    let err = c.lock("other").try_acquire().unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    // Two attempts (a lost reply is asked again), each bounded by the io timeout.
    assert!(took < Duration::from_secs(3), "{took:?}");
    let start = Instant::now();
    let err = guard.release().unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    server.resume().unwrap();
}

#[test]
fn a_release_after_a_restart_that_lost_the_key_says_expired() {
    let mut server = server();
    let c = client(&server);
    let guard = c
        .lock("amnesia")
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    server.kill();
    server.restart().unwrap(); // no persistence: the key is gone
    // The pooled connection is dead; idle for a while, it is checked before use.
    thread::sleep(Duration::from_millis(1100));
    match guard.release() {
        Err(Error::NotOwner { reason, .. }) => assert_eq!(reason, LossReason::Expired),
        other => panic!("the key was lost with the restart: {other:?}"),
    }
}

/// One builder serves many acquisitions (it keeps the lock's keys and script calls after the
/// first): each still gets its own owner token, and a changed setting takes effect.
#[test]
fn a_reused_builder_gives_each_acquisition_its_own_token_and_its_settings() {
    let server = server();
    let client = client(&server);
    let mut conn = raw(&server);
    let lock = client.lock("reused");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = lock.try_acquire().unwrap().expect("free");
        let stored: String = conn.get("redlease:{reused}:lock").unwrap();
        assert_eq!(stored, guard.lease().token.as_str());
        tokens.push(stored);
        guard.release().unwrap();
    }
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "every acquisition has its own token");
    // A clone with another ttl acquires with that ttl, not the cached one.
    let short = lock.clone().ttl(Duration::from_secs(5));
    let guard = short.acquire().unwrap();
    let pttl: i64 = conn.pttl("redlease:{reused}:lock").unwrap();
    assert!(pttl > 0 && pttl <= 5_000, "pttl {pttl}");
    guard.release().unwrap();

    // A semaphore builder reused while its permits are held: two distinct holders, then full.
    let sem = client.semaphore("reused", 2);
    let a = sem.try_acquire().unwrap().expect("a permit");
    let b = sem.try_acquire().unwrap().expect("a second permit");
    assert_ne!(a.lease().token, b.lease().token);
    assert!(
        sem.try_acquire().unwrap().is_none(),
        "two permits, two holders"
    );
    assert_eq!(client.semaphore_state("reused").unwrap().holders.len(), 2);
}

/// Whether `server` has a native compare-and-delete (Valkey 9.0+ `DELIFEQ`, Redis 8.4+
/// `DELEX ... IFEQ`), from its `INFO server`.
fn has_compare_and_delete(server: &RedisServer) -> Option<&'static str> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut raw(server))
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(|v| {
                let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
            })
    };
    match field("valkey_version") {
        Some(v) if v >= (9, 0) => Some("DELIFEQ"),
        Some(_) => None,
        None => field("redis_version")
            .filter(|v| *v >= (8, 4))
            .map(|_| "DELEX"),
    }
}

#[test]
fn a_release_uses_the_servers_compare_and_delete_where_it_has_one() {
    let release_sha = redlease::core::lease::scripts::RELEASE.sha1;
    let server = server();
    let client = client(&server);
    let native = has_compare_and_delete(&server);
    let guard = client.lock("native").acquire().unwrap();
    let mut monitor = testkit::Monitor::start(&server);
    guard.release().unwrap();
    // The release's commands, up to its announcement (the native batch's second command)
    // or its script (which announces inside).
    let mut sent = Vec::new();
    while !sent
        .last()
        .is_some_and(|c: &String| c.contains("PUBLISH") || c.contains(release_sha))
    {
        let c = monitor
            .next_command(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("the release's commands: {sent:#?}"));
        sent.push(c);
    }
    match native {
        Some(command) => {
            assert!(sent.iter().any(|c| c.contains(command)), "{sent:#?}");
            assert!(!sent.iter().any(|c| c.contains(release_sha)), "{sent:#?}");
        }
        None => assert!(sent.iter().any(|c| c.contains(release_sha)), "{sent:#?}"),
    }
    let mut conn = raw(&server);
    assert!(!conn.exists::<_, bool>("redlease:{native}:lock").unwrap());
    // Not ours any more: the outcome says why, natively or not (the script explains a 0).
    let guard = client
        .lock("native")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .acquire()
        .unwrap();
    await_condition(Duration::from_secs(5), || {
        !conn.exists::<_, bool>("redlease:{native}:lock").unwrap()
    });
    let other = client.lock("native").acquire().unwrap();
    match guard.release() {
        Err(Error::NotOwner { reason, .. }) => assert_eq!(reason, LossReason::Taken),
        other => panic!("{other:?}"),
    }
    other.release().unwrap();
}

/// `rejected_calls` of `command` in `server`'s `INFO commandstats` (0 when it has no line).
fn rejected_calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut raw(server))
        .unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("rejected_calls=")))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[test]
fn a_user_not_granted_the_native_delete_releases_by_script_after_one_refusal() {
    let server = server();
    let native = has_compare_and_delete(&server);
    // May ask INFO (so the client learns the server) but not run DELIFEQ / DELEX.
    let mut rule = vec!["SETUSER", "app", "reset", "on", ">pw", "~*", "&*", "+@all"];
    let denied = native.map(|c| format!("-{}", c.to_lowercase()));
    rule.extend(denied.as_deref());
    let _: () = redis::cmd("ACL")
        .arg(&rule)
        .query(&mut raw(&server))
        .unwrap();
    let client = Client::builder(format!("redis://app:pw@127.0.0.1:{}/", server.port()))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for _ in 0..3 {
        let guard = client.lock("granted").acquire().unwrap();
        guard.release().unwrap();
    }
    let mut conn = raw(&server);
    assert!(!conn.exists::<_, bool>("redlease:{granted}:lock").unwrap());
    if let Some(command) = native {
        // Refused once; the later releases went straight to the script.
        assert_eq!(rejected_calls(&server, &command.to_lowercase()), 1);
    }
}

/// Unfenced lease locks (`fenced(false)`) of two clients exclude each other; a free lock is
/// taken by a bare `SET NX PX` (no script), whose lease has fence 0 and is renewed and
/// released as usual.
#[test]
fn unfenced_locks_of_two_clients_exclude_each_other() {
    let server = server();
    let clients = [client(&server), client(&server)];
    // The connections are set up before the MONITOR below.
    clients[0]
        .lock("warm-up")
        .try_acquire()
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    let mut monitor = testkit::Monitor::start(&server);
    let guard = clients[0]
        .lock("fast")
        .fenced(false)
        .ttl(Duration::from_millis(600))
        .try_acquire()
        .unwrap()
        .expect("a free lock");
    let first = monitor
        .next_command(Duration::from_secs(5))
        .expect("the acquisition's command");
    assert!(
        first.contains(r#""SET" "redlease:{fast}:lock""#) && first.contains(r#""NX" "PX" "600""#),
        "{first}"
    );
    assert_eq!((guard.fence(), guard.attempts()), (0, 1));
    assert!(guard.is_watched());
    // Renewed past its ttl by the watchdog (every 200 ms): still ours, still exclusive.
    thread::sleep(Duration::from_millis(1500));
    assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    assert!(
        clients[1]
            .lock("fast")
            .fenced(false)
            .try_acquire()
            .unwrap()
            .is_none()
    );
    assert!(matches!(guard.inspect().unwrap(), LeaseState::Held { .. }));
    guard.release().unwrap();
    assert!(
        !raw(&server)
            .exists::<_, bool>("redlease:{fast}:lock")
            .unwrap()
    );

    // Contending threads of both clients, waiting: a non-atomic increment stays exact.
    let (threads, rounds) = (6, 150);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let client = clients[t % 2].clone();
            let barrier = barrier.clone();
            let mut conn = raw(&server);
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..rounds {
                    let guard = client
                        .lock("counter")
                        .fenced(false)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .unwrap();
                    assert_eq!(guard.fence(), 0, "no fence, whoever granted it");
                    let n: i64 = conn.get::<_, Option<i64>>("count").unwrap().unwrap_or(0);
                    let _: () = conn.set("count", n + 1).unwrap();
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut conn = raw(&server);
    assert_eq!(
        conn.get::<_, i64>("count").unwrap(),
        (threads * rounds) as i64
    );
    assert!(!conn.exists::<_, bool>("redlease:{counter}:lock").unwrap());
}

/// A fenced and an unfenced lock of one name are one lock: each excludes the other, and the
/// fenced holders' fences still increase.
#[test]
fn a_fenced_and_an_unfenced_lock_of_one_name_exclude_each_other() {
    let server = server();
    let c = client(&server);
    let fenced = c.lock("mixed").try_acquire().unwrap().unwrap();
    assert!(fenced.fence() > 0);
    assert!(
        c.lock("mixed")
            .fenced(false)
            .try_acquire()
            .unwrap()
            .is_none()
    );
    let first_fence = fenced.fence();
    fenced.release().unwrap();
    let unfenced = c
        .lock("mixed")
        .fenced(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    assert_eq!(unfenced.fence(), 0);
    assert!(c.lock("mixed").try_acquire().unwrap().is_none());
    // A fenced waiter gets the lock when the unfenced holder releases.
    let c2 = c.clone();
    let waiter = thread::spawn(move || c2.lock("mixed").wait(Duration::from_secs(10)).acquire());
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .unwrap();
        evalsha_calls(&stats) >= 3
    });
    unfenced.release().unwrap();
    let got = waiter.join().unwrap().unwrap();
    assert!(
        got.fence() > first_fence,
        "fences increase across unfenced holds"
    );
    got.release().unwrap();

    // Threads alternating fenced and unfenced acquisitions of one name.
    let (threads, rounds) = (4, 150);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let client = c.clone();
            let barrier = barrier.clone();
            let mut conn = raw(&server);
            thread::spawn(move || {
                barrier.wait();
                let mut last_fence = 0;
                for i in 0..rounds {
                    let guard = client
                        .lock("mixed")
                        .fenced((t + i) % 2 == 0)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .unwrap();
                    if guard.fence() > 0 {
                        assert!(guard.fence() > last_fence, "fences increase");
                        last_fence = guard.fence();
                    }
                    let n: i64 = conn.get::<_, Option<i64>>("count").unwrap().unwrap_or(0);
                    let _: () = conn.set("count", n + 1).unwrap();
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        conn.get::<_, i64>("count").unwrap(),
        (threads * rounds) as i64
    );
}

/// An unfenced lock on a key of the wrong type is a typed error, not "busy", trying once or
/// waiting, and the key is left alone; `fenced(false)` on any other kind of lock is refused
/// before anything is sent.
#[test]
fn unfenced_bad_input_gets_typed_errors() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let refused = [
        c.read_lock("r").fenced(false).try_acquire().map(|_| ()),
        c.read_lock("r").fenced(false).acquire().map(|_| ()),
        c.write_lock("w").fenced(false).try_acquire().map(|_| ()),
        c.fair_lock("f").fenced(false).acquire().map(|_| ()),
        c.reentrant_lock("re")
            .fenced(false)
            .try_acquire()
            .map(|_| ()),
        c.semaphore("s", 2).fenced(false).try_acquire().map(|_| ()),
    ];
    for outcome in refused {
        match outcome {
            Err(Error::InvalidArgument(InvalidArgument::Setting(m))) => {
                assert!(m.contains("fenced(false)"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut conn).unwrap(), 0);

    let _: () = conn.hset("redlease:{typed}:lock", "f", "v").unwrap();
    let err = c.lock("typed").fenced(false).try_acquire().unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { name, .. } if name == "typed"),
        "{err:?}"
    );
    let err = c
        .lock("typed")
        .fenced(false)
        .wait(Duration::from_secs(1))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let v: String = conn.hget("redlease:{typed}:lock", "f").unwrap();
    assert_eq!(v, "v");
}

/// Issue 31: a waiter whose retry pause ends while a thread of its own client holds the lock
/// does not ask Redis again (the lock is held: an attempt could only fail); it sleeps on
/// until the holder's release wakes it. Before, a waiter with 5 ms pauses asked about every
/// 5 ms for as long as the lock was held (some 60 attempts over 300 ms).
#[test]
fn a_waiter_does_not_retry_in_vain_while_its_own_client_holds_the_lock() {
    let server = server();
    let client = client(&server);
    start_listener(&client);
    let held = client.lock("held-here").try_acquire().unwrap().unwrap();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            let guard = client
                .lock("held-here")
                .wait(Duration::from_secs(30))
                .retry(Duration::from_millis(5), Duration::from_millis(5))
                .acquire()
                .unwrap();
            let attempts = guard.attempts();
            guard.release().unwrap();
            attempts
        })
    };
    await_condition(Duration::from_secs(10), || client.status().waiters == 1);
    // The hold lasts 60 retry pauses: the waiter's pauses end about 60 times meanwhile.
    thread::sleep(Duration::from_millis(300));
    held.release().unwrap();
    let attempts = waiter.join().unwrap();
    assert!(
        attempts <= 4,
        "the waiter asked {attempts} times: its pauses ended in attempts while the lock was held here"
    );
}

#[test]
fn a_waiter_beside_a_thread_looping_on_the_lock_is_served_and_retries_about_once_per_patience() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let server = server();
    let client = client(&server);
    start_listener(&client);
    let stop = Arc::new(AtomicBool::new(false));
    let loops = Arc::new(AtomicU64::new(0));
    let looping = {
        let (client, stop, loops) = (client.clone(), stop.clone(), loops.clone());
        let mut conn = raw(&server);
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let guard = client
                    .lock("hot")
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .unwrap();
                let _: Option<String> = conn.get("hot-counter").unwrap();
                loops.fetch_add(1, Ordering::SeqCst);
                guard.release().unwrap();
            }
        })
    };
    await_condition(Duration::from_secs(10), || {
        loops.load(Ordering::SeqCst) >= 20
    });
    // Twenty acquisitions while the loop runs: each is served (no Timeout), and retries
    // about once per patience (100 ms) beyond its first few attempts (its own, and the one
    // a release since its attempt was sent owes it), not at every release of the loop.
    let patience = Duration::from_millis(100);
    let (mut attempts, mut allowed, mut waited, mut during) = (0, 0, Duration::ZERO, 0);
    for _ in 0..20 {
        let started = Instant::now();
        let before = loops.load(Ordering::SeqCst);
        let guard = client
            .lock("hot")
            .wait(Duration::from_secs(30))
            .acquire()
            .unwrap();
        let took = started.elapsed();
        attempts += guard.attempts();
        allowed += (took.as_millis() / patience.as_millis()) as u32 + 3;
        waited += took;
        during += loops.load(Ordering::SeqCst) - before;
        guard.release().unwrap();
        await_condition(Duration::from_secs(10), || {
            loops.load(Ordering::SeqCst) >= before + 10
        });
    }
    stop.store(true, Ordering::SeqCst);
    looping.join().unwrap();
    println!(
        "20 acquisitions waited {waited:?} in {attempts} attempts while the loop ran {during} critical sections"
    );
    assert!(
        attempts <= allowed,
        "{attempts} attempts in {waited:?} (at most {allowed}): the waiter raced the loop's releases"
    );
}
