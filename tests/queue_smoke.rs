//! A first end-to-end pass over the queue (the full suite is tests/queue.rs).

use std::time::{Duration, Instant};

use redlease::{Client, queue::Pushed};
use redlease_suite::RedisServer;

#[test]
fn push_take_ack_nack_dead_and_delayed() {
    let server = RedisServer::start().unwrap();
    let c = Client::open(server.url()).unwrap();
    let q = c
        .queue("smoke")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let id = q.push(b"hello".to_vec()).unwrap();
    // A generated id is 16 random bytes in lowercase hex, fresh per push.
    assert_eq!(id.len(), 32, "{id}");
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{id}"
    );
    let job = q.try_take().unwrap().expect("a job");
    assert_eq!(job.id(), id);
    assert_eq!(job.payload(), b"hello");
    assert_eq!(job.delivery(), 1);
    assert_eq!(q.stats().unwrap().in_flight, 1);
    job.ack().unwrap();
    assert_eq!(q.stats().unwrap(), redlease::queue::QueueStats::default());

    assert_eq!(
        q.push_unique("u1", "x").unwrap(),
        Pushed::Queued("u1".into())
    );
    assert_eq!(
        q.push_unique("u1", "y").unwrap(),
        Pushed::Duplicate("u1".into())
    );
    let j = q.take(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(j.payload(), b"x");
    j.nack().unwrap();
    let j = q.take(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(j.delivery(), 2);
    j.nack().unwrap();
    assert_eq!(q.stats().unwrap().dead, 1);
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!(dead[0].id, "u1");
    assert!(q.requeue_dead("u1").unwrap());
    q.take(Duration::from_secs(1))
        .unwrap()
        .unwrap()
        .ack()
        .unwrap();

    let start = Instant::now();
    q.push_with(
        "later",
        redlease::queue::PushOptions::new().delay(Duration::from_millis(200)),
    )
    .unwrap();
    let j = q
        .take(Duration::from_secs(2))
        .unwrap()
        .expect("delayed job");
    let waited = start.elapsed();
    // Not before its due time; by its due time, with a 3x margin for a loaded machine.
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_millis(600),
        "{waited:?}"
    );
    j.ack().unwrap();
    assert!(q.take(Duration::from_millis(100)).unwrap().is_none());
}

#[test]
fn dead_jobs_can_be_deleted_and_their_ids_reused() {
    let server = RedisServer::start().unwrap();
    let c = Client::open(server.url()).unwrap();
    let q = c
        .queue("purge")
        .unwrap()
        .max_deliveries(1)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    for id in ["a", "b", "c"] {
        q.push_unique(id, "x").unwrap();
        q.take(Duration::from_secs(1))
            .unwrap()
            .unwrap()
            .nack()
            .unwrap();
    }
    assert_eq!(q.stats().unwrap().dead, 3);
    assert!(q.delete_dead("a").unwrap());
    assert!(!q.delete_dead("a").unwrap(), "already gone");
    assert_eq!(
        q.push_unique("a", "again").unwrap(),
        Pushed::Queued("a".into()),
        "the id is free again"
    );
    assert_eq!(q.purge_dead().unwrap(), 2);
    assert_eq!(q.stats().unwrap().dead, 0);
    assert_eq!(
        q.push_unique("b", "again").unwrap(),
        Pushed::Queued("b".into())
    );
}

#[test]
fn a_requeued_job_gets_max_deliveries_afresh_and_its_delivery_number_keeps_growing() {
    let server = RedisServer::start().unwrap();
    let c = Client::open(server.url()).unwrap();
    let q = c
        .queue("again")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    q.push_unique("j", "x").unwrap();
    for _ in 0..2 {
        q.take(Duration::from_secs(1))
            .unwrap()
            .unwrap()
            .nack()
            .unwrap();
    }
    assert_eq!(q.stats().unwrap().dead, 1);
    assert!(q.requeue_dead("j").unwrap());
    let job = q.take(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(job.delivery(), 3);
    job.nack().unwrap();
    assert_eq!(
        q.stats().unwrap().dead,
        0,
        "two more deliveries after a requeue"
    );
    let job = q.take(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(job.delivery(), 4);
    job.nack().unwrap();
    assert_eq!(q.stats().unwrap().dead, 1);
}
