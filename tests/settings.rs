//! Every setting at its extremes, through the public API against a real redis-server: each
//! value is either refused with an `InvalidArgument` that names the setting and its range
//! (before anything is written), or works end to end and leaves nothing behind.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::limits::{MAX_DURATION, MAX_PERMITS, MIN_TTL};
use redlease::{
    Client, Error, LossReason, lock::LegacyAlgorithm, lock::LockBuilder, lock::RedLock,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw, server};

const HUNDRED_YEARS_MS: i64 = 3_155_760_000_000;

/// 1e17 ms: accepted before the 100-year limit, and printed by Lua as `1e+17`.
const HUGE: Duration = Duration::from_millis(100_000_000_000_000_000);

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

/// `result` is an `InvalidArgument` whose message contains every one of `needles`.
#[track_caller]
fn refused<T: std::fmt::Debug>(result: Result<T, Error>, needles: &[&str]) {
    match result {
        Err(e @ Error::InvalidArgument(_)) => {
            let msg = e.to_string();
            for n in needles {
                assert!(msg.contains(n), "{msg:?} does not mention {n:?}");
            }
        }
        other => panic!("expected InvalidArgument mentioning {needles:?}, got {other:?}"),
    }
}

/// Makes a lock builder of some kind.
type Make = fn(&Client) -> LockBuilder<'_>;

fn keys(conn: &mut redis::Connection) -> BTreeSet<String> {
    conn.keys::<_, Vec<String>>("*")
        .unwrap()
        .into_iter()
        .collect()
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    conn.pttl(key).unwrap()
}

#[test]
fn client_settings_out_of_range_are_refused_at_build() {
    let server = server();
    let b = || Client::builder(server.url());
    let max = "3155760000s";
    refused(b().io_timeout(Duration::MAX).build(), &["io timeout", max]);
    refused(
        b().io_timeout(Duration::ZERO).build(),
        &["io timeout", "1ms"],
    );
    refused(
        b().connect_timeout(Duration::MAX).build(),
        &["connect timeout", max],
    );
    refused(b().op_timeout(Duration::MAX).build(), &["op timeout", max]);
    refused(b().pool_size(0).build(), &["pool size", "10000"]);
    // r2d2 would reserve room for u32::MAX connections up front.
    refused(b().pool_size(u32::MAX).build(), &["pool size", "10000"]);
}

/// The longest accepted io timeout: the client works and its watchdog keeps renewing (with
/// `io_timeout(Duration::MAX)` the watchdog thread used to die of an overflow).
#[test]
fn the_longest_io_timeout_works_and_the_watchdog_renews() {
    let server = server();
    let mut conn = raw(&server);
    let c = Client::builder(server.url())
        .io_timeout(MAX_DURATION)
        .connect_timeout(MAX_DURATION)
        .op_timeout(MAX_DURATION)
        .build()
        .unwrap();
    // 1 s: each renewal (every third) has ~650 ms to land on a loaded machine.
    let ttl = Duration::from_secs(1);
    let guard = c.lock("long-io").ttl(ttl).try_acquire().unwrap().unwrap();
    let key = "redlease:{long-io}:lock";
    // A ttl later the key still has most of a ttl: renewed.
    let started = Instant::now();
    await_condition(Duration::from_secs(10), || {
        started.elapsed() > ttl && pttl(&mut conn, key) > 500
    });
    assert!(!guard.is_lost());
    guard.release().unwrap();
    assert!(!keys(&mut conn).contains(key));
}

#[test]
fn lock_settings_out_of_range_are_refused_and_write_nothing() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let ms = Duration::from_millis;
    let max = "3155760000s";
    let kinds: [(&str, Make); 6] = [
        ("lease", |c| c.lock("x")),
        ("reentrant", |c| c.reentrant_lock("x")),
        ("fair", |c| c.fair_lock("x")),
        ("read", |c| c.read_lock("x")),
        ("write", |c| c.write_lock("x")),
        ("permit", |c| c.semaphore("x", 2)),
    ];
    for (kind, make) in kinds {
        let ttl_name = if kind == "permit" {
            "permit timeout"
        } else {
            "ttl"
        };
        // ttl 1-3 ms: named as the ttl (not as a "renewal interval"), with its range.
        for ttl in [ms(1), ms(2), ms(3), ms(9)] {
            refused(make(&c).ttl(ttl).try_acquire(), &[ttl_name, "10ms", max]);
            refused(
                make(&c).ttl(ttl).watchdog(false).acquire(),
                &[ttl_name, "10ms"],
            );
        }
        refused(make(&c).ttl(Duration::MAX).try_acquire(), &[ttl_name, max]);
        // 1e17 ms used to be accepted, reach Lua in exponent form and fail after writing.
        refused(make(&c).ttl(HUGE).try_acquire(), &[ttl_name, max]);
        refused(make(&c).ttl(HUGE).watchdog(false).acquire(), &[ttl_name]);
        // Retry pauses: a floor (retry(0, 0) was a busy loop) and no overflow.
        refused(make(&c).retry(ms(0), ms(0)).acquire(), &["retry", "1ms"]);
        refused(
            make(&c).retry(Duration::MAX, ms(10)).acquire(),
            &["retry", max],
        );
        refused(
            make(&c).retry(ms(5), Duration::MAX).acquire(),
            &["retry", max],
        );
        refused(
            make(&c).retry(ms(20), ms(10)).acquire(),
            &["retry", "at least the first"],
        );
        // (A wait of Duration::MAX is accepted, as "no deadline of ours": tests/bounds.rs.)
        // Renewals must come within the lease's validity (ttl less 1 % and 2 ms).
        refused(
            make(&c).ttl(ms(100)).renew_every(ms(97)).try_acquire(),
            &["renewal interval", "97ms"],
        );
        refused(
            make(&c).renew_every(Duration::ZERO).try_acquire(),
            &["renewal interval"],
        );
        refused(
            make(&c).max_hold(Duration::MAX).try_acquire(),
            &["maximum hold time", max],
        );
    }
    let queued: [Make; 3] = [
        |c| c.fair_lock("x"),
        |c| c.write_lock("x"),
        |c| c.semaphore("x", 1),
    ];
    for make in queued {
        refused(
            make(&c).waiter_timeout(Duration::MAX).acquire(),
            &["waiter timeout", max],
        );
        refused(
            make(&c).waiter_timeout(HUGE).acquire(),
            &["waiter timeout", max],
        );
        refused(
            make(&c).waiter_timeout(ms(5)).acquire(),
            &["waiter timeout", "10ms"],
        );
    }
    refused(
        c.run_once("x", ms(3), ms(1), || ()),
        &["at_most_for", "10ms"],
    );
    assert!(keys(&mut conn).is_empty(), "nothing written");
}

#[test]
fn semaphore_counts_are_exact_or_refused() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    // u64::MAX used to be stored, then read back as "not set".
    for permits in [0, u64::MAX, MAX_PERMITS + 1] {
        refused(
            c.semaphore("s", permits).try_acquire(),
            &["permits", "4294967295"],
        );
    }
    assert!(keys(&mut conn).is_empty(), "nothing written");

    let guard = c
        .semaphore("s", MAX_PERMITS)
        .try_acquire()
        .unwrap()
        .unwrap();
    assert_eq!(c.semaphore_state("s").unwrap().permits, Some(MAX_PERMITS));
    // 2^63 used to fail after changing the count; 2^53 + 1 was stored as 2^53.
    for permits in [1 << 63, (1 << 53) + 1, 0] {
        refused(c.set_permits("s", permits), &["permits", "4294967295"]);
        assert_eq!(
            c.semaphore_state("s").unwrap().permits,
            Some(MAX_PERMITS),
            "unchanged after refusing {permits}"
        );
    }
    assert_eq!(c.set_permits("s", 7).unwrap(), Some(MAX_PERMITS));
    assert_eq!(c.set_permits("s", MAX_PERMITS).unwrap(), Some(7));
    assert_eq!(c.semaphore_state("s").unwrap().permits, Some(MAX_PERMITS));
    guard.release().unwrap();
    let _: () = conn.del("redlease:{s}:sem:permits").unwrap();
    assert!(keys(&mut conn).is_empty(), "{:?}", keys(&mut conn));
}

/// The longest accepted ttl and waiter timeout reach every script as plain integers: each
/// kind is granted with a 100-year lease, a waiter with a 100-year place in line gives it up
/// cleanly on timeout, and the release leaves only the fence (and the permit count).
#[test]
fn the_longest_durations_work_end_to_end_for_every_kind() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    fn long(b: LockBuilder<'_>) -> LockBuilder<'_> {
        b.ttl(MAX_DURATION)
            .waiter_timeout(MAX_DURATION)
            .wait(Duration::from_millis(100))
    }
    // (holder, waiter, keys that must remain after the release)
    let cases: [(&str, Make, Make, &[&str]); 5] = [
        (
            "lease",
            |c| c.lock("l"),
            |c| c.lock("l"),
            &["redlease:{l}:fence"],
        ),
        (
            "reentrant",
            |c| c.reentrant_lock("r"),
            |c| c.lock("unused"),
            &["redlease:{r}:fence"],
        ),
        (
            "fair",
            |c| c.fair_lock("f"),
            |c| c.fair_lock("f"),
            &["redlease:{f}:fence"],
        ),
        (
            "read/write",
            |c| c.read_lock("rw"),
            |c| c.write_lock("rw"),
            &[],
        ),
        (
            "permit",
            |c| c.semaphore("p", 1),
            |c| c.semaphore("p", 1),
            &["redlease:{p}:sem:permits"],
        ),
    ];
    for (kind, holder, waiter, remaining) in cases {
        let guard = long(holder(&c)).try_acquire().unwrap().unwrap();
        assert!(!guard.is_lost(), "{kind}");
        // Redis holds it for 100 years (less the time since).
        let held: Vec<String> = keys(&mut conn)
            .into_iter()
            .filter(|k| !k.ends_with(":fence") && !k.ends_with(":permits"))
            .collect();
        assert!(!held.is_empty(), "{kind}");
        for k in &held {
            let left = pttl(&mut conn, k);
            assert!(
                left > HUNDRED_YEARS_MS - 60_000 && left <= HUNDRED_YEARS_MS,
                "{kind}: {k} has pttl {left}"
            );
        }
        if kind != "reentrant" {
            // A waiter with a 100-year place in line times out and leaves the line.
            let err = long(waiter(&c)).acquire().unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{kind}: {err:?}");
        }
        if kind == "permit" {
            let info = c.semaphore_state("p").unwrap();
            assert!(info.waiters.is_empty(), "{kind}: {info:?}");
        }
        guard.release().unwrap();
        let left = keys(&mut conn);
        let expected: BTreeSet<String> = remaining.iter().map(|s| s.to_string()).collect();
        assert_eq!(left, expected, "{kind}: only the persistent keys remain");
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    }
    // run_once with the longest at_most_for, and a remainder under MIN_TTL.
    let out = c
        .run_once("once", MAX_DURATION, Duration::from_millis(1), || 42)
        .unwrap();
    assert_eq!(out, Some(42));
    let key = "redlease:{once}:lock";
    let left = pttl(&mut conn, key);
    assert!(
        left == -2 || left <= MIN_TTL.as_millis() as i64,
        "the key is kept at most MIN_TTL more, pttl {left}"
    );
}

#[test]
fn extending_to_the_extremes() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let mut guard = c
        .lock("ext")
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    refused(guard.extend_to(Duration::MAX), &["ttl", "3155760000s"]);
    refused(guard.extend_to(Duration::from_millis(2)), &["ttl", "10ms"]);
    assert!(!guard.is_lost(), "a refused extension changes nothing");
    guard.extend_to(MAX_DURATION).unwrap();
    assert!(pttl(&mut conn, "redlease:{ext}:lock") > HUNDRED_YEARS_MS - 60_000);
    guard.release().unwrap();
    assert_eq!(
        keys(&mut conn),
        BTreeSet::from(["redlease:{ext}:fence".to_owned()])
    );
}

#[test]
fn queue_settings_work_or_are_refused() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let q = c.queue("q").unwrap();
    let id = q.push("job").unwrap();
    let ms = Duration::from_millis;
    let max = "3155760000s";
    // visibility(2ms) made every job un-ackable; idle_check(0) was a busy loop.
    refused(
        q.clone().visibility(ms(2)).try_take(),
        &["visibility timeout", "10ms"],
    );
    refused(
        q.clone().visibility(Duration::MAX).try_take(),
        &["visibility timeout", max],
    );
    refused(
        q.clone().idle_check(Duration::ZERO).take(ms(10)),
        &["idle check", "1ms"],
    );
    refused(
        q.clone().idle_check(Duration::MAX).take(ms(10)),
        &["idle check", max],
    );
    refused(
        q.clone()
            .retry_backoff(Duration::MAX, Duration::MAX)
            .try_take(),
        &["retry backoff", max],
    );
    // (A take of Duration::MAX is accepted, as "no deadline of ours": tests/bounds.rs.)
    refused(
        q.push_with(
            "late",
            redlease::queue::PushOptions::new().delay(Duration::MAX),
        ),
        &["delay", max],
    );
    refused(
        q.push_with("late", redlease::queue::PushOptions::new().delay(HUGE)),
        &["delay", max],
    );
    refused(
        q.clone().visibility(HUGE).try_take(),
        &["visibility timeout", max],
    );
    refused(q.clone().max_deliveries(0).try_take(), &["max_deliveries"]);
    let stats = q.stats().unwrap();
    assert_eq!((stats.ready, stats.in_flight, stats.delayed), (1, 0, 0));

    // The longest accepted values work: a 100-year lease is granted and acked.
    let long = q
        .clone()
        .visibility(MAX_DURATION)
        .idle_check(MAX_DURATION)
        .retry_backoff(MAX_DURATION, MAX_DURATION);
    let job = long.try_take().unwrap().unwrap();
    assert_eq!(job.id(), id);
    assert!(!job.is_lost());
    job.ack().unwrap();
    // An idle taker with a 100-year idle check still honours its wait.
    let started = Instant::now();
    assert!(long.take(ms(100)).unwrap().is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
    // A delayed push of 100 years, and a nack whose backoff is beyond it.
    long.push_with(
        "far",
        redlease::queue::PushOptions::new().delay(MAX_DURATION),
    )
    .unwrap();
    let id = long.push("again").unwrap();
    let job = long.try_take().unwrap().unwrap();
    assert_eq!(job.id(), id);
    job.nack_after(Duration::MAX).unwrap();
    let stats = q.stats().unwrap();
    assert_eq!((stats.ready, stats.in_flight, stats.delayed), (0, 0, 2));
    // A listing limit beyond a list's size means "all" (it used to reach Redis as 1.8e19).
    assert!(q.dead_jobs(usize::MAX).unwrap().is_empty());
    // A nack after the last delivery sends the job to the dead list.
    let dying = q.clone().max_deliveries(1);
    let id = dying.push("dies").unwrap();
    let job = dying.try_take().unwrap().unwrap();
    assert_eq!(job.id(), id);
    job.nack().unwrap();
    let dead = q.dead_jobs(usize::MAX).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id);
    // A limit of 0 lists none (it used to list one).
    assert!(q.dead_jobs(0).unwrap().is_empty());
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
}

#[test]
fn legacy_lock_settings_work_or_are_refused() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let ms = Duration::from_millis;
    for algorithm in [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire] {
        let lock = || c.legacy_lock("old").algorithm(algorithm);
        refused(
            lock().retry(ms(5), Duration::MAX).acquire(),
            &["retry", "3155760000s"],
        );
        refused(
            lock().retry(Duration::MAX, ms(5)).acquire(),
            &["retry", "3155760000s"],
        );
        refused(lock().retry(ms(0), ms(0)).acquire(), &["retry", "1ms"]);
        refused(lock().ttl(ms(3)).try_acquire(), &["ttl", "10ms"]);
        assert!(keys(&mut conn).is_empty(), "nothing written");
        // A wait of Duration::MAX means "as long as it takes": accepted (the lock is free).
        lock()
            .wait(Duration::MAX)
            .acquire()
            .unwrap()
            .release()
            .unwrap();
        let guard = lock().ttl(MAX_DURATION).try_acquire().unwrap().unwrap();
        // Valid for the ttl less its drift allowance (1 %).
        assert!(guard.remaining() > MAX_DURATION * 98 / 100);
        // A contender sees it held (the GetSet timestamp did not overflow into the past).
        assert!(lock().try_acquire().unwrap().is_none());
        guard.release().unwrap();
        assert!(keys(&mut conn).is_empty(), "{algorithm:?}");
    }
}

#[test]
fn redlock_settings_work_or_are_refused() {
    let a = server();
    let b = server();
    let url = a.url();
    refused(
        RedLock::builder(&[&url])
            .node_timeout(Duration::MAX)
            .build(),
        &["node timeout", "3155760000s"],
    );
    refused(
        RedLock::builder(&[&url]).pool_size(u32::MAX).build(),
        &["pool size"],
    );
    // The same server three times always timed out (its second SET NX found the first).
    refused(
        RedLock::builder(&[&url, &url, &url]).build(),
        &["distinct servers"],
    );
    let same_server_other_db = format!("{url}3");
    refused(
        RedLock::builder(&[
            url.as_str(),
            b.url().as_str(),
            same_server_other_db.as_str(),
        ])
        .build(),
        &["distinct servers"],
    );
    let red = RedLock::builder(&[url.as_str(), b.url().as_str()])
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    refused(
        red.lock("r").retry_max(Duration::ZERO).acquire(),
        &["retry", "1ms"],
    );
    refused(red.lock("r").ttl(Duration::MAX).acquire(), &["ttl"]);
    // A wait of Duration::MAX means "as long as it takes": accepted (the lock is free).
    red.lock("r")
        .wait(Duration::MAX)
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    let guard = red
        .lock("r")
        .ttl(MAX_DURATION)
        .try_acquire()
        .unwrap()
        .unwrap();
    assert_eq!(guard.granted(), 2);
    // Valid for the ttl less its drift allowance (1 %).
    assert!(guard.remaining() > MAX_DURATION * 98 / 100);
    guard.release().unwrap();
    for s in [&a, &b] {
        assert!(keys(&mut raw(s)).is_empty());
    }
}

#[test]
fn names_that_would_break_the_cluster_hash_tag_are_refused() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    for name in ["}", "}x", "}{x}"] {
        refused(c.lock(name).try_acquire(), &["must not start with '}'"]);
        refused(
            c.semaphore(name, 1).try_acquire(),
            &["must not start with '}'"],
        );
        refused(c.queue(name), &["must not start with '}'"]);
        refused(
            c.legacy_lock(name).try_acquire(),
            &["must not start with '}'"],
        );
    }
    assert!(keys(&mut conn).is_empty());
    // A brace elsewhere keeps a non-empty tag that every key shares.
    let guard = c.lock("a}b").try_acquire().unwrap().unwrap();
    guard.release().unwrap();
    assert_eq!(
        keys(&mut conn),
        BTreeSet::from(["redlease:{a}b}:fence".to_owned()])
    );
}

/// A watched lease at the ttl floor is granted usable and renewed while the guard lives.
#[test]
fn a_lease_at_the_floor_is_usable() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    // A waiting acquisition: on a loaded machine a reply may come after a 10 ms lease's
    // validity (the grant is then not returned as held, and trying once would fail
    // `Unavailable`); waiting asks again until a grant arrives in time.
    let guard = c
        .lock("floor")
        .ttl(MIN_TTL)
        .wait(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let key = "redlease:{floor}:lock";
    // Held in Redis for at most the floor, and renewed: the key outlives several ttls (or,
    // on a machine too loaded to renew every 3 ms, the guard says it was lost).
    let started = Instant::now();
    await_condition(Duration::from_secs(10), || {
        guard.is_lost() || (started.elapsed() > MIN_TTL * 5 && pttl(&mut conn, key) > 0)
    });
    if let Some(reason) = guard.lost_reason() {
        assert_ne!(reason, LossReason::Taken, "nobody else took it");
    }
    let left = pttl(&mut conn, key);
    assert!(left <= MIN_TTL.as_millis() as i64, "pttl {left}");
    let _ = guard.release();
}

/// `work(usize::MAX)` used to try to spawn threads until the system refused, then keep
/// trying ~2^64 times; it starts at most MAX_WORKERS threads and stops cleanly.
#[test]
fn a_worker_pool_is_bounded() {
    let server = server();
    let c = client(&server);
    let q = c.queue("w").unwrap();
    q.push("one").unwrap();
    let started = Instant::now();
    let workers = q.work(usize::MAX, |_job| Ok::<(), String>(())).unwrap();
    let spawned = started.elapsed();
    // This process's threads: the pool's plus the test harness's and other tests' few.
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    assert!(
        threads <= redlease::limits::MAX_WORKERS + 200,
        "{threads} threads"
    );
    await_condition(Duration::from_secs(30), || workers.report().acked == 1);
    let report = workers.stop();
    assert_eq!(report.acked, 1);
    assert!(
        spawned < Duration::from_secs(30),
        "starting the pool took {spawned:?}"
    );
}

/// On a Redis Cluster, a name with braces anywhere but at its start keeps every key of the
/// primitive in one slot, so the multi-key scripts run; a leading `}` (which used to fail
/// with CROSSSLOT there) is refused before anything is sent.
#[test]
fn names_with_braces_work_on_a_cluster() {
    let cluster = redlease_suite::RedisCluster::start().expect("a 3-master cluster");
    let c = Client::cluster(&cluster.urls())
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for name in ["a}b", "{x}y", "z}"] {
        let fair = c.fair_lock(name).try_acquire().unwrap().unwrap();
        fair.release().unwrap();
        let permit = c.semaphore(name, 2).try_acquire().unwrap().unwrap();
        permit.release().unwrap();
        let q = c.queue(name).unwrap();
        q.push("job").unwrap();
        q.try_take().unwrap().unwrap().ack().unwrap();
    }
    refused(
        c.fair_lock("}a").try_acquire(),
        &["must not start with '}'"],
    );
    refused(c.queue("}a"), &["must not start with '}'"]);
}
