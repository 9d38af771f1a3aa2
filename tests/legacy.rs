//! The legacy lock (SETNX + GETSET, SETNX + EXPIRE) against real redis-server processes whose
//! EVAL and EVALSHA are renamed away: every test proves that no scripting is used.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redlease::{
    Client, Error, InvalidArgument, LossReason, lock::LegacyAlgorithm, lock::LegacyGuard,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

const BOTH: [LegacyAlgorithm; 2] = [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire];

/// A redis-server without scripting: EVAL renamed away with the `config` form, EVALSHA with the
/// `config_args` form. Checks that both commands really fail before handing it out.
fn server() -> RedisServer {
    let server = RedisServer::builder()
        .config("rename-command", "EVAL \"\"")
        .config_args(&["rename-command", "EVALSHA", ""])
        .start()
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    assert_no_scripting(&mut raw(&server));
    server
}

fn assert_no_scripting(conn: &mut redis::Connection) {
    let eval: redis::RedisResult<i64> = redis::cmd("EVAL").arg("return 1").arg(0).query(conn);
    let evalsha: redis::RedisResult<i64> = redis::cmd("EVALSHA")
        .arg("e0e1f9fabfc9d4800c877a703b823ac0578ff8db")
        .arg(0)
        .query(conn);
    for (name, result) in [("EVAL", eval), ("EVALSHA", evalsha)] {
        let err = result.expect_err("scripting must be disabled on this server");
        assert!(
            err.to_string().to_lowercase().contains("unknown command"),
            "{name}: {err}"
        );
    }
}

fn key(name: &str) -> String {
    format!("redlease:{{{name}}}:legacy")
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn exists(conn: &mut redis::Connection, k: &str) -> bool {
    conn.exists(k).unwrap()
}

fn is_not_owner(result: Result<(), Error>, expected: LossReason) {
    match result {
        Err(Error::NotOwner { reason, .. }) => assert_eq!(reason, expected),
        other => panic!("expected NotOwner({expected:?}), got {other:?}"),
    }
}

#[test]
fn the_server_has_no_scripting_the_lease_lock_fails_and_the_legacy_lock_works() {
    let server = server();
    let c = client(&server);
    // The lease lock needs scripts: on this server it gets a typed Redis error.
    let err = c.lock("scripted").try_acquire().unwrap_err();
    assert!(matches!(err, Error::Redis { .. }), "{err:?}");
    for algorithm in BOTH {
        let g = c
            .legacy_lock("plain")
            .algorithm(algorithm)
            .try_acquire()
            .unwrap()
            .expect("free lock");
        assert_eq!(g.name(), "plain");
        assert_eq!(g.algorithm(), algorithm);
        assert_eq!(g.attempts(), 1);
        assert!(g.remaining() > Duration::from_secs(29));
        g.release().unwrap();
    }
    let mut conn = raw(&server);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    assert!(stats.contains("cmdstat_setnx:"), "{stats}");
    assert!(!stats.contains("cmdstat_eval"), "{stats}");
}

fn mutual_exclusion(algorithm: LegacyAlgorithm) {
    let server = server();
    let client = client(&server);
    let threads = 8;
    let rounds = 200;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let client = client.clone();
            let barrier = barrier.clone();
            let mut conn = raw(&server);
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..rounds {
                    let guard = client
                        .legacy_lock("counter")
                        .algorithm(algorithm)
                        .wait(Duration::from_secs(60))
                        .retry(Duration::from_millis(1), Duration::from_millis(20))
                        .acquire()
                        .unwrap();
                    // A non-atomic read-modify-write: only the lock keeps it exact.
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
    let count: i64 = conn.get("count").unwrap();
    assert_eq!(count, (threads * rounds) as i64, "{algorithm:?}");
    assert!(
        !exists(&mut conn, &key("counter")),
        "the last release deleted the lock key"
    );
}

#[test]
fn mutual_exclusion_8_threads_x_200_sections_getset() {
    mutual_exclusion(LegacyAlgorithm::GetSet);
}

#[test]
fn mutual_exclusion_8_threads_x_200_sections_setnx_expire() {
    mutual_exclusion(LegacyAlgorithm::SetNxExpire);
}

/// 8 threads (each with its own client) pass a barrier and try once; returns their guards.
fn race_8(server: &RedisServer, name: &str, algorithm: LegacyAlgorithm) -> Vec<LegacyGuard> {
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let c = client(server);
            let barrier = barrier.clone();
            let name = name.to_owned();
            thread::spawn(move || {
                barrier.wait();
                c.legacy_lock(&name)
                    .algorithm(algorithm)
                    .try_acquire()
                    .unwrap()
            })
        })
        .collect();
    handles
        .into_iter()
        .filter_map(|h| h.join().unwrap())
        .collect()
}

#[test]
fn getset_a_crashed_holder_is_taken_over_by_exactly_one_of_8_waiters() {
    let server = server();
    let mut conn = raw(&server);
    // A holder that died: its timestamp passed a second ago, and the key has no Redis expiry.
    let crashed = format!("{}:{}", unix_ms() - 1000, "c".repeat(32));
    let _: () = conn.set(key("crashed"), &crashed).unwrap();
    let winners = race_8(&server, "crashed", LegacyAlgorithm::GetSet);
    assert_eq!(winners.len(), 1, "exactly one takeover");
    let winner = winners.into_iter().next().unwrap();
    assert!(winner.remaining() > Duration::from_secs(25));
    // The key holds the winner's value, or a loser's that overwrote it (the GETSET flaw):
    // either way a live timestamp, never the crashed holder's.
    let now: String = conn.get(key("crashed")).unwrap();
    let (expiry, _) = now.split_once(':').unwrap();
    assert!(expiry.parse::<u64>().unwrap() > unix_ms());
    let overwritten = now != winner.lease().value;
    let result = winner.release();
    if overwritten {
        // The winner held the lock, but a loser's value is in the key: not deleted.
        is_not_owner(result, LossReason::Taken);
        assert!(exists(&mut conn, &key("crashed")));
    } else {
        result.unwrap();
        assert!(!exists(&mut conn, &key("crashed")));
    }
}

#[test]
fn setnx_expire_a_crashed_holder_without_ttl_is_repaired_then_taken_by_exactly_one_of_8() {
    let server = server();
    let mut conn = raw(&server);
    // A holder that died between SETNX and PEXPIRE: its key has no expiry.
    let _: () = conn.set(key("stuck"), "dead-holder").unwrap();
    let pttl: i64 = conn.pttl(key("stuck")).unwrap();
    assert_eq!(pttl, -1);
    // Short ttls here, so the repaired key goes away soon.
    let race = |ttl: Duration| {
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let c = client(&server);
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    c.legacy_lock("stuck")
                        .algorithm(LegacyAlgorithm::SetNxExpire)
                        .ttl(ttl)
                        .try_acquire()
                        .unwrap()
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    };
    let first = race(Duration::from_millis(300));
    assert!(first.is_empty(), "a live key is nobody's to take");
    let pttl: i64 = conn.pttl(key("stuck")).unwrap();
    assert!(pttl > 0 && pttl <= 300, "repaired: {pttl}");
    let v: String = conn.get(key("stuck")).unwrap();
    assert_eq!(v, "dead-holder", "the repair only set a ttl");
    await_condition(Duration::from_secs(5), || !exists(&mut conn, &key("stuck")));
    let winners = race(Duration::from_secs(30));
    assert_eq!(winners.len(), 1, "exactly one acquisition");
    let pttl: i64 = conn.pttl(key("stuck")).unwrap();
    assert!(pttl > 25_000, "the winner's own ttl: {pttl}");
    winners.into_iter().next().unwrap().release().unwrap();
}

#[test]
fn setnx_expire_a_key_without_ttl_is_repaired_and_a_waiter_acquires_after_it() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let _: () = conn.set(key("repair"), "dead-holder").unwrap();
    let lock = c
        .legacy_lock("repair")
        .algorithm(LegacyAlgorithm::SetNxExpire)
        .ttl(Duration::from_millis(400));
    // The repaired ttl runs from a moment after this one.
    let start = Instant::now();
    assert!(lock.try_acquire().unwrap().is_none());
    let pttl: i64 = conn.pttl(key("repair")).unwrap();
    assert!(pttl > 0 && pttl <= 400, "the attempt gave it a ttl: {pttl}");
    let g = lock.wait(Duration::from_secs(5)).acquire().unwrap();
    // 50 ms for the server's millisecond clock against our monotonic one.
    assert!(
        start.elapsed() >= Duration::from_millis(350),
        "not before the repaired ttl ran out: {:?}",
        start.elapsed()
    );
    let v: String = conn.get(key("repair")).unwrap();
    assert_eq!(v, g.lease().value);
    g.release().unwrap();
}

#[test]
fn bad_input_gets_typed_errors_and_writes_nothing() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    for algorithm in BOTH {
        let lock = |name: &str| c.legacy_lock(name).algorithm(algorithm);
        assert!(matches!(
            lock("").try_acquire(),
            Err(Error::InvalidArgument(InvalidArgument::EmptyName))
        ));
        assert!(matches!(
            lock("").acquire(),
            Err(Error::InvalidArgument(InvalidArgument::EmptyName))
        ));
        assert!(matches!(
            lock("x").ttl(Duration::ZERO).try_acquire(),
            Err(Error::InvalidArgument(
                InvalidArgument::DurationTooShort { .. }
            ))
        ));
        assert!(matches!(
            lock("x").ttl(Duration::from_micros(300)).acquire(),
            Err(Error::InvalidArgument(
                InvalidArgument::DurationTooShort { .. }
            ))
        ));
        assert!(matches!(
            lock("x").ttl(Duration::from_secs(u64::MAX)).try_acquire(),
            Err(Error::InvalidArgument(
                InvalidArgument::DurationTooLong { .. }
            ))
        ));
        assert!(matches!(
            lock(&"n".repeat(5000)).try_acquire(),
            Err(Error::InvalidArgument(InvalidArgument::NameTooLong { .. }))
        ));
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0, "nothing written for rejected input");

    for algorithm in BOTH {
        let lock = |name: &str| c.legacy_lock(name).algorithm(algorithm);
        // The lock key holds a hash: WRONGTYPE, and the hash is untouched (no ttl either:
        // a SetNxExpire contender does not "repair" a foreign key).
        let name = format!("typed-{algorithm:?}");
        let _: () = conn.hset(key(&name), "f", "v").unwrap();
        let err = lock(&name).try_acquire().unwrap_err();
        assert!(
            matches!(&err, Error::WrongType { name: n, .. } if *n == name),
            "{err:?}"
        );
        assert!(err.to_string().contains(&key(&name)), "{err}");
        let err = lock(&name)
            .wait(Duration::from_secs(1))
            .acquire()
            .unwrap_err();
        assert!(
            matches!(err, Error::WrongType { .. }),
            "waiting does not retry a WRONGTYPE: {err:?}"
        );
        let v: String = conn.hget(key(&name), "f").unwrap();
        assert_eq!(v, "v");
        let pttl: i64 = conn.pttl(key(&name)).unwrap();
        assert_eq!(pttl, -1, "no expiry set on the foreign key");
    }

    // GetSet: a string that is not a lock value is reported, and left alone.
    let _: () = conn.set(key("foreign"), "not a lock value").unwrap();
    let err = c.legacy_lock("foreign").try_acquire().unwrap_err();
    assert!(matches!(err, Error::UnexpectedReply { .. }), "{err:?}");
    let v: String = conn.get(key("foreign")).unwrap();
    assert_eq!(v, "not a lock value");
}

#[test]
fn getset_a_stale_holder_cannot_release_the_lock_it_lost() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    let mut conn = raw(&server);
    let old = a
        .legacy_lock("report")
        // Long enough to still be held at the check below on a loaded machine.
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .unwrap()
        .expect("free lock");
    assert!(b.legacy_lock("report").try_acquire().unwrap().is_none());
    // Another contender takes it over once its timestamp has passed.
    let mut new = None;
    await_condition(Duration::from_secs(5), || {
        new = b.legacy_lock("report").try_acquire().unwrap();
        new.is_some()
    });
    let new = new.unwrap();
    is_not_owner(old.release(), LossReason::Taken);
    let v: String = conn.get(key("report")).unwrap();
    assert_eq!(v, new.lease().value, "the new holder's key is intact");
    new.release().unwrap();
    assert!(!exists(&mut conn, &key("report")));
}

#[test]
fn getset_release_of_our_own_expired_value_says_expired_and_deletes_nothing() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let g = c
        .legacy_lock("lapsed")
        .ttl(Duration::from_millis(50))
        .try_acquire()
        .unwrap()
        .unwrap();
    let expiry = g.lease().expires_at_unix_ms().unwrap();
    await_condition(Duration::from_secs(5), || unix_ms() > expiry);
    let value = g.lease().value.clone();
    is_not_owner(g.release(), LossReason::Expired);
    let v: String = conn.get(key("lapsed")).unwrap();
    assert_eq!(v, value, "not deleted: a contender may be taking it over");
}

#[test]
fn setnx_expire_release_after_expiry_says_expired_or_taken() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let lock = c
        .legacy_lock("lapsed")
        .algorithm(LegacyAlgorithm::SetNxExpire)
        .ttl(Duration::from_millis(100));
    // Gone and nobody else took it: expired.
    let first = lock.try_acquire().unwrap().unwrap();
    await_condition(Duration::from_secs(5), || {
        !exists(&mut conn, &key("lapsed"))
    });
    is_not_owner(first.release(), LossReason::Expired);
    // Gone and taken by another: taken, and the new holder's key is left alone.
    let second_old = lock.try_acquire().unwrap().unwrap();
    await_condition(Duration::from_secs(5), || {
        !exists(&mut conn, &key("lapsed"))
    });
    let new = c
        .legacy_lock("lapsed")
        .algorithm(LegacyAlgorithm::SetNxExpire)
        .try_acquire()
        .unwrap()
        .unwrap();
    is_not_owner(second_old.release(), LossReason::Taken);
    let v: String = conn.get(key("lapsed")).unwrap();
    assert_eq!(v, new.lease().value, "the new holder's key is intact");
    let pttl: i64 = conn.pttl(key("lapsed")).unwrap();
    assert!(pttl > 25_000, "{pttl}");
    new.release().unwrap();
}

#[test]
fn with_lock_and_drop_release_the_lock() {
    let server = server();
    let c = client(&server);
    for algorithm in BOTH {
        let out = c
            .legacy_lock("closure")
            .algorithm(algorithm)
            .with_lock(|g| {
                assert!(
                    c.legacy_lock("closure")
                        .algorithm(algorithm)
                        .try_acquire()
                        .unwrap()
                        .is_none()
                );
                g.name().len()
            })
            .unwrap();
        assert_eq!(out, 7);
        {
            let _g = c
                .legacy_lock("closure")
                .algorithm(algorithm)
                .try_acquire()
                .unwrap()
                .expect("released after the closure");
        }
        assert!(
            c.legacy_lock("closure")
                .algorithm(algorithm)
                .try_acquire()
                .unwrap()
                .is_some(),
            "released by drop"
        );
    }
}

#[test]
fn acquire_times_out_at_its_deadline_with_a_typed_error() {
    let server = server();
    let c = client(&server);
    for algorithm in BOTH {
        let _held = c
            .legacy_lock("busy")
            .algorithm(algorithm)
            .try_acquire()
            .unwrap()
            .unwrap();
        let start = Instant::now();
        let err = c
            .legacy_lock("busy")
            .algorithm(algorithm)
            .wait(Duration::from_millis(300))
            .acquire()
            .unwrap_err();
        let took = start.elapsed();
        match err {
            Error::Timeout { name, attempts, .. } => {
                assert_eq!(name, "busy");
                assert!(attempts >= 3, "{attempts}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}

#[test]
fn redis_restarted_mid_hold_gives_typed_errors_within_deadlines_then_works() {
    let mut server = server();
    let c = client(&server);
    for algorithm in BOTH {
        let lock = c.legacy_lock("outage").algorithm(algorithm);
        let guard = lock.try_acquire().unwrap().unwrap();
        server.kill();

        let start = Instant::now();
        let err = guard.release().unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );

        let start = Instant::now();
        let err = lock.try_acquire().unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );

        let start = Instant::now();
        let err = lock
            .clone()
            .wait(Duration::from_millis(500))
            .acquire()
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        // The wait plus at most one connect timeout for the attempt in flight; twice that
        // for a loaded machine.
        assert!(
            start.elapsed() < Duration::from_millis(500 + 300) * 2,
            "{:?}",
            start.elapsed()
        );

        // A guard dropped while Redis is down returns within the op timeout.
        server.restart().unwrap();
        let g = lock.clone().wait(Duration::from_secs(5)).acquire().unwrap();
        server.kill();
        let start = Instant::now();
        drop(g);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );

        // Back again: the same client works (the pool replaces broken connections).
        server.restart().unwrap();
        assert_no_scripting(&mut raw(&server));
        let g = lock.clone().wait(Duration::from_secs(5)).acquire().unwrap();
        g.release().unwrap();
        assert!(lock.try_acquire().unwrap().is_some());
    }
}
