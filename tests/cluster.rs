//! Redis Cluster: three masters on loopback ports joined with `redis-cli --cluster create`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use redis::Commands;
use redlease::Client;
use redlease_suite::RedisCluster;
use redlease_suite::testkit::{await_condition, connection, server};

struct Cluster {
    inner: RedisCluster,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster {
            inner: RedisCluster::start().expect("a 3-master cluster"),
        }
    }

    fn nodes(&self) -> &[redlease_suite::RedisServer] {
        self.inner.nodes()
    }

    fn client(&self) -> Client {
        Client::cluster(&self.inner.urls())
            .connect_timeout(Duration::from_millis(500))
            .io_timeout(Duration::from_millis(500))
            .build()
            .unwrap()
    }

    fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut connection(&self.nodes()[i]))
            .unwrap()
    }

    /// The index of the node serving `slot`.
    fn owner(&self, slot: u16) -> usize {
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut connection(&self.nodes()[0]))
            .unwrap();
        for range in slots {
            let redis::Value::Array(items) = range else {
                continue;
            };
            let (
                Some(redis::Value::Int(lo)),
                Some(redis::Value::Int(hi)),
                Some(redis::Value::Array(node)),
            ) = (items.first(), items.get(1), items.get(2))
            else {
                continue;
            };
            if (*lo..=*hi).contains(&i64::from(slot))
                && let Some(redis::Value::Int(port)) = node.get(1)
            {
                return self
                    .nodes()
                    .iter()
                    .position(|n| i64::from(n.port()) == *port)
                    .unwrap();
            }
        }
        panic!("slot {slot} has no owner")
    }
}

fn slot_of(cluster: &Cluster, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut connection(&cluster.nodes()[0]))
        .unwrap()
}

#[test]
fn lock_semaphore_and_queue_keep_exact_counts_on_a_cluster() {
    let cluster = Cluster::start();
    let counters = server();
    let c = cluster.client();
    // Names that land on different masters.
    let names = ["alpha", "bravo", "charlie", "delta"];
    let owners: std::collections::HashSet<usize> = names
        .iter()
        .map(|n| cluster.owner(slot_of(&cluster, &format!("redlease:{{{n}}}:lock"))))
        .collect();
    assert!(owners.len() >= 2, "names spread over the masters");

    let barrier = Arc::new(Barrier::new(8));
    let max_permits = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (c, barrier, max_permits) = (c.clone(), barrier.clone(), max_permits.clone());
            let mut conn = connection(&counters);
            thread::spawn(move || {
                barrier.wait();
                let name = names[i % names.len()];
                for _ in 0..50 {
                    c.lock(name)
                        .wait(Duration::from_secs(30))
                        .with_lock(|_| {
                            let n: i64 = conn.get::<_, Option<i64>>(name).unwrap().unwrap_or(0);
                            let _: () = conn.set(name, n + 1).unwrap();
                        })
                        .unwrap();
                    c.semaphore("pool", 2)
                        .wait(Duration::from_secs(30))
                        .with_permit(|_| {
                            let n: usize = conn.incr("holders", 1).unwrap();
                            max_permits.fetch_max(n, Ordering::SeqCst);
                            let _: i64 = conn.decr("holders", 1).unwrap();
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut conn = connection(&counters);
    for name in names {
        assert_eq!(conn.get::<_, i64>(name).unwrap(), 100, "{name}");
    }
    let m = max_permits.load(Ordering::SeqCst);
    assert!((1..=2).contains(&m), "{m}");

    let q = c.queue("orders").unwrap();
    let ids = q.push_many((0..300).map(|i| format!("job {i}"))).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let workers = q
        .work(3, move |_job| -> Result<(), String> {
            d.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    await_condition(Duration::from_secs(30), || {
        done.load(Ordering::SeqCst) >= ids.len()
    });
    let report = workers.stop();
    assert_eq!(report.acked, 300);
    assert_eq!(q.stats().unwrap(), redlease::queue::QueueStats::default());
}

#[test]
fn a_lock_whose_slot_moves_to_another_master_keeps_working() {
    let cluster = Cluster::start();
    let c = cluster.client();
    let mut guard = c
        .lock("moving")
        .ttl(Duration::from_secs(30))
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    let lock_key = "redlease:{moving}:lock";
    let slot = slot_of(&cluster, lock_key);
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    // Reshard the slot by hand, as redis-cli --cluster reshard does.
    let mut src = connection(&cluster.nodes()[from]);
    let mut dst = connection(&cluster.nodes()[to]);
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&from_id)
        .query(&mut dst)
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&to_id)
        .query(&mut src)
        .unwrap();
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(&mut src)
        .unwrap();
    assert!(keys.iter().any(|k| k == lock_key), "{keys:?}");
    for key in &keys {
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(cluster.nodes()[to].port())
            .arg(key)
            .arg(0)
            .arg(5000)
            .query(&mut src)
            .unwrap();
    }
    for node in cluster.nodes() {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to_id)
            .query(&mut connection(node))
            .unwrap();
    }
    assert_eq!(cluster.owner(slot), to);
    // The client still has the old slot map: its next command gets MOVED and follows it.
    guard.extend().unwrap();
    assert!(
        c.lock("moving").try_acquire().unwrap().is_none(),
        "still held, on the new master"
    );
    let fence = guard.fence();
    guard.release().unwrap();
    let again = c
        .lock("moving")
        .try_acquire()
        .unwrap()
        .expect("free after the release");
    assert!(
        again.fence() > fence,
        "the fence keeps increasing across the slot move"
    );
}

#[test]
fn waiters_on_a_cluster_are_woken_through_their_shard() {
    let cluster = Cluster::start();
    let c = cluster.client();
    let holder = c.lock("shard").try_acquire().unwrap().unwrap();
    let c2 = c.clone();
    let waiter = thread::spawn(move || {
        let start = std::time::Instant::now();
        let g = c2
            .lock("shard")
            .retry(Duration::from_secs(10), Duration::from_secs(10))
            .wait(Duration::from_secs(30))
            .acquire()
            .unwrap();
        (start.elapsed(), g.fence())
    });
    let channel = "redlease:{shard}:released";
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection(&cluster.nodes()[0]))
        .unwrap();
    let major: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next()?.parse().ok())
        .unwrap();
    if major < 7 {
        // Redis 6.2 has no shard channels: the client chose plain PUBLISH/SUBSCRIBE (one
        // listener, on the seed node; a cluster passes PUBLISH to every node).
        await_condition(Duration::from_secs(10), || {
            cluster.nodes().iter().any(|node| {
                let plain: Vec<redis::Value> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query(&mut connection(node))
                    .unwrap();
                matches!(plain.get(1), Some(redis::Value::Int(1)))
            })
        });
        let fence = holder.fence();
        holder.release().unwrap();
        let (waited, got) = waiter.join().unwrap();
        assert!(got > fence, "{got} after {fence}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        return;
    }
    // The waiter subscribes to the shard channel on the node serving its slot, only there.
    let owner = cluster.owner(slot_of(&cluster, channel));
    await_condition(Duration::from_secs(10), || {
        let subs: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query(&mut connection(&cluster.nodes()[owner]))
            .unwrap();
        matches!(subs.get(1), Some(redis::Value::Int(1)))
    });
    for (i, node) in cluster.nodes().iter().enumerate() {
        let plain: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut connection(node))
            .unwrap();
        assert!(
            matches!(plain.get(1), Some(redis::Value::Int(0))),
            "node {i}: no plain subscription"
        );
    }
    let fence = holder.fence();
    holder.release().unwrap();
    let (waited, got) = waiter.join().unwrap();
    assert!(got > fence);
    // With a 10 s retry interval, only the release message can have woken it in time.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

/// `calls` of each command in the node's `INFO commandstats` (`evalsha`, `setnx`, ...).
fn command_calls(node: &redlease_suite::RedisServer) -> std::collections::HashMap<String, u64> {
    command_stat(node, "calls=")
}

/// One field of each command's `INFO commandstats` line (`calls=`, `rejected_calls=`).
fn command_stat(
    node: &redlease_suite::RedisServer,
    field: &str,
) -> std::collections::HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection(node))
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix(field))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

fn calls(stats: &std::collections::HashMap<String, u64>, command: &str) -> u64 {
    stats.get(command).copied().unwrap_or(0)
}

/// The settings: io_timeout 200 ms, op_timeout 1 s.
fn tight_client(cluster: &Cluster) -> Client {
    Client::cluster(&cluster.inner.urls())
        .connect_timeout(Duration::from_millis(200))
        .io_timeout(Duration::from_millis(200))
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// How long a master stays frozen: past every deadline under test (a call that answers only
/// once the master runs again had a hidden re-send), yet well under the cluster's node
/// timeout (5 s), so the cluster does not mark the master failed and refuse what it then runs.
const FREEZE: Duration = Duration::from_millis(1500);

/// The bound under test: no call outlives its deadline (op_timeout 1 s) by more than one
/// io_timeout (200 ms), with a 2x margin for a loaded machine.
const BOUND: Duration = Duration::from_millis(2400);

/// Freezes `node` for [`FREEZE`] (SIGSTOP) on another thread, runs `f` meanwhile, waits for
/// the node to run again, and returns what `f` returned with how long it took.
fn while_frozen<T>(node: &redlease_suite::RedisServer, f: impl FnOnce() -> T) -> (T, Duration) {
    node.pause().unwrap();
    let start = std::time::Instant::now();
    let out = f();
    let took = start.elapsed();
    let left = FREEZE.saturating_sub(start.elapsed());
    thread::sleep(left); // the fault's length, not a synchronisation
    node.resume().unwrap();
    (out, took)
}

/// Waits until every node says `cluster_state:ok` again (a master frozen past the cluster's
/// node timeout is marked failed, and the mark is lifted a little after it answers again).
fn await_cluster_ok(cluster: &Cluster) {
    await_condition(Duration::from_secs(30), || {
        cluster.nodes().iter().all(|n| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut connection(n))
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    });
}

fn reset_stats(node: &redlease_suite::RedisServer) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut connection(node))
        .unwrap();
}

/// How many times the core sent its command: the `attempts` of an `Unavailable`.
fn core_attempts<T: std::fmt::Debug>(what: &str, got: &Result<T, redlease::Error>) -> u64 {
    match got {
        Err(redlease::Error::Unavailable { attempts, .. }) => u64::from(*attempts),
        other => panic!("{what}: Unavailable expected, got {other:?}"),
    }
}

/// Once `node` runs again, the scripts (`EVALSHA`/`EVAL`) it carried out, awaited until they
/// reach `at_least` (every command the client wrote was buffered before the node resumed).
/// Whether the call's last attempt left the client (its reply was lost): it then runs on
/// the node once the node answers again. One that found no connection in time (on a loaded
/// machine) never reaches the node.
fn was_sent<T>(got: &Result<T, redlease::Error>) -> bool {
    matches!(got, Err(redlease::Error::Unavailable { last, .. })
        if last.kind == redlease::FailureKind::NoReply)
}

fn script_runs(node: &redlease_suite::RedisServer, at_least: u64) -> u64 {
    let runs = || {
        let stats = command_calls(node);
        calls(&stats, "evalsha") + calls(&stats, "eval")
    };
    await_condition(Duration::from_secs(10), || runs() >= at_least);
    runs()
}

#[test]
fn a_frozen_master_gets_each_command_once_and_calls_keep_their_deadline() {
    let cluster = Cluster::start();
    let owner_of =
        |name: &str| cluster.owner(slot_of(&cluster, &format!("redlease:{{{name}}}:lock")));

    // 1. try_acquire of a lease lock: Unavailable in time; the node ran the script exactly
    // as often as the core sent it (before: 15 hidden re-sends, returning after the freeze).
    let c = tight_client(&cluster);
    let node = &cluster.nodes()[owner_of("q1")];
    // Scripts loaded and a connection pooled, then count from zero.
    await_condition(Duration::from_secs(10), || {
        c.lock("q1")
            .try_acquire()
            .is_ok_and(|g| g.is_some_and(|g| g.release().is_ok()))
    });
    reset_stats(node);
    let (got, took) = while_frozen(node, || c.lock("q1").try_acquire().map(|g| g.is_some()));
    let attempts = core_attempts("try_acquire", &got);
    println!("try_acquire with the master frozen: {took:?}");
    assert!(took < BOUND, "try_acquire took {took:?}");
    // Trying once resends a lost acquisition once (the script knows our token), no more.
    assert!((1..=2).contains(&attempts), "{attempts}");
    // An attempt that was sent runs once the node answers again; one that found no
    // connection in time (not sent, on a loaded machine) never reaches it.
    if was_sent(&got) {
        script_runs(node, 1);
    }
    await_cluster_ok(&cluster);
    // The core's own sends: its attempts, and the owner-checked undo (a release script)
    // that a lost acquisition sends before giving up; nothing more.
    let runs = script_runs(node, 0);
    assert!(
        runs <= attempts + 1,
        "no hidden re-send: {runs} runs, {attempts} attempts and one undo sent"
    );

    // 2. The legacy lock: its own SETNX wrote; it must not answer "busy" (Ok(None)).
    let name = "legacy1";
    let node =
        &cluster.nodes()[cluster.owner(slot_of(&cluster, &format!("redlease:{{{name}}}:legacy")))];
    let c = tight_client(&cluster);
    await_condition(Duration::from_secs(10), || {
        c.legacy_lock(name)
            .try_acquire()
            .is_ok_and(|g| g.is_some_and(|g| g.release().is_ok()))
    });
    reset_stats(node);
    let (got, took) = while_frozen(node, || {
        c.legacy_lock(name).try_acquire().map(|g| g.is_some())
    });
    let attempts = core_attempts("legacy try_acquire", &got);
    println!("legacy try_acquire with the master frozen: {took:?}");
    assert!(took < BOUND, "legacy try_acquire took {took:?}");
    if was_sent(&got) {
        await_condition(Duration::from_secs(10), || {
            calls(&command_calls(node), "setnx") >= 1
        });
    }
    await_cluster_ok(&cluster);
    let setnx = calls(&command_calls(node), "setnx");
    assert!(
        setnx <= attempts,
        "no hidden re-send: {setnx} SETNX, {attempts} sent"
    );

    await_cluster_ok(&cluster);

    // 3. Release of a held lease: outcome unknown (not NotOwner { Expired }, which a hidden
    // re-send finding its own deletion reported), in time; the key is gone once it runs.
    let c = tight_client(&cluster);
    let node = &cluster.nodes()[owner_of("held")];
    // (The first tries after a freeze may find no connection in 200 ms.) Both scripts
    // loaded first: an EVALSHA answered NOSCRIPT would not release.
    await_condition(Duration::from_secs(10), || {
        c.lock("held")
            .try_acquire()
            .is_ok_and(|g| g.is_some_and(|g| g.release().is_ok()))
    });
    let mut held = None;
    await_condition(Duration::from_secs(10), || {
        held = c
            .lock("held")
            .ttl(Duration::from_secs(30))
            .watchdog(false)
            .try_acquire()
            .ok()
            .flatten();
        held.is_some()
    });
    let guard = held.unwrap();
    reset_stats(node);
    let (got, took) = while_frozen(node, || guard.release());
    let attempts = core_attempts("release", &got);
    println!("release with the master frozen: {took:?}");
    assert!(took < BOUND, "release took {took:?}");
    let runs = script_runs(node, u64::from(was_sent(&got)));
    assert!(
        runs <= attempts,
        "no hidden re-send: {runs} runs, {attempts} sent"
    );
    // A release that says Ok deleted the key; one that gave up (Unavailable) may or may not
    // have run before the freeze ended: its key then expires with its ttl.
    if got.is_ok() {
        await_condition(Duration::from_secs(10), || {
            !connection(node)
                .exists::<_, bool>("redlease:{held}:lock")
                .unwrap()
        });
    }

    await_cluster_ok(&cluster);

    // 4. A queue take is not re-sent: no more jobs leased than takes the core sent.
    let c = tight_client(&cluster);
    let q = c.queue("jobs").unwrap();
    await_condition(Duration::from_secs(10), || {
        q.push_many((0..3).map(|i| format!("job {i}"))).is_ok()
    });
    let node = &cluster.nodes()[cluster.owner(slot_of(&cluster, "redlease:{jobs}:x"))];
    reset_stats(node);
    let (got, took) = while_frozen(node, || q.try_take().map(|j| j.is_some()));
    let attempts = core_attempts("try_take", &got);
    println!("try_take with the master frozen: {took:?}");
    assert!(took < BOUND, "try_take took {took:?}");
    // The core's own sends: its attempts, and the owner-checked undo (a release script)
    // that a lost acquisition sends before giving up; nothing more.
    let runs = script_runs(node, u64::from(was_sent(&got)));
    assert!(
        runs <= attempts + 1,
        "no hidden re-send: {runs} runs, {attempts} attempts and one undo sent"
    );
    let stats = tight_client(&cluster)
        .queue("jobs")
        .unwrap()
        .stats()
        .unwrap();
    assert!(stats.in_flight <= runs, "{stats:?}");
    assert_eq!(stats.in_flight + stats.ready, 3, "{stats:?}");
}

#[test]
fn a_slot_in_migration_costs_a_try_no_more_than_its_deadline() {
    let cluster = Cluster::start();
    let c = tight_client(&cluster);
    // The fence counter exists on the source: while the slot migrates, the acquire script
    // (lock key absent, fence key present) is refused with TRYAGAIN.
    let first = c.lock("mig").try_acquire().unwrap().unwrap();
    let first_fence = first.fence();
    first.release().unwrap();
    let lock_key = "redlease:{mig}:lock";
    let slot = slot_of(&cluster, lock_key);
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let mut src = connection(&cluster.nodes()[from]);
    let mut dst = connection(&cluster.nodes()[to]);
    let setslot = |conn: &mut redis::Connection, state: &str, id: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .query(conn)
            .unwrap();
    };
    setslot(&mut dst, "IMPORTING", &from_id);
    setslot(&mut src, "MIGRATING", &to_id);

    // Trying once: a transient error at once, not a wait for the migration to end.
    let start = std::time::Instant::now();
    let got = c.lock("mig").try_acquire();
    let took = start.elapsed();
    match &got {
        // The command did not run: a passing failure that names the server's TRYAGAIN.
        Err(redlease::Error::Unavailable { last, .. }) => {
            assert_eq!(last.kind, redlease::FailureKind::NotSent);
            assert!(last.to_string().contains("TRYAGAIN"), "{last}");
        }
        other => panic!(
            "{:?}",
            other.as_ref().map(|g| g.as_ref().map(|g| g.fence()))
        ),
    }
    println!("try_acquire on a migrating slot: {took:?}");
    assert!(took < BOUND, "try_acquire took {took:?}");

    // Waiting: retries inside its own wait, and ends at its deadline.
    let start = std::time::Instant::now();
    let got = c
        .lock("mig")
        .retry(Duration::from_millis(50), Duration::from_millis(100))
        .wait(Duration::from_secs(1))
        .acquire();
    let took = start.elapsed();
    assert!(got.is_err(), "the slot is still migrating");
    println!("a 1 s wait on a migrating slot: {took:?}");
    assert!(took < BOUND, "a 1 s wait took {took:?}");

    // A waiter that outlives the migration gets the lock once it ends.
    let c2 = c.clone();
    let waiter = thread::spawn(move || {
        c2.lock("mig")
            .retry(Duration::from_millis(50), Duration::from_millis(100))
            .wait(Duration::from_secs(20))
            .acquire()
            .map(|g| g.fence())
    });
    // Let it be refused a few times (TRYAGAIN), then finish the migration.
    let refused = || {
        calls(
            &command_stat(&cluster.nodes()[from], "rejected_calls="),
            "evalsha",
        )
    };
    let before = refused();
    await_condition(Duration::from_secs(10), || refused() >= before + 2);
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(&mut src)
        .unwrap();
    for key in &keys {
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(cluster.nodes()[to].port())
            .arg(key)
            .arg(0)
            .arg(5000)
            .query(&mut src)
            .unwrap();
    }
    for node in cluster.nodes() {
        setslot(&mut connection(node), "NODE", &to_id);
    }
    let fence = waiter
        .join()
        .unwrap()
        .expect("acquired after the migration");
    assert!(fence > first_fence, "the fence counter moved with the slot");
}

/// Unfenced lease locks (`fenced(false)`) on a cluster: names on different masters exclude
/// across two clients, report fence 0, are renewed by the watchdog past their ttl, and are
/// released; a fenced and an unfenced lock of one name exclude each other there too.
#[test]
fn unfenced_locks_exclude_renew_and_release_across_the_masters() {
    const TTL: Duration = Duration::from_millis(1000);
    let cluster = Cluster::start();
    let (a, b) = (cluster.client(), cluster.client());
    let names = ["alpha", "bravo", "charlie", "delta"];
    let key = |n: &str| format!("redlease:{{{n}}}:lock");
    let owners: std::collections::HashSet<usize> = names
        .iter()
        .map(|n| cluster.owner(slot_of(&cluster, &key(n))))
        .collect();
    assert!(owners.len() >= 2, "names spread over the masters");
    let pttl = |n: &str| -> i64 {
        let owner = cluster.owner(slot_of(&cluster, &key(n)));
        redis::cmd("PTTL")
            .arg(key(n))
            .query(&mut connection(&cluster.nodes()[owner]))
            .unwrap()
    };

    let guards: Vec<_> = names
        .iter()
        .map(|n| {
            let g = a
                .lock(n)
                .fenced(false)
                .ttl(TTL)
                .try_acquire()
                .unwrap()
                .unwrap_or_else(|| panic!("{n} is free"));
            assert_eq!(g.fence(), 0, "{n}: an unfenced lock has no fence");
            g
        })
        .collect();
    let start = std::time::Instant::now();
    // For three ttls: B is refused every name, fenced or not, and A's leases live on.
    while start.elapsed() < 3 * TTL {
        for (n, g) in names.iter().zip(&guards) {
            assert!(!g.is_lost(), "{n}: {:?}", g.lost_reason());
            assert!(
                b.lock(n).fenced(false).try_acquire().unwrap().is_none(),
                "{n}: B took A's unfenced lock after {:?}",
                start.elapsed()
            );
            assert!(
                b.lock(n).try_acquire().unwrap().is_none(),
                "{n}: B's fenced lock took A's unfenced lock after {:?}",
                start.elapsed()
            );
        }
        thread::sleep(Duration::from_millis(100)); // B polls; the invariant is checked each time
    }
    for (n, g) in names.iter().zip(guards) {
        let left = pttl(n);
        assert!(left > 0, "{n}: renewed past its ttl (pttl {left})");
        g.release().unwrap();
        assert_eq!(pttl(n), -2, "{n}: released");
    }

    // B takes each name fenced now; A's unfenced attempt is refused, then gets it back.
    for n in names {
        let fenced = b.lock(n).ttl(TTL).try_acquire().unwrap().expect("free");
        assert!(fenced.fence() > 0, "{n}");
        assert!(
            a.lock(n).fenced(false).try_acquire().unwrap().is_none(),
            "{n}: an unfenced lock took a fenced holder's lock"
        );
        fenced.release().unwrap();
        let again = a
            .lock(n)
            .fenced(false)
            .try_acquire()
            .unwrap()
            .expect("free again");
        assert_eq!(again.fence(), 0);
        again.release().unwrap();
    }
}
