//! A failed job keeps its handler's error, and a handler chooses how it is retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use redlease::{Client, queue::JobError, queue::Queue, queue::Retry};
use redlease_suite::testkit::{await_condition, server};

fn queue(client: &Client, name: &str) -> Queue {
    client
        .queue(name)
        .unwrap()
        .max_deliveries(3)
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
}

fn client(server: &redlease_suite::RedisServer) -> Client {
    redlease_suite::testkit::client(server, Duration::from_millis(500))
}

#[test]
fn a_dead_job_keeps_the_handlers_error() {
    let server = server();
    let client = client(&server);
    let q = queue(&client, "fails");
    let id = q.push("x").unwrap();
    let workers = q
        .work(1, |job| -> Result<(), String> {
            Err(format!("cannot parse job {}", job.id()))
        })
        .unwrap();
    await_condition(Duration::from_secs(20), || q.stats().unwrap().dead == 1);
    let report = workers.stop();
    assert_eq!(report.nacked, 3);
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id);
    assert_eq!(dead[0].deliveries, 3);
    assert_eq!(
        dead[0].reason.as_deref(),
        Some(format!("cannot parse job {id}").as_str())
    );

    // Requeued, the old reason is forgotten; a later death without one records none.
    assert!(q.requeue_dead(&id).unwrap());
    assert_eq!(q.dead_jobs(10).unwrap().len(), 0);
    for _ in 0..3 {
        let job = q.take(Duration::from_secs(5)).unwrap().unwrap();
        job.nack_after(Duration::ZERO).unwrap();
    }
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!((dead.len(), dead[0].reason.clone()), (1, None));
    // Deleted, nothing is left behind (the id may be pushed again).
    assert!(q.delete_dead(&id).unwrap());
    let mut conn = redlease_suite::testkit::connection(&server);
    let reasons: u64 = redis::cmd("HLEN")
        .arg("redlease:{fails}:q:reasons")
        .query(&mut conn)
        .unwrap();
    assert_eq!(reasons, 0);
}

#[test]
fn no_retry_sends_the_job_to_the_dead_list_at_once() {
    let server = server();
    let client = client(&server);
    let q = queue(&client, "poison").max_deliveries(5);
    let id = q.push("not json").unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let workers = {
        let runs = runs.clone();
        q.work(2, move |_job| {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(JobError::no_retry("the payload is not JSON"))
        })
        .unwrap()
    };
    await_condition(Duration::from_secs(20), || q.stats().unwrap().dead == 1);
    workers.stop();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "no second delivery");
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!(dead[0].id, id);
    assert_eq!(dead[0].deliveries, 1);
    assert_eq!(dead[0].reason.as_deref(), Some("the payload is not JSON"));

    // The same through Job::fail.
    let id = q.push("again").unwrap();
    let job = q.take(Duration::from_secs(5)).unwrap().unwrap();
    job.fail("refused by hand", Retry::Never).unwrap();
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!(dead[1].id, id);
    assert_eq!(dead[1].reason.as_deref(), Some("refused by hand"));
}

#[test]
fn retry_after_delays_the_next_delivery() {
    let server = server();
    let client = client(&server);
    let q = queue(&client, "later");
    q.push("x").unwrap();
    let delay = Duration::from_millis(600);
    let job = q.take(Duration::from_secs(5)).unwrap().unwrap();
    let failed_at = Instant::now();
    job.fail("upstream busy", Retry::After(delay)).unwrap();
    let stats = q.stats().unwrap();
    assert_eq!((stats.ready, stats.delayed), (0, 1));
    let job = q.take(Duration::from_secs(10)).unwrap().unwrap();
    assert!(
        failed_at.elapsed() >= delay - Duration::from_millis(20),
        "redelivered after {:?}",
        failed_at.elapsed()
    );
    assert_eq!(job.delivery(), 2);
    job.ack().unwrap();

    // From a worker: JobError::retry_after.
    q.push("y").unwrap();
    let workers = q
        .work(1, move |job| {
            if job.delivery() == 1 {
                Err(JobError::retry_after(
                    Duration::from_secs(3600),
                    "try in an hour",
                ))
            } else {
                Ok(())
            }
        })
        .unwrap();
    await_condition(Duration::from_secs(20), || q.stats().unwrap().delayed == 1);
    let report = workers.stop();
    assert_eq!((report.nacked, report.acked), (1, 0));
}
