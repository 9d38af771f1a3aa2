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
    let workers = q.work(3, move |_job| -> Result<(), String> {
        d.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    await_condition(Duration::from_secs(30), || {
        done.load(Ordering::SeqCst) >= ids.len()
    });
    let report = workers.stop();
    assert_eq!(report.acked, 300);
    assert_eq!(q.stats().unwrap(), redlease::QueueStats::default());
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
        assert_eq!(got, fence + 1);
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
