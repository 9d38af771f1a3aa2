//! The async lease lock against real redis-server processes (one throwaway server per test).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use redlease_core::LossReason;
use redlease_suite::RedisServer;
use redlease_tokio::{Client, Error};

/// Long enough that a lease left behind would fail the test that follows it.
const LONG_TTL: Duration = Duration::from_secs(30);

fn server() -> RedisServer {
    RedisServer::start().expect("redis-server starts")
}

async fn client(server: &RedisServer, ttl: Duration) -> Client {
    Client::builder(&server.url())
        .prefix("tokio-test")
        .lock_ttl(ttl)
        .build()
        .await
        .expect("client connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_typed_errors() {
    let server = server();
    let empty = Client::builder(&server.url()).prefix("").build().await;
    assert!(matches!(
        empty,
        Err(Error::Core(redlease_core::Error::InvalidArgument(_)))
    ));
    let zero = Client::builder(&server.url())
        .io_timeout(Duration::ZERO)
        .build()
        .await;
    assert!(matches!(
        zero,
        Err(Error::Core(redlease_core::Error::InvalidArgument(_)))
    ));
    let ttl = Client::builder(&server.url())
        .lock_ttl(Duration::ZERO)
        .build()
        .await;
    assert!(matches!(
        ttl,
        Err(Error::Core(redlease_core::Error::InvalidArgument(_)))
    ));
    let url = Client::builder("not a url").build().await;
    assert!(matches!(url, Err(Error::Connect(_))), "{url:?}");
    let client = client(&server, LONG_TTL).await;
    assert!(matches!(
        client.lock(""),
        Err(Error::Core(redlease_core::Error::InvalidArgument(_)))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_is_exclusive_and_fences_increase() {
    let server = server();
    let (a, b) = (
        client(&server, LONG_TTL).await,
        client(&server, LONG_TTL).await,
    );
    let first = a
        .lock("invoice")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(
        b.lock("invoice")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let fence = first.fence();
    first.release().await.expect("released");
    let second = b
        .lock("invoice")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free again");
    assert!(second.fence() > fence, "{} after {fence}", second.fence());
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_never_hold_at_once() {
    let server = server();
    let clients = [
        client(&server, LONG_TTL).await,
        client(&server, LONG_TTL).await,
    ];
    let inside = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for t in 0..24 {
        let lock = clients[t % 2].lock("stock").unwrap();
        let (inside, fences) = (Arc::clone(&inside), Arc::clone(&fences));
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let guard = lock
                    .acquire(Duration::from_secs(30))
                    .await
                    .expect("acquired");
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                fences.lock().unwrap().push(guard.fence());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("released");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 96);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences in holding order: {fences:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_lock_past_its_ttl() {
    let server = server();
    let ttl = Duration::from_millis(600);
    let (a, b) = (client(&server, ttl).await, client(&server, ttl).await);
    let guard = a
        .lock("etl")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    // Time passing is what is tested here: three ttls.
    tokio::time::sleep(ttl * 3).await;
    assert!(!guard.is_lost());
    assert!(
        b.lock("etl")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "renewed, still held"
    );
    guard.release().await.expect("still ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_signals_loss() {
    let server = server();
    let client = client(&server, Duration::from_millis(900)).await;
    let guard = client
        .lock("report")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(!guard.is_lost());
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tokio-test:{report}*")
        .query(&mut raw)
        .unwrap();
    assert!(!keys.is_empty());
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut raw).unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("loss within 5s");
    assert!(
        matches!(
            lost,
            Error::Core(redlease_core::Error::NotOwner {
                reason: LossReason::Expired,
                ..
            })
        ),
        "{lost:?}"
    );
    assert!(guard.is_lost());
    assert!(
        guard.release().await.is_err(),
        "a lost lease cannot be released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_releases() {
    let server = server();
    let (a, b) = (
        client(&server, LONG_TTL).await,
        client(&server, LONG_TTL).await,
    );
    let guard = a
        .lock("printer")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let waiter = b.lock("printer").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire(Duration::from_secs(5)).await });
    drop(guard);
    // Far within the 30 s ttl: only the release of the drop makes this succeed.
    let next = waiting.await.unwrap().expect("acquired after the drop");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_nothing_held() {
    let server = server();
    let (a, b) = (
        client(&server, LONG_TTL).await,
        client(&server, LONG_TTL).await,
    );
    let lock = a.lock("cancel").unwrap();
    let check = b.lock("cancel").unwrap();
    let mut dropped = 0;
    for yields in 0..60 {
        // Dropped after `yields` turns of the runtime while the driver runs beside it:
        // before the attempt is sent, with it in flight, or after the grant came back.
        let finished = {
            let mut attempt = std::pin::pin!(lock.acquire(LONG_TTL));
            let mut finished = None;
            for _ in 0..=yields {
                let polled =
                    std::future::poll_fn(|cx| Poll::Ready(attempt.as_mut().poll(cx))).await;
                if let Poll::Ready(out) = polled {
                    finished = Some(out);
                    break;
                }
                tokio::task::yield_now().await;
            }
            finished
        }; // the attempt is dropped here
        match finished {
            Some(guard) => guard.unwrap().release().await.unwrap(),
            None => dropped += 1,
        }
        // With a 30 s ttl, anything left held would make this wait out.
        let next = check
            .acquire(Duration::from_secs(5))
            .await
            .expect("nothing left held");
        next.release().await.unwrap();
    }
    assert!(dropped > 0, "no acquire was dropped midway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_midway_leaves_nothing_held() {
    let server = server();
    let (a, b) = (
        client(&server, LONG_TTL).await,
        client(&server, LONG_TTL).await,
    );
    let holder = a
        .lock("queue")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let waiting = b.lock("queue").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting.acquire(LONG_TTL))
            .await
            .is_err()
    );
    holder.release().await.unwrap();
    let next = a.lock("queue").unwrap().try_acquire().await.unwrap();
    assert!(next.is_some(), "the dropped waiter took the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_succeed_again_after_a_restart() {
    let mut server = server();
    let client = client(&server, LONG_TTL).await;
    let lock = client.lock("restart").unwrap();
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    tokio::task::block_in_place(|| server.restart()).expect("restarted");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match lock.try_acquire().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody holds the lock on the fresh server"),
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "still failing: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!guard.is_lost());
    guard.release().await.expect("released on the new server");
}

#[test]
fn a_guard_outliving_its_runtime_drops_quietly_and_reports_loss() {
    let server = server();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let guard = runtime.block_on(async {
        let client = client(&server, LONG_TTL).await;
        client
            .lock("shutdown")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .expect("free")
    });
    assert!(!guard.is_lost());
    drop(runtime);
    // The driver is gone with its runtime: nothing renews the lease any more.
    assert!(guard.is_lost());
    drop(guard); // no runtime here: must not panic
    let outside = poll_here(Client::builder(&server.url()).build());
    assert!(matches!(outside, Err(Error::NoRuntime)), "{outside:?}");
}

/// Polls `f` to completion on this thread, outside any runtime (`build` fails before its
/// first await there).
fn poll_here<F: Future>(f: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_before_its_retry_pause() {
    let server = server();
    let (a, b) = (
        client(&server, LONG_TTL).await,
        client(&server, LONG_TTL).await,
    );
    let holder = a
        .lock("wake")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let waiter = b.lock("wake").unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(Duration::from_secs(10)).await;
        (guard, tokio::time::Instant::now())
    });
    // Long enough for the waiter's retry pause to grow to its 1 s maximum.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let released = tokio::time::Instant::now();
    holder.release().await.unwrap();
    let (guard, at) = waiting.await.unwrap();
    let after = at - released;
    assert!(
        after < Duration::from_millis(400),
        "woken {after:?} after the release"
    );
    guard.expect("acquired").release().await.unwrap();
}
