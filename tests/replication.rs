//! Replication safety: the failover hole, shown with a real master and replica, and closed
//! by `min_replicas`.

use std::time::{Duration, Instant};

use redlease::{Client, Error};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{await_condition, connection};

fn info(server: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut connection(server))
        .unwrap()
}

/// A master and a replica of it, replication link up.
fn pair() -> (RedisServer, RedisServer) {
    // No 5 s wait before the first full sync (the default diskless-sync delay).
    let master = RedisServer::builder()
        .config("repl-diskless-sync-delay", "0")
        .start()
        .unwrap();
    let replica = RedisServer::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start()
        .unwrap();
    await_condition(Duration::from_secs(10), || {
        info(&replica, "replication").contains("master_link_status:up")
    });
    (master, replica)
}

fn client(server: &RedisServer) -> Client {
    Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

fn promote(replica: &RedisServer) {
    let mut conn = redis::Client::open(replica.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut conn)
        .unwrap();
}

#[test]
fn without_min_replicas_a_failover_can_hand_the_lock_to_a_second_client() {
    let (mut master, replica) = pair();
    // Replication is cut: the replica is frozen and its link dropped, so the master's next
    // writes stay on the master (they would reach a live replica a moment later).
    replica.pause().unwrap();
    let mut conn = redis::Client::open(master.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let dropped: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut conn)
        .unwrap();
    assert_eq!(dropped, 1);
    let first = client(&master)
        .lock("order-7")
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .expect("free");
    master.kill(); // the master dies before replicating the acquisition
    replica.resume().unwrap();
    promote(&replica);
    let second = client(&replica).lock("order-7").try_acquire().unwrap();
    assert!(second.is_some(), "the hole: two holders of one lock");
    std::mem::forget(first);
}

#[test]
fn min_replicas_refuses_an_acquisition_the_replica_did_not_acknowledge() {
    let (master, replica) = pair();
    replica.pause().unwrap();
    let start = Instant::now();
    let err = client(&master)
        .lock("order-8")
        .min_replicas(1, Duration::from_millis(200))
        .try_acquire()
        .unwrap_err();
    match err {
        Error::ReplicationFailed {
            acknowledged,
            required,
            ..
        } => assert_eq!((acknowledged, required), (0, 1)),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(2));
    // Released on the master: nothing left to lose in a failover.
    let mut conn = redis::Client::open(master.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("redlease:{order-8}:lock")
        .query(&mut conn)
        .unwrap();
    assert!(!exists);
    replica.resume().unwrap();
}

#[test]
fn with_min_replicas_a_failover_keeps_the_lock() {
    let (mut master, replica) = pair();
    let first = client(&master)
        .lock("order-9")
        .ttl(Duration::from_secs(30))
        .watchdog(false)
        .min_replicas(1, Duration::from_secs(5))
        .try_acquire()
        .unwrap()
        .expect("free, and acknowledged by the replica");
    master.kill();
    promote(&replica);
    let second = client(&replica).lock("order-9").try_acquire().unwrap();
    assert!(
        second.is_none(),
        "the promoted replica knows the lock is held"
    );
    // The same holds for a semaphore permit.
    drop(second);
    std::mem::forget(first);
}

#[test]
fn min_replicas_works_for_semaphores() {
    let (master, replica) = pair();
    let c = client(&master);
    let permit = c
        .semaphore("jobs", 1)
        .min_replicas(1, Duration::from_secs(5))
        .try_acquire()
        .unwrap()
        .unwrap();
    drop(permit);
    replica.pause().unwrap();
    let err = c
        .semaphore("jobs", 1)
        .min_replicas(1, Duration::from_millis(100))
        .try_acquire()
        .unwrap_err();
    assert!(matches!(err, Error::ReplicationFailed { .. }), "{err:?}");
    assert!(
        c.semaphore_state("jobs").unwrap().holders.is_empty(),
        "the permit was given back"
    );
    replica.resume().unwrap();
}
