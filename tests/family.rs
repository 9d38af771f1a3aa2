//! The lock family against real redis-server: reentrant, fair and read-write locks, and the
//! bad input and faults every kind must survive.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::core::lease::{LockKind, ScriptOp};
use redlease::{Client, Error, InvalidArgument, LossReason, lock::LeaseState, lock::LockBuilder};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(300))
}

// ---------------------------------------------------------------------------------------
// Reentrant

#[test]
fn reentrant_nesting_three_deep_needs_three_releases() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let g1 = c.reentrant_lock("re").try_acquire().unwrap().expect("free");
    let g2 = c
        .reentrant_lock("re")
        .try_acquire()
        .unwrap()
        .expect("same thread: nested");
    let g3 = c
        .reentrant_lock("re")
        .try_acquire()
        .unwrap()
        .expect("same thread: nested");
    assert_eq!(g1.fence(), g2.fence(), "nested holds share the fence");
    assert_eq!(g2.fence(), g3.fence());
    let holds = || -> Vec<i64> {
        let map: std::collections::HashMap<String, String> =
            raw(&server).hgetall("redlease:{re}:reentrant").unwrap();
        map.iter()
            .filter(|(k, _)| !k.contains(":h:") && !k.ends_with(":r") && *k != "fence")
            .map(|(_, v)| v.parse().unwrap())
            .collect()
    };
    assert_eq!(holds(), vec![3]);

    // Another thread of the same client is another owner.
    let other = c.clone();
    let blocked =
        thread::spawn(move || other.reentrant_lock("re").try_acquire().unwrap().is_none());
    assert!(blocked.join().unwrap());

    g3.release().unwrap();
    assert_eq!(holds(), vec![2]);
    drop(g2); // drop releases one hold too
    assert_eq!(holds(), vec![1]);
    assert!(conn.exists::<_, bool>("redlease:{re}:reentrant").unwrap());
    g1.release().unwrap();
    assert!(
        !conn.exists::<_, bool>("redlease:{re}:reentrant").unwrap(),
        "the last release deletes"
    );
}

#[test]
fn reentrant_waiters_block_until_the_final_release_and_wake_without_polling() {
    let server = server();
    let c = client(&server);
    let outer = c.reentrant_lock("rw8").try_acquire().unwrap().unwrap();
    let inner = c.reentrant_lock("rw8").try_acquire().unwrap().unwrap();
    let c2 = c.clone();
    let released_at = Arc::new(Mutex::new(None::<Instant>));
    let r2 = released_at.clone();
    let waiter = thread::spawn(move || {
        let g = c2
            .reentrant_lock("rw8")
            .retry(Duration::from_secs(10), Duration::from_secs(10))
            .wait(Duration::from_secs(30))
            .acquire()
            .unwrap();
        let got = Instant::now();
        let released = r2
            .lock()
            .unwrap()
            .expect("acquired only after the final release");
        (g.fence(), got.duration_since(released))
    });
    // Let the waiter find the lock busy (its first attempt), then release one level: not enough.
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        let n: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redlease:{rw8}:reentrant:released")
            .query(&mut conn)
            .unwrap();
        matches!(n.get(1), Some(redis::Value::Int(1)))
    });
    inner.release().unwrap();
    let fence = outer.fence();
    *released_at.lock().unwrap() = Some(Instant::now());
    outer.release().unwrap();
    let (got_fence, after) = waiter.join().unwrap();
    assert!(got_fence > fence);
    assert!(
        after < Duration::from_secs(2),
        "woken by the release, not a 10 s retry: {after:?}"
    );
}

#[test]
fn a_reentrant_release_retried_after_a_lost_reply_counts_once() {
    let server = server();
    let c = client(&server);
    let g1 = c.reentrant_lock("retry").try_acquire().unwrap().unwrap();
    let g2 = c.reentrant_lock("retry").try_acquire().unwrap().unwrap();
    // Send g2's release twice, as a retry after a lost reply would.
    let deadline = Instant::now() + Duration::from_secs(1);
    c.run(ScriptOp::release(g2.lease(), deadline)).unwrap();
    c.run(ScriptOp::release(g2.lease(), deadline)).unwrap();
    std::mem::forget(g2); // its release was sent by hand
    // Still held once: by g1.
    let other = c.clone();
    assert!(
        thread::spawn(move || other
            .reentrant_lock("retry")
            .try_acquire()
            .unwrap()
            .is_none())
        .join()
        .unwrap()
    );
    g1.release().unwrap();
    assert!(c.reentrant_lock("retry").try_acquire().unwrap().is_some());
}

#[test]
fn a_reentrant_extension_shortens_from_the_current_ttl() {
    // ttl 10 s, extended to 60 s, then to 20 s: held once, so the key is shortened to 20 s
    // (shorter than the current 60 s, though longer than the acquisition's 10 s).
    let server = server();
    let c = client(&server);
    let mut g = c
        .reentrant_lock("shorten")
        .ttl(Duration::from_secs(10))
        .try_acquire()
        .unwrap()
        .expect("free");
    g.extend_to(Duration::from_secs(60)).unwrap();
    let mut conn = raw(&server);
    let pttl: i64 = conn.pttl("redlease:{shorten}:reentrant").unwrap();
    assert!(pttl > 20_000, "extended: pttl {pttl}");
    g.extend_to(Duration::from_secs(20)).unwrap();
    let pttl: i64 = conn.pttl("redlease:{shorten}:reentrant").unwrap();
    assert!(pttl > 0 && pttl <= 20_000, "shortened: pttl {pttl}");
    assert_eq!(g.ttl(), Duration::from_secs(20));
    g.release().unwrap();
}

#[test]
fn a_reentrant_release_by_a_non_owner_is_refused() {
    let server = server();
    let c = client(&server);
    let g = c
        .reentrant_lock("mine")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        !conn.exists::<_, bool>("redlease:{mine}:reentrant").unwrap()
    });
    let other = c.clone();
    let taker = thread::spawn(move || {
        let g = other.reentrant_lock("mine").try_acquire().unwrap().unwrap();
        std::mem::forget(g);
    });
    taker.join().unwrap();
    assert!(matches!(
        g.release(),
        Err(Error::NotOwner {
            reason: LossReason::Taken,
            ..
        })
    ));
    assert!(
        conn.exists::<_, bool>("redlease:{mine}:reentrant").unwrap(),
        "the other owner's hold is intact"
    );
}

#[test]
fn the_watchdog_keeps_a_reentrant_lock() {
    let server = server();
    let c = client(&server);
    let g = c
        .reentrant_lock("kept")
        // Its renewal (every third) has ~650 ms to land on a loaded machine.
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .unwrap()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let other = c.clone();
        assert!(
            thread::spawn(move || other
                .reentrant_lock("kept")
                .try_acquire()
                .unwrap()
                .is_none())
            .join()
            .unwrap()
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(!g.is_lost());
    assert!(matches!(g.inspect().unwrap(), LeaseState::Held { .. }));
    g.release().unwrap();
}

// ---------------------------------------------------------------------------------------
// Fair

#[test]
fn fair_waiters_get_the_lock_in_the_order_they_started_waiting() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let holder = c.fair_lock("line").try_acquire().unwrap().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        let order = order.clone();
        handles.push(thread::spawn(move || {
            let g = c
                .fair_lock("line")
                .wait(Duration::from_secs(30))
                .acquire()
                .unwrap();
            order.lock().unwrap().push(i);
            g.release().unwrap();
        }));
        // Start the next waiter only once this one is in line.
        await_condition(Duration::from_secs(5), || {
            conn.llen::<_, usize>("redlease:{line}:fair:queue").unwrap() == i + 1
        });
    }
    holder.release().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    assert_eq!(
        conn.llen::<_, usize>("redlease:{line}:fair:queue").unwrap(),
        0
    );
}

#[test]
fn a_dead_fair_waiter_is_skipped_after_its_queue_timeout() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let holder = c.fair_lock("dead").try_acquire().unwrap().unwrap();
    // A waiter that died in line: queued, never refreshed, 400 ms left on its place.
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let _: () = conn.rpush("redlease:{dead}:fair:queue", "ghost").unwrap();
    let _: () = conn
        .zadd("redlease:{dead}:fair:timeouts", "ghost", now_ms + 400)
        .unwrap();
    let c2 = c.clone();
    let waiter = thread::spawn(move || {
        let start = Instant::now();
        let g = c2
            .fair_lock("dead")
            .wait(Duration::from_secs(10))
            .acquire()
            .unwrap();
        (start.elapsed(), g.fence())
    });
    await_condition(Duration::from_secs(5), || {
        conn.llen::<_, usize>("redlease:{dead}:fair:queue").unwrap() == 2
    });
    holder.release().unwrap();
    let (waited, _) = waiter.join().unwrap();
    assert!(
        waited >= Duration::from_millis(300),
        "the ghost kept its place until its timeout: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "then was skipped: {waited:?}"
    );
    let ghost: Option<f64> = conn
        .zscore("redlease:{dead}:fair:timeouts", "ghost")
        .unwrap();
    assert!(ghost.is_none(), "purged");
}

#[test]
fn trying_a_busy_fair_lock_or_giving_up_leaves_the_line_empty() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let _holder = c.fair_lock("brief").try_acquire().unwrap().unwrap();
    assert!(c.fair_lock("brief").try_acquire().unwrap().is_none());
    assert_eq!(
        conn.llen::<_, usize>("redlease:{brief}:fair:queue")
            .unwrap(),
        0
    );
    let err = c
        .fair_lock("brief")
        .wait(Duration::from_millis(100))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }));
    assert_eq!(
        conn.llen::<_, usize>("redlease:{brief}:fair:queue")
            .unwrap(),
        0
    );
    assert!(matches!(
        c.fair_lock("brief")
            .waiter_timeout(Duration::from_millis(100))
            .try_acquire(),
        Err(Error::InvalidArgument(InvalidArgument::Setting(_)))
    ));
}

// ---------------------------------------------------------------------------------------
// Read-write

#[test]
fn writers_never_overlap_anyone_readers_overlap_and_writers_are_not_starved() {
    let server = server();
    let c = client(&server);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let mut readers = Vec::new();
    for _ in 0..6 {
        let (c, stop, max_readers, violations, barrier) = (
            c.clone(),
            stop.clone(),
            max_readers.clone(),
            violations.clone(),
            barrier.clone(),
        );
        let mut conn = raw(&server);
        readers.push(thread::spawn(move || {
            barrier.wait();
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let g = c
                    .read_lock("doc")
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .unwrap();
                let r: usize = conn.incr("readers_in", 1).unwrap();
                let w: usize = conn.get("writers_in").unwrap_or(0);
                if w != 0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                max_readers.fetch_max(r, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(3)); // readers keep arriving and overlapping
                let _: i64 = conn.decr("readers_in", 1).unwrap();
                g.release().unwrap();
                reads += 1;
            }
            reads
        }));
    }
    let mut writers = Vec::new();
    for _ in 0..2 {
        let (c, violations, barrier) = (c.clone(), violations.clone(), barrier.clone());
        let mut conn = raw(&server);
        writers.push(thread::spawn(move || {
            barrier.wait();
            let start = Instant::now();
            for _ in 0..15 {
                let g = c
                    .write_lock("doc")
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .unwrap();
                let w: usize = conn.incr("writers_in", 1).unwrap();
                let r: usize = conn.get("readers_in").unwrap_or(0);
                if w != 1 || r != 0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_millis(2));
                let _: i64 = conn.decr("writers_in", 1).unwrap();
                g.release().unwrap();
            }
            start.elapsed()
        }));
    }
    let writer_times: Vec<Duration> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    let reads: usize = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "a writer overlapped someone"
    );
    assert!(
        max_readers.load(Ordering::SeqCst) >= 2,
        "readers overlap each other"
    );
    // Writers are preferred, so readers get in between them; each got in at least once.
    assert!(reads >= 6, "{reads}");
    for t in writer_times {
        assert!(
            t < Duration::from_secs(20),
            "writers got in while readers kept arriving: {t:?}"
        );
    }
}

#[test]
fn a_reader_waits_for_a_writer_and_a_writer_for_readers() {
    let server = server();
    let c = client(&server);
    let r1 = c.read_lock("rw").try_acquire().unwrap().unwrap();
    let r2 = c.read_lock("rw").try_acquire().unwrap().unwrap();
    assert_eq!(r1.fence(), 0, "no writer yet");
    assert!(c.write_lock("rw").try_acquire().unwrap().is_none());
    drop(r1);
    assert!(
        c.write_lock("rw").try_acquire().unwrap().is_none(),
        "one reader left"
    );
    drop(r2);
    let w = c.write_lock("rw").try_acquire().unwrap().unwrap();
    assert!(c.read_lock("rw").try_acquire().unwrap().is_none());
    let fence = w.fence();
    w.release().unwrap();
    let r = c.read_lock("rw").try_acquire().unwrap().unwrap();
    assert_eq!(r.fence(), fence, "a reader sees the last writer's fence");
    // A reader whose hold expired is told so.
    let short = c
        .read_lock("rw")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        matches!(short.inspect(), Ok(LeaseState::Expired))
    });
    let _ = &mut conn;
    assert!(matches!(
        short.release(),
        Err(Error::NotOwner {
            reason: LossReason::Expired,
            ..
        })
    ));
    drop(r);
}

#[test]
fn a_waiting_writer_holds_back_new_readers_until_it_gives_up() {
    let server = server();
    let c = client(&server);
    let reader = c.read_lock("hold").try_acquire().unwrap().unwrap();
    let c2 = c.clone();
    let writer = thread::spawn(move || {
        c2.write_lock("hold")
            .wait(Duration::from_millis(400))
            .acquire()
    });
    let mut conn = raw(&server);
    await_condition(Duration::from_secs(5), || {
        conn.zcard::<_, usize>("redlease:{hold}:rw:writers-waiting")
            .unwrap()
            == 1
    });
    assert!(
        c.read_lock("hold").try_acquire().unwrap().is_none(),
        "held back by the waiting writer"
    );
    assert!(matches!(writer.join().unwrap(), Err(Error::Timeout { .. })));
    assert_eq!(
        conn.zcard::<_, usize>("redlease:{hold}:rw:writers-waiting")
            .unwrap(),
        0,
        "left the line"
    );
    assert!(c.read_lock("hold").try_acquire().unwrap().is_some());
    drop(reader);
}

// ---------------------------------------------------------------------------------------
// Every kind: bad input and faults

fn kinds(c: &Client, name: &str) -> Vec<(LockKind, LockBuilder<'static>)> {
    // Leak a clone so the builders can outlive this function in a table (test only).
    let c: &'static Client = Box::leak(Box::new(c.clone()));
    vec![
        (LockKind::Lease, c.lock(name)),
        (LockKind::Reentrant, c.reentrant_lock(name)),
        (LockKind::Fair, c.fair_lock(name)),
        (LockKind::Read, c.read_lock(name)),
        (LockKind::Write, c.write_lock(name)),
    ]
}

#[test]
fn every_kind_rejects_bad_input_and_writes_nothing() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    for (kind, b) in kinds(&c, "") {
        assert!(
            matches!(
                b.try_acquire(),
                Err(Error::InvalidArgument(InvalidArgument::EmptyName))
            ),
            "{kind:?}"
        );
    }
    for (kind, b) in kinds(&c, "x") {
        assert!(
            matches!(
                b.clone().ttl(Duration::ZERO).try_acquire(),
                Err(Error::InvalidArgument(_))
            ),
            "{kind:?}"
        );
        assert!(
            matches!(
                b.ttl(Duration::MAX).try_acquire(),
                Err(Error::InvalidArgument(_))
            ),
            "{kind:?}"
        );
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0);
    // Every key of every kind made a string where a hash/list/zset is expected, or a hash
    // where a string is: WRONGTYPE, typed, nothing else written.
    for (kind, b) in kinds(&c, "typed") {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        for key in [
            "redlease:{typed}:lock",
            "redlease:{typed}:reentrant",
            "redlease:{typed}:fair",
            "redlease:{typed}:fair:queue",
            "redlease:{typed}:rw:writer",
            "redlease:{typed}:rw:readers",
        ] {
            let _: () = conn.hset(key, "f", "v").unwrap();
        }
        let _: () = conn.set("redlease:{typed}:reentrant", "s").unwrap();
        let _: () = conn.set("redlease:{typed}:rw:readers", "s").unwrap();
        let _: () = conn.set("redlease:{typed}:fair:queue", "s").unwrap();
        let before: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
        let err = b.try_acquire().unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{kind:?}: {err:?}");
        let after: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
        assert_eq!(before, after, "{kind:?}: nothing written");
        let fence: bool = conn.exists("redlease:{typed}:fence").unwrap();
        assert!(!fence, "{kind:?}: no fence issued");
    }
}

#[test]
fn every_kind_survives_a_redis_restart_mid_hold() {
    let mut server = server();
    let c = client(&server);
    let guards: Vec<_> = kinds(&c, "restart")
        .into_iter()
        .filter(|(k, _)| *k != LockKind::Write) // the read hold below excludes the writer
        .map(|(k, b)| {
            (
                k,
                b.try_acquire()
                    .unwrap()
                    .unwrap_or_else(|| panic!("{k:?} free")),
            )
        })
        .collect();
    server.kill();
    for (kind, g) in guards {
        let start = Instant::now();
        let r = g.release();
        assert!(
            matches!(r, Err(Error::Unavailable { .. })),
            "{kind:?}: {r:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{kind:?}: {:?}",
            start.elapsed()
        );
    }
    for (kind, b) in kinds(&c, "restart") {
        let start = Instant::now();
        let r = b.wait(Duration::from_millis(300)).acquire();
        assert!(
            matches!(r, Err(Error::Unavailable { .. })),
            "{kind:?}: {r:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{kind:?}: {:?}",
            start.elapsed()
        );
    }
    server.restart().unwrap();
    for (kind, b) in kinds(&c, "after") {
        let g = b.wait(Duration::from_secs(5)).acquire();
        assert!(g.is_ok(), "{kind:?}: {g:?}");
    }
}

#[test]
fn a_nested_reentrant_hold_with_a_shorter_ttl_never_shortens_the_lease() {
    let server = server();
    let c = client(&server);
    let outer = c
        .reentrant_lock("nest")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .unwrap()
        .unwrap();
    let inner = c
        .reentrant_lock("nest")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    let pttl: i64 = raw(&server).pttl("redlease:{nest}:reentrant").unwrap();
    assert!(pttl > 20_000, "the outer hold's lease stands: {pttl}");
    drop(inner);
    assert!(matches!(outer.inspect().unwrap(), LeaseState::Held { .. }));
    outer.release().unwrap();
}

/// Poisons one key at a time (the others healthy): a read, write, fair or permit
/// acquisition fails with WRONGTYPE before writing anything.
#[test]
fn a_single_key_of_the_wrong_type_fails_before_any_write() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let cases: Vec<(&str, LockBuilder<'_>)> = vec![
        ("redlease:{p}:fence", c.read_lock("p")),
        ("redlease:{p}:rw:writers-waiting", c.read_lock("p")),
        ("redlease:{p}:fence", c.write_lock("p")),
        ("redlease:{p}:rw:readers", c.write_lock("p")),
        ("redlease:{p}:fence", c.fair_lock("p")),
        ("redlease:{p}:fair:timeouts", c.fair_lock("p")),
        ("redlease:{p}:sem:holders", c.semaphore("p", 2)),
        ("redlease:{p}:sem:timeouts", c.semaphore("p", 2)),
    ];
    for (key, builder) in cases {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let _: () = conn.hset(key, "f", "v").unwrap();
        let err = builder
            .wait(Duration::from_millis(100))
            .acquire()
            .unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{key}: {err:?}");
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        assert_eq!(keys, vec![key.to_string()], "{key}: nothing else written");
    }
}
