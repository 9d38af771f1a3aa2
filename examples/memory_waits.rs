//! How much real time a long wait costs on the in-process server (`memory` feature): a
//! waiting `take` of a job due in 2 h at `idle_check` 10 ms, and a 600 s lock wait at
//! 10 ms retries. Each should cost a handful of script runs, whatever the settings.
//!
//! Run with `cargo run --release --example memory_waits`.

use std::time::{Duration, Instant};

use redlease::memory::MemoryServer;

fn main() -> Result<(), redlease::Error> {
    let server = MemoryServer::new();
    let client = server.client();
    let queue = client.queue("later")?.idle_check(Duration::from_millis(10));
    queue.push_with(
        "in two hours",
        redlease::queue::PushOptions::new().delay(Duration::from_secs(2 * 3600)),
    )?;
    let started = Instant::now();
    let job = queue.take(Duration::from_secs(3 * 3600))?;
    let real = started.elapsed();
    let job = job.ok_or(redlease::Error::Driver("the job never came"))?;
    job.ack()?;
    println!(
        "take of a job due in 2 h at idle_check 10 ms: {:?} real, {:?} virtual",
        real,
        server.clock().elapsed()
    );

    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let _held = a.lock("busy").ttl(Duration::from_secs(30)).acquire()?;
    let started = Instant::now();
    let clock = server.clock().elapsed();
    let waited = b
        .lock("busy")
        .retry(Duration::from_millis(10), Duration::from_millis(10))
        .wait(Duration::from_secs(600))
        .acquire();
    let real = started.elapsed();
    let attempts = match &waited {
        Err(redlease::Error::Timeout { attempts, .. }) => *attempts,
        other => {
            println!("unexpected: {other:?}");
            0
        }
    };
    println!(
        "600 s lock wait at 10 ms retries: {:?} real, {:?} virtual, {attempts} attempts",
        real,
        server.clock().elapsed() - clock
    );
    Ok(())
}
