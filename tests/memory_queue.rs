//! The reliable queue on the in-process server (feature `memory`): priorities, delays,
//! leases (visibility), ack/nack, dead letters and `work`, on the server's clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlease::memory::{Loss, MemoryServer};
use redlease::{Error, queue::JobError};
use redlease_suite::testkit::await_condition;

const S: Duration = Duration::from_secs(1);

#[test]
fn priorities_then_fifo() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    q.push("low-1").unwrap();
    q.push_with("high", redlease::queue::PushOptions::new().priority(9))
        .unwrap();
    q.push("low-2").unwrap();
    let order: Vec<Vec<u8>> = (0..3)
        .map(|_| {
            let job = q.try_take().unwrap().unwrap();
            let p = job.payload().to_vec();
            job.ack().unwrap();
            p
        })
        .collect();
    assert_eq!(
        order,
        [b"high".to_vec(), b"low-1".to_vec(), b"low-2".to_vec()]
    );
    assert!(q.try_take().unwrap().is_none());
}

#[test]
fn a_job_due_in_an_hour_is_taken_after_an_hour_of_virtual_time() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    q.push_with("later", redlease::queue::PushOptions::new().delay(3600 * S))
        .unwrap();
    assert!(q.try_take().unwrap().is_none());
    assert_eq!(q.stats().unwrap().delayed, 1);
    server.clock().advance(3599 * S);
    assert!(q.try_take().unwrap().is_none());
    // A taker waiting up to 2 minutes sleeps until the job is due, not longer.
    let (real, t0) = (Instant::now(), server.clock().elapsed());
    let job = q.take(120 * S).unwrap().expect("due within the wait");
    let waited = server.clock().elapsed() - t0;
    assert!(waited >= S && waited < 3 * S, "{waited:?}");
    assert_eq!(job.payload(), b"later");
    job.ack().unwrap();
    assert!(real.elapsed() < 5 * S);
}

#[test]
fn an_idle_taker_gives_up_after_its_wait() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    let t0 = server.clock().elapsed();
    assert!(q.take(10 * S).unwrap().is_none());
    let waited = server.clock().elapsed() - t0;
    assert!(waited >= 10 * S && waited < 11 * S, "{waited:?}");
}

#[test]
fn an_abandoned_job_is_redelivered_when_its_visibility_runs_out() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let qa = a.queue("q").unwrap().visibility(30 * S);
    let qb = b.queue("q").unwrap().visibility(30 * S);
    let id = qa.push("refund-7").unwrap();
    let job = qa.try_take().unwrap().unwrap();
    assert_eq!(job.delivery(), 1);
    job.abandon(); // the worker "dies": no more renewals
    assert!(qb.try_take().unwrap().is_none(), "invisible while leased");
    server.clock().advance(31 * S);
    let again = qb.try_take().unwrap().expect("redelivered");
    assert_eq!(again.id(), id);
    assert_eq!(again.delivery(), 2);
    again.ack().unwrap();
    assert_eq!(qb.stats().unwrap().in_flight, 0);
}

#[test]
fn a_held_job_is_renewed_by_the_watchdog_and_its_late_ack_counts() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap().visibility(30 * S);
    q.push("long").unwrap();
    let job = q.try_take().unwrap().unwrap();
    server.clock().advance(300 * S);
    assert!(!job.is_lost());
    assert!(q.try_take().unwrap().is_none(), "still leased");
    job.ack().unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.ready, s.in_flight, s.dead), (0, 0, 0));
}

#[test]
fn nacked_jobs_back_off_and_go_to_the_dead_list_after_max_deliveries() {
    let server = MemoryServer::new();
    let q = server
        .client()
        .queue("q")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(10 * S, 60 * S);
    q.push("bad").unwrap();
    q.try_take().unwrap().unwrap().nack().unwrap();
    assert!(q.try_take().unwrap().is_none(), "backing off 10 s");
    server.clock().advance(10 * S);
    let job = q.try_take().unwrap().expect("retried");
    assert_eq!(job.delivery(), 2);
    job.fail("still bad", redlease::queue::Retry::Backoff)
        .unwrap();
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_deref(), Some("still bad"));
    assert!(q.requeue_dead(&dead[0].id).unwrap());
    assert!(q.try_take().unwrap().is_some());
}

/// A job requeued from the dead list is retried as a new one (issue 27): its attempts and
/// its backoff start again, while its delivery number (its fence) keeps increasing.
#[test]
fn a_requeued_dead_job_starts_its_attempts_and_backoff_afresh() {
    let server = MemoryServer::new();
    let q = server
        .client()
        .queue("q")
        .unwrap()
        .max_deliveries(3)
        .retry_backoff(10 * S, 3600 * S);
    let id = q.push("bad").unwrap();
    // Three failures with the backoff doubling: 10 s, 20 s, then dead.
    for (attempt, backoff) in [(1, 10), (2, 20), (3, 0)] {
        let job = q.try_take().unwrap().expect("due");
        assert_eq!((job.delivery(), job.attempt()), (attempt, attempt));
        job.nack().unwrap();
        server.clock().advance(backoff * S);
    }
    assert_eq!(q.dead_jobs(10).unwrap()[0].id, id);
    assert!(q.requeue_dead(&id).unwrap());
    for (delivery, attempt) in [(4, 1), (5, 2)] {
        let job = q
            .try_take()
            .unwrap()
            .expect("requeued, or retried after its backoff");
        assert_eq!((job.delivery(), job.attempt()), (delivery, attempt));
        job.nack().unwrap();
        // The backoff restarted from the base: 10 s after the first failure since the
        // requeue (not 10 s * 2^3), 20 s after the second.
        let backoff = 10 * S * (1 << (attempt - 1));
        server.clock().advance(backoff - S);
        assert!(q.try_take().unwrap().is_none(), "backing off {backoff:?}");
        server.clock().advance(S);
    }
    // The third attempt since the requeue is the last of max_deliveries.
    let job = q.try_take().unwrap().expect("retried");
    assert_eq!((job.delivery(), job.attempt()), (6, 3));
    job.nack().unwrap();
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!((dead.len(), dead[0].deliveries), (1, 6));
}

/// The worker pool's ack-and-take hands over a requeued job with its attempt too.
#[test]
fn a_worker_pool_sees_a_requeued_jobs_attempt() {
    let server = MemoryServer::new();
    let q = server
        .client()
        .queue("q")
        .unwrap()
        .max_deliveries(1)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let id = q.push_unique("again", "x").unwrap();
    assert_eq!(id, redlease::queue::Pushed::Queued("again".into()));
    q.try_take().unwrap().unwrap().nack().unwrap();
    // Another job first, so that the requeued one is handed over by the ack.
    q.push("first").unwrap();
    assert!(q.requeue_dead("again").unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let workers = q
        .work(1, move |job| -> Result<(), String> {
            record
                .lock()
                .unwrap()
                .push((job.id().to_owned(), job.delivery(), job.attempt()));
            Ok(())
        })
        .unwrap();
    await_condition(10 * S, || seen.lock().unwrap().len() == 2);
    drop(workers);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains(&("again".to_owned(), 2, 1)), "{seen:?}");
}

#[test]
fn an_ack_whose_reply_was_lost_is_retried_once() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    q.push("x").unwrap();
    let job = q.try_take().unwrap().unwrap();
    server.lose_next_reply(Loss::AfterRun);
    job.ack().unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.ready, s.in_flight), (0, 0));
}

#[test]
fn a_restart_that_lost_the_queue_is_an_empty_queue_not_a_hang() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    q.push("x").unwrap();
    let snap = server.snapshot();
    q.push("y").unwrap();
    server.restart_from(&snap);
    let job = q.try_take().unwrap().unwrap();
    assert_eq!(job.payload(), b"x");
    job.ack().unwrap();
    assert!(q.try_take().unwrap().is_none());
}

#[test]
fn a_refusing_server_is_unavailable() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    server.refuse_connections(true);
    assert!(matches!(q.push("x"), Err(Error::Unavailable { .. })));
    server.refuse_connections(false);
    q.push("x").unwrap();
}

#[test]
fn workers_are_woken_by_pushes_and_stop_on_request() {
    let server = MemoryServer::new();
    let client = server.client();
    let q = client.queue("q").unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let workers = {
        let seen = seen.clone();
        q.work(2, move |job| {
            if job.payload() == b"bad" {
                return Err(JobError::no_retry("bad"));
            }
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap()
    };
    q.push_many(["a", "b", "c", "bad"]).unwrap();
    await_condition(30 * S, || {
        let r = workers.report();
        r.acked + r.nacked == 4
    });
    let report = workers.stop();
    assert_eq!((report.acked, report.nacked), (3, 1));
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(q.dead_jobs(10).unwrap().len(), 1);
}

#[test]
fn workers_wait_on_the_test_clock_for_a_delayed_job() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    let workers = q.work(1, |_job| -> Result<(), String> { Ok(()) }).unwrap();
    q.push_with(
        "in an hour",
        redlease::queue::PushOptions::new().delay(3600 * S),
    )
    .unwrap();
    // The worker waits on the clock (it never moves it itself).
    await_condition(30 * S, || server.clock().sleepers() >= 1);
    server.clock().advance(1800 * S);
    assert_eq!(workers.report().acked, 0);
    assert_eq!(q.stats().unwrap().delayed, 1);
    // Move time while the worker waits, not in the middle of its call (a reply that comes
    // after a jump is, to the client, a reply that took that long).
    await_condition(30 * S, || server.clock().sleepers() >= 1);
    server.clock().advance(1800 * S);
    await_condition(30 * S, || workers.report().acked == 1);
    assert_eq!(workers.stop().acked, 1);
}

/// Bad queue settings fail when the worker pool is made, with the message, instead of a
/// pool whose every take is refused (issue 27: `max_deliveries(0)` then `work` spun).
#[test]
fn bad_queue_settings_fail_when_the_pool_is_made() {
    let server = MemoryServer::new();
    let client = server.client();
    let q = || client.queue("q").unwrap();
    let handler = |_job: &redlease::queue::Job| -> Result<(), String> { Ok(()) };
    for (queue, says) in [
        (q().max_deliveries(0), "max_deliveries"),
        (q().visibility(Duration::ZERO), "visibility"),
        (q().idle_check(Duration::ZERO), "idle check"),
        (
            q().retry_backoff(Duration::MAX, Duration::MAX),
            "retry backoff",
        ),
    ] {
        let e = queue.work(2, handler).map(drop).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
    assert!(q().work(1, handler).is_ok());
}

/// A worker pool's report carries the text of its last error (without a tracing
/// subscriber, the only place it shows).
#[test]
fn a_worker_report_carries_its_last_error() {
    let server = MemoryServer::new();
    let q = server.client().queue("q").unwrap();
    // Not a queue's sorted set: every take fails with a typed error.
    server
        .call(&["SET", "redlease:{q}:q:ready", "not a queue"])
        .unwrap();
    let workers = q.work(1, |_job| -> Result<(), String> { Ok(()) }).unwrap();
    await_condition(10 * S, || workers.report().errors >= 1);
    let report = workers.stop();
    let text = report.last_error.expect("the last error's text");
    println!("last worker error: {text}");
    assert!(text.contains("wrong kind of value"), "{text}");
}
