//! The lock family on the in-process server (feature `memory`): no redis-server, every timer
//! on the server's clock. Real time is bounded loosely (each test runs in milliseconds; the
//! assertions are about virtual time).

use std::time::{Duration, Instant};

use redlease::memory::{Loss, MemoryServer};
use redlease::{Error, LossReason};
use redlease_suite::testkit::await_condition;

const S: Duration = Duration::from_secs(1);

#[test]
fn a_lock_is_exclusive_and_fenced_across_clients_of_one_server() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a.lock("invoice").watchdog(false).acquire().unwrap();
    assert!(b.lock("invoice").try_acquire().unwrap().is_none());
    let first = g.fence();
    g.release().unwrap();
    let g2 = b.lock("invoice").try_acquire().unwrap().unwrap();
    assert!(g2.fence() > first);
}

#[test]
fn a_30_s_lease_expires_when_the_clock_passes_it() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a.lock("l").ttl(30 * S).watchdog(false).acquire().unwrap();
    server.clock().advance(29 * S);
    assert!(!g.is_lost());
    assert!(b.lock("l").try_acquire().unwrap().is_none());
    server.clock().advance(2 * S);
    assert_eq!(g.remaining(), Duration::ZERO);
    let g2 = b.lock("l").try_acquire().unwrap().expect("expired: free");
    assert!(g2.fence() > g.fence());
    assert!(matches!(g.release(), Err(Error::NotOwner { .. })));
}

#[test]
fn a_waiter_times_out_after_10_s_of_virtual_time_in_no_real_time() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let _g = a.lock("l").ttl(60 * S).watchdog(false).acquire().unwrap();
    let (real, virt) = (Instant::now(), server.clock().elapsed());
    let err = b.lock("l").wait(10 * S).acquire().unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let waited = server.clock().elapsed() - virt;
    assert!(waited >= 10 * S && waited < 11 * S, "{waited:?}");
    assert!(real.elapsed() < 5 * S, "{:?}", real.elapsed());
}

#[test]
fn a_waiter_gets_the_lock_when_the_lease_expires() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a.lock("l").ttl(5 * S).watchdog(false).acquire().unwrap();
    let t0 = server.clock().elapsed();
    let g2 = b.lock("l").wait(10 * S).acquire().unwrap();
    let waited = server.clock().elapsed() - t0;
    assert!(waited >= 5 * S && waited < 6 * S, "{waited:?}");
    assert!(g2.fence() > g.fence());
}

#[test]
fn the_watchdog_renews_on_the_virtual_clock_and_reports_a_deleted_key_lost() {
    let server = MemoryServer::new();
    let a = server.client();
    let g = a.lock("w").ttl(30 * S).acquire().unwrap();
    server.clock().advance(95 * S);
    assert!(!g.is_lost(), "renewed every 10 s");
    assert!(g.remaining() > 15 * S, "{:?}", g.remaining());
    assert!(server.evict("redlease:{w}:lock"));
    server.clock().advance(11 * S);
    assert!(g.is_lost());
    assert!(g.lost().try_recv().is_ok());
}

#[test]
fn a_paused_server_makes_the_watchdog_report_the_lease_lost_at_its_validity() {
    let server = MemoryServer::new();
    let a = server.client();
    let g = a.lock("p").ttl(30 * S).acquire().unwrap();
    server.pause();
    server.clock().advance(29 * S);
    assert!(!g.is_lost());
    server.clock().advance(2 * S);
    assert_eq!(g.lost_reason(), Some(LossReason::RenewalFailed));
}

#[test]
fn a_lost_release_reply_is_retried_and_the_lock_is_free() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a.lock("r").watchdog(false).acquire().unwrap();
    server.lose_next_reply(Loss::AfterRun);
    g.release().unwrap();
    assert!(b.lock("r").try_acquire().unwrap().is_some());
}

#[test]
fn a_release_wakes_a_waiter_without_moving_the_clock() {
    let server = MemoryServer::new();
    // Two threads make calls at once: time moves only when the test says.
    server.clock().set_auto_advance(false);
    let (a, b) = (server.client(), server.client());
    let g = a.lock("l").ttl(60 * S).watchdog(false).acquire().unwrap();
    let waiter = std::thread::spawn(move || b.lock("l").wait(10 * S).acquire().map(|g| g.fence()));
    await_condition(30 * S, || server.clock().sleepers() == 1);
    let first = g.fence();
    g.release().unwrap();
    let fence = waiter.join().unwrap().unwrap();
    assert!(fence > first);
    assert_eq!(
        server.clock().elapsed(),
        Duration::ZERO,
        "woken by the release"
    );
}

#[test]
fn with_auto_advance_off_a_waiter_times_out_when_the_test_advances_the_clock() {
    let server = MemoryServer::new();
    server.clock().set_auto_advance(false);
    let (a, b) = (server.client(), server.client());
    let _g = a.lock("l").ttl(60 * S).watchdog(false).acquire().unwrap();
    let waiter = std::thread::spawn(move || b.lock("l").wait(10 * S).acquire().map(|_| ()));
    await_condition(30 * S, || server.clock().sleepers() == 1);
    server.clock().advance(5 * S);
    // Still waiting (it retried, and sleeps again): 5 s is not its 10 s.
    await_condition(30 * S, || server.clock().sleepers() == 1);
    assert!(!waiter.is_finished());
    server.clock().advance(6 * S);
    assert!(matches!(waiter.join().unwrap(), Err(Error::Timeout { .. })));
}

#[test]
fn a_restart_without_data_is_reported_to_the_holder_and_fences_still_increase() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a.lock("r").ttl(30 * S).acquire().unwrap();
    server.restart_empty(); // nothing persisted; the script cache is empty too
    // The next renewal (10 s in) finds the key gone: the holder learns it at once.
    server.clock().advance(10 * S);
    assert!(g.is_lost(), "{:?}", g.lost_reason());
    // A new holder gets a greater fence although the counter was lost (EVALSHA falls back
    // to EVAL after the restart).
    let next = b
        .lock("r")
        .try_acquire()
        .unwrap()
        .expect("free after the restart");
    assert!(next.fence() > g.fence());
}

#[test]
fn dropping_the_client_stops_its_watchdog_and_the_guard_says_so() {
    let server = MemoryServer::new();
    let a = server.client();
    let g = a.lock("d").ttl(30 * S).acquire().unwrap();
    drop(a);
    assert_eq!(g.lost_reason(), Some(LossReason::WatchdogStopped));
    // Its release is still sent (owner-checked): the lock is free at once.
    g.release().unwrap();
    assert!(server.client().lock("d").try_acquire().unwrap().is_some());
}

/// One run of a small contended scenario: what it observed, to the microsecond.
fn contended_run() -> (Duration, u64, String, String) {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let g = a.lock("l").ttl(5 * S).watchdog(false).acquire().unwrap();
    let token = format!("{:?}", g.lease().token);
    let g2 = b.lock("l").wait(10 * S).acquire().unwrap();
    let job = a.queue("q").unwrap().push("x").unwrap();
    (server.clock().elapsed(), g2.fence(), token, job)
}

#[test]
fn a_run_on_a_new_server_is_repeated_exactly() {
    // Tokens, retry jitter and job ids come from a generator the server seeds, and time
    // from its clock: the same test sees the same schedule every run.
    let first = contended_run();
    assert!(
        first.0 > 5 * S,
        "b waited for the lease to expire: {:?}",
        first.0
    );
    assert_eq!(contended_run(), first);
}

/// An unwatched lease says it is lost once its validity has passed (issue 27: it said
/// `is_lost() == false` past its ttl, while the README's long-job loop relies on
/// `lost_reason()`).
#[test]
fn an_unwatched_lease_is_lost_once_its_validity_has_passed() {
    let server = MemoryServer::new();
    let client = server.client();
    let guard = client
        .lock("unwatched")
        .ttl(Duration::from_secs(10))
        .watchdog(false)
        .acquire()
        .unwrap();
    assert!(!guard.is_watched());
    server.clock().advance(Duration::from_secs(9));
    assert_eq!(guard.lost_reason(), None);
    // Past the validity (10 s less 1 % and 2 ms), before the key's expiry on the server.
    server.clock().advance(Duration::from_millis(950));
    assert!(guard.is_lost(), "past its validity");
    assert_eq!(guard.lost_reason(), Some(LossReason::ValidityPassed));
    // The release is still sent (the key may outlive the validity by the drift allowance).
    guard.release().unwrap();
}

/// `with_lock` returns the closure's value beside the loss (issue 27: it was dropped
/// although the closure's side effects had happened).
#[test]
fn with_lock_keeps_the_value_of_a_section_whose_lease_was_lost() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let out = a
        .lock("report")
        .ttl(10 * S)
        .watchdog(false)
        .with_lock(|guard| {
            // The lease runs out mid-section and another client takes the lock.
            server.clock().advance(11 * S);
            b.lock("report")
                .try_acquire()
                .unwrap()
                .expect("free")
                .release()
                .unwrap();
            guard.fence()
        });
    match out {
        Err(redlease::lock::WithLockError::Release { value, error }) => {
            assert!(value >= 1, "the fence the section wrote with");
            assert!(matches!(error, Error::NotOwner { .. }), "{error:?}");
        }
        other => panic!("{other:?}"),
    }
    // Not acquired: the closure did not run.
    let _held = b.lock("busy").acquire().unwrap();
    let out = a.lock("busy").with_lock(|_| unreachable!("not acquired"));
    let out: Result<(), _> = out;
    assert!(matches!(
        out,
        Err(redlease::lock::WithLockError::Acquire(_))
    ));
    // `?` into redlease::Error still works.
    let plain = || -> Result<u64, Error> { Ok(a.lock("free").with_lock(|g| g.fence())?) };
    assert!(plain().unwrap() >= 1);
}
