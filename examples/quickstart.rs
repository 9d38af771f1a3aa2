//! The lease lock in five minutes: exclusive sections across threads, fencing tokens, and
//! what a holder whose lease ran out is told.
//!
//! Runs against `REDIS_URL` when it is set; otherwise it starts a throwaway redis-server on a
//! free port and stops it at the end. Exits 0 when every step behaved as described, else
//! prints what went wrong and exits 1.
//!
//! ```text
//! cargo run --example quickstart
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example quickstart
//! ```

mod common;

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use common::BoxError;
use redlease::{Client, Error, LossReason};

fn main() -> ExitCode {
    common::finish("quickstart", run())
}

fn run() -> Result<(), BoxError> {
    // Keep the server (if we started one) alive until the end of run().
    let redis = common::redis("quickstart")?;
    let url = redis.url.clone();
    // build_and_check: fail now, with a clear message, when Redis is unreachable or refuses
    // our configuration (a wrong password...), rather than at the first lock.
    let client = Client::builder(&url)
        .key_prefix("quickstart")
        .build_and_check()?;

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
            thread::spawn(move || -> Result<(), BoxError> {
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
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "a worker thread panicked")??;
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
        .ok_or("'report' was busy, but nothing else uses it")?;
    println!("first holder of 'report' got fence {}", first.fence());
    first.release()?;
    let second = client.lock("report").acquire()?;
    println!("next holder of 'report' got fence {}", second.fence());
    drop(second); // dropping a guard releases it

    // 3. A holder that outlives its lease is told so, and cannot delete the next holder's lock.
    //    The watchdog (on by default) would keep renewing the lease while the guard lives, so
    //    this holder turns it off: it stands for a process that stopped renewing (a long GC
    //    pause, a frozen VM) while its code still believes it holds the lock.
    let slow = client
        .lock("invoice")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .try_acquire()?
        .ok_or("'invoice' was busy, but nothing else uses it")?;
    thread::sleep(Duration::from_millis(150)); // the pause: the lease runs out meanwhile
    // Redis freed the lock at the end of the lease; another holder takes it.
    let next = client
        .lock("invoice")
        .wait(Duration::from_secs(5))
        .acquire()?;
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
        Ok(()) => {
            return Err("the stale holder's release succeeded: its lease had not ended".into());
        }
        Err(e) => return Err(format!("the stale holder's release failed otherwise: {e}").into()),
    }
    next.release()?;
    println!("quickstart: done");
    Ok(())
}
