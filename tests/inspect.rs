//! Looking into a queue against a real redis-server: enqueue times and waits, the latency
//! figures of `stats`, jobs listed by state a page at a time, one job looked up by id, and
//! the per-minute counts of what happened.
//!
//! `REDLEASE_INSPECT_JOBS=1000000 cargo test --release --test inspect` pages a million jobs
//! (3,000 by default).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use redlease::core::queue::inspect::{MAX_PAGE, PREVIEW_LEN, event};
use redlease::{
    Client, inspect::JobStatus, queue::NewJob, queue::PushOptions, queue::Queue, queue::Retry,
};
use redlease_suite::{RedisServer, testkit};

fn queue(server: &RedisServer, name: &str) -> Queue {
    Client::open(server.url())
        .unwrap()
        .queue(name)
        .unwrap()
        .counting(true)
}

/// `q`'s counts from `from` to a minute from now, summed over the minutes by event.
fn totals(q: &Queue, from: SystemTime) -> BTreeMap<String, i64> {
    let to = SystemTime::now() + Duration::from_secs(60);
    let mut sums = BTreeMap::new();
    for minute in q.counts(from, to).unwrap() {
        for (event, n) in minute.events {
            *sums.entry(event).or_insert(0) += n;
        }
    }
    sums
}

#[test]
fn a_taken_job_knows_when_it_was_pushed_and_how_long_it_waited() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "waits");
    let before = SystemTime::now();
    let sent = Instant::now();
    q.push("now").unwrap();
    let job = q.try_take().unwrap().unwrap();
    let elapsed = sent.elapsed();
    let after = SystemTime::now();
    let at = job.enqueued_at().expect("an enqueue time");
    // The server's clock is this machine's (milliseconds: one either side).
    assert!(at + Duration::from_millis(1) >= before, "{at:?} {before:?}");
    assert!(at <= after + Duration::from_millis(1));
    let waited = job.waited().unwrap();
    assert!(
        waited <= elapsed + Duration::from_millis(1),
        "{waited:?} {elapsed:?}"
    );
    job.ack().unwrap();

    // A job delayed 150 ms waited at least that long when it is taken.
    q.push_with(
        "later",
        PushOptions::new().delay(Duration::from_millis(150)),
    )
    .unwrap();
    let job = q.take(Duration::from_secs(10)).unwrap().unwrap();
    assert!(
        job.waited().unwrap() >= Duration::from_millis(150),
        "{:?}",
        job.waited()
    );
    job.ack().unwrap();
}

#[test]
fn stats_say_how_old_the_oldest_ready_job_is_and_the_least_lease_left() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "latency").visibility(Duration::from_secs(10));
    let s = q.stats().unwrap();
    assert_eq!((s.oldest_ready_age, s.least_lease_left), (None, None));

    let first = Instant::now();
    q.push("old, low priority").unwrap();
    // Time passes (what is measured, not a wait for anything).
    std::thread::sleep(Duration::from_millis(60));
    q.push_with("new, urgent", PushOptions::new().priority(9))
        .unwrap();
    let s = q.stats().unwrap();
    let age = s.oldest_ready_age.unwrap();
    // The low-priority job is the oldest, though the urgent one is next in line.
    assert!(age >= Duration::from_millis(60), "{age:?}");
    assert!(age <= first.elapsed() + Duration::from_millis(1), "{age:?}");
    assert_eq!(s.least_lease_left, None);

    let taken = Instant::now();
    let job = q.try_take().unwrap().unwrap();
    assert_eq!(job.payload(), b"new, urgent");
    let s = q.stats().unwrap();
    let left = s.least_lease_left.unwrap();
    assert!(left <= Duration::from_secs(10), "{left:?}");
    assert!(left + taken.elapsed() + Duration::from_millis(1) >= Duration::from_secs(10));
    job.ack().unwrap();
    q.try_take().unwrap().unwrap().ack().unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.oldest_ready_age, s.least_lease_left), (None, None));
}

/// Every id of `state`, paged `limit` at a time; checks each page's size.
fn all(q: &Queue, state: JobStatus, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = q.jobs(state, cursor.as_ref(), limit).unwrap();
        assert!(page.jobs.len() <= limit.min(MAX_PAGE));
        assert!(page.jobs.iter().all(|j| j.state == state));
        ids.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
}

#[test]
fn jobs_are_listed_by_state_a_page_at_a_time() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "pages")
        .max_deliveries(1)
        .visibility(Duration::from_secs(30));
    let job = |i: usize| NewJob {
        id: format!("job-{i:03}"),
        payload: vec![b'x'; i],
    };
    let urgent: Vec<NewJob> = (0..5).map(job).collect();
    let plain: Vec<NewJob> = (5..30).map(job).collect();
    // Ten delayed jobs pushed together share one due time: the cursor pages through ties.
    let later: Vec<NewJob> = (30..40).map(job).collect();
    q.push_batch(&plain, PushOptions::new()).unwrap();
    q.push_batch(&urgent, PushOptions::new().priority(7))
        .unwrap();
    q.push_batch(&later, PushOptions::new().delay(Duration::from_secs(600)))
        .unwrap();
    // Three in flight (the urgent ones come first), two of them then dead.
    let taken: Vec<_> = (0..3).map(|_| q.try_take().unwrap().unwrap()).collect();
    let ids: Vec<String> = taken.iter().map(|j| j.id().to_owned()).collect();
    assert_eq!(ids, ["job-000", "job-001", "job-002"]);
    let mut taken = taken.into_iter();
    taken.next().unwrap().nack().unwrap();
    taken.next().unwrap().nack().unwrap();
    let held = taken.next().unwrap();

    for limit in [1, 3, 7, 100] {
        // Ready: in the order they will be taken.
        let expected: Vec<String> = (3..30).map(|i| format!("job-{i:03}")).collect();
        assert_eq!(all(&q, JobStatus::Ready, limit), expected, "limit {limit}");
        let delayed = all(&q, JobStatus::Delayed, limit);
        assert_eq!(delayed.len(), 10, "{delayed:?}");
        assert_eq!(delayed.iter().collect::<HashSet<_>>().len(), 10);
        assert_eq!(all(&q, JobStatus::InFlight, limit), ["job-002"]);
        assert_eq!(all(&q, JobStatus::Dead, limit), ["job-000", "job-001"]);
    }
    let page = q.jobs(JobStatus::Delayed, None, 1).unwrap();
    let due = page.jobs[0].due_at.unwrap();
    let from_now = due.duration_since(SystemTime::now()).unwrap();
    assert!(from_now > Duration::from_secs(590) && from_now <= Duration::from_secs(601));
    let page = q.jobs(JobStatus::InFlight, None, 10).unwrap();
    let left = page.jobs[0].lease_left.unwrap();
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(30),
        "{left:?}"
    );
    assert_eq!(page.jobs[0].deliveries, 1);
    assert!(page.next.is_none());
    // A cursor survives as text (a tool's --cursor).
    let first = q.jobs(JobStatus::Ready, None, 4).unwrap();
    let text = first.next.unwrap().as_str().to_owned();
    let again = q
        .jobs(
            JobStatus::Ready,
            Some(&redlease::inspect::JobCursor::from(text)),
            1,
        )
        .unwrap();
    assert_eq!(again.jobs[0].id, "job-007");
    // The cursor's job taken meanwhile: the page starts where it was.
    let cursor = q.jobs(JobStatus::Ready, None, 1).unwrap().next.unwrap();
    let next = q.try_take().unwrap().unwrap();
    assert_eq!(next.id(), "job-003");
    let page = q.jobs(JobStatus::Ready, Some(&cursor), 1).unwrap();
    assert_eq!(page.jobs[0].id, "job-004");
    drop((held, next));
    // A limit of 0 is refused before anything is sent.
    assert!(matches!(
        q.jobs(JobStatus::Ready, None, 0),
        Err(redlease::Error::InvalidArgument(_))
    ));
}

#[test]
fn one_job_is_looked_up_by_id_wherever_it_is() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "lookup").max_deliveries(1);
    assert_eq!(q.job("nobody").unwrap(), None);
    let big = vec![b'p'; 1000];
    let before = SystemTime::now();
    q.push_batch(
        &[NewJob {
            id: "big".into(),
            payload: big.clone(),
        }],
        PushOptions::new().priority(3),
    )
    .unwrap();
    let info = q.job("big").unwrap().unwrap();
    assert_eq!(info.state, JobStatus::Ready);
    assert_eq!(info.priority, 3);
    assert_eq!(info.deliveries, 0);
    assert_eq!(info.payload_size, 1000);
    assert_eq!(info.preview, big[..PREVIEW_LEN]);
    assert!(info.enqueued_at.unwrap() + Duration::from_millis(1) >= before);
    assert!(info.due_at.is_none() && info.lease_left.is_none());

    let job = q.try_take().unwrap().unwrap();
    let info = q.job("big").unwrap().unwrap();
    assert_eq!((info.state, info.deliveries), (JobStatus::InFlight, 1));
    assert!(info.lease_left.unwrap() > Duration::ZERO);
    job.nack().unwrap();
    let info = q.job("big").unwrap().unwrap();
    assert_eq!(info.state, JobStatus::Dead);
    assert_eq!(info.preview.len(), PREVIEW_LEN);

    q.push_with("soon", PushOptions::new().delay(Duration::from_secs(60)))
        .unwrap();
    let page = q.jobs(JobStatus::Delayed, None, 1).unwrap();
    let id = page.jobs[0].id.clone();
    let info = q.job(&id).unwrap().unwrap();
    assert_eq!(info.state, JobStatus::Delayed);
    assert!(info.due_at.unwrap() > SystemTime::now());
    assert_eq!(info.preview, b"soon");
    assert!(q.delete_dead("big").unwrap());
    assert_eq!(q.job("big").unwrap(), None);
}

#[test]
fn paging_many_jobs_visits_each_exactly_once() {
    let n: usize = std::env::var("REDLEASE_INSPECT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "many");
    for start in (0..n).step_by(5_000) {
        let jobs: Vec<NewJob> = (start..(start + 5_000).min(n))
            .map(|i| NewJob {
                id: format!("{i}"),
                payload: Vec::new(),
            })
            .collect();
        q.push_batch(&jobs, PushOptions::new()).unwrap();
    }
    let mut seen = vec![false; n];
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = q.jobs(JobStatus::Ready, cursor.as_ref(), MAX_PAGE).unwrap();
        pages += 1;
        for job in page.jobs {
            let i: usize = job.id.parse().unwrap();
            assert!(!seen[i], "job {i} listed twice");
            seen[i] = true;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert!(seen.iter().all(|s| *s), "some job was never listed");
    assert_eq!(pages, n / MAX_PAGE + 1);
}

#[test]
fn counts_say_what_happened_minute_by_minute() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "counted")
        .max_deliveries(2)
        .visibility(Duration::from_millis(50))
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let from = SystemTime::now() - Duration::from_secs(60);
    q.push_many(["a", "b", "c"]).unwrap();
    // Duplicates are not counted.
    q.push_unique("u", "d").unwrap();
    q.push_unique("u", "d").unwrap();
    q.try_take().unwrap().unwrap().ack().unwrap();
    // One failure retried, then dead.
    let job = q.try_take().unwrap().unwrap();
    let failing = job.id().to_owned();
    job.nack().unwrap();
    let mut held = Vec::new();
    loop {
        let job = q.try_take().unwrap().unwrap();
        if job.id() == failing {
            job.nack().unwrap();
            break;
        }
        held.push(job);
    }
    assert_eq!(held.len(), 2);
    held.pop().unwrap().ack().unwrap();
    // One lease runs out (its worker "died"), then the job is taken again and acked.
    let job = held.pop().unwrap();
    let lost = job.id().to_owned();
    job.abandon();
    let again = loop {
        if let Some(job) = q.take(Duration::from_secs(5)).unwrap() {
            break job;
        }
    };
    assert_eq!(again.id(), lost);
    again.ack().unwrap();
    let to = SystemTime::now() + Duration::from_secs(60);
    let minutes = q.counts(from, to).unwrap();
    assert!(!minutes.is_empty() && minutes.len() <= 3, "{minutes:?}");
    let total = |e: &str| minutes.iter().map(|m| m.get(e)).sum::<i64>();
    assert_eq!(total(event::PUSHED), 4);
    assert_eq!(total(event::ACKED), 3);
    assert_eq!(total(event::FAILED), 2);
    assert_eq!(total(event::DEAD), 1);
    assert_eq!(total(event::EXPIRED), 1);
    // The nack retried once, the expired lease once.
    assert_eq!(total(event::RETRIED), 2);
    // Deliveries: 4 jobs, one of them twice after a nack, one twice after its lease ran out.
    assert_eq!(total(event::TAKEN), 6);
    assert_eq!(q.stats().unwrap().dead, 1);
    // Nothing counted outside the range.
    let past = SystemTime::now() - Duration::from_secs(3 * 3600);
    assert!(q.counts(past, from).unwrap().is_empty());
}

/// A busy worker's ack and take in one script count one counter for both (`acked_taken`),
/// read back as one ack and one take; a batch take counts its jobs in one counter.
#[test]
fn an_ack_and_take_and_a_batch_are_counted_as_what_they_did() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "counted-worker");
    let from = SystemTime::now() - Duration::from_secs(60);
    q.push_many(["a", "b", "c", "d", "e", "f"]).unwrap();
    // A batch of 2, then 2 acks that each take the next job, then one that finds nothing.
    let mut batch = q.try_take_batch(2).unwrap();
    assert_eq!(batch.len(), 2);
    let mut job = batch.pop().unwrap();
    for _ in 0..4 {
        let out = job.ack_and_take();
        out.ack.unwrap();
        job = out.next.expect("nothing handed over");
    }
    let out = job.ack_and_take();
    out.ack.unwrap();
    assert!(out.next.is_none(), "the queue should be empty");
    batch.pop().unwrap().ack().unwrap();
    let minutes = totals(&q, from);
    let total = |e: &str| minutes.get(e).copied().unwrap_or(0);
    assert_eq!(total(event::PUSHED), 6);
    assert_eq!(total(event::TAKEN), 6);
    assert_eq!(total(event::ACKED), 6);
    // Read back as acks and takes, never as an event of its own.
    assert_eq!(total("acked_taken"), 0);
    // On the server: 4 paired counts, the batch in one counter of 2.
    let mut conn = testkit::connection(&server);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*counted-worker*counts*")
        .query(&mut conn)
        .unwrap();
    let mut sum = |suffix: &str| -> i64 {
        keys.iter()
            .filter(|k| k.ends_with(suffix))
            .map(|k| redis::cmd("GET").arg(k).query::<i64>(&mut conn).unwrap())
            .sum()
    };
    assert_eq!(sum(":acked_taken"), 4, "{keys:?}");
    assert_eq!(sum(":taken"), 2, "{keys:?}");
    assert_eq!(sum(":acked"), 2, "{keys:?}");
}

/// A job pushed with a dedup id, into a group or by a schedule records its enqueue time as
/// a plain push does (its take knows how long it waited), and the time goes with the job.
#[test]
fn every_kind_of_push_records_its_enqueue_time() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(server.url()).unwrap();
    let before = SystemTime::now() - Duration::from_secs(1);
    let check = |job: &redlease::queue::Job, what: &str| {
        let at = job
            .enqueued_at()
            .unwrap_or_else(|| panic!("{what}: no enqueue time"));
        assert!(
            at >= before && at <= SystemTime::now() + Duration::from_secs(1),
            "{what}: {at:?}"
        );
        assert!(job.waited().is_some(), "{what}: no wait");
    };
    let q = client.queue("kinds").unwrap();
    let mode = redlease::queue::dedup::Dedup::UntilDone { dead_blocks: true };
    q.push_dedup("order", "x", mode).unwrap();
    let job = q.try_take().unwrap().unwrap();
    check(&job, "dedup");
    job.ack().unwrap();
    // A keep-latest follow-up pushed while its job runs: its time is when it is made ready
    // (the ack of the job it follows).
    q.push_dedup("latest", "1", redlease::queue::dedup::Dedup::KeepLatest)
        .unwrap();
    let job = q.try_take().unwrap().unwrap();
    q.push_dedup("latest", "2", redlease::queue::dedup::Dedup::KeepLatest)
        .unwrap();
    job.ack().unwrap();
    let job = q.try_take().unwrap().expect("the follow-up");
    assert_eq!(job.payload(), b"2");
    check(&job, "keep-latest follow-up");
    job.ack().unwrap();
    let g = client.queue("kinds-g").unwrap().groups().unwrap();
    let job = NewJob {
        id: "j".into(),
        payload: b"y".to_vec(),
    };
    g.push_batch(&[job], PushOptions::new().group("a")).unwrap();
    let job = g.try_take().unwrap().unwrap();
    check(&job, "grouped");
    job.ack().unwrap();
    let s = client.queue("kinds-s").unwrap();
    let now_ms = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let every = redlease::queue::schedule::Schedule::every(Duration::from_secs(3600))
        .unwrap()
        .starting_at_ms(now_ms + 300)
        .payload("z");
    s.schedule("hourly", &every).unwrap();
    let job = s
        .take(Duration::from_secs(10))
        .unwrap()
        .expect("the schedule's first occurrence");
    check(&job, "scheduled");
    job.ack().unwrap();
    // Nothing is left beside the payloads of the jobs that are gone (the schedule's next
    // occurrence waits, with its own time).
    let mut conn = testkit::connection(&server);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*kinds*payloads")
        .query(&mut conn)
        .unwrap();
    let mut fields = Vec::new();
    for k in &keys {
        let f: Vec<Vec<u8>> = redis::cmd("HKEYS").arg(k).query(&mut conn).unwrap();
        fields.extend(
            f.into_iter()
                .map(|f| String::from_utf8_lossy(&f).into_owned()),
        );
    }
    fields.sort();
    assert_eq!(fields.len(), 2, "{fields:?}");
    assert!(fields[0].starts_with("sched:hourly:"), "{fields:?}");
    assert_eq!(fields[1], format!("{}\u{fffd}", fields[0]), "{fields:?}");
}

/// A grouped queue counts as a plain one: its pushes, takes, acks, nacks (failed, then
/// retried or dead) and leases that ran out (expired, then retried), and its rate-limited
/// answers (deferred: the job goes back to its group without counting a delivery).
#[test]
fn a_grouped_queue_counts_its_jobs() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "counted-groups");
    let from = SystemTime::now() - Duration::from_secs(60);
    let jobs: Vec<NewJob> = ["a", "b", "c"]
        .iter()
        .map(|id| NewJob {
            id: (*id).into(),
            payload: b"x".to_vec(),
        })
        .collect();
    q.push_batch(&jobs, PushOptions::new().group("g1")).unwrap();
    let g = q.groups().unwrap();
    for _ in 0..2 {
        g.try_take().unwrap().unwrap().ack().unwrap();
    }
    let wait = Duration::from_secs(10);
    // c: rate limited once (its group waits 1 ms), nacked once (retried at once), its
    // lease left to run out once (a 50 ms visibility), then failed for good.
    let job = g.take(wait).unwrap().expect("c");
    job.fail("429", Retry::RateLimited(Duration::from_millis(1)))
        .unwrap();
    g.take(wait)
        .unwrap()
        .expect("c after its group waited")
        .nack_after(Duration::ZERO)
        .unwrap();
    let short = g.clone().visibility(Duration::from_millis(50));
    short
        .take(wait)
        .unwrap()
        .expect("c after its nack")
        .abandon();
    let job = g.take(wait).unwrap().expect("c after its lease ran out");
    assert_eq!(job.id(), "c");
    job.fail("broken", Retry::Never).unwrap();
    let minutes = totals(&g, from);
    let total = |e: &str| minutes.get(e).copied().unwrap_or(0);
    for (event, n) in [
        (event::PUSHED, 3),
        (event::TAKEN, 6),
        (event::ACKED, 2),
        (event::DEFERRED, 1),
        (event::FAILED, 2),
        (event::RETRIED, 2),
        (event::EXPIRED, 1),
        (event::DEAD, 1),
    ] {
        assert_eq!(total(event), n, "{event}: {minutes:?}");
    }
    // The plain queue's counts are its own.
    assert!(totals(&q, from).is_empty());
}

/// A schedule's occurrences count as pushed, each once, whichever call pushed it (the
/// upsert its first, the advance when one is taken the next).
#[test]
fn a_schedule_counts_its_occurrences_as_pushed() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "counted-schedule");
    let from = SystemTime::now() - Duration::from_secs(60);
    // Catch-up: an occurrence taken late (a busy machine) still runs, so the take below
    // hands over the first occurrence whenever it runs, and its advance pushes one more.
    let every = redlease::queue::schedule::Schedule::every(Duration::from_millis(200))
        .unwrap()
        .missed(redlease::queue::schedule::Missed::CatchUp)
        .payload("z");
    q.schedule("often", &every).unwrap();
    // Upserting the same schedule again pushes nothing more.
    q.schedule("often", &every).unwrap();
    let pushed = |q: &Queue| totals(q, from).get(event::PUSHED).copied();
    assert_eq!(pushed(&q), Some(1));
    let job = q
        .take(Duration::from_secs(10))
        .unwrap()
        .expect("the first occurrence");
    // Taking it pushed the next one.
    assert_eq!(pushed(&q), Some(2));
    job.ack().unwrap();
    assert!(q.remove_schedule("often").unwrap());
    assert_eq!(pushed(&q), Some(2));
}

/// A push with a dedup id counts as pushed when it queues a job (or parks a new follow-up),
/// not when it is refused as a duplicate or replaces a payload.
#[test]
fn a_dedup_push_counts_the_jobs_it_queues() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "counted-dedup");
    let from = SystemTime::now() - Duration::from_secs(60);
    let until_done = redlease::queue::dedup::Dedup::UntilDone { dead_blocks: true };
    q.push_dedup("a", "1", until_done).unwrap();
    q.push_dedup("a", "2", until_done).unwrap();
    let latest = redlease::queue::dedup::Dedup::KeepLatest;
    q.push_dedup("b", "1", latest).unwrap();
    q.push_dedup("b", "2", latest).unwrap();
    let minutes = totals(&q, from);
    let total = |e: &str| minutes.get(e).copied().unwrap_or(0);
    assert_eq!(total(event::PUSHED), 2, "{minutes:?}");
}

#[test]
fn a_cancelled_job_counts_as_dead_or_drops_its_enqueue_time_when_removed() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "cancelled");
    let from = SystemTime::now() - Duration::from_secs(60);
    q.push_unique("d", "to the dead list").unwrap();
    q.push_unique("r", "removed").unwrap();
    assert_eq!(
        q.cancel("d", "no").unwrap(),
        redlease::queue::Cancelled::Waiting
    );
    let to = SystemTime::now() + Duration::from_secs(60);
    let dead: i64 = q
        .counts(from, to)
        .unwrap()
        .iter()
        .map(|m| m.get(event::DEAD))
        .sum();
    assert_eq!(dead, 1, "a job cancelled to the dead list counts as dead");
    let job = q.job("d").unwrap().expect("on the dead list");
    assert!(
        job.enqueued_at.is_some(),
        "a dead job keeps its enqueue time"
    );
    let remove = Client::open(server.url())
        .unwrap()
        .queue("cancelled")
        .unwrap()
        .cancelled_jobs(redlease::queue::CancelledJobs::Remove);
    assert_eq!(
        remove.cancel("r", "").unwrap(),
        redlease::queue::Cancelled::Waiting
    );
    let mut conn = testkit::connection(&server);
    // Each job's enqueue time is kept beside its payload, under its id and the byte 0xff
    // (never in a UTF-8 id), and a dead job's death record under its id and 0xfe.
    let mut left: Vec<Vec<u8>> = redis::cmd("HKEYS")
        .arg("redlease:{cancelled}:q:payloads")
        .query(&mut conn)
        .unwrap();
    left.sort();
    assert_eq!(
        left,
        [b"d".to_vec(), b"d\xfe".to_vec(), b"d\xff".to_vec()],
        "the removed job's payload and enqueue time are gone, the dead one's kept with its death"
    );
}

#[test]
fn a_foreign_value_in_a_counter_leaves_its_event_uncounted_and_the_job_moves() {
    let server = RedisServer::start().unwrap();
    let q = queue(&server, "foreign");
    let mut conn = testkit::connection(&server);
    // The `pushed` counters of this minute and the next hold a hash, not an integer.
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let minute = secs / 60;
    for m in [minute, minute + 1] {
        let _: () = redis::cmd("HSET")
            .arg(format!("redlease:{{foreign}}:q:counts:{m}:pushed"))
            .arg("not")
            .arg("a counter")
            .query(&mut conn)
            .unwrap();
    }
    let from = SystemTime::now() - Duration::from_secs(60);
    q.push("a").unwrap();
    let job = q.try_take().unwrap().expect("pushed although uncounted");
    job.ack().unwrap();
    let minutes = totals(&q, from);
    let sum = |e: &str| minutes.get(e).copied().unwrap_or(0);
    assert_eq!(sum(event::PUSHED), 0, "{minutes:?}");
    assert_eq!(
        (sum(event::TAKEN), sum(event::ACKED)),
        (1, 1),
        "{minutes:?}"
    );
}
