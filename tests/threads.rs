//! Dropping a client stops its background threads. Alone in its test binary, so that no
//! other test's client threads are counted.

use std::time::Duration;

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
}
