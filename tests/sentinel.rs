//! Connecting through Sentinel: after a failover the client follows the new master.
//! One master, one replica and three sentinels, all on loopback ports.

use std::time::{Duration, Instant};

use redlease::Client;
use redlease_suite::RedisServer;
use redlease_suite::testkit::connection as conn;

fn await_condition(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn master_port(sentinel: &RedisServer) -> Option<u16> {
    let reply: Option<Vec<String>> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg("svc")
        .query(&mut conn(sentinel))
        .ok()?;
    reply?.get(1)?.parse().ok()
}

#[test]
fn the_client_follows_a_failover() {
    follow_a_failover(None);
}

#[test]
fn the_client_follows_a_failover_of_a_password_protected_master() {
    follow_a_failover(Some("s3cret"));
}

fn conn_with(server: &RedisServer, password: Option<&str>) -> redis::Connection {
    let url = match password {
        Some(p) => format!("redis://:{p}@127.0.0.1:{}/", server.port()),
        None => server.url(),
    };
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// A master, its replica and three Sentinels monitoring them as `svc` (down after 400 ms),
/// ready to fail over.
struct Deployment {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

fn deployment(password: Option<&str>) -> Deployment {
    let auth = |b: redlease_suite::RedisServerBuilder| match password {
        Some(p) => b.config("requirepass", p).config("masterauth", p),
        None => b,
    };
    let master = auth(RedisServer::builder())
        .config("repl-diskless-sync-delay", "0")
        .start()
        .unwrap();
    let replica = auth(RedisServer::builder())
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .config("repl-diskless-sync-delay", "0")
        .start()
        .unwrap();
    await_condition(Duration::from_secs(10), "replication link", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn_with(&replica, password))
            .unwrap();
        info.contains("master_link_status:up")
    });
    let sentinels: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::builder().sentinel().start().unwrap())
        .collect();
    for s in &sentinels {
        let mut c = conn(s);
        let _: () = redis::cmd("SENTINEL")
            .arg("MONITOR")
            .arg("svc")
            .arg("127.0.0.1")
            .arg(master.port())
            .arg(2)
            .query(&mut c)
            .unwrap();
        // A master that misses PINGs this long is down: long enough that one starved for
        // a moment on a loaded machine is not failed over behind the tests' backs.
        let mut settings = vec![
            ("down-after-milliseconds", "1500"),
            ("failover-timeout", "2000"),
        ];
        if let Some(p) = password {
            settings.push(("auth-pass", p));
        }
        for (k, v) in settings {
            let _: () = redis::cmd("SENTINEL")
                .arg("SET")
                .arg("svc")
                .arg(k)
                .arg(v)
                .query(&mut c)
                .unwrap();
        }
    }
    // The sentinels must know each other (and the replica) before a failover can be agreed.
    await_condition(
        Duration::from_secs(20),
        "sentinels discover each other",
        || {
            sentinels.iter().all(|s| {
                let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg("svc")
                    .query(&mut conn(s))
                    .unwrap_or_default();
                let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg("svc")
                    .query(&mut conn(s))
                    .unwrap_or_default();
                others.len() == 2 && replicas.len() == 1
            })
        },
    );

    Deployment {
        master,
        replica,
        sentinels,
    }
}

fn follow_a_failover(password: Option<&str>) {
    let Deployment {
        mut master,
        replica,
        sentinels,
    } = deployment(password);
    let urls: Vec<String> = sentinels.iter().map(RedisServer::url).collect();
    let mut builder = Client::sentinel(&urls, "svc")
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(300));
    if let Some(p) = password {
        builder = builder.master_auth(None, p);
    }
    let client = builder.build().unwrap();
    let held = client
        .lock("kept")
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .min_replicas(1, Duration::from_secs(5))
        .try_acquire()
        .unwrap()
        .expect("free");
    assert_eq!(master_port(&sentinels[0]), Some(master.port()));

    master.kill();
    await_condition(Duration::from_secs(30), "failover to the replica", || {
        master_port(&sentinels[0]) == Some(replica.port())
    });

    // The same client now talks to the new master: it works, and it sees the lock that
    // was replicated before the failover.
    let start = Instant::now();
    let other = client
        .lock("other")
        .wait(Duration::from_secs(10))
        .acquire()
        .unwrap();
    println!(
        "first acquisition after the failover took {:?}",
        start.elapsed()
    );
    assert!(
        client.lock("kept").try_acquire().unwrap().is_none(),
        "the held lock survived the failover"
    );
    let exists: bool = redis::cmd("EXISTS")
        .arg("redlease:{other}:lock")
        .query(&mut conn_with(&replica, password))
        .unwrap();
    assert!(exists, "written to the new master");
    other.release().unwrap();
    std::mem::forget(held);
}

/// `SENTINEL FAILOVER` while A holds a watched lease: the old master keeps answering as a
/// master for seconds, yet A's renewals must reach the new master, and no other client may
/// get the lock while A's guard says A holds it.
#[test]
fn after_a_graceful_failover_the_holder_renews_on_the_new_master() {
    graceful_failover(false, true);
}

/// The same with unfenced lease locks (`fenced(false)`) for the holder, the waiter and the
/// contender: kept (renewed on the new master) or reported lost, as a fenced one, and never a
/// second holder while the first believes it holds.
#[test]
fn after_a_graceful_failover_an_unfenced_holder_renews_on_the_new_master() {
    graceful_failover(false, false);
}

/// The same when the client misses `+switch-master` (the Sentinel it listens to is frozen):
/// the periodic check finds the switch.
#[test]
fn a_missed_switch_message_is_made_up_for_by_the_periodic_check() {
    graceful_failover(true, true);
}

fn graceful_failover(miss_the_message: bool, fenced: bool) {
    const TTL: Duration = Duration::from_secs(3);
    let d = deployment(None);
    let urls: Vec<String> = d.sentinels.iter().map(RedisServer::url).collect();
    let client = || {
        Client::sentinel(&urls, "svc")
            .connect_timeout(Duration::from_millis(300))
            .io_timeout(Duration::from_millis(300))
            .sentinel_check(Duration::from_millis(500))
            .build()
            .unwrap()
    };
    let (a_client, b_client) = (client(), client());
    let a = a_client
        .lock("graceful")
        .fenced(fenced)
        .ttl(TTL)
        .try_acquire()
        .unwrap()
        .expect("free");
    assert_eq!(a.fence() == 0, !fenced, "fence {}", a.fence());
    let token_on = |server: &RedisServer| -> Option<String> {
        redis::cmd("GET")
            .arg("redlease:{graceful}:lock")
            .query(&mut conn(server))
            .unwrap()
    };
    let token = token_on(&d.master).expect("A's key on the master");
    // The key (and A's renewals until the switch) reach the replica.
    await_condition(Duration::from_secs(10), "replicated", || {
        token_on(&d.replica).is_some()
    });

    // A waiter subscribed (on the old master) before the failover: its listener must move to
    // the new master, or the release below reaches it only by its 10 s retry.
    let waiter = (!miss_the_message).then(|| {
        let c = client();
        std::thread::spawn(move || {
            let g = c
                .lock("graceful")
                .fenced(fenced)
                .ttl(TTL)
                .retry(Duration::from_secs(10), Duration::from_secs(10))
                .wait(Duration::from_secs(40))
                .acquire();
            (Instant::now(), g.map(|g| g.fence()))
        })
    });
    let channel = "redlease:{graceful}:released";
    let subscribers = |server: &RedisServer| -> i64 {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut conn(server))
            .unwrap();
        reply.1
    };
    if waiter.is_some() {
        await_condition(Duration::from_secs(10), "the waiter subscribed", || {
            subscribers(&d.master) == 1
        });
    }

    // The client listens to the first Sentinel: freeze it to make it miss the message.
    let (asked, listened) = if miss_the_message {
        d.sentinels[0].pause().unwrap();
        (&d.sentinels[1], &d.sentinels[1])
    } else {
        (&d.sentinels[0], &d.sentinels[0])
    };
    // A Sentinel refuses a failover (NOGOODSLAVE) until it has seen the replica in the
    // master's INFO (every 10 s at most): ask again until it accepts.
    await_condition(
        Duration::from_secs(30),
        "a Sentinel accepts FAILOVER",
        || match redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg("svc")
            .query::<()>(&mut conn(asked))
        {
            Ok(()) => true,
            Err(e) if e.code() == Some("NOGOODSLAVE") => false,
            Err(e) => panic!("SENTINEL FAILOVER: {e}"),
        },
    );
    await_condition(Duration::from_secs(30), "failover to the replica", || {
        master_port(listened) == Some(d.replica.port())
    });
    let switched = Instant::now();

    // For three ttls after the switch: B never holds the lock while A's guard says A does,
    // and A's lease lives on the new master (renewed there, or else reported lost).
    let mut b_holds = None;
    let mut moved: Option<Duration> = None;
    while switched.elapsed() < 3 * TTL {
        if waiter.is_some() && moved.is_none() && subscribers(&d.replica) == 1 {
            moved = Some(switched.elapsed());
        }
        if let Some(g) = b_client
            .lock("graceful")
            .fenced(fenced)
            .try_acquire()
            .unwrap_or(None)
        {
            assert!(
                a.is_lost(),
                "B acquired {:?} after the switch while A's guard says it holds ({:?} left)",
                switched.elapsed(),
                a.remaining()
            );
            b_holds = Some(g);
            break;
        }
        std::thread::sleep(Duration::from_millis(50)); // B polls; the invariant is checked each time
    }
    if miss_the_message {
        d.sentinels[0].resume().unwrap();
    }
    match b_holds {
        // A's key had expired on the new master: A was told before B got in (asserted above).
        Some(_) => println!("outcome: A's lease was reported lost, then B got the lock"),
        None => {
            println!("outcome: A's lease was kept on the new master");
            assert!(!a.is_lost(), "{:?}", a.lost_reason());
            assert_eq!(
                token_on(&d.replica),
                Some(token),
                "A's key lives on the new master past its ttl: renewed there"
            );
            if let Some(waiter) = waiter {
                // The listener followed the switch (the old master, reconfigured by the
                // Sentinels about 10 s later, would otherwise keep it).
                let moved = moved.expect("the waiter re-subscribed on the new master");
                assert!(
                    moved < Duration::from_secs(4),
                    "re-subscribed after {moved:?}"
                );
                let released = Instant::now();
                a.release().unwrap();
                let (acquired, fence) = waiter.join().unwrap();
                let fence = fence.expect("the waiter gets the lock");
                assert_eq!(fence == 0, !fenced, "fence {fence}");
                let woken = acquired.duration_since(released);
                // Its retry interval is 10 s: only the release message wakes it this soon.
                assert!(woken < Duration::from_secs(5), "woken after {woken:?}");
            }
            return;
        }
    }
    drop(a);
}
