//! Durable schedules (issue 29): one job per occurrence from any number of processes
//! upserting the same schedule, some of them SIGKILLed (real redis-server, child OS
//! processes); a cron schedule across a daylight-saving change on the in-process server's
//! clock; exactly one pending occurrence per schedule after every step.
//!
//! The multi-process test runs for 10 s by default; `REDLEASE_SCHEDULE_SECS=60` runs the
//! issue's full 60 s.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use redlease::core::queue::schedule::OCCURRENCE_PREFIX;
use redlease::memory::{MemoryClock, MemoryServer};
use redlease::{
    queue::Queue, queue::schedule::Missed, queue::schedule::Schedule, queue::schedule::Upserted,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{Rng, await_condition, connection as raw, percentile};

const S: Duration = Duration::from_secs(1);

/// Environment of a child process: the server's URL; the schedule's start and end (ms).
const CHILD_URL: &str = "REDLEASE_SCHEDULE_CHILD_URL";
const CHILD_START: &str = "REDLEASE_SCHEDULE_CHILD_START";
const CHILD_END: &str = "REDLEASE_SCHEDULE_CHILD_END";

/// The handler's record, on the server's clock: `<id> <delivery> <seconds> <microseconds>
/// <take ms>`, the take's time read from the lease's expiry (its visibility timeout,
/// ARGV[3], earlier; a renewal would only make it later).
const RECORD: &str = "local t = redis.call('TIME') \
    local taken = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1])) - tonumber(ARGV[3]) \
    redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. t[1] .. ' ' .. t[2] .. ' ' .. taken) \
    return 1";

fn ticks_schedule(start: u64, end: u64) -> Schedule {
    Schedule::every(S)
        .unwrap()
        .starting_at_ms(start)
        .ending_at_ms(end)
        .missed(Missed::CatchUp)
        .payload("tick")
}

/// The body of a child process (run by `five_processes_upserting_every_second_...`): upsert
/// the schedule, work the queue with one worker recording each run, upsert again every
/// 700 ms, until killed.
#[test]
#[ignore = "the child process of five_processes_upserting_every_second_make_one_job_per_occurrence"]
fn schedule_child_process() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let num = |k: &str| std::env::var(k).unwrap().parse::<u64>().unwrap();
    let schedule = ticks_schedule(num(CHILD_START), num(CHILD_END));
    let client = redlease::Client::builder(url.as_str())
        .op_timeout(S)
        .build()
        .unwrap();
    let q = client
        .queue("ticks")
        .unwrap()
        .visibility(Duration::from_millis(300));
    q.schedule("tick", &schedule).unwrap();
    let conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let conn = std::sync::Mutex::new(conn);
    let _workers = q
        .work(1, move |job| {
            let mut c = conn.lock().unwrap();
            redis::cmd("EVAL")
                .arg(RECORD)
                .arg(2)
                .arg("ticks:runs")
                .arg("redlease:{ticks}:q:inflight")
                .arg(job.id())
                .arg(job.delivery())
                .arg(300)
                .query::<i64>(&mut *c)
                .map(|_| ())
                .map_err(redlease::queue::JobError::new)
        })
        .unwrap();
    loop {
        thread::sleep(Duration::from_millis(700));
        let _ = q.schedule("tick", &schedule);
    }
}

fn spawn_child(server: &RedisServer, start: u64, end: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "schedule_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL, server.url())
        .env(CHILD_START, start.to_string())
        .env(CHILD_END, end.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn server_ms(conn: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    s * 1000 + us / 1000
}

#[test]
fn five_processes_upserting_every_second_make_one_job_per_occurrence() {
    let secs: u64 = std::env::var("REDLEASE_SCHEDULE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let server = RedisServer::start().unwrap();
    let mut conn = raw(&server);
    // Occurrences from a whole second 2 s from now, `secs` of them.
    let start = (server_ms(&mut conn) / 1000 + 2) * 1000;
    let end = start + (secs - 1) * 1000;
    let mut children: Vec<Child> = (0..5).map(|_| spawn_child(&server, start, end)).collect();
    let (mut rng, seed) = Rng::seeded();
    // Two of them SIGKILLed at random instants within the run.
    let mut kills: Vec<(u64, usize)> = (0..2)
        .map(|i| (start + rng.next() % (secs * 1000), i * 2))
        .collect();
    kills.sort();
    for (at, victim) in kills {
        let now = server_ms(&mut conn);
        thread::sleep(Duration::from_millis(at.saturating_sub(now)));
        children[victim].kill().unwrap();
        children[victim].wait().unwrap();
    }
    // Wait for the last occurrence's run (a killed worker's job comes back after 300 ms).
    let last = format!("{OCCURRENCE_PREFIX}tick:{end}");
    await_condition(Duration::from_secs(secs + 30), || {
        let runs: Vec<String> = redis::cmd("LRANGE")
            .arg("ticks:runs")
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        runs.iter().any(|r| r.starts_with(&format!("{last} ")))
    });
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let runs: Vec<String> = redis::cmd("LRANGE")
        .arg("ticks:runs")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    let mut first: HashMap<String, Vec<i64>> = HashMap::new();
    let mut ids = HashSet::new();
    let mut late = Vec::new();
    let mut take_late = Vec::new();
    for r in &runs {
        let f: Vec<&str> = r.split(' ').collect();
        let (id, delivery) = (f[0], f[1].parse::<u64>().unwrap());
        let at_us = f[2].parse::<i64>().unwrap() * 1_000_000 + f[3].parse::<i64>().unwrap();
        let due = id.rsplit_once(':').unwrap().1.parse::<i64>().unwrap();
        ids.insert(id.to_owned());
        if delivery == 1 {
            first
                .entry(id.to_owned())
                .or_default()
                .push(at_us - due * 1000);
            late.push(at_us - due * 1000);
            take_late.push(f[4].parse::<i64>().unwrap() - due);
        }
    }
    // One job per occurrence: each id delivered first once, the due times those of the
    // schedule, and 60 +- 1 of them (here `secs` +- 1).
    for (id, l) in &first {
        assert_eq!(l.len(), 1, "{id} created twice (seed {seed})");
    }
    let mut dues: Vec<u64> = ids
        .iter()
        .map(|id| id.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    dues.sort();
    assert!(
        dues.iter()
            .all(|d| (d - start).is_multiple_of(1000) && *d <= end),
        "{dues:?}"
    );
    assert!(
        dues.len() as u64 + 1 >= secs && dues.len() as u64 <= secs + 1,
        "{} occurrences in {secs} s (seed {seed})",
        dues.len()
    );
    late.sort();
    take_late.sort();
    let p99 = percentile(&take_late, 0.99);
    eprintln!(
        "schedule: {} occurrences in {secs} s, {} runs; lateness of the take p50 {} ms, p99 {p99} ms, \
         max {} ms; of the handler's start (after the advance) p50 {} us, p99 {} us (seed {seed})",
        dues.len(),
        runs.len(),
        percentile(&take_late, 0.5),
        take_late.last().unwrap(),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
    );
    assert!(
        take_late[0] >= 0,
        "an occurrence was taken early: {take_late:?}"
    );
    // The bound, p99 under 5 ms (of 60 takes, the second latest: so at most one
    // take 5 ms late or more), is judged by the full run (`REDLEASE_SCHEDULE_SECS`, meant
    // for a quiet machine); the default run, which must pass on a busy shared machine,
    // asserts that every occurrence is taken before the next one is due.
    let over = take_late.iter().filter(|l| **l >= 5).count();
    if std::env::var_os("REDLEASE_SCHEDULE_SECS").is_some() {
        assert!(
            over <= 1,
            "{over} takes 5 ms late or more: {take_late:?} (seed {seed})"
        );
    } else {
        assert!(
            take_late.iter().all(|l| *l < 1000),
            "a take a period late: {take_late:?} (seed {seed})"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The in-process server

/// The ids of schedule `name`'s occurrences waiting (delayed or ready) on queue `queue`.
fn waiting(server: &MemoryServer, queue: &str, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in ["delayed", "ready"] {
        let key = format!("redlease:{{{queue}}}:q:{part}");
        let reply = server.call(&["ZRANGE", key.as_str(), "0", "-1"]).unwrap();
        let redlease::core::reply::Reply::Array(items) = reply else {
            panic!("{reply:?}")
        };
        for i in items {
            let redlease::core::reply::Reply::Bulk(b) = i else {
                panic!()
            };
            let id = String::from_utf8(b).unwrap();
            if id.starts_with(&format!("{OCCURRENCE_PREFIX}{name}:")) {
                out.push(id);
            }
        }
    }
    out
}

/// Exactly one pending occurrence of schedule `name`, waiting, and the one it lists.
fn one_pending(server: &MemoryServer, q: &Queue, name: &str) -> u64 {
    let listed = q.schedules().unwrap();
    let info = listed.iter().find(|i| i.name == name).expect("listed");
    let next = info.next.expect("an occurrence left");
    assert_eq!(
        waiting(server, q.name(), name),
        vec![format!("{OCCURRENCE_PREFIX}{name}:{next}")]
    );
    next
}

fn unix_ms(clock: &MemoryClock) -> u64 {
    clock.unix_ms() as u64
}

#[test]
fn every_step_leaves_exactly_one_pending_occurrence() {
    let server = MemoryServer::new();
    let clock = server.clock();
    let (a, b) = (server.client(), server.client());
    let (qa, qb) = (a.queue("jobs").unwrap(), b.queue("jobs").unwrap());
    let every = Schedule::every(10 * S).unwrap().payload("v1");
    // Two processes upsert the same schedule: one occurrence.
    assert!(matches!(
        qa.schedule("s", &every).unwrap(),
        Upserted::Set { .. }
    ));
    let first = one_pending(&server, &qa, "s");
    assert_eq!(first % 10_000, 0);
    assert!(first > unix_ms(&clock));
    assert_eq!(
        qb.schedule("s", &every).unwrap(),
        Upserted::Unchanged { next: Some(first) }
    );
    assert_eq!(one_pending(&server, &qa, "s"), first);
    // A change replaces the waiting occurrence (its payload too).
    let every2 = Schedule::every(10 * S).unwrap().payload("v2");
    assert!(matches!(
        qb.schedule("s", &every2).unwrap(),
        Upserted::Set { .. }
    ));
    assert_eq!(one_pending(&server, &qa, "s"), first);
    let faster = Schedule::every(3 * S).unwrap().payload("v3");
    qa.schedule("s", &faster).unwrap();
    let next = one_pending(&server, &qa, "s");
    assert_eq!(next % 3_000, 0);
    // A take runs the occurrence once the next exists.
    let job = qa.take(60 * S).unwrap().expect("due");
    assert_eq!(job.payload(), b"v3");
    assert_eq!(job.id(), format!("sched:s:{next}"));
    assert_eq!(one_pending(&server, &qa, "s"), next + 3_000);
    job.ack().unwrap();
    assert_eq!(one_pending(&server, &qa, "s"), next + 3_000);
    // An occurrence given back after its take (dropped: as a worker whose lease ran out):
    // the next exists already; the redelivery runs it again and advances nothing.
    let job = qb.take(60 * S).unwrap().expect("due");
    assert_eq!(one_pending(&server, &qa, "s"), next + 6_000);
    drop(job);
    let again = qa.take(60 * S).unwrap().expect("redelivered");
    assert_eq!(again.id(), format!("sched:s:{}", next + 3_000));
    assert_eq!(again.delivery(), 2);
    assert_eq!(one_pending(&server, &qa, "s"), next + 6_000);
    again.ack().unwrap();
    // Removed: no occurrence waits.
    assert!(qa.remove_schedule("s").unwrap());
    assert!(waiting(&server, "jobs", "s").is_empty());
    assert!(qa.schedules().unwrap().is_empty());
    assert!(!qa.remove_schedule("s").unwrap());
}

#[test]
fn a_missed_occurrence_is_skipped_or_run_once() {
    for (missed, runs) in [(Missed::Skip, 0), (Missed::CatchUp, 1)] {
        let server = MemoryServer::new();
        let clock = server.clock();
        let q = server.client().queue("jobs").unwrap();
        let s = Schedule::every(S).unwrap().missed(missed).payload("x");
        q.schedule("s", &s).unwrap();
        let pending = one_pending(&server, &q, "s");
        // Nothing runs for 10.5 s.
        clock.advance(Duration::from_millis(10_500));
        let now = unix_ms(&clock);
        let mut ran = 0;
        while let Some(job) = q.try_take().unwrap() {
            assert_eq!(job.id(), format!("sched:s:{pending}"));
            ran += 1;
            job.ack().unwrap();
        }
        assert_eq!(ran, runs, "{missed:?}");
        // The next occurrence is the first after the take: the gap made no backlog.
        let next = one_pending(&server, &q, "s");
        assert_eq!(next, (now / 1000 + 1) * 1000, "{missed:?}");
    }
}

#[test]
fn an_ended_schedule_has_no_occurrence_left() {
    let server = MemoryServer::new();
    let now = unix_ms(&server.clock());
    let q = server.client().queue("jobs").unwrap();
    let start = (now / 1000 + 1) * 1000;
    let s = Schedule::every(S)
        .unwrap()
        .starting_at_ms(start)
        .ending_at_ms(start + 2_000);
    q.schedule("s", &s).unwrap();
    let mut dues = Vec::new();
    while let Some(job) = q.take(10 * S).unwrap() {
        dues.push(job.id().to_owned());
        job.ack().unwrap();
    }
    let want: Vec<String> = (0..3)
        .map(|i| format!("sched:s:{}", start + i * 1000))
        .collect();
    assert_eq!(dues, want);
    assert_eq!(q.schedules().unwrap()[0].next, None);
    assert!(waiting(&server, "jobs", "s").is_empty());
}

#[test]
fn bad_names_and_periods_are_refused_before_anything_is_sent() {
    let server = MemoryServer::new();
    let q = server.client().queue("jobs").unwrap();
    let s = Schedule::every(S).unwrap();
    assert!(matches!(
        q.schedule("", &s),
        Err(redlease::Error::InvalidArgument(_))
    ));
    assert!(Schedule::every(Duration::ZERO).is_err());
    assert!(server.keys().is_empty());
}

/// 2026-03-08 02:00 EST jumps to 03:00 EDT; 2026-11-01 02:00 EDT falls back to 01:00 EST.
/// Hourly at minute 30 in America/New_York, taken on the in-process server's clock: every
/// occurrence one real hour after the last, none missing, none doubled, and exactly one
/// pending after each take.
#[test]
fn a_cron_schedule_across_the_dst_changes_in_new_york_runs_every_hour_once() {
    // 2026-03-07 23:00 EST and 2026-10-31 23:00 EDT; the default visibility, and a 1 s one
    // (the in-process watchdog's round then found itself due again at one instant and
    // called itself until the stack overflowed).
    for (start_s, visibility) in [
        (1_772_942_400u64, None),
        (1_793_502_000, None),
        (1_772_942_400, Some(S)),
    ] {
        let server =
            MemoryServer::with_clock(MemoryClock::starting_at(Duration::from_secs(start_s)));
        let mut q = server.client().queue("jobs").unwrap();
        if let Some(v) = visibility {
            q = q.visibility(v);
        }
        let s = Schedule::cron("30 * * * *", "America/New_York").unwrap();
        q.schedule("hourly", &s).unwrap();
        let mut dues = Vec::new();
        for _ in 0..8 {
            let pending = one_pending(&server, &q, "hourly");
            let job = q.take(2 * 3600 * S).unwrap().expect("due within two hours");
            let (_, due) = job.id().rsplit_once(':').unwrap();
            let due: u64 = due.parse().unwrap();
            assert_eq!(due, pending);
            // Taken at its due time on the server's clock.
            assert_eq!(unix_ms(&server.clock()), due);
            dues.push(due);
            job.ack().unwrap();
        }
        assert_eq!(dues[0], start_s * 1000 + 1_800_000);
        for w in dues.windows(2) {
            assert_eq!(w[1] - w[0], 3_600_000, "{dues:?}");
        }
    }
}

/// An occurrence cancelled and forgotten is never made again: an upsert of the unchanged
/// schedule that runs between the cancel and the advance past it (a cancel is two calls;
/// the second's reply may be lost, another process may upsert meanwhile) makes the
/// occurrence after it, not the cancelled one again; the advance past the cancelled one
/// then finds it replaced and pushes nothing more. Real redis-server.
#[test]
fn an_upsert_between_a_cancel_and_its_advance_does_not_make_the_cancelled_occurrence_again() {
    use redlease::core::keys::Keyspace;
    use redlease::core::queue::QueueKeys;
    use redlease::core::queue::cancel::{self, Cancelled, CancelledJobs};
    use redlease::core::queue::schedule as core_schedule;

    let server = RedisServer::start().unwrap();
    let client = redlease::Client::open(server.url().as_str()).unwrap();
    let q = client.queue("jobs").unwrap();
    let mut conn = raw(&server);
    // Occurrences every minute from an hour ahead: the first is not due during the test.
    let start = (server_ms(&mut conn) / 60_000 + 60) * 60_000;
    let every = Schedule::every(60 * S)
        .unwrap()
        .starting_at_ms(start)
        .payload("tick");
    assert!(matches!(
        q.schedule("s", &every).unwrap(),
        Upserted::Set { next: Some(n) } if n == start
    ));
    let first = format!("sched:s:{start}");
    // The cancel's first call alone: the pending occurrence is forgotten.
    let keys = QueueKeys::new(&Keyspace::default(), "jobs").unwrap();
    let deadline = std::time::Instant::now() + 5 * S;
    let op = cancel::cancel(&keys, &first, "skip", CancelledJobs::Remove, deadline).unwrap();
    assert_eq!(client.run(op).unwrap(), Cancelled::Waiting);
    // Another process upserts the unchanged schedule before the advance past it runs.
    let upserted = q.schedule("s", &every).unwrap();
    assert_eq!(
        upserted,
        Upserted::Set {
            next: Some(start + 60_000)
        },
        "the occurrence after the cancelled one, not the cancelled one again"
    );
    let next = format!("sched:s:{}", start + 60_000);
    assert_eq!(
        waiting_ids(&q),
        std::slice::from_ref(&next),
        "one occurrence waits"
    );
    // The advance past the cancelled occurrence (the cancel's second call) finds the
    // schedule moved on and pushes nothing.
    let op = core_schedule::advance(&keys, "s", start, None, deadline).unwrap();
    assert!(matches!(
        client.run(op).unwrap(),
        core_schedule::Advanced::NotPending { .. }
    ));
    assert_eq!(waiting_ids(&q), [next]);
    // Upserted again (as every process does now and then): unchanged.
    assert_eq!(
        q.schedule("s", &every).unwrap(),
        Upserted::Unchanged {
            next: Some(start + 60_000)
        }
    );
}

/// The ids of `q`'s ready and delayed jobs.
fn waiting_ids(q: &Queue) -> Vec<String> {
    use redlease::inspect::JobStatus;
    [JobStatus::Ready, JobStatus::Delayed]
        .into_iter()
        .flat_map(|state| q.jobs(state, None, 100).unwrap().jobs)
        .map(|j| j.id)
        .collect()
}
