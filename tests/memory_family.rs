//! The rest of the lock family on the in-process server (feature `memory`): reentrant, fair,
//! read-write locks, the semaphore, run-once and RedLock, on the server's clock.

use std::time::Duration;

use redlease::memory::{MemoryClock, MemoryServer};
use redlease::{Error, lock::RedLock};

const S: Duration = Duration::from_secs(1);

#[test]
fn a_reentrant_lock_counts_holds_on_one_thread_and_excludes_other_clients() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let outer = a.reentrant_lock("r").watchdog(false).acquire().unwrap();
    let inner = a.reentrant_lock("r").watchdog(false).acquire().unwrap();
    assert!(b.reentrant_lock("r").try_acquire().unwrap().is_none());
    inner.release().unwrap();
    assert!(
        b.reentrant_lock("r").try_acquire().unwrap().is_none(),
        "one hold left"
    );
    outer.release().unwrap();
    assert!(b.reentrant_lock("r").try_acquire().unwrap().is_some());
}

#[test]
fn readers_share_and_a_writer_excludes_them() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let r1 = a.read_lock("rw").watchdog(false).acquire().unwrap();
    let r2 = b.read_lock("rw").watchdog(false).acquire().unwrap();
    assert!(a.write_lock("rw").try_acquire().unwrap().is_none());
    r1.release().unwrap();
    r2.release().unwrap();
    let w = a.write_lock("rw").watchdog(false).acquire().unwrap();
    assert!(b.read_lock("rw").try_acquire().unwrap().is_none());
    w.release().unwrap();
}

#[test]
fn a_fair_lock_waiter_times_out_after_its_wait_and_leaves_the_line() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a
        .fair_lock("f")
        .ttl(60 * S)
        .watchdog(false)
        .acquire()
        .unwrap();
    let t0 = server.clock().elapsed();
    let err = b.fair_lock("f").wait(10 * S).acquire().unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let waited = server.clock().elapsed() - t0;
    assert!(waited >= 10 * S && waited < 11 * S, "{waited:?}");
    g.release().unwrap();
    assert!(b.fair_lock("f").try_acquire().unwrap().is_some());
}

#[test]
fn a_semaphore_gives_n_permits_and_a_dead_holders_permit_expires() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let p1 = a
        .semaphore("s", 2)
        .ttl(30 * S)
        .watchdog(false)
        .acquire()
        .unwrap();
    let _p2 = a
        .semaphore("s", 2)
        .ttl(30 * S)
        .watchdog(false)
        .acquire()
        .unwrap();
    assert!(b.semaphore("s", 2).try_acquire().unwrap().is_none());
    assert_eq!(a.semaphore_state("s").unwrap().holders.len(), 2);
    std::mem::forget(p1); // never released
    // p1's holder "died": its permit times out on the server's clock.
    let t0 = server.clock().elapsed();
    let p3 = b
        .semaphore("s", 2)
        .ttl(30 * S)
        .wait(60 * S)
        .acquire()
        .unwrap();
    let waited = server.clock().elapsed() - t0;
    assert!(waited >= 29 * S && waited < 32 * S, "{waited:?}");
    p3.release().unwrap();
}

#[test]
fn watched_permits_are_refreshed_while_their_holder_lives() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let p = a.semaphore("s", 1).ttl(30 * S).acquire().unwrap();
    server.clock().advance(120 * S);
    assert!(!p.is_lost());
    assert!(b.semaphore("s", 1).try_acquire().unwrap().is_none());
    p.release().unwrap();
    assert!(b.semaphore("s", 1).try_acquire().unwrap().is_some());
}

#[test]
fn run_once_runs_once_per_period() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let ran = a.run_once("cron", 60 * S, 30 * S, || 42).unwrap();
    assert_eq!(ran, Some(42));
    assert_eq!(b.run_once("cron", 60 * S, 30 * S, || 43).unwrap(), None);
    server.clock().advance(29 * S);
    assert_eq!(b.run_once("cron", 60 * S, 30 * S, || 44).unwrap(), None);
    server.clock().advance(2 * S);
    assert_eq!(b.run_once("cron", 60 * S, 30 * S, || 45).unwrap(), Some(45));
}

fn three_nodes() -> (MemoryClock, Vec<MemoryServer>) {
    let clock = MemoryClock::new();
    let nodes = (0..3)
        .map(|_| MemoryServer::with_clock(clock.clone()))
        .collect();
    (clock, nodes)
}

#[test]
fn redlock_needs_a_majority_of_in_process_nodes() {
    let (_clock, n) = three_nodes();
    let red = RedLock::in_memory(&[&n[0], &n[1], &n[2]]).unwrap();
    let other = RedLock::in_memory(&[&n[0], &n[1], &n[2]]).unwrap();
    n[2].pause();
    let g = red.lock("job").ttl(10 * S).try_acquire().unwrap().unwrap();
    assert_eq!(g.granted(), 2);
    assert!(other.lock("job").try_acquire().unwrap().is_none());
    n[1].pause();
    let mut g = g;
    assert!(g.extend().is_err(), "one node of three cannot extend");
    n[1].resume();
    n[2].resume();
    g.release().unwrap();
    assert!(other.lock("job").try_acquire().unwrap().is_some());
}

#[test]
fn a_redlock_lease_runs_out_on_the_shared_clock_and_a_waiter_times_out() {
    let (clock, n) = three_nodes();
    let red = RedLock::in_memory(&[&n[0], &n[1], &n[2]]).unwrap();
    let other = RedLock::in_memory(&[&n[0], &n[1], &n[2]]).unwrap();
    let g = red.lock("job").ttl(30 * S).try_acquire().unwrap().unwrap();
    let t0 = clock.elapsed();
    assert!(matches!(
        other.lock("job").wait(10 * S).acquire(),
        Err(Error::Timeout { .. })
    ));
    assert!(clock.elapsed() - t0 >= 10 * S);
    clock.advance(25 * S);
    assert!(g.is_lost());
    assert!(other.lock("job").try_acquire().unwrap().is_some());
}

#[test]
fn redlock_refuses_nodes_on_different_clocks_or_given_twice() {
    let (a, b) = (MemoryServer::new(), MemoryServer::new());
    assert!(matches!(
        RedLock::in_memory(&[&a, &b]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RedLock::in_memory(&[&a, &a]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RedLock::in_memory(&[]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn run_once_measures_the_job_on_the_clients_clock() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    // A job that takes 40 s (of the test's clock): longer than at_least_for, so the key
    // is deleted at its end and the next period may start at once.
    let clock = server.clock();
    let ran = a
        .run_once("cron", 60 * S, 30 * S, || clock.advance(40 * S))
        .unwrap();
    assert_eq!(ran, Some(()));
    assert_eq!(b.run_once("cron", 60 * S, 30 * S, || 1).unwrap(), Some(1));
}
