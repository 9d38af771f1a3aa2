//! Live leases against real redis-server: watchdog renewal, lost-lease signal, waiting
//! without polling, run-once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::{Client, Error, LossReason, lock::LeaseState};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(300))
}

/// Long enough that a renewal (every ttl/3) delayed by a loaded machine still lands well
/// within the lease's validity: a watched lease is lost the moment its validity passes.
const TTL: Duration = Duration::from_secs(1);

#[test]
fn a_watched_guard_stays_owned_for_five_ttls() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    let guard = a.lock("kept").ttl(TTL).try_acquire().unwrap().unwrap();
    assert!(guard.is_watched());
    let start = Instant::now();
    let mut checks = 0;
    while start.elapsed() < TTL * 5 {
        assert!(
            b.lock("kept").try_acquire().unwrap().is_none(),
            "taken after {:?}",
            start.elapsed()
        );
        assert!(!guard.is_lost());
        checks += 1;
        thread::sleep(Duration::from_millis(25));
    }
    assert!(checks > 20);
    assert!(guard.remaining() > Duration::ZERO);
    assert!(matches!(guard.inspect().unwrap(), LeaseState::Held { .. }));
    guard.release().unwrap();
    assert!(b.lock("kept").try_acquire().unwrap().is_some());
}

#[test]
fn a_key_deleted_behind_our_back_is_reported_lost_within_one_renewal() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    let guard = a.lock("stolen").ttl(TTL).try_acquire().unwrap().unwrap();
    let _: () = raw(&server).del("redlease:{stolen}:lock").unwrap();
    let deleted = Instant::now();
    // The promise is one renewal period (ttl/3): a ttl is that with a 3x margin.
    let reason = guard
        .lost()
        .recv_timeout(TTL)
        .expect("loss reported within one renewal period (ttl/3) plus margin");
    assert!(deleted.elapsed() < TTL, "{:?}", deleted.elapsed());
    assert_eq!(reason, LossReason::Expired);
    assert!(guard.is_lost());
    assert_eq!(guard.lost_reason(), Some(LossReason::Expired));
    let other = b
        .lock("stolen")
        .try_acquire()
        .unwrap()
        .expect("free after deletion");
    drop(guard);
    assert!(
        matches!(other.inspect().unwrap(), LeaseState::Held { .. }),
        "the lost holder's drop left the new holder's key alone"
    );
    other.release().unwrap();
}

#[test]
fn a_lost_guard_refuses_to_release_and_extend() {
    let server = server();
    let a = client(&server);
    let mut guard = a.lock("refuse").ttl(TTL).try_acquire().unwrap().unwrap();
    let _: () = raw(&server)
        .set("redlease:{refuse}:lock", "someone-else")
        .unwrap();
    assert_eq!(guard.lost().recv_timeout(TTL).unwrap(), LossReason::Taken);
    assert!(matches!(
        guard.extend(),
        Err(Error::NotOwner {
            reason: LossReason::Taken,
            ..
        })
    ));
    assert!(matches!(
        guard.release(),
        Err(Error::NotOwner {
            reason: LossReason::Taken,
            ..
        })
    ));
    let v: String = raw(&server).get("redlease:{refuse}:lock").unwrap();
    assert_eq!(v, "someone-else");
}

/// CPU time (user + system, in clock ticks) of this process's threads whose name starts with `prefix`.
fn thread_cpu_ticks(prefix: &str) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the command name (which is in parentheses): utime is the 14th field.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        total += utime + stime;
    }
    total
}

#[test]
fn killing_redis_under_a_watched_guard_reports_it_lost_once_it_must_have_expired() {
    let mut server = server();
    let a = client(&server);
    let guard = a.lock("outage").ttl(TTL).try_acquire().unwrap().unwrap();
    let valid_until = guard.valid_until();
    server.kill();
    let killed = Instant::now();
    let reason = guard.lost().recv_timeout(TTL * 3).expect("loss reported");
    assert_eq!(reason, LossReason::RenewalFailed);
    let now = Instant::now();
    assert!(
        now >= valid_until,
        "not before the lease could have expired"
    );
    // Reported at the validity, which ends at most a ttl after the kill: twice that for a
    // loaded machine.
    assert!(
        now.duration_since(killed) < TTL * 2,
        "{:?}",
        now.duration_since(killed)
    );
    // The watchdog did not spin while Redis was down (threads of other tests share the
    // name, so this bounds them all: well under a second of CPU).
    assert!(thread_cpu_ticks("redlease-watch") < 100);
    drop(guard); // lost: nothing is sent, and nothing hangs

    // The same client (and its watchdog) works once Redis is back.
    server.restart().unwrap();
    let g = a
        .lock("outage")
        .ttl(TTL)
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    thread::sleep(TTL * 2);
    assert!(
        !g.is_lost(),
        "renewed by the same watchdog after the outage"
    );
    g.release().unwrap();
}

#[test]
fn no_renewal_reaches_redis_after_release() {
    // The slow log, set to record every command with its arguments, shows each renewal.
    let server = RedisServer::builder()
        .config("slowlog-log-slower-than", "0")
        .config("slowlog-max-len", "100000")
        .start()
        .unwrap();
    let c = client(&server);
    let mut conn = raw(&server);
    let extend_sha = redlease::core::lease::SCRIPTS
        .iter()
        .find(|s| s.name == "lease_extend")
        .unwrap()
        .sha1;
    let renewals_of = |conn: &mut redis::Connection, key: &str| -> usize {
        let log: redis::Value = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query(conn)
            .unwrap();
        let text = format!("{log:?}");
        // A renewal is the extend script, or where the server has it (Valkey 8.1+, Redis
        // 8.4+) the native `SET key token IFEQ token PX ttl` (`DELIFEQ` is a release).
        let native = text.matches("IFEQ").count() - text.matches("DELIFEQ").count();
        (text.matches(extend_sha).count() + native).min(text.matches(key).count())
    };
    let every = Duration::from_millis(50);
    let guard = c
        .lock("quiet")
        .ttl(TTL)
        .renew_every(every)
        .try_acquire()
        .unwrap()
        .unwrap();
    await_condition(Duration::from_secs(5), || {
        renewals_of(&mut conn, "redlease:{quiet}:lock") >= 3
    });
    guard.release().unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut conn).unwrap();
    // Watching for the absence of something needs time to pass: four renewal periods.
    thread::sleep(every * 4);
    assert_eq!(renewals_of(&mut conn, "redlease:{quiet}:lock"), 0);
}

#[test]
fn max_hold_stops_renewal_and_reports_the_lease_lost() {
    let server = server();
    let c = client(&server);
    let hold = Duration::from_millis(1500);
    // Measured from before the acquisition: the hold limit runs from a moment after it.
    let start = Instant::now();
    let guard = c
        .lock("bounded")
        .ttl(TTL)
        .max_hold(hold)
        .try_acquire()
        .unwrap()
        .unwrap();
    let reason = guard.lost().recv_timeout(hold * 3).unwrap();
    assert_eq!(reason, LossReason::MaxHoldReached);
    let held = start.elapsed();
    // Not before the hold limit (less the drift allowance and then some), and by the hold
    // limit: twice it for a loaded machine.
    assert!(
        held >= hold - Duration::from_millis(100) && held < hold * 2,
        "{held:?}"
    );
    // The guard says "lost" a drift allowance before Redis frees the key: conservative.
    let next = c.lock("bounded").wait(Duration::from_millis(500)).acquire();
    assert!(next.is_ok(), "free right after the hold limit: {next:?}");
}

#[test]
fn a_dead_process_lock_expires_after_one_ttl() {
    let server = server();
    let other = client(&server);
    let (acquired, fence) = {
        let doomed = client(&server);
        let guard = doomed
            .lock("orphan")
            .ttl(TTL)
            .try_acquire()
            .unwrap()
            .unwrap();
        let fence = guard.fence();
        std::mem::forget(guard); // the process "dies": no release
        (Instant::now(), fence)
        // `doomed` dropped here: its watchdog stops
    };
    let g = other
        .lock("orphan")
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    let waited = acquired.elapsed();
    // Free after one ttl (the waiter's pauses end at the holder's expiry); twice that for
    // a loaded machine. A lease still renewed would keep the waiter out for the whole 5 s.
    assert!(waited < TTL * 2, "{waited:?}");
    assert!(g.fence() > fence);
}

#[test]
fn waiters_are_woken_by_releases_not_by_polling() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let threads = 8;
    let rounds = 50;
    let barrier = Arc::new(Barrier::new(threads));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let c = c.clone();
            let barrier = barrier.clone();
            let mut conn = raw(&server);
            thread::spawn(move || {
                barrier.wait();
                let mut longest = Duration::ZERO;
                for _ in 0..rounds {
                    let t = Instant::now();
                    // A 60 s retry interval: polling alone would take hours.
                    let g = c
                        .lock("busy")
                        .retry(Duration::from_secs(60), Duration::from_secs(60))
                        .wait(Duration::from_secs(120))
                        .acquire()
                        .unwrap();
                    longest = longest.max(t.elapsed());
                    let n: i64 = conn.get::<_, Option<i64>>("n").unwrap().unwrap_or(0);
                    let _: () = conn.set("n", n + 1).unwrap();
                    g.release().unwrap();
                }
                longest
            })
        })
        .collect();
    let longest = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap();
    let took = start.elapsed();
    let n: i64 = conn.get("n").unwrap();
    assert_eq!(n, (threads * rounds) as i64);
    // The first pause of a 60 s backoff is at least 30 s: no acquisition waited for a
    // timer. (A waiter that keeps losing the race to threads that re-acquire at once can
    // wait for hundreds of sections on a loaded machine: the bound leaves room for that.)
    assert!(
        longest < Duration::from_secs(30),
        "longest acquisition {longest:?}"
    );
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
fn waiters_fall_back_to_polling_while_the_subscriber_is_cut_off() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    // Start the listener, then keep killing its connection while threads contend.
    drop(c.lock("warm").try_acquire().unwrap());
    let holder = c.lock("cut").try_acquire().unwrap().unwrap();
    let c2 = c.clone();
    let waiter = thread::spawn(move || {
        c2.lock("cut")
            .retry(Duration::from_millis(20), Duration::from_millis(50))
            .wait(Duration::from_secs(10))
            .acquire()
    });
    // Cut the subscriber connection as soon as it exists, then release without it.
    await_condition(Duration::from_secs(5), || {
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut conn)
            .unwrap();
        n > 0
    });
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut conn)
        .unwrap();
    holder.release().unwrap();
    let got = waiter
        .join()
        .unwrap()
        .expect("acquired by polling while the listener was down");
    drop(got);
    // The listener comes back by itself: later waits are notification-driven again.
    await_condition(Duration::from_secs(10), || {
        let n: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redlease:{cut}:released")
            .query(&mut conn)
            .unwrap();
        matches!(n.get(1), Some(redis::Value::Int(1)))
    });
}

#[test]
fn run_once_runs_a_fleet_job_exactly_once_per_period() {
    let server = server();
    let clients: Vec<Client> = (0..8).map(|_| client(&server)).collect();
    let mut conn = raw(&server);
    let periods = 3;
    let runs = Arc::new(AtomicUsize::new(0));
    for period in 0..periods {
        let barrier = Arc::new(Barrier::new(clients.len()));
        let handles: Vec<_> = clients
            .iter()
            .cloned()
            .map(|c| {
                let barrier = barrier.clone();
                let runs = runs.clone();
                thread::spawn(move || {
                    barrier.wait();
                    let mut ran = 0;
                    for _ in 0..20 {
                        let r = c
                            .run_once(
                                "nightly",
                                Duration::from_secs(5),
                                // Long enough for all 160 tries of a loaded machine to
                                // end before the key expires and opens the next period.
                                Duration::from_secs(1),
                                || {
                                    runs.fetch_add(1, Ordering::SeqCst);
                                },
                            )
                            .unwrap();
                        ran += usize::from(r.is_some());
                    }
                    ran
                })
            })
            .collect();
        let ran: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(ran, 1, "period {period}");
        assert_eq!(runs.load(Ordering::SeqCst), period + 1);
        // Held at least 1 s after the start, then expires by itself (not deleted).
        let pttl: i64 = conn.pttl("redlease:{nightly}:lock").unwrap();
        assert!(pttl > 0 && pttl <= 1000, "{pttl}");
        await_condition(Duration::from_secs(5), || {
            !conn.exists::<_, bool>("redlease:{nightly}:lock").unwrap()
        });
    }
    // A long job: the key is deleted at the end, so the next trigger may run at once.
    let c = &clients[0];
    assert_eq!(
        c.run_once(
            "long",
            Duration::from_secs(5),
            Duration::from_millis(10),
            || thread::sleep(Duration::from_millis(30))
        )
        .unwrap(),
        Some(())
    );
    assert!(!conn.exists::<_, bool>("redlease:{long}:lock").unwrap());
    // at_least_for above at_most_for is refused.
    assert!(matches!(
        c.run_once(
            "bad",
            Duration::from_millis(10),
            Duration::from_secs(1),
            || ()
        ),
        Err(Error::InvalidArgument(_))
    ));
    // A job that outlives at_most_for is reported.
    let r = c.run_once("overrun", Duration::from_millis(50), Duration::ZERO, || {
        thread::sleep(Duration::from_millis(120))
    });
    assert!(matches!(r, Err(Error::NotOwner { .. })), "{r:?}");
}

#[test]
fn extending_to_a_new_ttl_keeps_the_watchdog_renewing_with_it() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    let mut guard = a.lock("grown").ttl(TTL).try_acquire().unwrap().unwrap();
    guard.extend_to(TTL * 3).unwrap();
    assert_eq!(guard.ttl(), TTL * 3);
    assert_eq!(guard.lease().ttl, TTL, "the lease as acquired");
    let start = Instant::now();
    // Longer than the new ttl: the lease lives on only if it is renewed.
    while start.elapsed() < TTL * 3 + TTL / 2 {
        assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
        assert!(b.lock("grown").try_acquire().unwrap().is_none());
        thread::sleep(Duration::from_millis(50));
    }
    let LeaseState::Held {
        remaining: Some(left),
    } = guard.inspect().unwrap()
    else {
        panic!("held")
    };
    // Renewed with the new ttl (every 1 s), so more than the old ttl is always left.
    assert!(left > TTL, "{left:?}");
    guard.release().unwrap();
}

#[test]
fn leases_registered_just_before_the_client_is_dropped_are_reported_too() {
    let server = server();
    let client = client(&server);
    // Registered back to back: the second is still queued for the watchdog thread.
    let guards: Vec<_> = (0..4)
        .map(|i| {
            client
                .lock(&format!("q{i}"))
                .try_acquire()
                .unwrap()
                .unwrap()
        })
        .collect();
    drop(client);
    for g in &guards {
        assert_eq!(
            g.lost_reason(),
            Some(redlease::LossReason::WatchdogStopped),
            "{}",
            g.name()
        );
    }
}
