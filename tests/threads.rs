//! Dropping a client stops its background threads. Alone in its test binary, so that no
//! other test's client threads are counted.

use std::time::{Duration, Instant};

use redlease::Client;
use redlease_suite::RedisServer;

/// The kernel clears a joined thread's id before its /proc entry is gone, so give a just-joined
/// thread's entry a moment to disappear (a bounded wait for a condition, not a sleep).
fn settles_to(expected: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = client_threads();
        if n == expected || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::yield_now();
    }
}

/// A new thread carries its parent's name until it sets its own: wait (bounded) for the
/// names to settle.
fn named_settles_to(prefix: &str, expected: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = threads_named(prefix);
        if n == expected || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::yield_now();
    }
}

/// The threads one client starts: its watchdog, renewal and listener threads (the
/// connection pool's threads are shared by every client of the process).
fn client_threads() -> usize {
    threads_named("redlease-watch")
        + threads_named("redlease-renew")
        + threads_named("redlease-liste")
}

fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim().starts_with(prefix))
        })
        .count()
}

#[test]
fn dropping_a_client_stops_its_watchdog_and_listener_threads() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(server.url()).unwrap();
    assert_eq!(client_threads(), 0, "threads start on first use");

    // A watched lease starts the watchdog; a wait on a busy lock starts the listener.
    let guard = client
        .lock("t")
        .ttl(Duration::from_millis(300))
        .try_acquire()
        .unwrap()
        .unwrap();
    let err = client
        .lock("t")
        .wait(Duration::from_millis(100))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, redlease::Error::Timeout { .. }));
    assert_eq!(named_settles_to("redlease-watch", 1), 1);
    assert_eq!(named_settles_to("redlease-liste", 1), 1);

    // A clone shares the threads.
    let clone = client.clone();
    drop(client);
    assert_eq!(named_settles_to("redlease-watch", 1), 1);
    assert_eq!(named_settles_to("redlease-liste", 1), 1);
    drop(guard); // a guard holds the client too
    drop(clone);
    // Dropping the last handle joined both threads before returning.
    assert_eq!(settles_to(0), 0);

    // Same while Redis is down (the listener is reconnecting), with a guard still alive:
    // guards do not keep the threads, and a watched lease whose watchdog stopped says so.
    let mut server = server;
    let client = Client::open(server.url()).unwrap();
    let g = client
        .lock("u")
        // Long enough not to run out (and be lost as RenewalFailed) between the kill and
        // the drop on a loaded machine.
        .ttl(Duration::from_secs(5))
        .try_acquire()
        .unwrap()
        .unwrap();
    let r = client.lock("u").wait(Duration::from_millis(50)).acquire();
    assert_eq!(named_settles_to("redlease-watch", 1), 1);
    assert_eq!(named_settles_to("redlease-liste", 1), 1, "{r:?}");
    server.kill();
    drop(client);
    assert_eq!(settles_to(0), 0);
    assert_eq!(g.lost_reason(), Some(redlease::LossReason::WatchdogStopped));
    drop(g); // its release fails within the op timeout: Redis is down

    // Dropping the client while a renewal waits on a frozen server returns at once (the
    // renewal thread is not waited for: issue 26, item 5), and that thread ends by itself
    // when its I/O times out, the server still frozen.
    let server = RedisServer::start().unwrap();
    let io_timeout = Duration::from_secs(2);
    let client = Client::builder(server.url())
        .io_timeout(io_timeout)
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let every = Duration::from_millis(100);
    let g = client
        .lock("v")
        .ttl(Duration::from_secs(30))
        .renew_every(every)
        .try_acquire()
        .unwrap()
        .unwrap();
    // The renewal thread starts with the first renewal (answered: the server still runs).
    assert_eq!(named_settles_to("redlease-renew", 1), 1);
    server.pause().unwrap();
    // The next renewal is sent within `every` and then waits for its reply.
    std::thread::sleep(3 * every);
    let start = Instant::now();
    drop(client);
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "dropping the client took {took:?}"
    );
    assert_eq!(
        threads_named("redlease-renew"),
        1,
        "the renewal in flight was left to end by itself"
    );
    let ended = Instant::now();
    let left = settles_to(0);
    let after = start.elapsed();
    server.resume().unwrap();
    assert_eq!(left, 0, "the renewal thread ended");
    assert!(
        after < io_timeout + Duration::from_secs(1),
        "the renewal thread ended {after:?} after the drop (io_timeout {io_timeout:?}, waited {:?})",
        ended.elapsed()
    );
    assert_eq!(g.lost_reason(), Some(redlease::LossReason::WatchdogStopped));
    drop(g);
}
