//! The dead list against real redis-server processes: every death recorded with its time
//! (the server's clock) and cause, retention by count and age applied by the scripts that
//! add to the list (leaving nothing of a trimmed job behind), and bulk requeue and delete
//! with a filter and a limit, paged.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redlease::{
    Client, Error, queue::OnTimeout, queue::Pushed, queue::dead::DeadFilter,
    queue::dead::DeadRetention, queue::dead::DeathCause,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, await_condition, connection as raw, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

/// The server's clock (`TIME`).
fn server_time(conn: &mut redis::Connection) -> SystemTime {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    UNIX_EPOCH + Duration::from_secs(s) + Duration::from_micros(us)
}

/// Whole ms, as the scripts record them.
fn floor_ms(t: SystemTime) -> SystemTime {
    let ms = t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Every field of the queue's hashes that names `id` (its payload, enqueue time, death
/// record, priority, deliveries, base, reason), and its dedup entry.
fn traces(conn: &mut redis::Connection, queue: &str, id: &str) -> Vec<String> {
    let stem = format!("redlease:{{{queue}}}:q:");
    let mut found = Vec::new();
    for part in [
        "payloads",
        "priorities",
        "deliveries",
        "bases",
        "reasons",
        "dedup_of",
    ] {
        let fields: Vec<Vec<u8>> = conn.hkeys(format!("{stem}{part}")).unwrap();
        for f in fields {
            if f.starts_with(id.as_bytes())
                && (f.len() == id.len() || f.len() == id.len() + 1 && f[id.len()] >= 0xfe)
            {
                found.push(format!("{part}[{}]", String::from_utf8_lossy(&f)));
            }
        }
    }
    found
}

#[test]
fn every_death_is_recorded_with_its_time_and_cause() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let q = c
        .queue("causes")
        .unwrap()
        .max_deliveries(1)
        .visibility(Duration::from_millis(200));
    // failed: the handler's error.
    q.push_unique("failed", "a").unwrap();
    let before = floor_ms(server_time(&mut conn));
    q.try_take()
        .unwrap()
        .unwrap()
        .fail("db down", redlease::queue::Retry::Backoff)
        .unwrap();
    let after = server_time(&mut conn);
    // expired: its lease ran out on its last delivery (a worker that died).
    q.push_unique("expired", "b").unwrap();
    q.try_take().unwrap().unwrap().abandon();
    await_condition(Duration::from_secs(10), || {
        q.try_take().unwrap().is_none() && q.stats().unwrap().dead == 2
    });
    // timed_out, twice: the handler gave up, and a handler that ignored its timeout until its
    // lease ended at the hold limit (timeout + grace).
    let timed = c
        .queue("causes")
        .unwrap()
        .max_deliveries(1)
        .timeout(Duration::from_millis(50))
        .timeout_grace(Duration::from_millis(50))
        .on_timeout(OnTimeout::Dead);
    timed.push_unique("gave-up", "c").unwrap();
    let job = timed.try_take().unwrap().unwrap();
    await_condition(Duration::from_secs(10), || job.is_cancelled());
    job.timed_out().unwrap();
    timed.push_unique("ignored", "d").unwrap();
    timed.try_take().unwrap().unwrap().abandon();
    await_condition(Duration::from_secs(10), || {
        timed.try_take().unwrap().is_none() && q.stats().unwrap().dead == 4
    });
    // cancelled.
    q.push_unique("cancelled", "e").unwrap();
    assert_eq!(
        q.cancel("cancelled", "no longer wanted").unwrap(),
        redlease::queue::Cancelled::Waiting
    );

    let dead = q.dead_jobs(10).unwrap();
    let seen: Vec<(&str, Option<DeathCause>, Option<&str>)> = dead
        .iter()
        .map(|d| (d.id.as_str(), d.cause, d.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("failed", Some(DeathCause::Failed), Some("db down")),
            ("expired", Some(DeathCause::LeaseExpired), None),
            ("gave-up", Some(DeathCause::TimedOut), Some("timed out")),
            ("ignored", Some(DeathCause::TimedOut), None),
            (
                "cancelled",
                Some(DeathCause::Cancelled),
                Some("cancelled: no longer wanted")
            ),
        ]
    );
    // Times on the server's clock, in order of death.
    let first = dead[0].died_at.unwrap();
    assert!(
        first >= before && first <= after,
        "{first:?} in [{before:?}, {after:?}]"
    );
    let times: Vec<SystemTime> = dead.iter().map(|d| d.died_at.unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // A look-up by id says when too.
    let info = q.job("expired").unwrap().unwrap();
    assert_eq!(info.died_at, dead[1].died_at);
    // A requeue forgets the death; the job's next death is recorded afresh.
    assert!(q.requeue_dead("failed").unwrap());
    assert!(
        !traces(&mut conn, "causes", "failed")
            .iter()
            .any(|t| t.contains("reasons"))
    );
    let job = q.try_take().unwrap().unwrap();
    assert_eq!(job.id(), "failed");
    job.fail("", redlease::queue::Retry::Never).unwrap();
    let again = q.dead_jobs(10).unwrap().pop().unwrap();
    assert_eq!(
        (again.id.as_str(), again.cause, again.reason),
        ("failed", Some(DeathCause::Failed), None)
    );
    assert!(again.died_at.unwrap() >= times[4]);
}

#[test]
fn retention_is_applied_by_the_scripts_that_add_to_the_dead_list() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let q = c
        .queue("keep")
        .unwrap()
        .max_deliveries(1)
        .visibility(Duration::from_millis(100));
    assert_eq!(q.dead_retention().unwrap(), DeadRetention::DEFAULT);
    let three = DeadRetention {
        max_jobs: Some(3),
        max_age: None,
    };
    assert_eq!(q.set_dead_retention(three).unwrap(), 0);
    assert_eq!(q.dead_retention().unwrap(), three);
    // Five deaths by cancel: the two oldest go, with every trace of them (a dedup entry too).
    for i in 0..5 {
        let id = format!("c{i}");
        if i == 0 {
            let mode = redlease::queue::dedup::Dedup::UntilDone { dead_blocks: true };
            let pushed = q.push_dedup("d0", "p", mode).unwrap();
            assert!(
                matches!(pushed, redlease::queue::dedup::DedupOutcome::Queued(_)),
                "{pushed:?}"
            );
            let job = q.try_take().unwrap().unwrap();
            let dedup_id = job.id().to_owned();
            job.fail("x", redlease::queue::Retry::Never).unwrap();
            assert_eq!(q.dead_jobs(1).unwrap()[0].id, dedup_id);
            continue;
        }
        q.push_unique(&id, "p").unwrap();
        q.cancel(&id, "x").unwrap();
    }
    let ids: Vec<String> = q.dead_jobs(10).unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(ids, ["c2", "c3", "c4"]);
    assert_eq!(traces(&mut conn, "keep", "c1"), Vec::<String>::new());
    let dedup: usize = conn.hlen("redlease:{keep}:q:dedup").unwrap();
    assert_eq!(dedup, 0, "the trimmed job's dedup entry went with it");
    // A nack and an expired lease apply it too.
    q.push_unique("n", "p").unwrap();
    q.try_take().unwrap().unwrap().nack().unwrap();
    q.push_unique("e", "p").unwrap();
    q.try_take().unwrap().unwrap().abandon();
    await_condition(Duration::from_secs(10), || {
        q.try_take().unwrap().is_none() && q.dead_jobs(10).unwrap().iter().any(|d| d.id == "e")
    });
    let ids: Vec<String> = q.dead_jobs(10).unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(ids, ["c4", "n", "e"]);
    // Lowering it applies it at once.
    let one = DeadRetention {
        max_jobs: Some(1),
        max_age: None,
    };
    assert_eq!(q.set_dead_retention(one).unwrap(), 2);
    assert_eq!(q.stats().unwrap().dead, 1);

    // By age, on the server's clock: a job dead for longer than 1 s goes at the next death.
    let age = DeadRetention {
        max_jobs: None,
        max_age: Some(Duration::from_secs(1)),
    };
    q.set_dead_retention(age).unwrap();
    q.purge_dead().unwrap();
    q.push_unique("old", "p").unwrap();
    q.cancel("old", "x").unwrap();
    let died = q.dead_jobs(1).unwrap()[0].died_at.unwrap();
    q.push_unique("young", "p").unwrap();
    q.cancel("young", "x").unwrap();
    assert_eq!(q.stats().unwrap().dead, 2, "not old enough yet");
    await_condition(Duration::from_secs(10), || {
        server_time(&mut conn) >= died + Duration::from_millis(1001)
    });
    q.push_unique("third", "p").unwrap();
    q.cancel("third", "x").unwrap();
    let ids: Vec<String> = q.dead_jobs(10).unwrap().into_iter().map(|d| d.id).collect();
    assert!(!ids.contains(&"old".to_owned()), "{ids:?}");
    assert!(ids.contains(&"third".to_owned()));
    assert_eq!(traces(&mut conn, "keep", "old"), Vec::<String>::new());

    // A job that died before deaths were recorded: the age stops at it, the count does not.
    q.purge_dead().unwrap();
    let _: () = conn.rpush("redlease:{keep}:q:dead", "legacy").unwrap();
    let _: () = conn
        .hset("redlease:{keep}:q:payloads", "legacy", "p")
        .unwrap();
    q.push_unique("after", "p").unwrap();
    q.cancel("after", "x").unwrap();
    assert_eq!(q.stats().unwrap().dead, 2);
    let legacy = &q.dead_jobs(1).unwrap()[0];
    assert_eq!(
        (legacy.id.as_str(), legacy.died_at, legacy.cause),
        ("legacy", None, None)
    );
    q.set_dead_retention(one).unwrap();
    assert_eq!(q.dead_jobs(10).unwrap()[0].id, "after");
    assert_eq!(traces(&mut conn, "keep", "legacy"), Vec::<String>::new());

    // Back to the defaults: the setting's key is gone.
    q.set_dead_retention(DeadRetention::DEFAULT).unwrap();
    let exists: bool = conn.exists("redlease:{keep}:q:dead_keep").unwrap();
    assert!(!exists);
    // Bad input.
    for bad in [
        DeadRetention {
            max_jobs: Some(0),
            max_age: None,
        },
        DeadRetention {
            max_jobs: None,
            max_age: Some(Duration::ZERO),
        },
    ] {
        assert!(matches!(
            q.set_dead_retention(bad),
            Err(Error::InvalidArgument(_))
        ));
    }
    // Unlimited keeps everything.
    q.set_dead_retention(DeadRetention::UNLIMITED).unwrap();
    assert_eq!(q.dead_retention().unwrap(), DeadRetention::UNLIMITED);
}

#[test]
fn bulk_actions_pick_by_cause_reason_and_time_page_by_page_with_a_limit() {
    let server = server();
    let c = client(&server);
    let mut conn = raw(&server);
    let q = c.queue("bulk").unwrap().max_deliveries(1);
    // 2,500 dead jobs (three pages): every tenth failed with "db down", the rest cancelled.
    let ids = q.push_many((0..2500).map(|i| format!("p{i}"))).unwrap();
    for (i, id) in ids.iter().enumerate() {
        if i % 10 == 0 {
            // The ready set is FIFO: this take is job i.
            let job = q.try_take().unwrap().unwrap();
            assert_eq!(job.id(), id);
            job.fail(&format!("db down #{i}"), redlease::queue::Retry::Never)
                .unwrap();
        } else {
            assert_eq!(
                q.cancel(id, "bulk").unwrap(),
                redlease::queue::Cancelled::Waiting
            );
        }
    }
    assert_eq!(q.stats().unwrap().dead, 2500);
    let middle = q.dead_jobs(1300).unwrap()[1299].died_at.unwrap();

    // Requeue four of the failed ones: the oldest four, once each.
    let failed = DeadFilter::new()
        .cause(DeathCause::Failed)
        .reason_contains("db down");
    let requeued: Vec<String> = q
        .requeue_dead_where(&failed, 4)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        requeued,
        [
            ids[0].clone(),
            ids[10].clone(),
            ids[20].clone(),
            ids[30].clone()
        ]
    );
    assert_eq!(q.stats().unwrap().ready, 4);
    let job = q.try_take().unwrap().unwrap();
    assert_eq!((job.id(), job.attempt()), (ids[0].as_str(), 1));
    job.ack().unwrap();

    // Delete every remaining failed one: 246, across three pages, each once.
    let deleted = q.delete_dead_where(&failed, usize::MAX).unwrap();
    assert_eq!(deleted.len(), 246);
    assert_eq!(deleted.iter().collect::<HashSet<_>>().len(), 246);
    assert!(
        deleted
            .iter()
            .all(|r| r.group.is_none() && traces(&mut conn, "bulk", &r.id).is_empty())
    );
    assert_eq!(q.stats().unwrap().dead, 2250);

    // By time: the cancelled ones that died at or before the 1,300th death.
    let early = DeadFilter::new()
        .cause(DeathCause::Cancelled)
        .died_before(middle);
    let n = q.delete_dead_where(&early, usize::MAX).unwrap().len();
    let left = q.dead_jobs(3000).unwrap();
    assert_eq!(left.len(), 2250 - n);
    assert!(left.iter().all(|d| d.died_at.unwrap() >= middle));
    assert!(
        n >= 1170,
        "at least the cancelled ones among the first 1,300: {n}"
    );
    // A filter that picks nothing looks at everything and acts on nothing.
    let none = DeadFilter::new().reason_contains("no such text");
    assert!(q.requeue_dead_where(&none, 10).unwrap().is_empty());
    assert!(
        q.requeue_dead_where(&DeadFilter::new(), 0)
            .unwrap()
            .is_empty()
    );
    // The rest, requeued: all of them, ready now.
    let all = q
        .requeue_dead_where(&DeadFilter::new(), usize::MAX)
        .unwrap();
    assert_eq!(all.len(), 2250 - n);
    assert_eq!(q.stats().unwrap().ready as usize, all.len() + 3);
    let reasons: usize = conn.hlen("redlease:{bulk}:q:reasons").unwrap();
    assert_eq!(reasons, 0);
}

#[test]
fn a_duplicate_of_a_dead_job_stays_refused_until_it_is_deleted() {
    let server = server();
    let c = client(&server);
    let q = c.queue("dup").unwrap();
    q.push_unique("x", "p").unwrap();
    q.cancel("x", "gone").unwrap();
    assert_eq!(
        q.push_unique("x", "p").unwrap(),
        Pushed::Duplicate("x".into())
    );
    let deleted = q
        .delete_dead_where(&DeadFilter::new().cause(DeathCause::Cancelled), 10)
        .unwrap();
    assert_eq!(deleted, [redlease::queue::JobRef::plain("x")]);
    assert_eq!(q.push_unique("x", "p").unwrap(), Pushed::Queued("x".into()));
}
