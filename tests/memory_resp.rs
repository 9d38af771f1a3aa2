//! The in-process server over TCP (feature `memory`): `MemoryServer::listen` serves the
//! `redis` crate and redlease's own Redis client on a loopback port.

use std::time::Duration;

use redlease::memory::MemoryServer;
use redlease_core::Reply;

const S: Duration = Duration::from_secs(1);

#[test]
fn the_redis_crate_sets_gets_and_evals_on_the_listener() {
    let server = MemoryServer::new();
    let url = server.listen().unwrap();
    assert!(url.starts_with("redis://127.0.0.1:"), "{url}");
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("stock")
        .arg(10)
        .query(&mut conn)
        .unwrap();
    let got: i64 = redis::cmd("GET").arg("stock").query(&mut conn).unwrap();
    assert_eq!(got, 10);
    // The same data, seen in-process.
    assert_eq!(
        server.call(&["GET", "stock"]).unwrap(),
        Reply::Bulk(b"10".to_vec())
    );
    let left: i64 = redis::cmd("EVAL")
        .arg(
            "local n = tonumber(redis.call('GET', KEYS[1])) - tonumber(ARGV[1]) \
             redis.call('SET', KEYS[1], n) return n",
        )
        .arg(1)
        .arg("stock")
        .arg(3)
        .query(&mut conn)
        .unwrap();
    assert_eq!(left, 7);
    let missing: Option<String> = redis::cmd("GET").arg("nothing").query(&mut conn).unwrap();
    assert_eq!(missing, None);
    let err = redis::cmd("BLPOP")
        .arg("l")
        .arg(0)
        .query::<()>(&mut conn)
        .unwrap_err();
    assert!(err.to_string().contains("does not implement"), "{err}");
    // Expiry follows the server's clock.
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(1000)
        .query(&mut conn)
        .unwrap();
    server.clock().advance(2 * S);
    let gone: Option<String> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(gone, None);
}

#[test]
fn a_redlease_client_on_the_listener_locks_beside_an_in_process_client() {
    let server = MemoryServer::new();
    let url = server.listen().unwrap();
    let remote = redlease::Client::open(&url).unwrap();
    let local = server.client();
    let guard = remote
        .lock("invoice")
        .ttl(30 * S)
        .watchdog(false)
        .acquire()
        .unwrap();
    assert!(guard.fence() >= 1);
    assert!(local.lock("invoice").try_acquire().unwrap().is_none());
    guard.release().unwrap();
    let next = local
        .lock("invoice")
        .try_acquire()
        .unwrap()
        .expect("released");
    assert!(next.fence() > 0);
    drop(next);
    let queue = remote.queue("mail").unwrap();
    queue.push("hello").unwrap();
    let job = local
        .queue("mail")
        .unwrap()
        .try_take()
        .unwrap()
        .expect("pushed");
    assert_eq!(job.payload(), b"hello");
    job.ack().unwrap();
}

#[test]
fn dropping_the_server_closes_the_listener() {
    let server = MemoryServer::new();
    let url = server.listen().unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection_with_timeout(10 * S)
        .unwrap();
    let _: () = redis::cmd("PING").query(&mut conn).unwrap();
    drop(server);
    assert!(redis::cmd("PING").query::<String>(&mut conn).is_err());
    let addr = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    redlease_suite::testkit::await_condition(30 * S, || {
        std::net::TcpStream::connect(addr.as_str()).is_err()
    });
}
