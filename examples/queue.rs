//! A reliable queue worked until it is empty: jobs pushed, a pool of workers processing
//! them, one job that always fails ending on the dead list, and the pool's report.
//!
//! Runs against `REDIS_URL` when it is set (keys start with `queue-example:`); otherwise it
//! starts a throwaway redis-server on a free port and stops it at the end. Exits 0 when
//! every job was processed as described, else prints what went wrong and exits 1.
//!
//! ```text
//! cargo run --example queue
//! ```

mod common;

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use common::BoxError;
use redlease::Client;

/// Jobs pushed (one of them fails every time).
const JOBS: u64 = 20;
/// How long the example waits for the queue to drain before calling it a failure.
const DRAIN_WAIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    common::finish("queue", run())
}

fn run() -> Result<(), BoxError> {
    let redis = common::redis("queue")?;
    let client = Client::builder(&redis.url)
        .key_prefix("queue-example")
        .build()?;
    let emails = client
        .queue("emails")?
        .max_deliveries(3) // the third failure sends a job to the dead list
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(100));
    emails.purge_dead()?; // a clean start when REDIS_URL points at a used server

    for n in 1..JOBS {
        emails.push(format!("welcome email #{n}"))?;
    }
    emails.push("poison: fails every time")?;

    // Four workers; Ok acks a job, Err nacks it (retried with backoff, dead after 3 tries).
    let workers = emails.work(4, |job| -> Result<(), String> {
        let text = String::from_utf8_lossy(job.payload());
        if text.starts_with("poison") {
            return Err(format!("cannot send {text:?}"));
        }
        Ok(())
    })?;

    // Process until the queue is empty: nothing ready, delayed (a retry) or in a worker's
    // hands. The report says what the workers did so far.
    let started = Instant::now();
    loop {
        let stats = emails.stats()?;
        if stats.ready == 0 && stats.delayed == 0 && stats.in_flight == 0 {
            break;
        }
        if started.elapsed() > DRAIN_WAIT {
            return Err(format!(
                "the queue did not drain within {DRAIN_WAIT:?}: {stats:?}, workers {:?}",
                workers.report()
            )
            .into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    let report = workers.stop(); // each worker finishes the job in hand, then stops
    println!(
        "queue: drained in {:?}: acked={} nacked={} refused={} errors={}",
        started.elapsed(),
        report.acked,
        report.nacked,
        report.refused,
        report.errors
    );

    let dead = emails.dead_jobs(10)?;
    for job in &dead {
        println!(
            "queue: dead job {} after {} deliveries: {}",
            job.id,
            job.deliveries,
            String::from_utf8_lossy(&job.payload)
        );
    }
    if report.acked != JOBS - 1 || report.nacked != 3 || dead.len() != 1 {
        return Err(format!(
            "expected {} acked, 3 nacks and 1 dead job; got {report:?} and {} dead",
            JOBS - 1,
            dead.len()
        )
        .into());
    }
    emails.purge_dead()?;
    println!("queue: done");
    Ok(())
}
