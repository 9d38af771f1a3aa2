//! The reliable queue against real redis-server processes: crashing workers, delayed jobs,
//! priorities, idle takers, expired leases, dead letters, the worker pool, bad input and a
//! Redis restart.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use redlease::core::queue::scripts::DEQUEUE;
use redlease::{
    Client, Error, InvalidArgument, LossReason, queue::Job, queue::NewJob, queue::Pushed,
    queue::Queue, queue::QueueStats, queue::WorkerReport,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{
    self, Monitor, Rng, await_condition, connection as raw, percentile, pubsub_subscribers, server,
    server_is_busy, snapshot,
};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

// ---------------------------------------------------------------------------------------
// Harness

/// The load test takes this exclusively; tests with tight timing bounds share it, so that
/// they never run beside the load test on a small machine.
static HEAVY: RwLock<()> = RwLock::new(());

fn timing_sensitive() -> RwLockReadGuard<'static, ()> {
    HEAVY.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    HEAVY.write().unwrap_or_else(|p| p.into_inner())
}

/// The key of part `part` of queue `name` (default prefix).
fn key(name: &str, part: &str) -> String {
    format!("redlease:{{{name}}}:q:{part}")
}

fn zero() -> QueueStats {
    QueueStats::default()
}

/// The counts of `stats` without its times (the oldest ready job's age, the least lease
/// left: tests/inspect.rs checks them).
fn counts(mut stats: QueueStats) -> QueueStats {
    stats.oldest_ready_age = None;
    stats.least_lease_left = None;
    stats
}

/// `QueueStats` and `WorkerReport` are `#[non_exhaustive]` (they will grow), so expected
/// values are built from a default one, field by field.
macro_rules! with {
    ($t:ident { $($field:ident: $value:expr),* $(,)? }) => {{
        let mut x = $t::default();
        $(x.$field = $value;)*
        x
    }};
}

// ---------------------------------------------------------------------------------------
// Crashing workers

const PROCESSED: &str = "test:processed";
const ACKED: &str = "test:acked";

enum Exit {
    Stopped,
    Killed,
}

struct Shared {
    stop: AtomicBool,
    acks: AtomicUsize,
    abandoned: Mutex<HashMap<String, i64>>,
    refused: Mutex<HashSet<String>>,
}

/// Takes jobs until stopped; "killed" with probability 1/`kill_one_in` per job: the job's
/// side effect is recorded, then the handle is abandoned (no ack, no renewal) and the
/// thread ends, as a crashed worker would.
fn crashing_worker(
    q: &Queue,
    conn: &mut redis::Connection,
    seed: u64,
    kill_one_in: u64,
    shared: &Shared,
) -> Exit {
    let mut rng = Rng(seed | 1);
    while !shared.stop.load(Ordering::SeqCst) {
        let Some(job) = q.take(Duration::from_millis(200)).unwrap() else {
            continue;
        };
        let id = job.id().to_owned();
        let _: i64 = redis::cmd("HINCRBY")
            .arg(PROCESSED)
            .arg(&id)
            .arg(1)
            .query(conn)
            .unwrap();
        if rng.next().is_multiple_of(kill_one_in) {
            *shared.abandoned.lock().unwrap().entry(id).or_default() += 1;
            job.abandon();
            return Exit::Killed;
        }
        match job.ack() {
            Ok(()) => {
                let _: i64 = redis::cmd("SADD").arg(ACKED).arg(&id).query(conn).unwrap();
                shared.acks.fetch_add(1, Ordering::SeqCst);
            }
            Err(Error::NotOwner { .. }) => {
                shared.refused.lock().unwrap().insert(id);
            }
            Err(e) => panic!("ack of {id}: {e}"),
        }
    }
    Exit::Stopped
}

#[test]
fn ten_thousand_jobs_survive_workers_killed_mid_job() {
    let _heavy = exclusive();
    let server = server();
    let c = client(&server);
    let total = 10_000;
    let visibility = Duration::from_millis(300);
    let q = c
        .queue("load")
        .unwrap()
        .visibility(visibility)
        .max_deliveries(1000);
    let mut conn = raw(&server);

    let pushing = Instant::now();
    let mut ids = HashSet::new();
    for batch in 0..20 {
        let payloads = (0..total / 20).map(|i| format!("job {}", batch * (total / 20) + i));
        ids.extend(q.push_many(payloads).unwrap());
    }
    let pushed_in = pushing.elapsed();
    assert_eq!(ids.len(), total);
    assert_eq!(
        counts(q.stats().unwrap()),
        with!(QueueStats {
            ready: total as u64
        })
    );

    let (mut rng, seed) = Rng::seeded();
    println!("seed {seed}");
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        acks: AtomicUsize::new(0),
        abandoned: Mutex::new(HashMap::new()),
        refused: Mutex::new(HashSet::new()),
    });
    let (exits, exited) = mpsc::channel();
    let spawn = |worker_seed: u64| {
        let (q, shared, exits) = (q.clone(), shared.clone(), exits.clone());
        let mut conn = raw(&server);
        thread::spawn(move || {
            let exit = crashing_worker(&q, &mut conn, worker_seed, 150, &shared);
            let killed = matches!(exit, Exit::Killed);
            let _ = exits.send(killed);
        })
    };
    let start = Instant::now();
    let mut handles: Vec<_> = (0..4).map(|_| spawn(rng.next())).collect();
    let mut kills = 0;
    while shared.acks.load(Ordering::SeqCst) < total {
        assert!(
            start.elapsed() < Duration::from_secs(50),
            "only {} of {total} acked after {:?}: {:?}",
            shared.acks.load(Ordering::SeqCst),
            start.elapsed(),
            q.stats()
        );
        // A killed worker is replaced at once, so four keep running.
        if let Ok(killed) = exited.recv_timeout(Duration::from_millis(50)) {
            assert!(killed, "a worker stopped before being told to");
            kills += 1;
            handles.push(spawn(rng.next()));
        }
    }
    let took = start.elapsed();
    shared.stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    kills += exited.try_iter().filter(|killed| *killed).count();

    let abandoned = shared.abandoned.lock().unwrap().clone();
    let refused = shared.refused.lock().unwrap().clone();
    let processed: HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(PROCESSED)
        .query(&mut conn)
        .unwrap();
    let acked: HashSet<String> = redis::cmd("SMEMBERS").arg(ACKED).query(&mut conn).unwrap();
    let duplicates: HashSet<&String> = processed
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id)
        .collect();
    println!(
        "{total} jobs through 4 workers in {took:?} ({:.0} jobs/s; pushed in {pushed_in:?}): \
         {kills} workers killed, {} duplicates, {} acks refused",
        total as f64 / took.as_secs_f64(),
        duplicates.len(),
        refused.len()
    );

    // Every job acked exactly once, and nothing left behind.
    assert_eq!(shared.acks.load(Ordering::SeqCst), total);
    assert_eq!(acked, ids, "every id acked");
    assert_eq!(q.stats().unwrap(), zero(), "no job lost or left in flight");
    assert_eq!(processed.len(), total);
    assert!(kills > 0, "no worker was killed");
    assert_eq!(abandoned.values().sum::<i64>(), kills as i64);
    // An abandoned job was processed again after its lease ran out (once more per time it
    // was abandoned) ...
    for (id, times) in &abandoned {
        assert!(
            processed[id] > *times,
            "{id} was abandoned {times} time(s) but processed only {} time(s)",
            processed[id]
        );
    }
    // ... and only a job whose lease ran out was processed twice.
    for id in &duplicates {
        assert!(
            abandoned.contains_key(*id) || refused.contains(*id),
            "{id} processed {} times though its lease never ran out",
            processed[*id]
        );
    }
    // Completed jobs are not kept.
    let payloads: i64 = redis::cmd("HLEN")
        .arg(key("load", "payloads"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(payloads, 0);
}

// ---------------------------------------------------------------------------------------
// Delayed jobs

#[test]
fn delayed_jobs_come_out_in_due_order_and_never_early() {
    let _timing = timing_sensitive();
    let server = server();
    let c = client(&server);
    let q = c.queue("delayed").unwrap();
    let mut conn = raw(&server);
    let n = 200;

    // The taker is idle on the empty queue before the first push.
    let taker = {
        let q = q.clone();
        thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < n {
                let job = q
                    .take(Duration::from_secs(5))
                    .unwrap()
                    .unwrap_or_else(|| panic!("nothing to take after {} jobs", got.len()));
                got.push((job.id().to_owned(), Instant::now()));
                job.ack().unwrap();
            }
            got
        })
    };
    await_condition(Duration::from_secs(5), || {
        pubsub_subscribers(&mut conn, &key("delayed", "pushed")) == 1
    });

    // Delays spread over 0-500 ms, pushed in random order, as a producer would over time.
    let (mut rng, seed) = Rng::seeded();
    println!("seed {seed}");
    let mut delays: Vec<Duration> = (0..n)
        .map(|i| Duration::from_micros(i as u64 * 500_000 / (n as u64 - 1)))
        .collect();
    rng.shuffle(&mut delays);
    // The server fixes a job's due time when the push runs, somewhere between the
    // moment it was sent and the moment its reply came back: keep both ends.
    let mut due: HashMap<String, (Instant, Instant, Duration)> = HashMap::new();
    for delay in delays {
        let sent = Instant::now();
        let id = q
            .push_with(
                b"later".to_vec(),
                redlease::queue::PushOptions::new().delay(delay),
            )
            .unwrap();
        due.insert(id, (sent + delay, Instant::now() + delay, delay));
        // Pacing the producer (not synchronisation): pushes arrive while the taker sleeps.
        thread::sleep(Duration::from_millis(1));
    }
    let got = taker.join().unwrap();
    assert_eq!(got.len(), n);

    // Lateness in µs (negative: early), by the client clock.
    let allowance = Duration::from_millis(5);
    let mut lateness = Vec::new();
    for (id, at) in &got {
        let (due_at, _, delay) = due[id];
        assert!(
            *at + allowance >= due_at,
            "job with delay {delay:?} taken {:?} early",
            due_at - *at
        );
        lateness.push(if *at >= due_at {
            (*at - due_at).as_micros() as i64
        } else {
            -((due_at - *at).as_micros() as i64)
        });
    }
    // Taken in due order (ties within the allowance): a job taken first cannot have
    // become due after the next one could at the latest have become due.
    for pair in got.windows(2) {
        let (a_earliest, b_latest) = (due[&pair[0].0].0, due[&pair[1].0].1);
        assert!(
            a_earliest <= b_latest + allowance,
            "a job due {:?} later was taken first",
            a_earliest - b_latest
        );
    }
    lateness.sort_unstable();
    let (p50, p99, max) = (
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness[lateness.len() - 1],
    );
    println!(
        "delayed-job lateness over {n} jobs: min {} µs, p50 {p50} µs, p99 {p99} µs, max {max} µs",
        lateness[0]
    );
    // Order and never early are the promise here (the wake at the due time is held by
    // a_delayed_push_wakes_an_idle_taker_at_its_due_time). Lateness is a figure: a taker
    // starved on a loaded machine measured p99 504 ms; 1 s still catches one that sleeps
    // through due times for its 2 s idle check.
    assert!(p99 < 1_000_000, "p99 lateness {p99} µs");
    assert_eq!(q.stats().unwrap(), zero());
}

#[test]
fn a_delayed_push_wakes_an_idle_taker_at_its_due_time() {
    let _timing = timing_sensitive();
    let server = server();
    let c = client(&server);
    // A long idle check: only a push notification or a due time should end the wait.
    let q = c
        .queue("wake-delayed")
        .unwrap()
        .idle_check(Duration::from_secs(10));
    let mut monitor = Monitor::start(&server);
    let taker = {
        let q = q.clone();
        thread::spawn(move || {
            let job = q.take(Duration::from_secs(20)).unwrap();
            let at = Instant::now();
            (job.map(|j| (j.payload().to_vec(), j.ack())), at)
        })
    };
    // The taker's pauses double from 50 ms: after its seventh check the next pause is drawn
    // from a 3.2 s step (at least 1.6 s). Push right after that check.
    for _ in 0..7 {
        monitor.await_command(DEQUEUE.sha1, Duration::from_secs(5));
    }
    let delay = Duration::from_millis(100);
    let sent = Instant::now();
    q.push_with("soon", redlease::queue::PushOptions::new().delay(delay))
        .unwrap();
    let (job, at) = taker.join().unwrap();
    let (payload, ack) = job.expect("the delayed job");
    assert_eq!(payload, b"soon");
    ack.unwrap();
    let late = at.saturating_duration_since(sent + delay);
    // Room for a starved thread on a loaded machine; sleeping through the push would make
    // it at least 1.5 s late.
    assert!(
        late < Duration::from_millis(800),
        "a job due in {delay:?} was taken {late:?} late: the taker slept through its push"
    );
}

// ---------------------------------------------------------------------------------------
// Priorities

fn new_job(id: &str) -> NewJob {
    NewJob {
        id: id.to_owned(),
        payload: format!("payload of {id}").into_bytes(),
    }
}

#[test]
fn priorities_are_honoured_and_equal_priorities_keep_fifo_order() {
    let server = server();
    let c = client(&server);
    let q = c.queue("prio").unwrap();
    // Interleaved pushes of three priorities, one at a time ...
    for i in 0..5 {
        for (priority, name) in [(0, "low"), (9, "high"), (5, "mid")] {
            let pushed = q
                .push_batch(
                    &[new_job(&format!("{name}-{i}"))],
                    redlease::queue::PushOptions::new().priority(priority),
                )
                .unwrap();
            assert_eq!(pushed, vec![Pushed::Queued(format!("{name}-{i}"))]);
        }
    }
    // ... a batch keeps its order within its priority ...
    let batch: Vec<NewJob> = (0..5).map(|i| new_job(&format!("batch-{i}"))).collect();
    q.push_batch(&batch, redlease::queue::PushOptions::new().priority(5))
        .unwrap();
    // ... and the highest priority comes first whenever it is pushed.
    q.push_batch(
        &[new_job("top")],
        redlease::queue::PushOptions::new().priority(255),
    )
    .unwrap();

    let take = || {
        let job = q.try_take().unwrap().expect("a job");
        assert_eq!(job.payload(), format!("payload of {}", job.id()).as_bytes());
        job
    };
    let top = take();
    assert_eq!(top.id(), "top");
    // A job given back keeps its priority: it is served again before everything else.
    top.nack_after(Duration::ZERO).unwrap();
    let top = take();
    assert_eq!((top.id(), top.delivery()), ("top", 2));
    top.ack().unwrap();
    // Given back within its priority, a job goes to the end of that priority's line.
    let first_high = take();
    assert_eq!(first_high.id(), "high-0");
    first_high.nack_after(Duration::ZERO).unwrap();

    let mut order = Vec::new();
    while let Some(job) = q.try_take().unwrap() {
        order.push(job.id().to_owned());
        job.ack().unwrap();
    }
    let expected: Vec<String> = (1..5)
        .map(|i| format!("high-{i}"))
        .chain(["high-0".to_owned()])
        .chain((0..5).map(|i| format!("mid-{i}")))
        .chain((0..5).map(|i| format!("batch-{i}")))
        .chain((0..5).map(|i| format!("low-{i}")))
        .collect();
    assert_eq!(order, expected);
    assert_eq!(q.stats().unwrap(), zero());
}

// ---------------------------------------------------------------------------------------
// Idle takers

#[test]
fn a_blocked_taker_is_quiet_and_woken_at_once_by_a_push() {
    let _timing = timing_sensitive();
    let server = server();
    let c = client(&server);
    let q = c.queue("idle").unwrap();
    let mut conn = raw(&server);
    let (tx, rx) = mpsc::channel();
    let taker = {
        let q = q.clone();
        thread::spawn(move || {
            let job = q.take(Duration::from_secs(10));
            let _ = tx.send(Instant::now());
            job.map(|j| j.map(|j| (j.payload().to_vec(), j.ack())))
        })
    };
    await_condition(Duration::from_secs(3), || {
        pubsub_subscribers(&mut conn, &key("idle", "pushed")) == 1
    });
    // Counting the commands of a waiting taker needs time to pass.
    let mut monitor = Monitor::start(&server);
    let window = Duration::from_secs(3);
    let sent = monitor.commands_during(window);
    let rate = sent.len() as f64 / window.as_secs_f64();
    println!(
        "a blocked taker sent {} commands in {window:?} ({rate:.1}/s)",
        sent.len()
    );
    assert!(
        rate <= 5.0,
        "{} commands in {window:?}: {sent:#?}",
        sent.len()
    );
    assert!(
        sent.iter().any(|c| c.contains(DEQUEUE.sha1)),
        "the taker checks the queue now and then: {sent:#?}"
    );
    assert!(rx.try_recv().is_err(), "the taker gave up early");

    // Push right after one of its checks: its pauses are at least 1 s by now (half its
    // 2 s idle check), so only the push notification can wake it within 500 ms.
    monitor.await_command(DEQUEUE.sha1, Duration::from_secs(3));
    let pushed = Instant::now();
    q.push("wake up").unwrap();
    let woke = rx
        .recv_timeout(Duration::from_secs(3))
        .expect("the taker returns");
    let latency = woke.saturating_duration_since(pushed);
    println!("a push reached the blocked taker in {latency:?}");
    // Room for a starved thread on a loaded machine, still half the shortest pause.
    assert!(latency < Duration::from_millis(500), "{latency:?}");
    let (payload, ack) = taker.join().unwrap().unwrap().expect("the pushed job");
    assert_eq!(payload, b"wake up");
    ack.unwrap();
    assert_eq!(q.stats().unwrap(), zero());
}

// ---------------------------------------------------------------------------------------
// Expired leases, dead letters

#[test]
fn an_ack_after_the_lease_ran_out_is_refused_and_the_job_redelivered() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    let mut conn = raw(&server);
    let qa = a
        .queue("expiry")
        .unwrap()
        .visibility(Duration::from_secs(1));
    let qb = b
        .queue("expiry")
        .unwrap()
        .visibility(Duration::from_secs(1));
    let id = qa.push("work").unwrap();
    let first = qa.try_take().unwrap().expect("the job");
    assert_eq!((first.id(), first.delivery()), (id.as_str(), 1));
    assert!(qb.try_take().unwrap().is_none(), "invisible while leased");

    // The watchdog keeps renewing this lease; make it run out on the server as a long pause
    // would: its expiry is set in the past.
    let _: i64 = redis::cmd("ZADD")
        .arg(key("expiry", "inflight"))
        .arg("XX")
        .arg(1)
        .arg(&id)
        .query(&mut conn)
        .unwrap();
    let second = qb
        .take(Duration::from_secs(2))
        .unwrap()
        .expect("redelivered");
    assert_eq!(second.id(), id);
    assert_eq!(second.delivery(), 2, "the fence counts deliveries");
    assert_eq!(second.payload(), b"work");

    // The first holder hears of it, and its ack is refused.
    let reason = first
        .lost()
        .recv_timeout(Duration::from_secs(2))
        .expect("loss reported");
    assert!(
        matches!(reason, LossReason::Taken | LossReason::Expired),
        "{reason:?}"
    );
    assert!(first.is_lost());
    match first.ack() {
        Err(Error::NotOwner { name, .. }) => assert!(name.contains(&id), "{name}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        counts(qb.stats().unwrap()),
        with!(QueueStats { in_flight: 1 }),
        "the refused ack removed nothing"
    );
    second.ack().unwrap();
    assert_eq!(qb.stats().unwrap(), zero());
}

#[test]
fn nacks_up_to_max_deliveries_end_on_the_dead_list_and_requeue_brings_them_back() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("dead")
        .unwrap()
        .max_deliveries(3)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let payload = b"\x00poison\xff".to_vec();
    assert_eq!(
        q.push_unique("doomed", payload.clone()).unwrap(),
        Pushed::Queued("doomed".into())
    );
    for delivery in 1..=3 {
        let job = q.try_take().unwrap().expect("retried at once");
        assert_eq!((job.id(), job.delivery()), ("doomed", delivery));
        job.nack().unwrap();
    }
    assert!(q.try_take().unwrap().is_none());
    assert_eq!(counts(q.stats().unwrap()), with!(QueueStats { dead: 1 }));
    let dead = q.dead_jobs(10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "doomed");
    assert_eq!(dead[0].deliveries, 3);
    assert_eq!(dead[0].payload, payload);
    // A dead id is not pushed again.
    assert_eq!(
        q.push_unique("doomed", "other").unwrap(),
        Pushed::Duplicate("doomed".into())
    );

    assert!(q.requeue_dead("doomed").unwrap());
    assert!(!q.requeue_dead("doomed").unwrap(), "no longer dead");
    assert!(!q.requeue_dead("never-existed").unwrap());
    assert!(q.dead_jobs(10).unwrap().is_empty());
    let job = q.try_take().unwrap().expect("requeued");
    assert_eq!(
        (job.delivery(), job.attempt()),
        (4, 1),
        "the delivery number (the job's fence) keeps increasing; the attempts start again"
    );
    assert_eq!(job.payload(), payload);
    job.ack().unwrap();
    assert_eq!(q.stats().unwrap(), zero());
}

#[test]
fn a_lease_that_runs_out_at_max_deliveries_goes_to_the_dead_list() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("dead-by-expiry")
        .unwrap()
        .visibility(Duration::from_millis(100))
        .max_deliveries(1);
    q.push_unique("crashy", "p").unwrap();
    let job = q.try_take().unwrap().expect("the job");
    job.abandon();
    // The next taker finds the lease ran out, and the job out of deliveries.
    assert!(q.take(Duration::from_millis(400)).unwrap().is_none());
    assert_eq!(counts(q.stats().unwrap()), with!(QueueStats { dead: 1 }));
    let dead = q.dead_jobs(1).unwrap();
    assert_eq!((dead[0].id.as_str(), dead[0].deliveries), ("crashy", 1));
}

// ---------------------------------------------------------------------------------------
// Watchdog

#[test]
fn a_long_jobs_lease_is_extended_while_its_handle_lives() {
    let _timing = timing_sensitive();
    let server = server();
    let a = client(&server);
    let b = client(&server);
    // 1 s: the renewal (every third) has ~650 ms to land on a loaded machine.
    let visibility = Duration::from_secs(1);
    let qa = a.queue("long").unwrap().visibility(visibility);
    let qb = b.queue("long").unwrap().visibility(visibility);
    qa.push("slow work").unwrap();
    let job = qa.try_take().unwrap().expect("the job");
    let start = Instant::now();
    let mut checks = 0;
    // The job "works" for five visibility timeouts; nobody else may get it meanwhile.
    while start.elapsed() < visibility * 5 {
        assert!(
            qb.try_take().unwrap().is_none(),
            "redelivered after {:?}",
            start.elapsed()
        );
        assert!(!job.is_lost());
        checks += 1;
        thread::sleep(Duration::from_millis(25));
    }
    assert!(checks > 20);
    job.ack().unwrap();
    assert_eq!(qb.stats().unwrap(), zero());
    assert!(qb.try_take().unwrap().is_none(), "acked: gone for good");
}

// ---------------------------------------------------------------------------------------
// Job ids

#[test]
fn a_queued_or_running_id_is_a_duplicate_and_nothing_is_written() {
    let server = server();
    let c = client(&server);
    let q = c.queue("ids").unwrap();
    let mut conn = raw(&server);
    assert_eq!(
        q.push_unique("order-1", "first").unwrap(),
        Pushed::Queued("order-1".into())
    );
    let before = snapshot(&mut conn);
    assert_eq!(
        q.push_unique("order-1", "second").unwrap(),
        Pushed::Duplicate("order-1".into())
    );
    assert_eq!(
        snapshot(&mut conn),
        before,
        "a queued duplicate wrote nothing"
    );

    let job = q.try_take().unwrap().expect("the job");
    let before = snapshot(&mut conn);
    assert_eq!(
        q.push_unique("order-1", "third").unwrap(),
        Pushed::Duplicate("order-1".into())
    );
    assert_eq!(
        snapshot(&mut conn),
        before,
        "a running duplicate wrote nothing"
    );
    assert_eq!(job.payload(), b"first");
    let payload: Vec<u8> = redis::cmd("HGET")
        .arg(key("ids", "payloads"))
        .arg("order-1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(payload, b"first");

    // A batch with one duplicate pushes the others.
    let pushed = q
        .push_batch(
            &[new_job("order-2"), new_job("order-1")],
            redlease::queue::PushOptions::new(),
        )
        .unwrap();
    assert_eq!(
        pushed,
        vec![
            Pushed::Queued("order-2".into()),
            Pushed::Duplicate("order-1".into())
        ]
    );
    job.ack().unwrap();
    // Once done, the id is free again.
    assert_eq!(
        q.push_unique("order-1", "again").unwrap(),
        Pushed::Queued("order-1".into())
    );
    assert_eq!(counts(q.stats().unwrap()), with!(QueueStats { ready: 2 }));
}

// ---------------------------------------------------------------------------------------
// The worker pool

#[test]
fn the_worker_pool_acks_and_nacks_and_stops_promptly_without_losing_jobs() {
    let _timing = timing_sensitive();
    let server = server();
    let c = client(&server);
    let q = c
        .queue("pool")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let total = 300;
    let failing = (0..total).filter(|i| i % 15 == 0).count();
    let payloads = (0..total).map(|i| {
        if i % 15 == 0 {
            format!("fail {i}")
        } else {
            format!("ok {i}")
        }
    });
    let ids = q.push_many(payloads).unwrap();
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let started = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (runs, started) = (runs.clone(), started.clone());
        move |job: &Job| {
            *runs.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            if job.payload().starts_with(b"slow") {
                started.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(300));
            }
            if job.payload().starts_with(b"fail") {
                Err("handler failed")
            } else {
                Ok(())
            }
        }
    };
    let workers = q.work(3, handler.clone()).unwrap();
    let ok = (total - failing) as u64;
    let nacks = 2 * failing as u64;
    await_condition(Duration::from_secs(20), || {
        let r = workers.report();
        r.acked == ok && r.nacked == nacks
    });
    let stopping = Instant::now();
    let report = workers.stop();
    let took = stopping.elapsed();
    println!("an idle pool of 3 stopped in {took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(
        report,
        with!(WorkerReport {
            acked: ok,
            nacked: nacks,
            refused: 0,
            errors: 0,
            panicked: 0,
        })
    );
    assert_eq!(
        counts(q.stats().unwrap()),
        with!(QueueStats {
            dead: failing as u64
        })
    );
    let runs_now = runs.lock().unwrap().clone();
    assert_eq!(runs_now.len(), total);
    for id in &ids {
        assert!(runs_now.contains_key(id), "{id} never ran");
    }
    let dead: HashSet<String> = q
        .dead_jobs(100)
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(dead.len(), failing);
    for (id, n) in &runs_now {
        assert_eq!(*n, if dead.contains(id) { 2 } else { 1 }, "{id}");
    }

    // Stopped while busy: each thread finishes the job it has, and acks it.
    let workers = q.work(3, handler).unwrap();
    q.push_many(["slow 1", "slow 2", "slow 3"]).unwrap();
    await_condition(Duration::from_secs(5), || {
        started.load(Ordering::SeqCst) == 3
    });
    let stopping = Instant::now();
    let report = workers.stop();
    let took = stopping.elapsed();
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(report.acked, 3, "{report:?}");
    assert_eq!(
        counts(q.stats().unwrap()),
        with!(QueueStats {
            dead: failing as u64
        }),
        "nothing left in flight or ready"
    );
}

// ---------------------------------------------------------------------------------------
// Bad input

#[test]
fn bad_names_settings_and_ids_are_refused_before_anything_is_written() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    assert!(matches!(
        c.queue(""),
        Err(Error::InvalidArgument(InvalidArgument::EmptyName))
    ));
    let q = c.queue("bad").unwrap();
    q.push("kept").unwrap();
    let before = snapshot(&mut conn);
    let invalid = |r: Result<Option<Job>, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(q.clone().visibility(Duration::ZERO).try_take()));
    assert!(invalid(
        q.clone()
            .visibility(Duration::ZERO)
            .take(Duration::from_secs(1))
    ));
    assert!(invalid(
        q.clone().visibility(Duration::from_micros(500)).try_take()
    ));
    assert!(invalid(q.clone().max_deliveries(0).try_take()));
    assert!(matches!(
        q.push_unique("", "x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.push_unique(&"x".repeat(513), "x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.push_batch(&[], redlease::queue::PushOptions::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.push_many(Vec::<Vec<u8>>::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(snapshot(&mut conn), before, "nothing written");
    assert_eq!(counts(q.stats().unwrap()), with!(QueueStats { ready: 1 }));
}

#[test]
fn payloads_are_binary_safe_up_to_ten_megabytes() {
    let server = server();
    // Moving 10 MB through a script takes well over the usual 500 ms on a loaded machine.
    let c = testkit::client(&server, Duration::from_secs(10));
    let mut conn = raw(&server);
    // Counting (Queue::counting): its per-minute counters expire too.
    let q = c.queue("bytes").unwrap().counting(true);
    let mut binary: Vec<u8> = (0..=255u8).collect();
    binary.extend_from_slice(b"\x00\x00\xff\xff\r\n\xc3\x28");
    assert!(String::from_utf8(binary.clone()).is_err());
    let empty_id = q.push(Vec::new()).unwrap();
    let id = q.push(binary.clone()).unwrap();
    let job = q.try_take().unwrap().unwrap();
    assert_eq!((job.id(), job.payload()), (empty_id.as_str(), &b""[..]));
    job.ack().unwrap();
    let job = q.try_take().unwrap().unwrap();
    assert_eq!((job.id(), job.payload()), (id.as_str(), binary.as_slice()));
    job.ack().unwrap();

    let big: Vec<u8> = (0..10 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let id = q.push(big.clone()).unwrap();
    let stored: i64 = redis::cmd("HSTRLEN")
        .arg(key("bytes", "payloads"))
        .arg(&id)
        .query(&mut conn)
        .unwrap();
    assert_eq!(stored, big.len() as i64);
    let job = q.take(Duration::from_secs(2)).unwrap().unwrap();
    assert_eq!(job.id(), id);
    assert!(job.payload() == big.as_slice(), "10 MB payload changed");
    job.ack().unwrap();
    assert_eq!(q.stats().unwrap(), zero());
    let left: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    // Only the sequence counter stays, the record of settled deliveries (for acks
    // retried after a lost reply), which expires, and this minute's counts (one counter for
    // each event: pushed, taken, acked), which expire. (Up to two minutes' counts when the
    // test ran across a minute's end.)
    let counts: Vec<String> = redis::cmd("KEYS")
        .arg(key("bytes", "counts:*"))
        .query(&mut conn)
        .unwrap();
    assert!((3..=6).contains(&counts.len()), "{counts:?}");
    assert_eq!(left, 2 + counts.len() as i64, "{:?}", snapshot(&mut conn));
    let ttl: i64 = redis::cmd("PTTL").arg(&counts[0]).query(&mut conn).unwrap();
    assert!(
        ttl > 48 * 3600 * 1000 && ttl <= (48 * 60 + 1) * 60 * 1000,
        "{ttl}"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key("bytes", "settled"))
        .query(&mut conn)
        .unwrap();
    assert!(
        ttl > 0 && ttl <= redlease::core::queue::SETTLED_KEEP.as_millis() as i64,
        "{ttl}"
    );
}

fn unavailable<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Unavailable { .. }))
}

fn wrong_type(r: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::WrongType { .. }))
}

#[test]
fn a_foreign_value_in_a_queue_key_is_a_typed_error_and_nothing_is_half_written() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let q = c.queue("typed").unwrap();
    q.push_unique("existing", "e").unwrap();

    // The payload hash holds a list: the push fails at its first step.
    let payloads = key("typed", "payloads");
    let _: () = redis::cmd("RENAME")
        .arg(&payloads)
        .arg("saved")
        .query(&mut conn)
        .unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg(&payloads)
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let before = snapshot(&mut conn);
    let r = q.push_unique("new", "n");
    assert!(wrong_type(&r), "{r:?}");
    assert_eq!(snapshot(&mut conn), before, "nothing written");
    let _: () = redis::cmd("RENAME")
        .arg("saved")
        .arg(&payloads)
        .query(&mut conn)
        .unwrap();

    // The ready set holds a string: a push must not leave a payload without a queue entry
    // (that id would then be a "duplicate" forever, and the job never delivered).
    let ready = key("typed", "ready");
    let _: () = redis::cmd("RENAME")
        .arg(&ready)
        .arg("saved")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&ready)
        .arg("not a zset")
        .query(&mut conn)
        .unwrap();
    let before = snapshot(&mut conn);
    let r = q.push_unique("new", "n");
    match &r {
        Err(Error::WrongType { name, keys, .. }) => {
            assert_eq!(name, "queue typed");
            assert!(keys.contains(&ready), "{keys}");
        }
        other => panic!("{other:?}"),
    }
    assert!(wrong_type(&q.stats()));
    assert!(wrong_type(&q.try_take()));
    assert_eq!(
        snapshot(&mut conn),
        before,
        "a failed push or take left part of its writes behind"
    );
    let _: () = redis::cmd("RENAME")
        .arg("saved")
        .arg(&ready)
        .query(&mut conn)
        .unwrap();
    // Repaired: the queue works, and "new" can be pushed.
    assert_eq!(
        q.push_unique("new", "n").unwrap(),
        Pushed::Queued("new".into())
    );
    for id in ["existing", "new"] {
        let job = q.try_take().unwrap().expect("a job");
        assert_eq!(job.id(), id);
        job.ack().unwrap();
    }
    assert_eq!(q.stats().unwrap(), zero());
}

#[test]
fn a_take_failing_on_a_foreign_ready_key_loses_no_due_delayed_job() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let q = c.queue("typed-delayed").unwrap();
    let id = q
        .push_with(
            "due",
            redlease::queue::PushOptions::new().delay(Duration::from_millis(1)),
        )
        .unwrap();
    let due: f64 = redis::cmd("ZSCORE")
        .arg(key("typed-delayed", "delayed"))
        .arg(&id)
        .query(&mut conn)
        .unwrap();
    // Wait until the job is due by the server's clock.
    await_condition(Duration::from_secs(2), || {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        (s * 1000 + us / 1000) as f64 > due
    });
    let ready = key("typed-delayed", "ready");
    let _: () = redis::cmd("SET")
        .arg(&ready)
        .arg("not a zset")
        .query(&mut conn)
        .unwrap();
    let before = snapshot(&mut conn);
    let r = q.try_take();
    assert!(wrong_type(&r), "{r:?}");
    assert_eq!(
        snapshot(&mut conn),
        before,
        "the failed take moved the due job out of the delayed set"
    );
    let _: i64 = redis::cmd("DEL").arg(&ready).query(&mut conn).unwrap();
    let job = q
        .take(Duration::from_secs(1))
        .unwrap()
        .expect("the delayed job survived the failed take");
    assert_eq!(job.id(), id);
    job.ack().unwrap();
}

// ---------------------------------------------------------------------------------------
// Outages

#[test]
fn a_redis_restart_mid_job_gives_typed_errors_in_time_then_the_queue_works_again() {
    let mut server = server();
    let c = client(&server);
    let q = c
        .queue("restart")
        .unwrap()
        .visibility(Duration::from_millis(600));
    q.push("before").unwrap();
    let job = q.try_take().unwrap().expect("the job");
    server.kill();

    let t = Instant::now();
    let r = q.take(Duration::from_millis(500));
    let took = t.elapsed();
    assert!(unavailable(&r), "{r:?}");
    // The wait, plus at most one connect timeout for an attempt in flight; twice that for
    // a loaded machine.
    assert!(took < Duration::from_millis(500 + 300) * 2, "{took:?}");
    let t = Instant::now();
    let r = q.try_take();
    assert!(unavailable(&r), "{r:?}");
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    for (what, r) in [
        ("push", q.push("during").map(|_| ())),
        ("stats", q.stats().map(|_| ())),
    ] {
        assert!(unavailable(&r), "{what}: {r:?}");
    }
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    // The job's lease could not be renewed: its holder is told, and its ack refused.
    let reason = job.lost().recv_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(reason, LossReason::RenewalFailed);
    assert!(matches!(
        job.ack(),
        Err(Error::NotOwner {
            reason: LossReason::RenewalFailed,
            ..
        })
    ));

    // Back, empty (no persistence): scripts are loaded again, the listener reconnects.
    server.restart().unwrap();
    let mut conn = raw(&server);
    let id = q.push("after").unwrap();
    let job = q
        .take(Duration::from_secs(2))
        .unwrap()
        .expect("pushed after");
    assert_eq!((job.id(), job.payload()), (id.as_str(), &b"after"[..]));
    job.ack().unwrap();
    let taker = {
        let q = q.clone();
        thread::spawn(move || q.take(Duration::from_secs(10)))
    };
    await_condition(Duration::from_secs(5), || {
        pubsub_subscribers(&mut conn, &key("restart", "pushed")) == 1
    });
    let pushed = Instant::now();
    q.push("woken").unwrap();
    let job = taker.join().unwrap().unwrap().expect("woken by the push");
    assert!(
        pushed.elapsed() < Duration::from_secs(1),
        "{:?}",
        pushed.elapsed()
    );
    assert_eq!(job.payload(), b"woken");
    job.ack().unwrap();
    assert_eq!(q.stats().unwrap(), zero());
}

#[test]
fn a_take_whose_reply_was_lost_leaves_no_other_job_leased() {
    let server = server();
    // A short reply timeout, so that a stalled server makes the take's replies go missing.
    let c = Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(100))
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let q = c.queue("lost-reply").unwrap();
    q.push_many((0..6).map(|i| format!("job {i}"))).unwrap();
    // Load the scripts (a lost attempt that hit NOSCRIPT would have done nothing).
    q.try_take().unwrap().expect("a job").ack().unwrap();
    assert_eq!(q.stats().unwrap().ready, 5);
    // Stall the server for 600 ms with a busy script.
    let busy = {
        let mut conn = raw(&server);
        thread::spawn(move || {
            redis::cmd("EVAL")
                .arg(
                    "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] \
                     while true do local n = redis.call('TIME') \
                     if n[1] * 1e6 + n[2] - s > tonumber(ARGV[1]) * 1000 then return 1 end end",
                )
                .arg(0)
                .arg(600)
                .query::<i64>(&mut conn)
        })
    };
    await_condition(Duration::from_secs(2), || server_is_busy(&server));
    let job = q
        .take(Duration::from_secs(5))
        .unwrap()
        .expect("a job once the server answers");
    busy.join().unwrap().unwrap();
    // The attempts whose replies were lost ran once the server was free, with the same
    // token: each must find the job it already took rather than lease another one.
    let stats = counts(q.stats().unwrap());
    assert_eq!(
        stats,
        with!(QueueStats {
            ready: 4,
            in_flight: 1
        }),
        "jobs leased to nobody: they come back only after the visibility timeout, one \
         delivery spent"
    );
    job.ack().unwrap();
}

#[test]
fn a_panicking_handler_nacks_its_job_and_keeps_the_pool_alive() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("panics")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    q.push_unique("boom", "x").unwrap();
    q.push_unique("fine", "y").unwrap();
    let workers = q
        .work(1, |job| -> Result<(), String> {
            assert_ne!(job.id(), "boom", "a handler bug");
            Ok(())
        })
        .unwrap();
    await_condition(Duration::from_secs(10), || {
        let s = q.stats().unwrap();
        s.dead == 1 && s.ready == 0 && s.in_flight == 0
    });
    let report = workers.stop();
    assert_eq!(report.panicked, 2, "{report:?}");
    assert_eq!(
        report.acked, 1,
        "the one worker survived both panics: {report:?}"
    );
    assert_eq!(q.dead_jobs(10).unwrap()[0].id, "boom");
}

// ---------------------------------------------------------------------------------------
// Ack and take in one round trip

/// How many `EVALSHA` calls `server` has run (INFO commandstats).
fn evalsha_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut raw(server))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn the_worker_pool_acks_and_takes_the_next_job_in_one_round_trip() {
    let server = server();
    let c = client(&server);
    let q = c.queue("one-trip").unwrap();
    let total = 200;
    let ids = q.push_many((0..total).map(|i| format!("job {i}"))).unwrap();
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let before = evalsha_calls(&server);
    let workers = q
        .work(1, {
            let runs = runs.clone();
            move |job: &Job| -> Result<(), String> {
                *runs.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
                Ok(())
            }
        })
        .unwrap();
    await_condition(Duration::from_secs(20), || {
        workers.report().acked == total as u64
    });
    let calls = evalsha_calls(&server) - before;
    let report = workers.stop();
    assert_eq!(report.acked, total as u64, "{report:?}");
    assert_eq!((report.errors, report.refused), (0, 0), "{report:?}");
    // One script call per job (a take, then ack-and-take each), plus the idle takes of
    // the empty queue before the count was read; a take and an ack apiece would be 400.
    println!("{calls} script calls for {total} jobs");
    assert!(
        calls <= total as u64 + 20,
        "{calls} script calls for {total} jobs"
    );
    let runs = runs.lock().unwrap();
    for id in &ids {
        assert_eq!(runs.get(id), Some(&1), "{id}");
    }
    assert_eq!(q.stats().unwrap(), zero());
}

fn proxied(proxy: &redlease_suite::Proxy) -> Client {
    Client::builder(proxy.url())
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(300))
        .op_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// How often a one-call operation is sent before it gives up (the core's `MAX_ATTEMPTS`).
const ATTEMPTS: u64 = 3;

/// Takes job "0", then acks it and takes the next job in one call, so that the server knows
/// the combined script (a `NOSCRIPT` reply is not the reply a test means to lose).
fn load_ack_take(q: &Queue) -> Job {
    let zero = q.take(Duration::from_secs(2)).unwrap().unwrap();
    assert_eq!(zero.id(), "0");
    let out = zero.ack_and_take();
    assert_eq!(out.ack, Ok(()));
    out.next.expect("the next job")
}

/// `HGET deliveries id` of queue `name`.
fn deliveries(server: &RedisServer, name: &str, id: &str) -> Option<u64> {
    redis::cmd("HGET")
        .arg(key(name, "deliveries"))
        .arg(id)
        .query(&mut raw(server))
        .unwrap()
}

#[test]
fn an_ack_and_take_whose_reply_was_lost_acks_once_and_hands_over_one_job() {
    let server = server();
    let proxy = redlease_suite::Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    // A long visibility: no renewal reply is in flight to be dropped instead.
    let q = c.queue("lost-ack-take").unwrap();
    for id in ["0", "a", "b", "c"] {
        q.push_unique(id, "p").unwrap();
    }
    let first = load_ack_take(&q);
    assert_eq!(first.id(), "a");
    let dropped = proxy.dropped();
    proxy.drop_next_reply();
    let out = first.ack_and_take();
    assert_eq!(proxy.dropped(), dropped + 1, "the first reply was lost");
    assert_eq!(out.ack, Ok(()));
    let next = out.next.expect("the next job");
    assert_eq!((next.id(), next.delivery()), ("b", 1));
    // The retry found the job the lost attempt had leased: one job in flight, one delivery.
    assert_eq!(
        counts(q.stats().unwrap()),
        with!(QueueStats {
            ready: 1,
            in_flight: 1
        })
    );
    assert_eq!(deliveries(&server, "lost-ack-take", "b"), Some(1));
    let out = next.ack_and_take();
    assert_eq!(out.ack, Ok(()));
    let last = out.next.expect("the last job");
    assert_eq!(last.id(), "c");
    let out = last.ack_and_take();
    assert_eq!(out.ack, Ok(()));
    assert!(out.next.is_none());
    assert_eq!(q.stats().unwrap(), zero());
}

#[test]
fn an_ack_and_take_never_answered_gives_the_next_job_back_uncounted() {
    let server = server();
    let proxy = redlease_suite::Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let q = c.queue("unanswered").unwrap();
    for id in ["0", "a", "b"] {
        q.push_unique(id, "p").unwrap();
    }
    let first = load_ack_take(&q);
    // Every attempt of the combined call runs, but no reply comes back; the untake that
    // follows gets through.
    let dropped = proxy.dropped();
    for _ in 0..ATTEMPTS {
        proxy.drop_next_reply();
    }
    let out = first.ack_and_take();
    assert_eq!(proxy.dropped(), dropped + ATTEMPTS);
    assert!(unavailable(&out.ack), "{:?}", out.ack);
    assert!(out.next.is_none());
    // The first attempt acked "a" and leased "b"; the retries found both done; the untake
    // gave "b" back with its delivery not counted. Nothing lost, nothing run twice.
    assert_eq!(
        counts(q.stats().unwrap()),
        with!(QueueStats { ready: 1 }),
        "\"a\" acked, \"b\" ready again"
    );
    assert_eq!(deliveries(&server, "unanswered", "b"), Some(0));
    let again = q.try_take().unwrap().expect("\"b\" again");
    assert_eq!((again.id(), again.delivery()), ("b", 1));
    again.ack().unwrap();
    assert_eq!(q.stats().unwrap(), zero());
}

#[test]
fn a_worker_killed_between_ack_and_next_job_loses_nothing() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("killed-between")
        .unwrap()
        .visibility(Duration::from_millis(300));
    for id in ["a", "b"] {
        q.push_unique(id, "p").unwrap();
    }
    let first = q.take(Duration::from_secs(2)).unwrap().unwrap();
    let out = first.ack_and_take();
    assert_eq!(out.ack, Ok(()));
    let handed = out.next.expect("\"b\" handed over");
    assert_eq!(handed.id(), "b");
    // The worker dies right after the hand-over: nobody renews or acks "b".
    handed.abandon();
    let other = c.clone();
    let again = other
        .queue("killed-between")
        .unwrap()
        .take(Duration::from_secs(5))
        .unwrap()
        .expect("\"b\" redelivered once its lease ran out");
    assert_eq!((again.id(), again.delivery()), ("b", 2));
    again.ack().unwrap();
    // "a" was acked by the combined call: it never comes back.
    assert_eq!(q.stats().unwrap(), zero());
    assert!(q.try_take().unwrap().is_none());
}
