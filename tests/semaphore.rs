//! The fair counting semaphore against real redis-server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::{Client, Error, InvalidArgument, LossReason};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(300))
}

#[test]
fn sixteen_threads_never_exceed_three_permits() {
    let server = server();
    let clients: Vec<Client> = (0..4).map(|_| client(&server)).collect();
    let max_seen = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let c = clients[i % 4].clone();
            let (max_seen, barrier) = (max_seen.clone(), barrier.clone());
            let mut conn = raw(&server);
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..100 {
                    c.semaphore("api", 3)
                        .wait(Duration::from_secs(60))
                        .with_permit(|_| {
                            let n: usize = conn.incr("holders_now", 1).unwrap();
                            max_seen.fetch_max(n, Ordering::SeqCst);
                            let _: i64 = conn.decr("holders_now", 1).unwrap();
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let max = max_seen.load(Ordering::SeqCst);
    println!("most concurrent holders seen: {max}");
    assert!(max <= 3, "{max} holders at once");
    assert!(max >= 2, "permits were shared: {max}");
    let state = clients[0].semaphore_state("api").unwrap();
    assert_eq!(state.permits, Some(3));
    assert!(
        state.holders.is_empty() && state.waiters.is_empty(),
        "{state:?}"
    );
}

#[test]
fn a_dead_holders_permit_goes_to_a_waiter_after_its_timeout() {
    let server = server();
    let c = client(&server);
    let timeout = Duration::from_millis(400);
    // The permit times out `timeout` after a moment later than this one.
    let before = Instant::now();
    {
        let doomed = client(&server);
        let g = doomed
            .semaphore("one", 1)
            .ttl(timeout)
            .try_acquire()
            .unwrap()
            .unwrap();
        std::mem::forget(g); // the holder dies: no release; its client (and watchdog) go too
    }
    let start = Instant::now();
    let g = c
        .semaphore("one", 1)
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    let waited = start.elapsed();
    let since_acquired = before.elapsed();
    // 50 ms for the server's millisecond clock against our monotonic one.
    assert!(
        since_acquired >= timeout - Duration::from_millis(50),
        "not before the permit timed out: {since_acquired:?}"
    );
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    g.release().unwrap();
}

#[test]
fn a_live_holder_keeps_its_permit_and_a_removed_permit_is_reported_lost() {
    let server = server();
    let c = client(&server);
    // A 1 s permit: its renewal (every third) has ~650 ms to land on a loaded machine.
    let g = c
        .semaphore("kept", 1)
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .unwrap()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        assert!(c.semaphore("kept", 1).try_acquire().unwrap().is_none());
        thread::sleep(Duration::from_millis(50));
    }
    assert!(!g.is_lost());
    // The holder set loses our entry (an operator's mistake): reported, not silent.
    let _: () = raw(&server).del("redlease:{kept}:sem:holders").unwrap();
    assert_eq!(
        g.lost().recv_timeout(Duration::from_secs(1)).unwrap(),
        LossReason::Expired
    );
    assert!(matches!(g.release(), Err(Error::NotOwner { .. })));
}

#[test]
fn waiters_get_permits_in_the_order_they_started_waiting() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    // Full: both permits held.
    let holders: Vec<_> = (0..2)
        .map(|_| c.semaphore("fifo", 2).try_acquire().unwrap().unwrap())
        .collect();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..6 {
        let (c, order) = (c.clone(), order.clone());
        handles.push(thread::spawn(move || {
            let g = c
                .semaphore("fifo", 2)
                .wait(Duration::from_secs(30))
                .acquire()
                .unwrap();
            // Record under the permit, before the next waiter can be served.
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(20));
            g.release().unwrap();
        }));
        await_condition(Duration::from_secs(5), || {
            conn.llen::<_, usize>("redlease:{fifo}:sem:waiters")
                .unwrap()
                == i + 1
        });
    }
    let state = c.semaphore_state("fifo").unwrap();
    assert_eq!(state.holders.len(), 2);
    assert_eq!(state.waiters.len(), 6);
    // Serve one permit at a time (shrink to 1, then free both): the order is exact.
    c.set_permits("fifo", 1).unwrap();
    drop(holders);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
}

#[test]
fn changing_the_permit_count_at_run_time() {
    let server = server();
    let c = client(&server);
    let a = c.semaphore("grow", 1).try_acquire().unwrap().unwrap();
    assert!(c.semaphore("grow", 1).try_acquire().unwrap().is_none());
    // Another client asking for 5 does not change an existing count.
    assert!(c.semaphore("grow", 5).try_acquire().unwrap().is_none());
    // A waiter is woken when the count grows.
    let c2 = c.clone();
    let waiter = thread::spawn(move || {
        c2.semaphore("grow", 1)
            .retry(Duration::from_secs(10), Duration::from_secs(10))
            .waiter_timeout(Duration::from_secs(15))
            .wait(Duration::from_secs(30))
            .acquire()
    });
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        conn.llen::<_, usize>("redlease:{grow}:sem:waiters")
            .unwrap()
            == 1
    });
    let started = Instant::now();
    assert_eq!(c.set_permits("grow", 2).unwrap(), Some(1));
    let b = waiter.join().unwrap().unwrap();
    // Its first retry pause is at least 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "woken, not retried: {:?}",
        started.elapsed()
    );
    // Shrink below the holders: they keep their permits, nobody new gets one.
    assert_eq!(c.set_permits("grow", 1).unwrap(), Some(2));
    assert_eq!(c.semaphore_state("grow").unwrap().holders.len(), 2);
    a.release().unwrap();
    assert!(
        c.semaphore("grow", 1).try_acquire().unwrap().is_none(),
        "still one holder of one permit"
    );
    b.release().unwrap();
    assert!(c.semaphore("grow", 1).try_acquire().unwrap().is_some());
    assert!(matches!(
        c.set_permits("grow", 0),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn bad_input_gets_typed_errors_and_writes_nothing() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    assert!(matches!(
        c.semaphore("s", 0).try_acquire(),
        Err(Error::InvalidArgument(
            InvalidArgument::CountOutOfRange { .. }
        ))
    ));
    assert!(matches!(
        c.semaphore("s", 2).ttl(Duration::ZERO).try_acquire(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.semaphore("", 2).try_acquire(),
        Err(Error::InvalidArgument(InvalidArgument::EmptyName))
    ));
    assert!(matches!(
        c.semaphore_state(""),
        Err(Error::InvalidArgument(_))
    ));
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0);
    // WRONGTYPE on each key of the semaphore.
    for (key, make) in [
        ("redlease:{t}:sem:holders", "string"),
        ("redlease:{t}:sem:waiters", "string"),
        ("redlease:{t}:sem:permits", "hash"),
    ] {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        match make {
            "string" => {
                let _: () = conn.set(key, "x").unwrap();
            }
            _ => {
                let _: () = conn.hset(key, "f", "v").unwrap();
            }
        }
        let _ = c.set_permits("t", 1); // may itself be refused by the bad key
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let holder = c.semaphore("t", 1).try_acquire().unwrap().unwrap(); // holders full
        match make {
            "string" => {
                let _: () = conn.del(key).unwrap();
                let _: () = conn.set(key, "x").unwrap();
            }
            _ => {
                let _: () = conn.del(key).unwrap();
                let _: () = conn.hset(key, "f", "v").unwrap();
            }
        }
        let before: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        let err = c
            .semaphore("t", 1)
            .wait(Duration::from_millis(200))
            .acquire()
            .unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{key}: {err:?}");
        let mut after: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        let mut before = before;
        before.sort();
        after.sort();
        assert_eq!(before, after, "{key}: nothing written");
        std::mem::forget(holder);
    }
    // Releasing a permit you no longer hold.
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let g = c
        .semaphore("gone", 1)
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    await_condition(Duration::from_secs(5), || {
        matches!(g.inspect(), Ok(redlease::lock::LeaseState::Expired))
    });
    let other = c
        .semaphore("gone", 1)
        .try_acquire()
        .unwrap()
        .expect("the expired permit is free");
    assert!(matches!(
        g.release(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
    assert_eq!(
        c.semaphore_state("gone").unwrap().holders.len(),
        1,
        "the new holder's permit is intact"
    );
    drop(other);
}
