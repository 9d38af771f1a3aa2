//! Where two queue features meet, against real redis-server: each path that leases or ends
//! a job applies every feature's rule, or refuses the feature with a typed error.
//!
//! - a batch take admits a schedule's occurrence as a take does (its next occurrence is
//!   pushed), so the schedule goes on;
//! - the batch paths (take, batched pool) and schedules are refused on a queue's groups,
//!   where they would pass the groups' limits by or lose the occurrence's group;
//! - a batch ack of a grouped job frees its group's slot at once.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use redlease::{
    Client, Error, queue::Cancelled, queue::GroupLimits, queue::JobError, queue::LimitsOf,
    queue::PushOptions, queue::Queue, queue::Retry, queue::schedule::Schedule,
    queue::schedule::Upserted,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

fn refused<T: std::fmt::Debug>(out: Result<T, Error>) {
    match out {
        Err(Error::InvalidArgument(e)) => {
            assert!(e.to_string().contains("groups"), "{e}");
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
}

/// Queue `partners` whose group `acme` runs one job at a time.
fn one_at_a_time(c: &Client) -> Queue {
    let q = c.queue("partners").unwrap();
    q.set_group_limits(
        LimitsOf::Group("acme"),
        Some(GroupLimits::new().concurrency(1)),
    )
    .unwrap();
    q
}

/// Pushes `payloads` into group `acme`, in order; their ids.
fn push_acme(q: &Queue, payloads: &[&str]) -> Vec<String> {
    payloads
        .iter()
        .map(|p| q.push_with(*p, PushOptions::new().group("acme")).unwrap())
        .collect()
}

#[test]
fn a_batch_take_advances_a_schedules_occurrence_so_the_schedule_goes_on() {
    let server = server();
    let c = client(&server);
    let q = c.queue("ticks").unwrap();
    let every = Duration::from_millis(100);
    let schedule = Schedule::every(every).unwrap().payload("tick");
    assert!(matches!(
        q.schedule("tick", &schedule).unwrap(),
        Upserted::Set { .. }
    ));
    // Every occurrence is taken by a batch take (polled: a waiting `take_batch` would take
    // its first job with a single take): each must push the next one, or the schedule
    // stops after the first.
    let mut seen = HashSet::new();
    let start = Instant::now();
    while seen.len() < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "only {} occurrences ran in 20 s at one per 100 ms: {seen:?}",
            seen.len()
        );
        let jobs = q.try_take_batch(10).unwrap();
        if jobs.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        for job in &jobs {
            assert!(job.id().starts_with("sched:tick:"), "{}", job.id());
            seen.insert(job.id().to_owned());
        }
        for outcome in q.ack_batch(jobs) {
            outcome.unwrap();
        }
    }
    // Exactly one pending occurrence is left.
    let listed = q.schedules().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].next.is_some(), "{listed:?}");
}

#[test]
fn batch_paths_and_schedules_are_refused_on_a_queues_groups() {
    let server = server();
    let q = one_at_a_time(&client(&server));
    push_acme(&q, &["job 0", "job 1", "job 2", "job 3", "job 4"]);
    q.pause_group("paused").unwrap();
    q.push_with("held", PushOptions::new().group("paused"))
        .unwrap();
    let g = q.groups().unwrap();
    refused(g.try_take_batch(5));
    refused(g.take_batch(5, Duration::from_millis(50)));
    refused(g.work_batched(1, 5, |_| Ok::<(), JobError>(())));
    let schedule = Schedule::every(Duration::from_secs(1)).unwrap();
    refused(g.schedule("tick", &schedule));
    // Nothing was leased or written by the refused calls: one group take still gets one job
    // of the concurrency-1 group, and a second gets none.
    assert_eq!(g.stats().unwrap().in_flight, 0);
    let first = g.try_take().unwrap().expect("a job of acme");
    assert_eq!(first.group(), Some("acme"));
    assert!(g.try_take().unwrap().is_none());
    assert!(g.schedules().unwrap().is_empty());
    first.ack().unwrap();
}

#[test]
fn a_batch_ack_of_a_grouped_job_frees_its_groups_slot_at_once() {
    let server = server();
    let q = one_at_a_time(&client(&server));
    push_acme(&q, &["one", "two"]);
    let g: Queue = q.groups().unwrap();
    let one = g.try_take().unwrap().expect("the first job");
    assert!(
        g.try_take().unwrap().is_none(),
        "the group's one slot is held"
    );
    for outcome in g.ack_batch(vec![one]) {
        outcome.unwrap();
    }
    // The lease runs 30 s: a slot freed only by its expiry would leave the group empty-handed.
    let two = g
        .try_take()
        .unwrap()
        .expect("the slot is free after the batch ack");
    assert_eq!(two.payload(), b"two");
    assert_eq!(q.ack_batch(vec![two]), vec![Ok(())]);
}

#[test]
fn a_drain_on_either_handle_counts_grouped_and_plain_jobs_and_wakes_on_a_group_ack() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("deploys")
        .unwrap()
        .visibility(Duration::from_secs(20));
    let g = q.groups().unwrap();
    q.push_with("grouped", PushOptions::new().group("acme"))
        .unwrap();
    q.push("plain").unwrap();
    let grouped = g.try_take().unwrap().expect("the grouped job");
    // The plain handle's drain counts the grouped job in flight.
    assert!(!q.pause_and_wait(Duration::from_millis(50)).unwrap());
    q.resume().unwrap();
    let plain = q.try_take().unwrap().expect("the plain job");
    plain.ack().unwrap();
    // A drain is woken by the grouped job's ack, not by its lease running out (20 s).
    let start = Instant::now();
    let (drained, took) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let drained = g.pause_and_wait(Duration::from_secs(15)).unwrap();
            (drained, start.elapsed())
        });
        // Ack once the waiter has counted the job (the drain channel is recorded then).
        testkit::await_condition(Duration::from_secs(5), || {
            let mut conn = testkit::connection(&server);
            redis::cmd("HEXISTS")
                .arg("redlease:{deploys}:q:paused")
                .arg("drain")
                .query::<bool>(&mut conn)
                .unwrap()
        });
        grouped.ack().unwrap();
        waiter.join().unwrap()
    });
    assert!(drained);
    assert!(took < Duration::from_secs(10), "woken after {took:?}");
    assert!(q.pause_and_wait(Duration::ZERO).unwrap());
}

#[test]
fn a_grouped_drain_counts_plain_jobs_in_flight() {
    let server = server();
    let c = client(&server);
    let q = c.queue("deploys").unwrap();
    q.push("plain").unwrap();
    let plain = q.try_take().unwrap().expect("the plain job");
    assert!(
        !q.groups()
            .unwrap()
            .pause_and_wait(Duration::from_millis(50))
            .unwrap()
    );
    plain.ack().unwrap();
    assert!(q.groups().unwrap().pause_and_wait(Duration::ZERO).unwrap());
}

#[test]
fn a_grouped_job_is_cancelled_where_it_waits_and_its_slot_is_freed_when_it_runs() {
    let server = server();
    let q = one_at_a_time(&client(&server));
    let g = q.groups().unwrap();
    let ids = push_acme(&q, &["one", "two", "three", "four"]);
    // Sorted into its group by a first take: every job now waits in the group's ready set.
    let first = g.try_take().unwrap().expect("the first job");
    assert_eq!(first.payload(), b"one");
    let bare = |id: &str| id.rsplit('\u{1f}').next().unwrap().to_owned();
    // Waiting in its group: by group and id, through the queue or its groups, or by the
    // composed id.
    assert_eq!(
        q.cancel_grouped("acme", &bare(&ids[1]), "no").unwrap(),
        Cancelled::Waiting
    );
    assert_eq!(
        g.cancel(&format!("acme\u{1f}{}", bare(&ids[2])), "no")
            .unwrap(),
        Cancelled::Waiting
    );
    assert_eq!(
        g.cancel_grouped("acme", &bare(&ids[2]), "no").unwrap(),
        Cancelled::NotFound
    );
    assert!(matches!(
        q.cancel_grouped("", "x", "no"),
        Err(Error::InvalidArgument(_))
    ));
    // In flight: the lease ends and the group's one slot is free at once (the lease would
    // run 30 s).
    assert_eq!(
        q.cancel_grouped("acme", first.id(), "stop").unwrap(),
        Cancelled::InFlight
    );
    let next = g
        .try_take()
        .unwrap()
        .expect("the slot is free after the cancel");
    assert_eq!(next.payload(), b"four");
    assert!(g.try_take().unwrap().is_none());
    next.ack().unwrap();
}

#[test]
fn a_grouped_jobs_slot_is_free_at_once_after_a_nack_with_backoff_or_a_death() {
    let server = server();
    let q = one_at_a_time(&client(&server));
    push_acme(&q, &["one", "two", "three"]);
    let g = q.groups().unwrap();
    let one = g.try_take().unwrap().expect("the first job");
    assert!(
        g.try_take().unwrap().is_none(),
        "the group's one slot is held"
    );
    // Retried in 60 s: the slot is free now (the lease would run 30 s).
    one.nack_after(Duration::from_secs(60)).unwrap();
    let two = g
        .try_take()
        .unwrap()
        .expect("the slot is free after the nack");
    assert_eq!(two.payload(), b"two");
    // Dead at once: the slot is free now.
    two.fail("bad", Retry::Never).unwrap();
    let three = g
        .try_take()
        .unwrap()
        .expect("the slot is free after the death");
    assert_eq!(three.payload(), b"three");
    three.ack().unwrap();
    assert_eq!(g.stats().unwrap().dead, 1);
}

#[test]
fn schedule_times_past_2_pow_53_and_group_ids_no_group_can_have_are_refused() {
    let server = server();
    let c = client(&server);
    let q = c.queue("ticks").unwrap();
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    for ms in [1u64 << 63, u64::MAX, (1 << 53) + 1] {
        for schedule in [
            every.clone().starting_at_ms(ms),
            every.clone().ending_at_ms(ms),
        ] {
            assert!(
                matches!(
                    q.schedule("tick", &schedule),
                    Err(Error::InvalidArgument(_))
                ),
                "{ms}"
            );
        }
    }
    assert!(q.schedules().unwrap().is_empty(), "nothing was written");
    let last = every.starting_at_ms((1 << 53) - 1);
    assert!(matches!(
        q.schedule("tick", &last).unwrap(),
        Upserted::Set { .. }
    ));
    assert_eq!(q.schedules().unwrap()[0].next, Some((1 << 53) - 1));
    for bad in ["a\u{1f}b", ""] {
        assert!(matches!(q.pause_group(bad), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            q.resume_group(bad),
            Err(Error::InvalidArgument(_))
        ));
    }
}

fn zcard(conn: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("ZCARD").arg(key).query(conn).unwrap()
}

#[test]
fn a_push_or_a_cancel_sweeps_a_bounded_number_of_ended_windows_and_marks() {
    // Each call's work is bounded by what it moves, whatever the set holds: 100,000 ended
    // throttle windows or cancel marks are swept at most 64 a call (with their hash fields).
    let server = server();
    let c = client(&server);
    let mut conn = testkit::connection(&server);
    let q = c.queue("big").unwrap();
    let (windows, named) = ("redlease:{big}:q:throttle", "redlease:{big}:q:throttled");
    let (marks, messages) = (
        "redlease:{big}:q:cancelled",
        "redlease:{big}:q:cancel_messages",
    );
    testkit::fill_ended(&mut conn, windows, named, 100_000);
    testkit::fill_ended(&mut conn, marks, messages, 100_000);
    let throttle = redlease::queue::dedup::Dedup::Throttle(Duration::from_secs(60));
    assert!(matches!(
        q.push_dedup("d", "x", throttle).unwrap(),
        redlease::queue::dedup::DedupOutcome::Queued(_)
    ));
    // 64 swept, this push's own window added.
    assert_eq!(zcard(&mut conn, windows), 100_000 - 64 + 1);
    let hlen: usize = redis::cmd("HLEN").arg(named).query(&mut conn).unwrap();
    assert_eq!(hlen, 100_000 - 64 + 1);
    q.push("run").unwrap();
    let job = loop {
        let job = q.try_take().unwrap().expect("a job");
        if job.payload() == b"run" {
            break job;
        }
        job.ack().unwrap();
    };
    assert_eq!(q.cancel(job.id(), "stop").unwrap(), Cancelled::InFlight);
    assert_eq!(zcard(&mut conn, marks), 100_000 - 64 + 1);
    let hlen: usize = redis::cmd("HLEN").arg(messages).query(&mut conn).unwrap();
    assert_eq!(hlen, 100_000 - 64 + 1);
}

/// One way a job's lease ends.
type End = fn(&Queue, redlease::queue::Job);

#[test]
fn a_keep_latest_follow_up_runs_and_wakes_takers_however_the_job_it_follows_ends() {
    // Every way the followed job ends releases the follow-up its push answered Queued for,
    // and wakes the idle takers: an ack, a batch ack, a death (`Retry::Never`, or its last delivery), a cancel to the dead list, a cancel
    // that removes it.
    let server = server();
    let c = client(&server);
    let ends: [(&str, End); 6] = [
        ("ack", |_, job| job.ack().unwrap()),
        ("batch-ack", |q, job| {
            for outcome in q.ack_batch(vec![job]) {
                outcome.unwrap();
            }
        }),
        ("never", |_, job| job.fail("bad", Retry::Never).unwrap()),
        ("last", |_, job| job.nack().unwrap()),
        ("cancel-dead", |q, job| {
            assert_eq!(q.cancel(job.id(), "stop").unwrap(), Cancelled::InFlight);
        }),
        ("cancel-remove", |q, job| {
            let q = q
                .clone()
                .cancelled_jobs(redlease::queue::CancelledJobs::Remove);
            assert_eq!(q.cancel(job.id(), "stop").unwrap(), Cancelled::InFlight);
        }),
    ];
    for (name, end) in ends {
        let q = c.queue(name).unwrap().max_deliveries(1);
        let latest = redlease::queue::dedup::Dedup::KeepLatest;
        assert!(matches!(
            q.push_dedup("sync", "0", latest).unwrap(),
            redlease::queue::dedup::DedupOutcome::Queued(_)
        ));
        let running = q.try_take().unwrap().expect("the first job");
        let redlease::queue::dedup::DedupOutcome::Queued(follow_up) =
            q.push_dedup("sync", "1", latest).unwrap()
        else {
            panic!("{name}: the follow-up was not queued");
        };
        // The follow-up made ready wakes the idle takers: it is announced on the queue's
        // wake channel (without it an idle taker found it at its idle check).
        let mut conn = testkit::connection(&server);
        let mut sub = conn.as_pubsub();
        sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let channel = format!("redlease:{{{name}}}:q:pushed");
        sub.subscribe(&channel).unwrap();
        end(&q, running);
        let woken = sub.get_message();
        assert!(woken.is_ok(), "{name}: no wake-up on {channel}: {woken:?}");
        drop(sub);
        let next = q
            .try_take()
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: the follow-up does not run"));
        assert_eq!(next.id(), follow_up, "{name}");
        assert_eq!(next.payload(), b"1", "{name}");
        // It holds the dedup id now: a push while it runs is parked behind it.
        assert!(matches!(
            q.push_dedup("sync", "2", latest).unwrap(),
            redlease::queue::dedup::DedupOutcome::Queued(_)
        ));
        next.ack().unwrap();
        assert_eq!(
            q.try_take().unwrap().expect("the next follow-up").payload(),
            b"2"
        );
    }
}

#[test]
fn a_cleared_or_raised_group_rate_takes_effect_at_the_next_take() {
    let server = server();
    let c = client(&server);
    let slow = redlease::rate::RateLimit::new(1, Duration::from_secs(8), 1).unwrap();
    let fast = redlease::rate::RateLimit::new(1000, Duration::from_secs(1), 1).unwrap();
    for (name, of_group, new) in [
        ("cleared", true, None),
        ("raised", true, Some(GroupLimits::new().rate(fast))),
        ("defaults", false, Some(GroupLimits::new().rate(fast))),
    ] {
        let q = c.queue(name).unwrap();
        let of = if of_group {
            LimitsOf::Group("acme")
        } else {
            LimitsOf::EveryGroup
        };
        q.set_group_limits(of, Some(GroupLimits::new().rate(slow)))
            .unwrap();
        for p in ["one", "two"] {
            q.push_with(p, PushOptions::new().group("acme")).unwrap();
        }
        let g = q.groups().unwrap();
        g.try_take().unwrap().expect("the first job").ack().unwrap();
        assert!(
            g.try_take().unwrap().is_none(),
            "{name}: blocked by 1 per 8 s"
        );
        q.set_group_limits(of, new).unwrap();
        let two = g
            .try_take()
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: the old slot is waited out"));
        assert_eq!(two.payload(), b"two");
        two.ack().unwrap();
    }
}

#[test]
fn a_cancelled_schedule_occurrence_is_skipped_and_the_schedule_goes_on() {
    let server = server();
    let c = client(&server);
    for (name, jobs) in [
        ("to-dead", redlease::queue::CancelledJobs::Dead),
        ("removed", redlease::queue::CancelledJobs::Remove),
    ] {
        let q = c.queue(name).unwrap().cancelled_jobs(jobs);
        let hour = Schedule::every(Duration::from_secs(3600))
            .unwrap()
            .payload("report");
        let Upserted::Set { next: Some(first) } = q.schedule("hourly", &hour).unwrap() else {
            panic!("a first occurrence")
        };
        let id = format!("sched:hourly:{first}");
        assert_eq!(q.cancel(&id, "skip this one").unwrap(), Cancelled::Waiting);
        // The next occurrence, an hour later, waits in its place.
        let listed = q.schedules().unwrap();
        assert_eq!(
            listed[0].next,
            Some(first + 3_600_000),
            "{name}: {listed:?}"
        );
        assert_eq!(q.stats().unwrap().delayed, 1, "{name}");
        // An upsert of the same schedule finds it pending and changes nothing.
        assert_eq!(
            q.schedule("hourly", &hour).unwrap(),
            Upserted::Unchanged {
                next: Some(first + 3_600_000)
            },
            "{name}"
        );
        // A cancel repeated answers NotFound and advances nothing more.
        assert_eq!(q.cancel(&id, "again").unwrap(), Cancelled::NotFound);
        assert_eq!(q.schedules().unwrap()[0].next, Some(first + 3_600_000));
        assert_eq!(q.stats().unwrap().delayed, 1, "{name}");
    }
    // A schedule due every 100 ms whose ready occurrence is cancelled runs its next.
    let q = c.queue("ticks").unwrap();
    let Upserted::Set { next: Some(first) } = q
        .schedule(
            "tick",
            &Schedule::every(Duration::from_millis(100)).unwrap(),
        )
        .unwrap()
    else {
        panic!("a first occurrence")
    };
    q.cancel(&format!("sched:tick:{first}"), "skip").unwrap();
    let job = q
        .take(Duration::from_secs(10))
        .unwrap()
        .expect("the next occurrence runs");
    assert_ne!(job.id(), format!("sched:tick:{first}"));
    assert!(job.id().starts_with("sched:tick:"), "{}", job.id());
    job.ack().unwrap();
}

#[test]
fn a_resumed_group_runs_again_behind_any_number_of_paused_groups_and_wakes_grouped_takers() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("tenants")
        .unwrap()
        .idle_check(Duration::from_secs(30));
    let g = q.groups().unwrap();
    // 17 paused groups that sort before `zz`, each with a job, and `zz` paused too.
    let mut paused: Vec<String> = (0..17).map(|i| format!("a{i:02}")).collect();
    paused.push("zz".into());
    for group in &paused {
        q.pause_group(group).unwrap();
        q.push_with(format!("job of {group}"), PushOptions::new().group(group))
            .unwrap();
    }
    // Takes find nothing to run, and set every paused group aside.
    for _ in 0..4 {
        assert!(g.try_take().unwrap().is_none());
    }
    q.resume_group("zz").unwrap();
    let job = g.try_take().unwrap().expect("the resumed group's job");
    assert_eq!(job.group(), Some("zz"));
    job.ack().unwrap();
    // A resume through the plain handle wakes the grouped takers too: it is announced on
    // their wake channel (an idle grouped taker listens there; without it, it found the
    // group at its idle check, 30 s here).
    let mut conn = testkit::connection(&server);
    let mut sub = conn.as_pubsub();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sub.subscribe("redlease:{tenants}:q:g:pushed").unwrap();
    q.resume_group("a07").unwrap();
    let message = sub
        .get_message()
        .expect("the resume's wake-up on the grouped channel");
    assert_eq!(message.get_channel_name(), "redlease:{tenants}:q:g:pushed");
    drop(sub);
    let job = g.try_take().unwrap().expect("the job of a07");
    assert_eq!(job.group(), Some("a07"));
    job.ack().unwrap();
}

#[test]
fn a_cancel_of_a_job_in_flight_wakes_a_drain_and_a_freed_group_slot_wakes_takers() {
    let server = server();
    let c = client(&server);
    let q = one_at_a_time(&c).visibility(Duration::from_secs(20));
    let g = q.groups().unwrap();
    push_acme(&q, &["first", "second"]);
    let running = g.try_take().unwrap().expect("the first job of acme");
    // The concurrency-1 group is full: a take sets it aside.
    assert!(g.try_take().unwrap().is_none());
    // Its slot freed by the cancel wakes the grouped takers.
    let mut conn = testkit::connection(&server);
    let mut sub = conn.as_pubsub();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sub.subscribe("redlease:{partners}:q:g:pushed").unwrap();
    // The drain is told on its channel.
    sub.subscribe("redlease:{partners}:q:drained").unwrap();
    let start = Instant::now();
    let (drained, took) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let drained = q.pause_and_wait(Duration::from_secs(15)).unwrap();
            (drained, start.elapsed())
        });
        testkit::await_condition(Duration::from_secs(5), || {
            let mut conn = testkit::connection(&server);
            redis::cmd("HEXISTS")
                .arg("redlease:{partners}:q:paused")
                .arg("drain")
                .query::<bool>(&mut conn)
                .unwrap()
        });
        assert_eq!(
            q.cancel_grouped("acme", running.id(), "stop").unwrap(),
            Cancelled::InFlight
        );
        waiter.join().unwrap()
    });
    // The drain was woken by the cancel, not by the lease running out (20 s).
    assert!(drained);
    assert!(took < Duration::from_secs(10), "woken after {took:?}");
    let mut heard = HashSet::new();
    while heard.len() < 2 {
        match sub.get_message() {
            Ok(m) => heard.insert(m.get_channel_name().to_owned()),
            Err(e) => panic!("told on {heard:?} only: {e}"),
        };
    }
    drop(sub);
    q.resume().unwrap();
    let next = g.try_take().unwrap().expect("the second job of acme");
    assert_eq!(next.payload(), b"second");
    next.ack().unwrap();
}

fn exists(server: &RedisServer, key: &str) -> bool {
    let mut conn = testkit::connection(server);
    redis::cmd("EXISTS").arg(key).query(&mut conn).unwrap()
}

#[test]
fn a_group_whose_leases_ran_out_keeps_no_index_key() {
    let server = server();
    let c = client(&server);
    let q = c
        .queue("tenants")
        .unwrap()
        .visibility(Duration::from_millis(50))
        .max_deliveries(1);
    let g = q.groups().unwrap();
    // 20 tenants whose one job's lease runs out on its last delivery: each dies.
    for i in 0..20 {
        q.push_with("job", PushOptions::new().group(&format!("t{i}")))
            .unwrap();
    }
    for _ in 0..20 {
        g.try_take().unwrap().expect("a tenant's job").abandon();
    }
    let index = |i: usize| format!("redlease:{{tenants}}:q:g:i:t{i}");
    assert!(exists(&server, &index(0)), "a running job holds its slot");
    // A take after the leases ran out reclaims them: dead, and their slots freed.
    testkit::await_condition(Duration::from_secs(10), || {
        assert!(g.try_take().unwrap().is_none());
        g.dead_jobs(100).unwrap().len() == 20
    });
    let left: Vec<usize> = (0..20).filter(|&i| exists(&server, &index(i))).collect();
    assert!(
        left.is_empty(),
        "index keys left behind for tenants {left:?}"
    );
}

/// How many times Redis ran `command` (scripts' calls included) since the last reset.
fn calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn a_group_take_does_not_look_at_each_lease_its_group_holds() {
    // A group with 40,000 leases running: its take counts them (the index holds only
    // leases that run: every ending frees its slot) instead of checking each.
    let server = server();
    let c = client(&server);
    let mut conn = testkit::connection(&server);
    let q = c.queue("wide").unwrap();
    q.set_group_limits(
        LimitsOf::Group("big"),
        Some(GroupLimits::new().concurrency(100_000)),
    )
    .unwrap();
    let far = 4_000_000_000_000u64;
    for chunk in (0..40_000).collect::<Vec<_>>().chunks(10_000) {
        let mut index = redis::cmd("ZADD");
        index.arg("redlease:{wide}:q:g:i:big");
        let mut inflight = redis::cmd("ZADD");
        inflight.arg("redlease:{wide}:q:g:inflight");
        for i in chunk {
            index.arg(far).arg(format!("big\u{1f}m{i}"));
            inflight.arg(far).arg(format!("big\u{1f}m{i}"));
        }
        let () = redis::pipe()
            .add_command(index)
            .add_command(inflight)
            .query(&mut conn)
            .unwrap();
    }
    q.push_with("one more", PushOptions::new().group("big"))
        .unwrap();
    let g = q.groups().unwrap();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let job = g.try_take().unwrap().expect("the job of big");
    assert_eq!(job.payload(), b"one more");
    let looked = calls(&mut conn, "zscore");
    assert!(looked < 20, "the take ran ZSCORE {looked} times");
    assert_eq!(zcard(&mut conn, "redlease:{wide}:q:g:i:big"), 40_001);
    job.ack().unwrap();
    assert_eq!(zcard(&mut conn, "redlease:{wide}:q:g:i:big"), 40_000);
}

#[test]
fn bulk_dead_list_calls_go_in_bounded_pages_and_report_exactly() {
    // 100,000 dead jobs, the 1,000 a filter picks at the end: each page removes its picks
    // with one LREM (an LREM per pick scanned the list from its head: 1.6 s, past the io
    // timeout, so a call that had requeued 1,000 answered Unavailable).
    let server = server();
    let c = testkit::client(&server, Duration::from_secs(1));
    let mut conn = testkit::connection(&server);
    testkit::fill_dead(&mut conn, "bulk", "d", 100_000, 1_000);
    let q = c.queue("bulk").unwrap();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let filter = redlease::queue::dead::DeadFilter::new()
        .cause(redlease::queue::dead::DeathCause::LeaseExpired);
    let ids = q.requeue_dead_where(&filter, 1_000).unwrap();
    assert_eq!(ids.len(), 1_000);
    let unique: HashSet<&String> = ids.iter().map(|r| &r.id).collect();
    assert_eq!(unique.len(), 1_000);
    assert!(
        ids.iter()
            .all(|r| r.group.is_none() && r.id["d".len()..].parse::<usize>().unwrap() >= 99_000)
    );
    let pages = calls(&mut conn, "evalsha") + calls(&mut conn, "eval");
    let removals = calls(&mut conn, "lrem");
    assert!(removals <= pages, "{removals} LREMs in {pages} pages");
    assert_eq!(q.stats().unwrap().ready, 1_000);
    assert_eq!(q.stats().unwrap().dead, 99_000);
    // Called again, the filter picks none: none is requeued twice.
    assert!(q.requeue_dead_where(&filter, 1_000).unwrap().is_empty());
    // A purge of 250,000 reports each of them, in pages of 50.
    testkit::fill_dead(&mut conn, "bulk", "e", 151_000, 0);
    assert_eq!(q.purge_dead().unwrap(), 250_000);
    assert_eq!(q.stats().unwrap().dead, 0);
    let payloads: usize = redis::cmd("HLEN")
        .arg("redlease:{bulk}:q:payloads")
        .query(&mut conn)
        .unwrap();
    assert_eq!(payloads, 1_000, "the requeued jobs' payloads only");
}

#[test]
fn a_change_of_the_default_limits_does_not_walk_every_group_set_aside() {
    let server = server();
    let c = client(&server);
    let mut conn = testkit::connection(&server);
    let q = c.queue("fleet").unwrap();
    q.set_group_limits(
        LimitsOf::EveryGroup,
        Some(GroupLimits::new().concurrency(1)),
    )
    .unwrap();
    let g = q.groups().unwrap();
    for p in ["first", "second"] {
        q.push_with(p, PushOptions::new().group("acme")).unwrap();
    }
    let first = g.try_take().unwrap().expect("the first job");
    // The concurrency-1 group is full and set aside, beside 100,000 others.
    assert!(g.try_take().unwrap().is_none());
    for chunk in (0..100_000).collect::<Vec<_>>().chunks(10_000) {
        let mut full = redis::cmd("ZADD");
        full.arg("redlease:{fleet}:q:g:full");
        for i in chunk {
            full.arg(4_000_000_000_000u64).arg(format!("idle{i}"));
        }
        let () = full.query(&mut conn).unwrap();
    }
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    q.set_group_limits(
        LimitsOf::EveryGroup,
        Some(GroupLimits::new().concurrency(2)),
    )
    .unwrap();
    let writes = calls(&mut conn, "zadd") + calls(&mut conn, "zrem");
    assert!(writes < 10, "the change wrote {writes} times");
    // The raised limit takes effect at the next takes: acme's second job runs beside the
    // first (the groups set aside are looked at again, 16 a take).
    let mut second = None;
    for _ in 0..100_000 / 16 + 2 {
        if let Some(job) = g.try_take().unwrap() {
            second = Some(job);
            break;
        }
    }
    let second = second.expect("the second job of acme, under the raised limit");
    assert_eq!(second.payload(), b"second");
    first.ack().unwrap();
    second.ack().unwrap();
}

#[test]
fn a_grouped_dead_job_is_shown_and_addressed_by_its_group_and_id() {
    let server = server();
    let c = client(&server);
    let q = c.queue("tenants").unwrap();
    let g = q.groups().unwrap();
    let id = q.push_with("bad", PushOptions::new().group("t2")).unwrap();
    let job = g.try_take().unwrap().expect("the job of t2");
    assert_eq!(job.id(), id);
    job.fail("bad input", Retry::Never).unwrap();
    let dead = g.dead_jobs(10).unwrap();
    assert_eq!(dead.len(), 1);
    // The id as `Job::id()` said, the group beside it: no separator byte in either.
    assert_eq!(dead[0].id, id);
    assert_eq!(dead[0].group.as_deref(), Some("t2"));
    // Addressed by group and id, through the plain handle as through the groups'.
    assert!(q.requeue_dead_grouped("t2", &id).unwrap());
    assert!(
        !g.requeue_dead_grouped("t2", &id).unwrap(),
        "requeued already"
    );
    let again = g.try_take().unwrap().expect("the requeued job");
    assert_eq!((again.group(), again.id()), (Some("t2"), id.as_str()));
    again.fail("still bad", Retry::Never).unwrap();
    assert!(g.delete_dead_grouped("t2", &id).unwrap());
    assert!(g.dead_jobs(10).unwrap().is_empty());
    // The bulk calls of the groups' handle (which act on its dead list) answer a grouped
    // job by its group and id too.
    for action in ["requeue", "delete"] {
        let job = g.try_take().ok().flatten();
        assert!(job.is_none(), "nothing waits");
        let id = q
            .push_with("worse", PushOptions::new().group("t2"))
            .unwrap();
        let job = g.try_take().unwrap().expect("the job of t2");
        job.fail("worse", Retry::Never).unwrap();
        let all = redlease::queue::dead::DeadFilter::new();
        let done = match action {
            "requeue" => g.requeue_dead_where(&all, 10).unwrap(),
            _ => g.delete_dead_where(&all, 10).unwrap(),
        };
        assert_eq!(done, [redlease::queue::JobRef::grouped("t2", id.as_str())]);
        if action == "requeue" {
            g.try_take()
                .unwrap()
                .expect("the requeued job")
                .ack()
                .unwrap();
        }
    }
    refused_group(q.requeue_dead_grouped("no\u{1f}group", &id));
}

fn refused_group<T: std::fmt::Debug>(out: Result<T, Error>) {
    assert!(matches!(out, Err(Error::InvalidArgument(_))), "{out:?}");
}

#[test]
fn a_rate_limited_answer_is_a_deferral_not_a_nack_in_the_report_and_the_job() {
    let server = server();
    let c = client(&server);
    let q = c.queue("partner").unwrap();
    q.push_with("call", PushOptions::new().group("acme"))
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let workers = q
        .groups()
        .unwrap()
        .work(1, move |job: &redlease::queue::Job| {
            let mut log = log.lock().unwrap();
            log.push((job.delivery(), job.attempt(), job.deferrals()));
            if log.len() <= 2 {
                return Err(JobError::rate_limited(Duration::from_millis(5), "429"));
            }
            Ok(())
        })
        .unwrap();
    testkit::await_condition(Duration::from_secs(10), || workers.report().acked == 1);
    let report = workers.stop();
    assert_eq!(
        (report.acked, report.deferred, report.nacked),
        (1, 2, 0),
        "{report:?}"
    );
    // The delivery number climbs (it is the fence); the attempt does not, the deferrals do.
    assert_eq!(*seen.lock().unwrap(), vec![(1, 1, 0), (2, 1, 1), (3, 1, 2)]);
}

#[test]
fn a_schedule_outlives_the_loss_of_the_queues_data() {
    let server = server();
    let c = client(&server);
    let mut conn = testkit::connection(&server);
    let q = c
        .queue("reports")
        .unwrap()
        .schedule_check(Duration::from_millis(50));
    let tick = Schedule::every(Duration::from_millis(100)).unwrap();
    q.schedule("tick", &tick).unwrap();
    // A schedule removed does not come back.
    q.schedule("gone", &tick).unwrap();
    assert!(q.remove_schedule("gone").unwrap());
    let job = q
        .take(Duration::from_secs(5))
        .unwrap()
        .expect("an occurrence");
    job.ack().unwrap();
    // The data is lost (as a restart without persistence would lose it).
    let () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    assert!(q.schedules().unwrap().is_empty());
    // A take of the handle that upserted it, past its check interval, upserts it again:
    // its occurrences run again, and the removed schedule stays removed.
    let job = q
        .take(Duration::from_secs(10))
        .unwrap()
        .expect("an occurrence after the loss");
    assert!(job.id().starts_with("sched:tick:"), "{}", job.id());
    job.ack().unwrap();
    let names: Vec<String> = q.schedules().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["tick".to_owned()]);
}

#[test]
fn grouped_stats_count_the_jobs_waiting_in_their_groups_as_ready() {
    // A take sorts the staged jobs into their groups' own ready sets: they still count as
    // ready, through every path that adds to or takes from those sets.
    let server = server();
    let c = client(&server);
    let q = c.queue("sorted").unwrap();
    let g = q.groups().unwrap();
    for i in 0..13 {
        let group = format!("t{}", i % 3);
        q.push_with("job", PushOptions::new().group(&group))
            .unwrap();
    }
    assert_eq!(g.stats().unwrap().ready, 13, "pushed into their groups");
    let first = g.try_take().unwrap().expect("a job");
    assert_eq!(g.stats().unwrap().ready, 12, "one taken");
    // A deferral puts it back at its group's head: ready again.
    first.rate_limit_group(Duration::from_millis(1)).unwrap();
    assert_eq!(g.stats().unwrap().ready, 13, "deferred back");
    // A delayed job staged by a take joins its group's set: it counts once.
    q.push_with(
        "later",
        PushOptions::new()
            .group("t0")
            .delay(Duration::from_millis(1)),
    )
    .unwrap();
    let mut taken = Vec::new();
    testkit::await_condition(Duration::from_secs(5), || {
        if let Some(job) = g.try_take().unwrap() {
            taken.push(job);
        }
        !taken.is_empty() && g.stats().unwrap().delayed == 0
    });
    assert_eq!(g.stats().unwrap().ready, 14 - taken.len() as u64);
    // A cancel of a job waiting in its group takes it off the count.
    let waiting = q
        .push_with("to cancel", PushOptions::new().group("t1"))
        .unwrap();
    assert_eq!(g.stats().unwrap().ready, 15 - taken.len() as u64);
    assert_eq!(
        q.cancel_grouped("t1", &waiting, "no").unwrap(),
        Cancelled::Waiting
    );
    assert_eq!(g.stats().unwrap().ready, 14 - taken.len() as u64);
    while let Some(job) = g.try_take().unwrap() {
        taken.push(job);
    }
    assert_eq!(taken.len(), 14);
    assert_eq!(g.stats().unwrap().ready, 0);
    for job in taken.drain(..) {
        job.ack().unwrap();
    }
    // Jobs sorted into their groups before the count was kept (its key deleted here) are
    // taken without driving it below 0: the count is right again from the next push.
    for group in ["t0", "t1"] {
        q.push_with("old", PushOptions::new().group(group)).unwrap();
    }
    let mut conn = testkit::connection(&server);
    let deleted: i64 = redis::cmd("DEL")
        .arg("redlease:{sorted}:q:g:sorted")
        .query(&mut conn)
        .unwrap();
    assert_eq!(deleted, 1);
    let _: Vec<()> = (0..2)
        .map(|_| g.try_take().unwrap().expect("an old job").ack().unwrap())
        .collect();
    q.push_with("new", PushOptions::new().group("t2")).unwrap();
    assert_eq!(g.stats().unwrap().ready, 1);
}

#[test]
fn the_groups_are_read_a_page_at_a_time_with_their_figures() {
    use redlease::{queue::GroupCursor, queue::GroupState};
    let server = server();
    let c = client(&server);
    let q = c.queue("paged").unwrap();
    let g = q.groups().unwrap();
    q.set_group_limits(
        LimitsOf::Group("full"),
        Some(GroupLimits::new().concurrency(1)),
    )
    .unwrap();
    let slow = redlease::core::rate::RateLimit::new(1, Duration::from_secs(3600), 1).unwrap();
    q.set_group_limits(LimitsOf::Group("slow"), Some(GroupLimits::new().rate(slow)))
        .unwrap();
    for (group, jobs) in [("full", 2), ("slow", 2), ("held", 1), ("a", 1), ("b", 10)] {
        for _ in 0..jobs {
            q.push_with("job", PushOptions::new().group(group)).unwrap();
        }
    }
    q.pause_group("held").unwrap();
    // Eight takes: full's, slow's and a's first jobs run, and five of b's; held is set
    // aside as paused, full as full, slow as rate-blocked.
    let mut running = Vec::new();
    for _ in 0..8 {
        if let Some(job) = g.try_take().unwrap() {
            running.push(job);
        }
    }
    let mut seen = Vec::new();
    let mut cursor = Some(GroupCursor::START);
    let mut pages = 0;
    while let Some(at) = cursor {
        let page = g.group_page(at, 2).unwrap();
        assert!(page.groups.len() <= 2);
        seen.extend(page.groups);
        cursor = page.next;
        pages += 1;
        assert!(pages < 20, "the pages never end");
    }
    seen.sort_by(|x, y| x.id.cmp(&y.id));
    let figures: Vec<(&str, GroupState, u64, u64, bool)> = seen
        .iter()
        .map(|i| (i.id.as_str(), i.state, i.ready, i.in_flight, i.paused))
        .collect();
    // a ran its only job (no longer waiting: not listed); b ran five of its ten.
    assert_eq!(
        figures,
        [
            ("b", GroupState::Ready, 5, 5, false),
            ("full", GroupState::Full, 1, 1, false),
            ("held", GroupState::Paused, 1, 0, true),
            ("slow", GroupState::RateBlocked, 1, 1, false),
        ]
    );
    // The plain handle reads the same pages; a page size of 0 is refused.
    assert_eq!(
        q.group_page(GroupCursor::START, 1000).unwrap().groups.len(),
        4
    );
    assert!(matches!(
        g.group_page(GroupCursor::START, 0),
        Err(Error::InvalidArgument(_))
    ));
    for job in running {
        job.ack().unwrap();
    }
}
