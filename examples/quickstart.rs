//! The lease lock in five minutes: exclusive sections across threads, fencing tokens, and
//! what a holder whose lease ran out is told.
//!
//! Runs against `REDIS_URL` when it is set; otherwise it starts a throwaway redis-server on a
//! free port and stops it at the end.
//!
//! ```text
//! cargo run --example quickstart
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example quickstart
//! ```

use std::thread;
use std::time::{Duration, Instant};

use redlease::{Client, Error, LossReason};
use redlease_suite::RedisServer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the server (if we started one) alive until the end of main.
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("using REDIS_URL={url}");
            (url, None)
        }
        Err(_) => {
            let server = RedisServer::start()?;
            println!(
                "REDIS_URL not set: started redis-server on port {} (stopped on exit)",
                server.port()
            );
            (server.url(), Some(server))
        }
    };
    let client = Client::builder(&url).key_prefix("quickstart").build()?;

    // 1. Four threads share one counter in Redis; the lock makes read-modify-write exact.
    let mut conn = redis::Client::open(url.as_str())?.get_connection()?;
    let _: () = redis::cmd("DEL")
        .arg("quickstart:counter")
        .query(&mut conn)?;
    let started = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            thread::spawn(
                move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                    let mut conn = redis::Client::open(url.as_str())?.get_connection()?;
                    for _ in 0..250 {
                        client
                            .lock("counter")
                            .wait(Duration::from_secs(10))
                            .with_lock(|_guard| {
                                let n: i64 = redis::cmd("GET")
                                    .arg("quickstart:counter")
                                    .query::<Option<i64>>(&mut conn)?
                                    .unwrap_or(0);
                                redis::cmd("SET")
                                    .arg("quickstart:counter")
                                    .arg(n + 1)
                                    .query::<()>(&mut conn)
                            })??;
                    }
                    Ok(())
                },
            )
        })
        .collect();
    for w in workers {
        w.join()
            .map_err(|_| "worker panicked")?
            .map_err(|e| e.to_string())?;
    }
    let count: i64 = redis::cmd("GET")
        .arg("quickstart:counter")
        .query(&mut conn)?;
    println!(
        "1000 locked increments from 4 threads: counter = {count} in {:?}",
        started.elapsed()
    );

    // 2. Fencing tokens increase with every acquisition of a name.
    let first = client
        .lock("report")
        .try_acquire()?
        .ok_or("report is free")?;
    println!("first holder of 'report' got fence {}", first.fence());
    first.release()?;
    let second = client.lock("report").acquire()?;
    println!("next holder of 'report' got fence {}", second.fence());
    drop(second); // dropping a guard releases it

    // 3. A holder that outlives its lease is told so, and cannot delete the next holder's lock.
    let slow = client
        .lock("invoice")
        .ttl(Duration::from_millis(100))
        .try_acquire()?
        .ok_or("free")?;
    thread::sleep(Duration::from_millis(150)); // a GC pause, a slow disk...
    let next = client
        .lock("invoice")
        .try_acquire()?
        .ok_or("the lease expired, so it is free")?;
    let stale_fence = slow.fence();
    match slow.release() {
        Err(Error::NotOwner {
            reason: LossReason::Taken,
            ..
        }) => println!(
            "stale holder (fence {}) was told its lease was taken; new holder has fence {}",
            stale_fence,
            next.fence()
        ),
        other => println!("unexpected: {other:?}"),
    }
    next.release()?;
    Ok(())
}
