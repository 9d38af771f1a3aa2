//! One test body, two backends: the same calls on a real redis-server and on the in-process
//! server (feature `memory`) must give the same observable outcomes. Nothing here depends on
//! time passing (that is tests/memory_*.rs's subject, on the test clock).

use std::time::Duration;

use redlease::memory::MemoryServer;
use redlease::{Client, Error, queue::Pushed, queue::Retry};
use redlease_suite::testkit;

/// What the body saw, compared between the backends.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    fences_increase: bool,
    busy_for_others: bool,
    handed_back: &'static str,
    reentrant_holds: u32,
    permits_granted: usize,
    queue_order: Vec<Vec<u8>>,
    duplicate: bool,
    dead: Vec<(Vec<u8>, Option<String>)>,
    requeued: bool,
    /// An unfenced lock's fence, whether a fenced and an unfenced try of another client found
    /// it busy, and whether it was free again after the release.
    unfenced: (u64, bool, bool, bool),
}

fn body(a: &Client, b: &Client) -> Seen {
    let g1 = a.lock("l").watchdog(false).acquire().unwrap();
    let busy_for_others = b.lock("l").try_acquire().unwrap().is_none();
    let f1 = g1.fence();
    g1.release().unwrap();
    let g2 = b.lock("l").watchdog(false).acquire().unwrap();
    let fences_increase = g2.fence() > f1;
    // Released by b, taken by a: busy for b again; a's release frees it.
    g2.release().unwrap();
    let g3 = a.lock("l").watchdog(false).acquire().unwrap();
    let handed_back = match b.lock("l").try_acquire() {
        Ok(None) => "busy",
        Ok(Some(_)) => "free",
        Err(_) => "error",
    };
    g3.release().unwrap();

    let u = a
        .lock("u")
        .fenced(false)
        .watchdog(false)
        .try_acquire()
        .unwrap()
        .unwrap();
    let unfenced = (
        u.fence(),
        b.lock("u").try_acquire().unwrap().is_none(),
        b.lock("u").fenced(false).try_acquire().unwrap().is_none(),
        {
            u.release().unwrap();
            b.lock("u").fenced(false).try_acquire().unwrap().is_some()
        },
    );

    let r1 = a.reentrant_lock("r").watchdog(false).acquire().unwrap();
    let r2 = a.reentrant_lock("r").watchdog(false).acquire().unwrap();
    let mut reentrant_holds = 2;
    r2.release().unwrap();
    reentrant_holds -= 1;
    let other_blocked = b.reentrant_lock("r").try_acquire().unwrap().is_none();
    r1.release().unwrap();
    reentrant_holds -= u32::from(other_blocked);

    let permits: Vec<_> = (0..4)
        .filter_map(|_| a.semaphore("s", 3).watchdog(false).try_acquire().unwrap())
        .collect();
    let permits_granted = permits.len();
    drop(permits);

    let q = a.queue("q").unwrap().max_deliveries(1);
    q.push("first").unwrap();
    q.push_with("urgent", redlease::queue::PushOptions::new().priority(5))
        .unwrap();
    let duplicate = matches!(q.push_unique("u", "x").unwrap(), Pushed::Queued(_))
        && matches!(q.push_unique("u", "y").unwrap(), Pushed::Duplicate(_));
    let mut queue_order = Vec::new();
    while let Some(job) = q.try_take().unwrap() {
        queue_order.push(job.payload().to_vec());
        if job.payload() == b"x" {
            job.fail("no", Retry::Never).unwrap();
        } else {
            job.ack().unwrap();
        }
    }
    let dead = q
        .dead_jobs(10)
        .unwrap()
        .into_iter()
        .map(|d| (d.payload, d.reason))
        .collect();
    let requeued = q.requeue_dead("u").unwrap();
    assert!(matches!(
        q.push_with(
            "x",
            redlease::queue::PushOptions::new().delay(Duration::MAX)
        ),
        Err(Error::InvalidArgument(_))
    ));
    Seen {
        fences_increase,
        busy_for_others,
        handed_back,
        reentrant_holds,
        permits_granted,
        queue_order,
        duplicate,
        dead,
        requeued,
        unfenced,
    }
}

fn expected() -> Seen {
    Seen {
        fences_increase: true,
        busy_for_others: true,
        handed_back: "busy",
        reentrant_holds: 0,
        permits_granted: 3,
        queue_order: vec![b"urgent".to_vec(), b"first".to_vec(), b"x".to_vec()],
        duplicate: true,
        dead: vec![(b"x".to_vec(), Some("no".to_owned()))],
        requeued: true,
        unfenced: (0, true, true, true),
    }
}

#[test]
fn the_same_calls_give_the_same_outcomes_on_redis_and_in_process() {
    let server = testkit::server();
    let io = Duration::from_secs(2);
    let on_redis = body(&testkit::client(&server, io), &testkit::client(&server, io));
    let memory = MemoryServer::new();
    let in_process = body(&memory.client(), &memory.client());
    assert_eq!(on_redis, expected());
    assert_eq!(in_process, on_redis);
}
