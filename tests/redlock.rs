//! RedLock over five real redis-server processes.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::{Error, lock::RedLock};
use redlease_suite::RedisServer;

fn five() -> Vec<RedisServer> {
    (0..5).map(|_| RedisServer::start().unwrap()).collect()
}

/// A node timeout that first connections to five fresh servers meet on a loaded machine
/// (100 ms did not, once: `NoQuorum { unreachable: 5 }` on a first `try_acquire`); tests of
/// the timeout itself set their own.
fn client(servers: &[RedisServer]) -> RedLock {
    client_with(servers, Duration::from_millis(400))
}

fn client_with(servers: &[RedisServer], node_timeout: Duration) -> RedLock {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    RedLock::builder(&urls)
        .node_timeout(node_timeout)
        .build()
        .unwrap()
}

#[test]
fn mutual_exclusion_over_five_nodes() {
    let servers = five();
    let counter = RedisServer::start().unwrap();
    let red = client(&servers);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (red, barrier) = (red.clone(), barrier.clone());
            let mut conn = redis::Client::open(counter.url())
                .unwrap()
                .get_connection()
                .unwrap();
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..50 {
                    let g = red
                        .lock("count")
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .unwrap();
                    let n: i64 = conn.get::<_, Option<i64>>("n").unwrap().unwrap_or(0);
                    let _: () = conn.set("n", n + 1).unwrap();
                    g.release().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut conn = redis::Client::open(counter.url())
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(conn.get::<_, i64>("n").unwrap(), 400);
}

#[test]
fn two_nodes_down_still_acquires_three_down_fails_with_a_typed_error() {
    let mut servers = five();
    let red = client(&servers);
    servers[0].kill();
    servers[3].kill();
    let g = red
        .lock("quorum")
        .try_acquire()
        .unwrap()
        .expect("3 of 5 is a majority");
    assert_eq!(g.granted(), 3);
    assert!(
        red.lock("quorum").try_acquire().unwrap().is_none(),
        "held by the first"
    );
    g.release().unwrap();

    servers[4].kill();
    let start = Instant::now();
    let err = red
        .lock("quorum")
        .wait(Duration::from_millis(300))
        .acquire()
        .unwrap_err();
    let took = start.elapsed();
    match err {
        Error::NoQuorum {
            nodes,
            needed,
            granted,
            unreachable,
            ..
        } => {
            assert_eq!((nodes, needed, granted, unreachable), (5, 3, 2, 3));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        took < Duration::from_millis(300 + 500),
        "within its deadline: {took:?}"
    );
    // Nothing left behind on the live nodes.
    for s in &servers[1..3] {
        let mut conn = redis::Client::open(s.url())
            .unwrap()
            .get_connection()
            .unwrap();
        assert!(!conn.exists::<_, bool>("redlease:{quorum}:lock").unwrap());
    }
}

#[test]
fn a_frozen_node_costs_at_most_the_node_timeout() {
    let servers = five();
    // Long enough that the other nodes' round trips on a loaded machine fit in a second
    // one: the bounds below are twice the promise (one node timeout).
    let node_timeout = Duration::from_millis(400);
    let red = client_with(&servers, node_timeout);
    // Warm the pools, so the frozen node has an open connection that will not answer.
    red.lock("warm")
        .try_acquire()
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    servers[2].pause().unwrap();
    let start = Instant::now();
    let g = red
        .lock("frozen")
        .try_acquire()
        .unwrap()
        .expect("4 of 5 answer");
    let took = start.elapsed();
    assert_eq!(g.granted(), 4);
    assert!(
        took < node_timeout * 2,
        "one node timeout, not two or five: {took:?}"
    );
    let start = Instant::now();
    g.release().unwrap();
    let took = start.elapsed();
    // The release asks the silent node twice (a lost reply is asked again): two node
    // timeouts, with the same 2x margin.
    assert!(took < node_timeout * 4, "{took:?}");
    servers[2].resume().unwrap();
}

#[test]
fn extension_needs_a_majority() {
    let mut servers = five();
    let red = client(&servers);
    let mut g = red
        .lock("ext")
        .ttl(Duration::from_secs(2))
        .try_acquire()
        .unwrap()
        .unwrap();
    let before = g.valid_until();
    g.extend().unwrap();
    assert!(g.valid_until() > before);
    for s in servers.iter_mut().take(3) {
        s.kill();
    }
    assert!(matches!(
        g.extend(),
        Err(Error::NoQuorum { granted: 2, .. })
    ));
}

#[test]
fn bad_settings_are_refused() {
    assert!(RedLock::builder::<&str>(&[]).build().is_err());
    assert!(RedLock::builder(&["not a url"]).build().is_err());
    let servers = five();
    let red = client(&servers);
    assert!(matches!(
        red.lock("").try_acquire(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        matches!(
            red.lock("x").ttl(Duration::from_millis(150)).try_acquire(),
            Err(Error::InvalidArgument(_))
        ),
        "ttl must be well above the node timeout"
    );
}

/// Restarts without persistence (the harness's servers keep nothing): a restarted node
/// stops counting at the next extension, is not written again, and a lease left without a
/// majority is reported lost instead of showing its old validity.
#[test]
fn restarted_nodes_stop_counting_and_a_lost_majority_is_reported_at_renewal() {
    let mut servers = five();
    let red = client(&servers);
    let key = "redlease:{restart}:lock";
    let holds = |s: &RedisServer| {
        redis::Client::open(s.url())
            .unwrap()
            .get_connection()
            .unwrap()
            .exists::<_, bool>(key)
            .unwrap()
    };
    let mut a = red
        .lock("restart")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .unwrap()
        .unwrap();
    assert_eq!(a.granted(), 5);

    // One node restarts empty: still a majority, of 4 nodes, and node 0 stays empty.
    servers[0].restart().unwrap();
    a.extend().unwrap();
    assert_eq!(a.granted(), 4, "the restarted node no longer counts");
    assert!(!a.is_lost());
    assert!(!holds(&servers[0]), "extend does not write the key back");

    // Two more restart: 2 of 5 still hold it. A renewal that hears from them reports the
    // lease lost (one that finds their old connections dead cannot tell yet: it says
    // NoQuorum with nodes unreachable, and the old validity stands until it hears more).
    servers[1].restart().unwrap();
    servers[2].restart().unwrap();
    for _ in 0..3 {
        match a.extend() {
            _ if a.is_lost() => break,
            Err(Error::NoQuorum { unreachable, .. }) => assert!(unreachable > 0),
            other => panic!("{other:?} without losing the lease"),
        }
    }
    assert!(a.is_lost(), "granted {}", a.granted());
    assert_eq!(a.granted(), 2);
    assert_eq!(a.remaining(), Duration::ZERO);

    // What the holder is told is true: another client now gets a majority.
    let b = client(&servers)
        .lock("restart")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .unwrap()
        .expect("3 nodes lost A's key");
    assert_eq!(b.granted(), 3);
}

/// One lock builder acquiring again binds a fresh token to the calls it built for its first
/// acquisition: each acquisition writes its own token on every node, and the release of an
/// earlier holder (whose key vanished, as after an expiry) leaves the new holder's keys alone.
#[test]
fn a_builder_used_again_gives_each_acquisition_its_own_token() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let red = client(&servers);
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|s| {
            redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    let key = "redlease:{rebind}:lock";
    let tokens = |conns: &mut [redis::Connection]| -> Vec<Option<String>> {
        conns.iter_mut().map(|c| c.get(key).unwrap()).collect()
    };
    let lock = red.lock("rebind").ttl(Duration::from_secs(30));
    let first = lock.try_acquire().unwrap().expect("free");
    let first_tokens = tokens(&mut conns);
    assert!(
        first_tokens
            .iter()
            .all(|t| t.is_some() && *t == first_tokens[0])
    );
    // The key vanishes everywhere (as at its expiry): the same builder takes it again.
    for c in &mut conns {
        let _: () = c.del(key).unwrap();
    }
    let second = lock.try_acquire().unwrap().expect("free again");
    let second_tokens = tokens(&mut conns);
    assert!(
        second_tokens
            .iter()
            .all(|t| t.is_some() && *t == second_tokens[0])
    );
    assert_ne!(first_tokens[0], second_tokens[0], "a token of its own");
    assert!(
        matches!(first.release(), Err(Error::NotOwner { .. })),
        "the earlier holder's release finds another token"
    );
    assert_eq!(
        tokens(&mut conns),
        second_tokens,
        "the new holder keeps its keys"
    );
    second.release().unwrap();
    assert!(tokens(&mut conns).iter().all(Option::is_none));
}

/// A RedLock release asks each node for its owner-checked delete only: no release
/// announcement (nobody waits for one: RedLock waiters retry after a random delay), so no
/// node runs a `PUBLISH` per release. A failed acquisition's undo is the same.
#[test]
fn a_release_announces_nothing_on_any_node() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let red = client(&servers);
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|s| {
            redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    for c in &mut conns {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
    }
    for _ in 0..3 {
        red.lock("quiet")
            .try_acquire()
            .unwrap()
            .unwrap()
            .release()
            .unwrap();
    }
    // Held elsewhere on two nodes: the attempt fails and is undone on the node that granted it.
    for c in &mut conns[..2] {
        let _: () = c.set("redlease:{quiet}:lock", "other").unwrap();
    }
    assert!(red.lock("quiet").try_acquire().unwrap().is_none());
    for (i, c) in conns.iter_mut().enumerate() {
        let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
        let calls = |name: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        assert_eq!(calls("publish") + calls("spublish"), 0, "node {i}: {stats}");
        // Three releases, and on the node that granted the failed attempt its undo (the
        // two busy nodes never ran that attempt's SET, so they get no undo): by script or
        // native delete.
        let releases = calls("evalsha") + calls("eval") + calls("delifeq") + calls("delex");
        let expected = if i < 2 { 3 } else { 4 };
        assert!(releases >= expected, "node {i} released: {stats}");
    }
    // The other holder's keys are untouched; ours are gone.
    for c in &mut conns[..2] {
        assert_eq!(
            c.get::<_, Option<String>>("redlease:{quiet}:lock").unwrap(),
            Some("other".into())
        );
    }
    assert!(!conns[2].exists::<_, bool>("redlease:{quiet}:lock").unwrap());
}

/// Whether `server` has a native compare-and-delete (Valkey 9.0+ `DELIFEQ`, Redis 8.4+
/// `DELEX ... IFEQ`), from its `INFO server`: its `commandstats` name, lower case.
fn native_delete_of(conn: &mut redis::Connection) -> Option<&'static str> {
    let info: String = redis::cmd("INFO").arg("server").query(conn).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(|v| {
                let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
            })
    };
    match field("valkey_version") {
        Some(v) if v >= (9, 0) => Some("delifeq"),
        Some(_) => None,
        None => field("redis_version")
            .filter(|v| *v >= (8, 4))
            .map(|_| "delex"),
    }
}

/// A release asks each node with its own compare-and-delete where the server has one
/// (Valkey 9.0+, Redis 8.4+: cheaper for it than a script), with the script elsewhere; the
/// key is gone everywhere either way. (On Redis 7.0 this checks the script path; the
/// Valkey run of the suite checks the native one.)
#[test]
fn a_release_uses_each_nodes_compare_and_delete_where_it_has_one() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let red = client(&servers);
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|s| {
            redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    let guard = red.lock("native").try_acquire().unwrap().unwrap();
    for c in &mut conns {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
    }
    guard.release().unwrap();
    for (i, c) in conns.iter_mut().enumerate() {
        let native = native_delete_of(c);
        let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
        let calls = |name: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        let scripts = calls("evalsha") + calls("eval");
        match native {
            Some(cmd) => assert_eq!((calls(cmd), scripts), (1, 0), "node {i}: {stats}"),
            // A fresh server answers the first EVALSHA with NOSCRIPT: then an EVAL.
            None => assert!(
                scripts >= 1 && calls("delifeq") + calls("delex") == 0,
                "node {i}: {stats}"
            ),
        }
        assert!(!c.exists::<_, bool>("redlease:{native}:lock").unwrap());
    }
}

/// Each node is asked with the native `SET key token NX PX ttl`, not the single-node lease's
/// fenced acquire script: after an acquisition every node holds exactly one key, the lock
/// key, a string of the holder's token (the same on every node) with a PX ttl of at most the
/// lock's, and no fence counter or other bookkeeping key; the node ran one `SET` and no
/// script to grant it.
#[test]
fn each_node_holds_only_the_token_under_a_px_ttl_written_by_a_plain_set() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let red = client(&servers);
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|s| {
            redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    for c in &mut conns {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
    }
    let key = "redlease:{plain}:lock";
    let ttl = Duration::from_secs(30);
    let guard = red.lock("plain").ttl(ttl).try_acquire().unwrap().unwrap();
    assert_eq!(guard.granted(), 3);
    let mut tokens = Vec::new();
    for (i, c) in conns.iter_mut().enumerate() {
        let mut keys: Vec<String> = c.keys("*").unwrap();
        keys.sort();
        assert_eq!(keys, [key], "node {i}: the lock key and nothing else");
        let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
        assert_eq!(kind, "string", "node {i}");
        let pttl: i64 = c.pttl(key).unwrap();
        assert!(
            pttl > 0 && pttl <= 30_000,
            "node {i}: a PX ttl of at most the lock's, got {pttl}"
        );
        let token: String = c.get(key).unwrap();
        assert!(!token.is_empty(), "node {i}");
        tokens.push(token);
        let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
        let calls = |name: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        assert_eq!(
            (
                calls("set"),
                calls("evalsha") + calls("eval") + calls("incr")
            ),
            (1, 0),
            "node {i}: one SET, no script: {stats}"
        );
    }
    assert!(tokens.iter().all(|t| *t == tokens[0]), "{tokens:?}");
    guard.release().unwrap();
    for (i, c) in conns.iter_mut().enumerate() {
        let keys: Vec<String> = c.keys("*").unwrap();
        assert!(keys.is_empty(), "node {i} after release: {keys:?}");
    }
}

/// A failed attempt is undone only on the nodes that may hold its key, with the node's own
/// compare-and-delete where the server has one (Valkey 9.0+, Redis 8.4+: one native delete,
/// no script), the script elsewhere. The nodes where another holder has the key answered
/// the `SET NX` with nil: no release, no command at all, reaches them after it. The other
/// holder's keys stay, ours are gone. (On Redis 7.0 this checks the script path; the Valkey
/// run of the suite the native one.)
#[test]
fn a_failed_attempt_is_undone_only_where_it_may_hold_with_each_nodes_compare_and_delete() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let red = client(&servers);
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|s| {
            redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    let key = "redlease:{undo}:lock";
    // Connections set up (each learns its server), then another holder on nodes 0 and 1.
    red.lock("undo")
        .try_acquire()
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    for c in &mut conns[..2] {
        let _: () = c.set(key, "other").unwrap();
    }
    for c in &mut conns {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
    }
    assert!(red.lock("undo").try_acquire().unwrap().is_none());
    for (i, c) in conns.iter_mut().enumerate() {
        let native = native_delete_of(c);
        let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
        let calls = |name: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        let scripts = calls("evalsha") + calls("eval");
        let deletes = calls("delifeq") + calls("delex");
        assert_eq!(calls("set"), 1, "node {i}: one SET NX: {stats}");
        if i < 2 {
            assert_eq!(
                (scripts, deletes),
                (0, 0),
                "busy node {i}: no undo: {stats}"
            );
            continue;
        }
        match native {
            Some(cmd) => assert_eq!((calls(cmd), scripts), (1, 0), "node {i}: {stats}"),
            None => assert!(scripts >= 1 && deletes == 0, "node {i}: {stats}"),
        }
    }
    for c in &mut conns[..2] {
        assert_eq!(
            c.get::<_, Option<String>>(key).unwrap(),
            Some("other".into())
        );
    }
    assert!(!conns[2].exists::<_, bool>(key).unwrap());
}
