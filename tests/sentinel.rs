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

fn follow_a_failover(password: Option<&str>) {
    let auth = |b: redlease_suite::RedisServerBuilder| match password {
        Some(p) => b.config("requirepass", p).config("masterauth", p),
        None => b,
    };
    let mut master = auth(RedisServer::builder())
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
        let mut settings = vec![
            ("down-after-milliseconds", "400"),
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
