//! Batch takes and acks against real redis-server processes (issue 31, item 3): up to n jobs
//! in one round trip, each on its own lease with its own delivery and exactly-once ack; one
//! round trip to ack many; a lost reply neither loses nor duplicates a lease; the pause is
//! obeyed; the batched worker pool handles every job once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::core::queue::scripts::{ACK_MANY, TAKE_BATCH};
use redlease::{Client, Error, queue::Queue};
use redlease_suite::testkit::{self, Monitor, await_condition, connection as raw, server};
use redlease_suite::{Proxy, RedisServer};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

fn key(name: &str, part: &str) -> String {
    format!("redlease:{{{name}}}:q:{part}")
}

fn hlen(conn: &mut redis::Connection, key: &str) -> u64 {
    redis::cmd("HLEN").arg(key).query(conn).unwrap()
}

fn zcard(conn: &mut redis::Connection, key: &str) -> u64 {
    redis::cmd("ZCARD").arg(key).query(conn).unwrap()
}

#[test]
fn a_batch_take_leases_each_job_on_its_own_token_in_one_call_and_acks_them_in_one() {
    let server = server();
    let c = client(&server);
    let q = c.queue("batch").unwrap();
    let mut conn = raw(&server);
    let ids = q.push_many((0..10).map(|i| format!("p{i}"))).unwrap();
    let mut monitor = Monitor::start(&server);
    let jobs = q.try_take_batch(4).unwrap();
    // The first four, in order, each its own delivery and lease.
    let got: Vec<&str> = jobs.iter().map(|j| j.id()).collect();
    assert_eq!(got, ids[..4].iter().map(String::as_str).collect::<Vec<_>>());
    assert!(jobs.iter().all(|j| j.delivery() == 1 && j.attempt() == 1));
    assert_eq!(zcard(&mut conn, &key("batch", "inflight")), 4);
    // Four tokens, four holders on the server.
    assert_eq!(hlen(&mut conn, &key("batch", "holders")), 4);
    let sent = monitor.commands_during(Duration::from_millis(200));
    assert_eq!(
        sent.iter().filter(|c| c.contains(TAKE_BATCH.sha1)).count(),
        1,
        "{sent:#?}"
    );
    let outcomes = q.ack_batch(jobs);
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(zcard(&mut conn, &key("batch", "inflight")), 0);
    assert_eq!(hlen(&mut conn, &key("batch", "holders")), 0);
    // More than are ready: what there is.
    let rest = q.take_batch(50, Duration::ZERO).unwrap();
    assert_eq!(rest.len(), 6);
    drop(monitor);
    let mut monitor = Monitor::start(&server);
    assert!(q.ack_batch(rest).iter().all(Result::is_ok));
    let sent = monitor.commands_during(Duration::from_millis(200));
    assert_eq!(
        sent.iter().filter(|c| c.contains(ACK_MANY.sha1)).count(),
        1,
        "{sent:#?}"
    );
    let stats = q.stats().unwrap();
    assert_eq!((stats.ready, stats.in_flight), (0, 0));
}

/// A job of a batch whose lease ran out and went to another worker is refused in the batch
/// ack (`NotOwner`), while the rest of the batch is acked: each job is acked once.
#[test]
fn a_batch_ack_refuses_a_job_redelivered_meanwhile_and_acks_the_rest() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("refused")
        .unwrap()
        .visibility(Duration::from_millis(200));
    q.push_many(["a", "b", "c"]).unwrap();
    let jobs = q.try_take_batch(3).unwrap();
    assert_eq!(jobs.len(), 3);
    // The second job's lease runs out on the server (as if its renewal failed): made to
    // expire now, then taken by another worker.
    let mut conn = raw(&server);
    let stolen = jobs[1].id().to_owned();
    let _: i64 = redis::cmd("ZADD")
        .arg(key("refused", "inflight"))
        .arg(1)
        .arg(&stolen)
        .query(&mut conn)
        .unwrap();
    let other = client(&server).queue("refused").unwrap();
    let again = other.try_take().unwrap().expect("redelivered");
    assert_eq!((again.id(), again.delivery()), (stolen.as_str(), 2));
    let outcomes = q.ack_batch(jobs);
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert!(
        matches!(outcomes[1], Err(Error::NotOwner { .. })),
        "{outcomes:?}"
    );
    again.ack().unwrap();
    assert_eq!(q.stats().unwrap().in_flight, 0);
}

/// A lost reply: the retry with the same tokens gets the same jobs (each delivered once, no
/// other job leased), and a lost ack reply is retried without a second ack.
#[test]
fn a_lost_reply_neither_loses_nor_duplicates_a_lease() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = Client::builder(proxy.url())
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(300))
        .op_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let q = c.queue("lost").unwrap();
    // Warm the scripts (no NOSCRIPT round in the way of the dropped reply).
    q.push("warm").unwrap();
    let warm = q.try_take_batch(1).unwrap();
    assert!(q.ack_batch(warm).iter().all(Result::is_ok));
    q.push_many((0..5).map(|i| format!("p{i}"))).unwrap();
    proxy.drop_next_reply();
    let jobs = q.try_take_batch(3).unwrap();
    assert_eq!(proxy.dropped(), 1, "the first reply was lost");
    assert_eq!(jobs.len(), 3);
    assert!(
        jobs.iter().all(|j| j.delivery() == 1),
        "a job delivered twice"
    );
    let mut conn = raw(&server);
    assert_eq!(zcard(&mut conn, &key("lost", "inflight")), 3);
    assert_eq!(zcard(&mut conn, &key("lost", "ready")), 2);
    proxy.drop_next_reply();
    let outcomes = q.ack_batch(jobs);
    assert_eq!(proxy.dropped(), 2);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(zcard(&mut conn, &key("lost", "inflight")), 0);
    let rest = q.try_take_batch(5).unwrap();
    assert_eq!(rest.len(), 2);
    assert!(q.ack_batch(rest).iter().all(Result::is_ok));
}

/// A paused queue hands out nothing in a batch; resumed, it does.
#[test]
fn a_batch_take_respects_the_pause() {
    let server = server();
    let c = client(&server);
    let q = c.queue("paused").unwrap();
    q.push_many(["a", "b"]).unwrap();
    q.pause().unwrap();
    assert!(q.try_take_batch(10).unwrap().is_empty());
    assert_eq!(q.stats().unwrap().ready, 2);
    q.resume().unwrap();
    let jobs = q.try_take_batch(10).unwrap();
    assert_eq!(jobs.len(), 2);
    assert!(q.ack_batch(jobs).iter().all(Result::is_ok));
}

/// A worker that dies with a batch in hand loses nothing: the leases run out and the jobs
/// are delivered again.
#[test]
fn jobs_of_a_batch_abandoned_by_a_dead_worker_are_delivered_again() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("abandoned")
        .unwrap()
        .visibility(Duration::from_millis(100));
    q.push_many(["a", "b", "c"]).unwrap();
    for job in q.try_take_batch(3).unwrap() {
        job.abandon();
    }
    let mut again = Vec::new();
    await_condition(Duration::from_secs(5), || {
        again.extend(q.try_take_batch(3).unwrap());
        again.len() == 3
    });
    assert!(again.iter().all(|j| j.delivery() == 2));
    assert!(q.ack_batch(again).iter().all(Result::is_ok));
}

/// The batched pool handles every job once and acks it once, with a few failures nacked.
#[test]
fn the_batched_worker_pool_handles_every_job_once() {
    let server = server();
    let c = client(&server);
    let q: Queue = c
        .queue("pool")
        .unwrap()
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    const JOBS: usize = 1000;
    let ids: HashSet<String> = q
        .push_many((0..JOBS).map(|i| format!("{i:016}")))
        .unwrap()
        .into_iter()
        .collect();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let workers = {
        let seen = seen.clone();
        q.work_batched(2, 50, move |job| -> Result<(), String> {
            seen.lock().unwrap().push(job.id().to_owned());
            // Every 100th job fails on its first delivery.
            if job.payload().ends_with(b"00") && job.delivery() == 1 {
                return Err("first try".into());
            }
            Ok(())
        })
        .unwrap()
    };
    await_condition(Duration::from_secs(30), || {
        q.stats().map(|s| s.ready + s.in_flight + s.delayed) == Ok(0)
    });
    let report = workers.stop();
    assert_eq!(report.acked, JOBS as u64, "{report:?}");
    assert_eq!(report.nacked, (JOBS / 100) as u64, "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    let seen = seen.lock().unwrap();
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), JOBS);
    assert!(ids.iter().all(|id| distinct.contains(id)));
    assert_eq!(seen.len(), JOBS + JOBS / 100);
}

#[test]
fn batch_sizes_out_of_range_are_refused_before_anything_is_sent() {
    let server = server();
    let c = client(&server);
    let q = c.queue("sizes").unwrap();
    for n in [0, 1001] {
        assert!(matches!(
            q.try_take_batch(n),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            q.work_batched(1, n, |_| -> Result<(), String> { Ok(()) }),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(q.ack_batch(Vec::new()).is_empty());
}
