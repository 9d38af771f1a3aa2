//! An embedder's future dropped in the middle of an acquisition (`tokio::time::timeout`,
//! `select!`), against real Redis: what the dropped attempt leaves, and what
//! `lease::Undo` gives back (docs/embedding.md, "Cancellation").
//!
//! A proxy holds the attempt's reply (or the attempt itself) back, so that the future is
//! dropped at a moment the test chooses: after the server granted the lock, or before the
//! attempt reached it. The driver is the smallest tokio driver over `redlease-redis`.

use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redlease_core::keys::Keyspace;
use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LockSpec, ScriptOp, Token, Undo};
use redlease_core::{Error, Protocol, Response, Step, TransportFailure};
use redlease_suite::{Proxy, RedisServer};

/// Runs `machine` to its end on `conn`.
async fn drive<P: Protocol>(
    conn: &MultiplexedConnection,
    mut machine: P,
) -> Result<P::Output, Error> {
    let mut conn = conn.clone();
    loop {
        match machine.poll(Instant::now()) {
            Step::Send(batch) => {
                let deadline = tokio::time::Instant::from_std(batch.deadline);
                for r in &batch.requests {
                    let cmd = redlease_redis::command(&r.command);
                    let sent = tokio::time::timeout_at(deadline, conn.req_packed_command(&cmd));
                    let response = match sent.await {
                        Ok(outcome) => redlease_redis::response(r.id, outcome),
                        Err(_) => Response::failed(r.id, TransportFailure::no_reply("deadline")),
                    };
                    machine.handle(response, Instant::now());
                }
            }
            Step::Wait(wait) => {
                tokio::time::sleep_until(tokio::time::Instant::from_std(wait.until)).await;
            }
            Step::Done(result) => return result,
        }
    }
}

fn token() -> Token {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    Token::from_random(bytes)
}

fn lease(name: &str, ttl: Duration) -> LockSpec {
    LockSpec::lease(&Keyspace::new("embed").unwrap(), name, token(), ttl).unwrap()
}

async fn connect(url: &str) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(None);
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Tries `name` once with a fresh token.
async fn try_once(conn: &MultiplexedConnection, name: &str, ttl: Duration) -> Acquisition {
    let machine = Acquire::new(
        lease(name, ttl),
        &AcquireOptions::default(),
        7,
        Instant::now(),
    );
    drive(conn, machine.unwrap()).await.unwrap()
}

/// Who holds `key` now (the token's text), and its time left in ms.
async fn holder(conn: &MultiplexedConnection, key: &str) -> (Option<String>, i64) {
    let mut conn = conn.clone();
    let value: Option<String> = redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    (value, pttl)
}

/// Until `key` holds `token` (the attempt ran on the server), asked on `conn`.
async fn until_granted(conn: &MultiplexedConnection, key: &str, token: &Token) {
    let bound = Instant::now() + Duration::from_secs(30);
    while holder(conn, key).await.0.as_deref() != Some(token.as_str()) {
        assert!(
            Instant::now() < bound,
            "the attempt never reached the server"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A server, a proxy in front of it, a connection to each; the acquire script loaded (a
/// first attempt held back would otherwise only get `NOSCRIPT` back).
async fn setup() -> (
    RedisServer,
    Proxy,
    MultiplexedConnection,
    MultiplexedConnection,
) {
    let server = RedisServer::start().unwrap();
    let proxy = Proxy::start(server.port()).unwrap();
    let direct = connect(&server.url()).await;
    let proxied = connect(&proxy.url()).await;
    let Acquisition::Acquired(warm) = try_once(&direct, "warm-up", Duration::from_secs(5)).await
    else {
        panic!("warm-up lock busy")
    };
    drive(
        &direct,
        ScriptOp::release(&warm, Instant::now() + Duration::from_secs(5)),
    )
    .await
    .unwrap();
    (server, proxy, direct, proxied)
}

/// Drops an acquisition of `spec` (on `proxied`, whose replies are held back) once Redis has
/// granted it the lock.
async fn drop_after_grant(
    spec: &LockSpec,
    proxy: &Proxy,
    proxied: &MultiplexedConnection,
    direct: &MultiplexedConnection,
) {
    let key = spec.target.keys.first().unwrap().to_owned();
    proxy.delay_replies(Duration::from_secs(2));
    let machine =
        Acquire::new(spec.clone(), &AcquireOptions::default(), 1, Instant::now()).unwrap();
    tokio::select! {
        out = drive(proxied, machine) => panic!("the acquisition finished: {out:?}"),
        () = until_granted(direct, &key, &spec.token) => {} // dropped here
    }
}

/// Without an undo, the lock a dropped attempt was granted stays held by a token nobody
/// has, until its ttl ends (and not before): a later holder waits it out, never shares it.
#[tokio::test]
async fn a_dropped_acquisitions_grant_lasts_until_its_ttl() {
    let (_server, proxy, direct, proxied) = setup().await;
    let ttl = Duration::from_millis(1500);
    let spec = lease("orphan", ttl);
    let key = spec.target.keys.first().unwrap().to_owned();
    drop_after_grant(&spec, &proxy, &proxied, &direct).await;

    let read_at = Instant::now();
    let (value, pttl) = holder(&direct, &key).await;
    assert_eq!(value.as_deref(), Some(spec.token.as_str()));
    assert!(pttl > 0 && pttl <= ttl.as_millis() as i64, "pttl {pttl}");
    assert!(matches!(
        try_once(&direct, "orphan", ttl).await,
        Acquisition::Busy { .. }
    ));

    // Free only once the ttl has run out on the server.
    let bound = Instant::now() + ttl + Duration::from_secs(30);
    let freed_at = loop {
        if let Acquisition::Acquired(_) = try_once(&direct, "orphan", ttl).await {
            break Instant::now();
        }
        assert!(Instant::now() < bound, "the orphaned lock never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let held_for = freed_at.duration_since(read_at);
    assert!(
        held_for + Duration::from_millis(2) >= Duration::from_millis(pttl as u64),
        "freed after {held_for:?}, before the {pttl} ms the key had left"
    );
}

/// `Undo` from the dropped acquisition's spec releases what it was granted at once: the
/// next contender gets the lock without waiting for the (long) ttl.
#[tokio::test]
async fn undo_gives_back_a_dropped_acquisitions_grant_at_once() {
    let (_server, proxy, direct, proxied) = setup().await;
    let ttl = Duration::from_secs(60);
    let spec = lease("undone", ttl);
    let key = spec.target.keys.first().unwrap().to_owned();
    drop_after_grant(&spec, &proxy, &proxied, &direct).await;
    assert_eq!(
        holder(&direct, &key).await.0.as_deref(),
        Some(spec.token.as_str())
    );

    let undo = Undo::new(&spec, Instant::now() + Duration::from_secs(5));
    drive(&direct, undo).await.unwrap();
    assert_eq!(holder(&direct, &key).await.0, None);
    assert!(matches!(
        try_once(&direct, "undone", ttl).await,
        Acquisition::Acquired(_)
    ));
}

/// An attempt still on its way when it is undone (held back before it reached Redis) takes
/// nothing when it arrives: the undo recorded its token.
#[tokio::test]
async fn an_attempt_that_arrives_after_its_undo_takes_nothing() {
    let (_server, proxy, direct, proxied) = setup().await;
    let ttl = Duration::from_secs(60);
    let spec = lease("late", ttl);
    let key = spec.target.keys.first().unwrap().to_owned();
    proxy.delay_requests(Duration::from_secs(2));
    let machine =
        Acquire::new(spec.clone(), &AcquireOptions::default(), 1, Instant::now()).unwrap();
    let held = async {
        while proxy.held() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        out = drive(&proxied, machine) => panic!("the acquisition finished: {out:?}"),
        () = held => {} // the attempt is held back by the proxy: dropped here
    }

    let undo = Undo::new(&spec, Instant::now() + Duration::from_secs(5));
    drive(&direct, undo).await.unwrap();
    assert!(
        proxy.held() > 0,
        "the undo took longer than the attempt's delay: the test proves nothing"
    );
    // A PING behind the attempt on its connection: answered, the attempt has run.
    let mut late = proxied.clone();
    let _: String = redis::cmd("PING").query_async(&mut late).await.unwrap();
    assert_eq!(
        holder(&direct, &key).await.0,
        None,
        "the late attempt took the lock"
    );
    assert!(matches!(
        try_once(&direct, "late", ttl).await,
        Acquisition::Acquired(_)
    ));
}
