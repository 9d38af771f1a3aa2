//! Issue 19.2: on a Redis Cluster, one frozen master must not stall the renewals of leases
//! on the other masters; the frozen master's leases are reported lost by their validity.

use std::time::{Duration, Instant};

use redlease::{Client, LossReason, lock::LeaseState};
use redlease_suite::RedisCluster;
use redlease_suite::testkit::{await_condition, connection};

#[test]
fn a_frozen_master_stalls_no_renewal_on_the_other_masters() {
    let cluster = RedisCluster::start().expect("a 3-master cluster");
    // A 6 s freeze must not get the node declared failed (which would take the whole
    // cluster down, its slots being uncovered): the default node timeout is 15 s.
    for node in cluster.nodes() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-node-timeout")
            .arg("15000")
            .query(&mut connection(node))
            .unwrap();
    }
    let client = Client::cluster(&cluster.urls())
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(300))
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(2);
    let guards: Vec<_> = (0..30)
        .map(|i| {
            client
                .lock(&format!("shard-{i}"))
                .ttl(ttl)
                .try_acquire()
                .unwrap()
                .unwrap()
        })
        .collect();
    // Which master holds each lease: the owner answers EXISTS, the others MOVED.
    let owner = |key: &str| -> usize {
        (0..3)
            .find(|&n| {
                redis::cmd("EXISTS")
                    .arg(key)
                    .query::<i64>(&mut connection(&cluster.nodes()[n]))
                    .is_ok_and(|e| e == 1)
            })
            .unwrap_or_else(|| panic!("no master holds {key}"))
    };
    let frozen_node = 0;
    let (frozen, healthy): (Vec<_>, Vec<_>) = guards
        .into_iter()
        .partition(|g| owner(g.lease().target.keys.first().unwrap_or_default()) == frozen_node);
    assert!(!frozen.is_empty() && !healthy.is_empty());

    // Every lease renewed once (the client has learned which master owns which slot).
    await_condition(Duration::from_secs(5), || {
        frozen
            .iter()
            .chain(&healthy)
            .all(|g| g.valid_until() > g.lease().valid_until)
    });

    cluster.nodes()[frozen_node].pause().unwrap();
    let paused_at = Instant::now();
    let mut heard: Vec<Option<(Instant, LossReason)>> = vec![None; frozen.len()];
    while paused_at.elapsed() < Duration::from_secs(6) {
        for (g, seen) in frozen.iter().zip(heard.iter_mut()) {
            if seen.is_none()
                && let Ok(reason) = g.lost().try_recv()
            {
                *seen = Some((Instant::now(), reason));
            }
        }
        let lost: Vec<_> = healthy
            .iter()
            .filter(|g| g.is_lost())
            .map(|g| (g.name().to_owned(), g.lost_reason()))
            .collect();
        assert!(
            lost.is_empty(),
            "leases on healthy masters lost {:?} into the freeze: {lost:?}",
            paused_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The frozen master's leases were reported lost, each by its validity (the local
    // validity is final: no renewal was confirmed after the freeze).
    for (g, seen) in frozen.iter().zip(&heard) {
        let (at, reason) = seen.unwrap_or_else(|| panic!("{} never reported lost", g.name()));
        assert_eq!(reason, LossReason::RenewalFailed);
        let late = at.saturating_duration_since(g.valid_until());
        // The promise is "by the validity": the bound is room for the watchdog and this
        // polling thread to be scheduled on a loaded machine.
        assert!(
            late < Duration::from_millis(300),
            "{} reported lost {late:?} after its validity",
            g.name()
        );
    }
    // The healthy leases are still held, on the server too (the freeze goes on).
    for g in &healthy {
        assert!(!g.is_lost());
        let state = g.inspect().unwrap();
        assert!(
            matches!(state, LeaseState::Held { .. }),
            "{}: {state:?}",
            g.name()
        );
    }

    // Still frozen: dropping the client does not wait on the frozen master (the renewal
    // thread talking to it is given at most its io timeout).
    let t = Instant::now();
    drop(client);
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "dropping the client took {took:?}"
    );
    assert!(
        healthy
            .iter()
            .all(|g| g.lost_reason() == Some(LossReason::WatchdogStopped))
    );
    cluster.nodes()[frozen_node].resume().unwrap();
}
