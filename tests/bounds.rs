//! Every call returns within its documented bound on a frozen server (SIGSTOP), whatever
//! the pool's idle time or a renewal in flight (issue 26, items 4 and 5), and a wait past
//! the longest duration means "no deadline of ours" (item 6).

use std::thread;
use std::time::{Duration, Instant};

use redlease::{Client, Error, lock::LockGuard};
use redlease_suite::RedisServer;
use redlease_suite::testkit::server;

/// Slack over a bound, for a busy machine: scheduling, the SIGSTOP itself, a connection
/// set-up's first steps.
const SLACK: Duration = Duration::from_millis(300);

fn client(server: &RedisServer, io_timeout: Duration, op_timeout: Duration) -> Client {
    Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(io_timeout)
        .op_timeout(op_timeout)
        .build()
        .unwrap()
}

/// The idle time after which a pooled connection is checked (PINGed) before use, and a
/// little more.
const PAST_IDLE_CHECK: Duration = Duration::from_millis(1200);

/// Item 4: with io_timeout 3 s and op_timeout 1 s, release, extend, inspect and a guard's
/// drop on a frozen server each return within op_timeout (plus slack) even when the pooled
/// connection they check out has been idle past the pool's idle check: that check's PING is
/// bounded by the caller's remaining time, not by a full io_timeout (3.05 s before).
#[test]
fn every_owner_call_on_a_frozen_server_returns_within_op_timeout_after_an_idle_pool() {
    let server = server();
    let io_timeout = Duration::from_secs(3);
    let op_timeout = Duration::from_secs(1);
    // Each call leaves the guard it does not consume, to be dropped once the server runs
    // again (its drop would release, another op_timeout, inside the measured time).
    type Call = fn(&mut Option<LockGuard>) -> Result<(), Error>;
    let calls: [(&str, Call); 4] = [
        ("release", |g| g.take().unwrap().release()),
        ("extend", |g| g.as_mut().unwrap().extend()),
        ("inspect", |g| g.as_ref().unwrap().inspect().map(|_| ())),
        ("drop", |g| {
            drop(g.take());
            Ok(())
        }),
    ];
    // One client (and so one pool) per call, each with a guard whose connection then idles.
    let held: Vec<(&str, Call, LockGuard)> = calls
        .into_iter()
        .map(|(name, call)| {
            let c = client(&server, io_timeout, op_timeout);
            let guard = c
                .lock(&format!("idle-{name}"))
                .watchdog(false)
                .ttl(Duration::from_secs(60))
                .try_acquire()
                .unwrap()
                .unwrap();
            (name, call, guard)
        })
        .collect();
    // The scenario is the idle time itself, not a synchronisation.
    thread::sleep(PAST_IDLE_CHECK);
    server.pause().unwrap();
    let threads: Vec<_> = held
        .into_iter()
        .map(|(name, call, guard)| {
            thread::spawn(move || {
                let mut guard = Some(guard);
                let start = Instant::now();
                let out = call(&mut guard);
                (name, out, start.elapsed(), guard)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    server.resume().unwrap();
    let results: Vec<_> = results
        .into_iter()
        .map(|(name, out, took, _guard)| (name, out, took))
        .collect();
    for (name, out, took) in &results {
        println!("{name}: {took:?} {out:?}");
    }
    for (name, out, took) in results {
        if name != "drop" {
            assert!(
                matches!(out, Err(Error::Unavailable { .. })),
                "{name}: a typed error, got {out:?}"
            );
        }
        assert!(
            took < op_timeout + SLACK,
            "{name} took {took:?} (op_timeout {op_timeout:?}, io_timeout {io_timeout:?})"
        );
    }
}

/// Item 4: a guard dropped while its renewal is in flight on a frozen server returns within
/// op_timeout: the wait for the renewal and the release share that one deadline, and the
/// release's checkout does not add a full io_timeout (1.885 s at op_timeout 1.5 s before).
#[test]
fn a_guard_dropped_with_a_renewal_in_flight_returns_within_op_timeout() {
    let server = server();
    let io_timeout = Duration::from_secs(3);
    let op_timeout = Duration::from_millis(1500);
    let c = client(&server, io_timeout, op_timeout);
    // A second pooled connection, idle past the check by the time of the drop.
    let other = c.lock("renewing-other").try_acquire().unwrap().unwrap();
    let ttl = Duration::from_millis(1500);
    let guard = c.lock("renewing").ttl(ttl).try_acquire().unwrap().unwrap();
    other.release().unwrap();
    let acquired = Instant::now();
    // Renewals come every ttl/3 (500 ms): freeze before the first, drop after it was sent
    // (on a busy machine it may be later; the bound holds either way).
    server.pause().unwrap();
    thread::sleep((ttl / 3 + PAST_IDLE_CHECK).saturating_sub(acquired.elapsed()));
    let start = Instant::now();
    drop(guard);
    let took = start.elapsed();
    server.resume().unwrap();
    println!("drop with a renewal in flight took {took:?}");
    assert!(
        took < op_timeout + SLACK,
        "the drop took {took:?} (op_timeout {op_timeout:?}, io_timeout {io_timeout:?})"
    );
}

/// Item 5: dropping the last client while a renewal waits on a frozen server returns within
/// a second with io_timeout 3 s (2.9-3.0 s before: the renewal thread was joined for
/// io_timeout + 100 ms); the renewal thread still ends by itself once its I/O times out.
#[test]
fn dropping_the_last_client_with_a_renewal_in_flight_returns_within_a_second() {
    let server = server();
    let io_timeout = Duration::from_secs(3);
    let c = client(&server, io_timeout, Duration::from_secs(1));
    // A long lease renewed often: the renewal's reply is awaited for the whole io_timeout
    // (a lease whose validity ends sooner gives up on its renewal then).
    let every = Duration::from_millis(200);
    let guard = c
        .lock("renewing")
        .ttl(Duration::from_secs(30))
        .renew_every(every)
        .try_acquire()
        .unwrap()
        .unwrap();
    server.pause().unwrap();
    // The first renewal is due 200 ms after the acquisition, then waits up to io_timeout for
    // its reply: drop the client while it does.
    thread::sleep(every + Duration::from_millis(300));
    let start = Instant::now();
    drop(c);
    let took = start.elapsed();
    println!("dropping the client took {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "dropping the last client took {took:?} with io_timeout {io_timeout:?}"
    );
    // The guard learns that nothing renews it any more.
    assert!(guard.is_lost());
    drop(guard);
    server.resume().unwrap();
}

/// Item 6: `Duration::MAX` as a wait means "as long as it takes", as in
/// `recv_timeout(Duration::MAX)`: accepted (it used to fail with `DurationTooLong`), and a
/// free lock or a ready job is taken at once. Ttls keep their limit.
#[test]
fn duration_max_as_a_wait_is_accepted() {
    let server = server();
    let c = client(&server, Duration::from_secs(1), Duration::from_secs(1));
    type Make = fn(&Client) -> redlease::lock::LockBuilder<'_>;
    let kinds: [(&str, Make); 6] = [
        ("lease", |c| c.lock("forever")),
        ("reentrant", |c| c.reentrant_lock("forever-reentrant")),
        ("fair", |c| c.fair_lock("forever-fair")),
        ("read", |c| c.read_lock("forever-rw")),
        ("write", |c| c.write_lock("forever-rw")),
        ("permit", |c| c.semaphore("forever-permits", 2)),
    ];
    for (kind, make) in kinds {
        let g = make(&c)
            .wait(Duration::MAX)
            .acquire()
            .unwrap_or_else(|e| panic!("{kind}: a wait of Duration::MAX is refused: {e:?}"));
        g.release().unwrap();
    }
    // Busy: the waiter waits (it is not refused at once) until the holder lets go.
    let holder = c.lock("forever").try_acquire().unwrap().unwrap();
    let waiter = {
        let c = c.clone();
        thread::spawn(move || c.lock("forever").wait(Duration::MAX).acquire())
    };
    thread::sleep(Duration::from_millis(100));
    assert!(!waiter.is_finished(), "the waiter waits");
    holder.release().unwrap();
    waiter.join().unwrap().unwrap().release().unwrap();
    let q = c.queue("forever-jobs").unwrap();
    q.push(b"job").unwrap();
    let job = q
        .take(Duration::MAX)
        .expect("a take of Duration::MAX is accepted");
    job.expect("the job was ready").ack().unwrap();
    // A ttl past the limit is still refused.
    let e = c
        .lock("forever")
        .ttl(Duration::MAX)
        .try_acquire()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}
