//! Least privilege: every primitive runs as a Redis 7 ACL user holding only the rights listed
//! in docs/acl.md; a key outside the prefix is refused; a missing channel right is reported.

use std::thread;
use std::time::Duration;

use redlease::{Client, Error, lock::LeaseState, lock::LegacyAlgorithm, lock::RedLock};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{await_condition, connection, server};

/// The commands of docs/acl.md ("every primitive" on one server).
const COMMANDS: &str = "+ping +evalsha +eval +subscribe +unsubscribe +publish \
    +get +set +del +exists +incr +pexpire +pttl +time +rename \
    +hget +hmget +hset +hsetnx +hdel +hlen +hincrby +hexists +incrby \
    +llen +lindex +lpop +lpos +lrange +lrem +lset +ltrim +rpush \
    +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore \
    +setnx +getset +wait";

/// Creates user `name` (password `pw`) with the documented commands, keys `~app:*` and, when
/// `channels`, channels `&app:*`.
fn create_user(server: &RedisServer, name: &str, channels: bool) {
    let mut rule = vec![
        "SETUSER",
        name,
        "reset",
        "on",
        ">pw",
        "~app:*",
        "resetchannels",
    ];
    if channels {
        rule.push("&app:*");
    }
    rule.extend(COMMANDS.split_whitespace());
    let _: () = redis::cmd("ACL")
        .arg(&rule)
        .query(&mut connection(server))
        .unwrap();
}

fn client_as(server: &RedisServer, user: &str, prefix: &str) -> Client {
    Client::builder(format!("redis://{user}:pw@127.0.0.1:{}/", server.port()))
        .key_prefix(prefix)
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .op_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// A lock held by `holder` while another thread waits for it: the release must wake the
/// waiter through the listener (which needs the channel right).
fn contended(client: &Client, name: &str) {
    let held = client.lock(name).acquire().unwrap();
    let waiter = {
        let client = client.clone();
        let name = name.to_owned();
        thread::spawn(move || {
            client
                .lock(&name)
                .wait(Duration::from_secs(20))
                .acquire()
                .and_then(|g| g.release())
        })
    };
    await_condition(Duration::from_secs(10), || client.status().waiters == 1);
    held.release().unwrap();
    waiter.join().unwrap().unwrap();
}

#[test]
fn a_restricted_user_runs_every_primitive() {
    let server = server();
    create_user(&server, "app", true);
    let client = client_as(&server, "app", "app");

    // Locks of every kind, with contention so the listener subscribes.
    contended(&client, "lease");
    let outer = client.reentrant_lock("re").acquire().unwrap();
    let inner = client.reentrant_lock("re").acquire().unwrap();
    inner.release().unwrap();
    outer.release().unwrap();
    client
        .fair_lock("fair")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    let r1 = client.read_lock("rw").acquire().unwrap();
    let r2 = client.read_lock("rw").acquire().unwrap();
    assert!(client.write_lock("rw").try_acquire().unwrap().is_none());
    r1.release().unwrap();
    r2.release().unwrap();
    client
        .write_lock("rw")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    let mut g = client.lock("ext").acquire().unwrap();
    g.extend().unwrap();
    assert!(matches!(g.inspect().unwrap(), LeaseState::Held { .. }));
    g.release().unwrap();
    // WAIT is allowed: with no replica the acquisition fails as it should, not with NOPERM.
    let err = client
        .lock("replicated")
        .min_replicas(1, Duration::from_millis(100))
        .acquire()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReplicationFailed {
                acknowledged: 0,
                ..
            }
        ),
        "{err:?}"
    );

    // Semaphore.
    let p = client.semaphore("sem", 2).acquire().unwrap();
    assert_eq!(client.set_permits("sem", 3).unwrap(), Some(2));
    let state = client.semaphore_state("sem").unwrap();
    assert_eq!(state.holders.len(), 1);
    p.release().unwrap();

    // Run-once.
    assert_eq!(
        client
            .run_once(
                "cron",
                Duration::from_secs(5),
                Duration::from_millis(10),
                || 7
            )
            .unwrap(),
        Some(7)
    );

    // Queue: push, take, ack, nack to the dead list, requeue, delete.
    let q = client.queue("jobs").unwrap().max_deliveries(1);
    q.push("a").unwrap();
    q.push_with(
        "later",
        redlease::queue::PushOptions::new()
            .priority(3)
            .delay(Duration::from_millis(10)),
    )
    .unwrap();
    let job = q.take(Duration::from_secs(5)).unwrap().unwrap();
    // A worker's ack-and-take, as the worker pool runs it (the delayed job may not be due yet).
    let next = job.ack_and_take();
    next.ack.unwrap();
    let job = match next.next {
        Some(job) => job,
        None => q.take(Duration::from_secs(5)).unwrap().unwrap(),
    };
    assert!(
        job.waited().is_some(),
        "a take reports the job's enqueue time"
    );
    let id = job.id().to_owned();
    job.nack().unwrap();
    assert_eq!(q.dead_jobs(10).unwrap()[0].id, id);
    assert!(q.requeue_dead(&id).unwrap());
    let job = q.take(Duration::from_secs(5)).unwrap().unwrap();
    job.nack().unwrap();
    assert!(q.delete_dead(&id).unwrap());
    assert_eq!(q.purge_dead().unwrap(), 0);
    assert_eq!(q.stats().unwrap().dead, 0);

    // Rate limiter: take, wait, peek, reset.
    let limiter = client
        .rate_limiter("api")
        .rate(100, Duration::from_secs(1))
        .burst(1)
        .build()
        .unwrap();
    assert!(limiter.try_acquire(1).unwrap().allowed);
    assert!(limiter.acquire(1, Duration::from_secs(5)).unwrap().allowed);
    assert!(limiter.peek().unwrap().remaining <= 1);
    limiter.reset().unwrap();

    // Legacy locks (no scripts, no pub/sub).
    for algorithm in [LegacyAlgorithm::GetSet, LegacyAlgorithm::SetNxExpire] {
        client
            .legacy_lock("old")
            .algorithm(algorithm)
            .acquire()
            .unwrap()
            .release()
            .unwrap();
    }

    // RedLock over this one server, as the same user.
    let url = format!("redis://app:pw@127.0.0.1:{}/", server.port());
    let redlock = RedLock::builder(&[url])
        .key_prefix("app")
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    redlock.lock("red").acquire().unwrap().release().unwrap();

    // The listener subscribed without a refusal.
    await_condition(Duration::from_secs(10), || {
        let listener = client.status().listener;
        listener.started && listener.connected == 1
    });
    assert_eq!(client.status().listener.refused, None);

    // The read scripts (a lease's inspect, the semaphore's state, the queue's stats and dead
    // list) go as EVALSHA_RO, which this user is not granted: refused once, then sent as
    // EVALSHA by this client from then on. (Redis 6.2 has no EVALSHA_RO: "unknown command".)
    if major_version(&server) >= 7 {
        assert_eq!(rejected_calls(&server, "evalsha_ro"), 1);
    }
}

/// docs/acl.md's read-only operator on Redis 7+ and Valkey: keys readable only
/// (`%R~app:*`), no write command and no `EVALSHA`: the library's read scripts go as
/// `EVALSHA_RO`, and every read of locks, semaphores, queues and clients works; a write is
/// refused. On Redis 6.2 (no `%R~`, no `EVALSHA_RO`) the same reads run as `EVALSHA` (the
/// connection set-up's `INFO` says so), without a refused call.
#[test]
fn a_read_only_user_reads_everything_through_read_only_scripts() {
    let server = server();
    let modern = major_version(&server) >= 7;
    let admin = Client::builder(server.url())
        .key_prefix("app")
        .label("writer")
        .build()
        .unwrap();
    let held = admin.lock("orders").acquire().unwrap();
    let permit = admin.semaphore("sem", 2).acquire().unwrap();
    let q = admin
        .queue("jobs")
        .unwrap()
        .counting(true)
        .max_deliveries(1);
    q.push("a").unwrap();
    q.push("b").unwrap();
    let job = q.take(Duration::from_secs(5)).unwrap().unwrap();
    let dead_id = job.id().to_owned();
    job.nack().unwrap();
    q.pause_group("acme").unwrap();
    await_condition(Duration::from_secs(10), || {
        admin.clients().is_ok_and(|c| !c.is_empty())
    });

    let keys = if modern { "%R~app:*" } else { "~app:*" };
    let scripts = if modern {
        "+evalsha_ro +eval_ro"
    } else {
        "+evalsha +eval"
    };
    let rule = format!(
        "SETUSER viewer reset on >pw {keys} resetchannels +ping +info +scan +time {scripts} \
         +get +mget +pttl +type +llen +lpos +lrange +hlen +hget +hmget +hgetall +hexists \
         +zcard +zcount +zrank +zrange +zrangebyscore +zscore +pubsub|numsub"
    );
    let _: () = redis::cmd("ACL")
        .arg(rule.split_whitespace().collect::<Vec<_>>())
        .query(&mut connection(&server))
        .unwrap();
    let calls = |command: &str| commandstat(&server, command, "calls");
    let (ro_before, plain_before) = (calls("evalsha_ro"), calls("evalsha"));
    let viewer = client_as(&server, "viewer", "app");

    let info = viewer.lock_info("orders").unwrap();
    assert_eq!(info.holders().count(), 1, "{info:?}");
    assert_eq!(viewer.semaphore_state("sem").unwrap().holders.len(), 1);
    let vq = viewer.queue("jobs").unwrap().counting(true);
    let stats = vq.stats().unwrap();
    assert_eq!((stats.ready, stats.dead), (1, 1), "{stats:?}");
    let page = vq
        .jobs(redlease::inspect::JobStatus::Dead, None, 10)
        .unwrap();
    assert_eq!(page.jobs.len(), 1);
    assert!(vq.job(&dead_id).unwrap().is_some());
    assert_eq!(vq.dead_jobs(10).unwrap()[0].id, dead_id);
    let now = std::time::SystemTime::now();
    let counts = vq
        .counts(
            now - Duration::from_secs(120),
            now + Duration::from_secs(60),
        )
        .unwrap();
    assert!(!counts.is_empty(), "the pushes were counted");
    assert!(!viewer.clients().unwrap().is_empty());
    // The pause reads are read-only scripts too.
    assert!(!vq.is_paused().unwrap());
    assert!(vq.is_group_paused("acme").unwrap());
    // Writes are refused, and change nothing.
    let err = viewer.lock("free").try_acquire().unwrap_err();
    // (Redis 6.2 words the refusal inside a script as "can't run this command".)
    let text = format!("{err:?}");
    assert!(
        text.contains("NOPERM") || text.contains("can't run this command"),
        "{err:?}"
    );
    assert!(admin.lock_info("free").unwrap().kinds.is_empty());
    assert_eq!(vq.stats().unwrap().ready, 1);

    let (ro, plain) = (
        calls("evalsha_ro") - ro_before,
        calls("evalsha") - plain_before,
    );
    if modern {
        assert!(ro >= 8, "read-only calls: {ro}");
        assert_eq!(plain, 0, "no plain EVALSHA for reads");
        assert_eq!(commandstat(&server, "evalsha_ro", "rejected_calls"), 0);
    } else {
        assert_eq!(ro, 0);
        assert!(plain >= 8, "plain calls: {plain}");
    }
    held.release().unwrap();
    permit.release().unwrap();
}

#[test]
fn a_key_outside_the_prefix_is_refused() {
    let server = server();
    create_user(&server, "app", true);
    let client = client_as(&server, "app", "other");
    let err = client.lock("x").try_acquire().unwrap_err();
    assert!(refused_key(&err), "{err:?}");
    let err = client.queue("q").unwrap().push("p").unwrap_err();
    assert!(refused_key(&err), "{err:?}");
}

/// A command refused for a key outside the user's patterns: a configuration error that names
/// NOPERM (it is not retried), or NOPERM itself from inside a script.
fn refused_key(err: &Error) -> bool {
    match err {
        Error::Configuration { problem, .. } => problem.contains("NOPERM"),
        Error::Redis { code, .. } => code == "NOPERM",
        _ => false,
    }
}

/// Redis 7.0 reports a PUBLISH refused inside a script as `ERR The user executing the script
/// can't publish to the channel ...`; later versions may say `NOPERM`.
fn refused_publish(err: &Error) -> bool {
    matches!(err, Error::Redis { code, message }
        if code == "NOPERM"
            || message.contains("can't publish to the channel")
            // Valkey 9
            || message.contains("No permissions to access a channel"))
}

/// Creates the user `app` (password `pw`, keys and channels `app:*`, `commands`) on every
/// node of `cluster` (ACL SETUSER is per node); returns the nodes' URLs as that user.
fn cluster_user(cluster: &redlease_suite::RedisCluster, commands: &str) -> Vec<String> {
    for node in cluster.nodes() {
        let mut rule = vec![
            "SETUSER",
            "app",
            "reset",
            "resetchannels",
            "on",
            ">pw",
            "~app:*",
            "&app:*",
        ];
        rule.extend(commands.split_whitespace());
        let _: () = redis::cmd("ACL")
            .arg(&rule)
            .query(&mut connection(node))
            .unwrap();
    }
    cluster
        .nodes()
        .iter()
        .map(|n| format!("redis://app:pw@127.0.0.1:{}/", n.port()))
        .collect()
}

/// The major version of the server behind `node` (sharded pub/sub exists from 7).
fn major_version(node: &RedisServer) -> u32 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection(node))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse().ok())
        .unwrap()
}

/// docs/acl.md's cluster rule for `node`'s server: shard pub/sub from Redis 7, plain pub/sub
/// before (and with `+info` or without it, as `extra` says), plus `extra`.
fn cluster_commands(node: &RedisServer, extra: &str) -> (bool, String) {
    let sharded = major_version(node) >= 7;
    let pubsub = if sharded {
        " +ssubscribe +sunsubscribe +spublish"
    } else {
        " +subscribe +unsubscribe +publish"
    };
    let commands = COMMANDS
        .replace("+subscribe +unsubscribe +publish", "")
        .to_owned()
        + pubsub
        + extra;
    (sharded, commands)
}

#[test]
fn without_the_channel_right_releases_fail_loudly_and_waiters_poll() {
    let server = server();
    create_user(&server, "nochan", false);
    let client = client_as(&server, "nochan", "app");

    // The release deletes the key, then its PUBLISH is refused: the caller gets the NOPERM
    // (a logged warning says the fix), and the lock is free.
    let guard = client.lock("l").acquire().unwrap();
    let err = guard.release().unwrap_err();
    assert!(refused_publish(&err), "{err:?}");
    let exists: bool = redis::cmd("EXISTS")
        .arg("app:{l}:lock")
        .query(&mut connection(&server))
        .unwrap();
    assert!(
        !exists,
        "the release took effect before the refused PUBLISH"
    );

    // A waiter's SUBSCRIBE is refused: the status says so and the waiter polls.
    let held = client.lock("w").watchdog(false).acquire().unwrap();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            client
                .lock("w")
                .wait(Duration::from_secs(20))
                .retry(Duration::from_millis(10), Duration::from_millis(100))
                .acquire()
                .map(|g| g.fence())
        })
    };
    await_condition(Duration::from_secs(10), || {
        client.status().listener.refused.is_some()
    });
    let refused = client.status().listener.refused.unwrap();
    assert!(refused.contains("NOPERM"), "{refused}");
    // The holder's key is deleted by hand (its release would be refused too).
    let _: () = redis::cmd("DEL")
        .arg("app:{w}:lock")
        .query(&mut connection(&server))
        .unwrap();
    assert!(waiter.join().unwrap().unwrap() > held.fence());
    drop(held);
}

/// docs/acl.md's Redis Cluster rule: the single-server commands with shard pub/sub instead of
/// plain pub/sub, plus `cluster|slots`, `cluster|keyslot` and `asking`, on every node.
#[test]
fn a_restricted_user_runs_on_a_cluster() {
    let cluster = redlease_suite::RedisCluster::start().expect("a 3-master cluster");
    let (_, commands) = cluster_commands(
        &cluster.nodes()[0],
        " +cluster|slots +cluster|keyslot +asking +info",
    );
    let urls = cluster_user(&cluster, &commands);
    let client = Client::cluster(&urls)
        .key_prefix("app")
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for name in ["a", "b", "c"] {
        contended(&client, name);
    }
    let sem = client.semaphore("sem", 1).acquire().unwrap();
    sem.release().unwrap();
    let q = client.queue("jobs").unwrap().max_deliveries(1);
    q.push("x").unwrap();
    q.take(Duration::from_secs(5))
        .unwrap()
        .unwrap()
        .nack()
        .unwrap();
    assert_eq!(q.dead_jobs(10).unwrap().len(), 1);
    let listener = client.status().listener;
    assert!(listener.connected >= 1, "{listener:?}");
    assert_eq!(listener.refused, None);
}

/// docs/acl.md's Sentinel rule: a Sentinel user that may only ask for the master's address,
/// and the single-server rule on the master.
#[test]
fn a_restricted_user_runs_through_sentinel() {
    let master = server();
    create_user(&master, "app", true);
    let sentinel = RedisServer::builder().sentinel().start().unwrap();
    let mut admin = connection(&sentinel);
    let _: () = redis::cmd("SENTINEL")
        .arg(&["MONITOR", "svc", "127.0.0.1"])
        .arg(master.port())
        .arg(1)
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "watcher",
            "reset",
            "on",
            ">pw",
            "+ping",
            "+sentinel|get-master-addr-by-name",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://watcher:pw@127.0.0.1:{}/", sentinel.port());
    let client = Client::sentinel(&[url], "svc")
        .master_auth(Some("app"), "pw")
        .key_prefix("app")
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    contended(&client, "lease");
    let q = client.queue("jobs").unwrap();
    q.push("x").unwrap();
    q.take(Duration::from_secs(5))
        .unwrap()
        .unwrap()
        .ack()
        .unwrap();
    // The listener's connection is a gauge: under load it may be between a dropped
    // connection and the next one, so wait for it rather than read it once.
    await_condition(Duration::from_secs(10), || {
        client.status().listener.connected == 1
    });
    assert_eq!(client.status().listener.refused, None);
}

/// Rejected calls of `command` on `node` (INFO commandstats).
fn rejected_calls(node: &RedisServer, command: &str) -> u64 {
    commandstat(node, command, "rejected_calls")
}

/// Field `field` (`calls`, `rejected_calls`, ...) of `command` in `node`'s INFO
/// commandstats (0 when the command was never called).
fn commandstat(node: &RedisServer, command: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection(node))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        })
        .map_or(0, |n| n.parse().unwrap())
}

/// When a cluster listener cannot find a channel's node (here: no `cluster|keyslot` right),
/// waiters poll at their backoff; they must not retry the lookup in a tight loop.
#[test]
fn without_a_route_cluster_waiters_poll_instead_of_spinning() {
    let cluster = redlease_suite::RedisCluster::start().expect("a 3-master cluster");
    // Without `cluster|keyslot` a shard channel's node cannot be found. Before Redis 7 there
    // are no shard channels: plain pub/sub needs no route, so there is no lookup at all.
    let (sharded, commands) = cluster_commands(&cluster.nodes()[0], " +cluster|slots +asking");
    let urls = cluster_user(&cluster, &commands);
    let client = Client::cluster(&urls)
        .key_prefix("app")
        .sharded_pubsub(sharded)
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let held = client.lock("spin").watchdog(false).acquire().unwrap();
    let err = client
        .lock("spin")
        .wait(Duration::from_secs(1))
        .retry(Duration::from_millis(50), Duration::from_millis(200))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let lookups = rejected_calls(&cluster.nodes()[0], "cluster|keyslot");
    let expected = if sharded { 1..=40 } else { 0..=0 };
    assert!(
        expected.contains(&lookups),
        "{lookups} route lookups during a 1 s wait with 50-200 ms pauses (sharded: {sharded})"
    );
    held.release().unwrap();
}
