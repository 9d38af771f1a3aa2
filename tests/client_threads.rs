//! Issue 11.10: many clients share the connection pools' threads, and dropped clients leave
//! no thread behind. Alone in its test binary: it counts every thread of the process.

use std::time::{Duration, Instant};

use redlease::Client;
use redlease_suite::testkit::server;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Waits (at most `limit`) until the process has at most `n` threads; returns the count.
fn settles_to(n: usize, limit: Duration) -> usize {
    let start = Instant::now();
    loop {
        let now = threads();
        if now <= n || start.elapsed() > limit {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dropped_clients_leave_no_thread_behind_and_share_their_pools_threads() {
    let server = server();
    let baseline = threads();

    // 200 clients, each used (a connection opened, a lock taken and released, a lease
    // renewed by its watchdog), all alive at once.
    let clients: Vec<Client> = (0..200)
        .map(|_| Client::open(server.url()).unwrap())
        .collect();
    for (i, c) in clients.iter().enumerate() {
        c.lock(&format!("t{i}"))
            .watchdog(false)
            .try_acquire()
            .unwrap()
            .unwrap()
            .release()
            .unwrap();
    }
    // Connection pools share one small set of threads (r2d2 starts three per pool).
    let alive = threads();
    assert!(
        alive <= baseline + 8,
        "{} threads for 200 clients without watchdogs",
        alive - baseline
    );

    // Watched leases start each client's watchdog (and renewal) threads.
    let guards: Vec<_> = clients
        .iter()
        .take(20)
        .enumerate()
        .map(|(i, c)| {
            c.lock(&format!("w{i}"))
                .ttl(Duration::from_millis(300))
                .try_acquire()
                .unwrap()
                .unwrap()
        })
        .collect();
    assert!(threads() > alive, "watchdogs started");
    drop(guards);

    let dropped = Instant::now();
    drop(clients);
    let left = settles_to(baseline, Duration::from_secs(10));
    assert!(
        left <= baseline,
        "{} threads still alive {:?} after the clients were dropped",
        left - baseline,
        dropped.elapsed()
    );
}
