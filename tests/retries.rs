//! Retried requests judged by the server's truth (issue 26, items 1-3), against a real
//! `redis-server` behind the fault-injecting loopback [`Proxy`]:
//! - a grant found again by a retry is never believed longer than the server holds it;
//! - a request that was only delayed, and arrives after its retry was answered and the grant
//!   settled, takes nothing (no job, no lock, no permit for nobody);
//! - a delayed job (push delay, `nack_after`, `Retry::After`) is never taken before the
//!   caller's clock around the call says its delay has passed.

use std::time::{Duration, Instant};

use redlease::{Client, lock::LockBuilder, queue::Job, queue::Queue, queue::Retry};
use redlease_suite::testkit::{await_condition, server};
use redlease_suite::{Proxy, RedisServer};

/// The reply timeout of the proxied clients: a reply lost or a request held back longer
/// than this is retried.
const IO_TIMEOUT: Duration = Duration::from_millis(300);

/// How long a held-back request is held: well past the retry (which goes at once).
const HELD: Duration = Duration::from_millis(1500);

fn proxied(proxy: &Proxy) -> Client {
    Client::builder(proxy.url())
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(IO_TIMEOUT)
        .op_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn direct(server: &RedisServer) -> Client {
    redlease_suite::testkit::client(server, Duration::from_secs(2))
}

/// Warms the pool and the script cache of `q` (so that no `NOSCRIPT` round trip comes in
/// the way of a fault aimed at one request).
fn warm(q: &Queue) {
    q.push_unique("warm", "p").unwrap();
    let job = q.try_take().unwrap().unwrap();
    q.push_unique("warm-2", "p").unwrap();
    let next = job.ack_and_take();
    next.ack.unwrap();
    next.next.unwrap().fail("warm", Retry::Never).unwrap();
    assert_eq!(q.purge_dead().unwrap(), 1);
}

/// Waits (on the direct client) until the job whose lease `held` believes it holds is taken
/// by a second worker, which Redis allows only once the server's lease has ended; by then
/// the first worker must know it lost the job.
fn second_worker_finds_the_first_lost(server: &RedisServer, name: &str, held: &Job) {
    let other = direct(server)
        .queue(name)
        .unwrap()
        .visibility(Duration::from_secs(1));
    let start = Instant::now();
    let taken = other
        .take(Duration::from_secs(10))
        .unwrap()
        .expect("the job comes back");
    let seen = held.is_lost();
    assert_eq!(taken.id(), held.id());
    println!(
        "the second worker took the job after {:?}; the first one's is_lost(): {seen}",
        start.elapsed()
    );
    assert!(
        seen,
        "a second worker took the job while the first still believed it held it"
    );
    taken.ack().unwrap();
}

/// Item 1: a take whose first reply is lost is answered by its retry with the job already
/// leased to it. The worker counts the lease from the retry's send; the server's lease
/// must not end earlier (before the fix it ended up to a reply timeout earlier).
#[test]
fn a_take_retried_after_a_lost_reply_is_never_believed_past_the_servers_lease() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let name = "retried-take";
    let q = c.queue(name).unwrap().visibility(Duration::from_secs(1));
    warm(&q);
    q.push_unique("j", "p").unwrap();
    proxy.drop_next_reply();
    let job = q.try_take().unwrap().expect("the retry hands over the job");
    assert_eq!(proxy.dropped(), 1, "the first reply was lost");
    // No renewal gets through from now on: the lease ends when the server says so.
    proxy.blackhole(true);
    second_worker_finds_the_first_lost(&server, name, &job);
    proxy.blackhole(false);
}

/// Item 1, the same for the job handed over by `ack_and_take` after a lost reply.
#[test]
fn a_job_handed_over_by_a_retried_ack_and_take_is_never_believed_past_the_servers_lease() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let name = "retried-ack-take";
    let q = c.queue(name).unwrap().visibility(Duration::from_secs(1));
    warm(&q);
    q.push_unique("j1", "p").unwrap();
    q.push_unique("j2", "p").unwrap();
    let first = q.try_take().unwrap().unwrap();
    proxy.drop_next_reply();
    let out = first.ack_and_take();
    assert_eq!(proxy.dropped(), 1, "the first reply was lost");
    out.ack.unwrap();
    let next = out.next.expect("the retry hands over the next job");
    proxy.blackhole(true);
    second_worker_finds_the_first_lost(&server, name, &next);
    proxy.blackhole(false);
}

/// Holds back the next request on the proxy, runs `call` on a thread (its first attempt is
/// held back past the reply timeout; its retry goes through at once), and returns what it
/// returned; the held-back attempt is still on its way when this returns.
fn with_first_attempt_held<T: Send + 'static>(
    proxy: &Proxy,
    call: impl FnOnce() -> T + Send + 'static,
) -> T {
    proxy.delay_requests(HELD);
    let attempt = std::thread::spawn(call);
    await_condition(Duration::from_secs(5), || proxy.held() >= 1);
    proxy.delay_requests(Duration::ZERO);
    let out = attempt.join().unwrap();
    assert!(proxy.held() >= 1, "the first attempt is still held back");
    out
}

/// Item 2: a take held back past the reply timeout, whose retry was answered and the job
/// acked before the held-back take reaches Redis, leases nothing to its token (nobody holds
/// it): with max_deliveries(1) the next job was dead-lettered without any worker receiving
/// it before the fix.
#[test]
fn a_delayed_take_arriving_after_its_retry_was_acked_leases_nothing() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let name = "late-take";
    let q = c
        .queue(name)
        .unwrap()
        .visibility(Duration::from_millis(500))
        .max_deliveries(1);
    warm(&q);
    q.push_unique("j1", "p").unwrap();
    q.push_unique("j2", "p").unwrap();
    let taker = q.clone();
    let acked = with_first_attempt_held(&proxy, move || {
        let job = taker.try_take().unwrap().expect("the retry takes j1");
        let id = job.id().to_owned();
        job.ack().map(|()| id)
    });
    assert_eq!(acked.unwrap(), "j1");
    next_job_still_goes_to_a_worker(&server, &proxy, name);
}

/// The held-back request arrives; then the next job (`j2`) is still there for a worker,
/// delivered once, and nothing went to the dead list.
fn next_job_still_goes_to_a_worker(server: &RedisServer, proxy: &Proxy, name: &str) {
    await_condition(Duration::from_secs(5), || proxy.held() == 0);
    let other = direct(server).queue(name).unwrap().max_deliveries(1);
    // Had the late request leased j2 to nobody, it would come back only after the
    // visibility (500 ms), as dead: wait longer than that.
    let job = other.take(Duration::from_secs(2)).unwrap();
    let dead = other.dead_jobs(10).unwrap();
    assert!(
        dead.iter().all(|d| d.id != "j2"),
        "dead-lettered without a worker: {dead:?}"
    );
    let job = job.expect("the next job goes to a worker");
    assert_eq!((job.id(), job.delivery()), ("j2", 1));
    job.ack().unwrap();
}

/// Item 2, the same for `ack_and_take`: its first attempt held back, its retry acks j0 and
/// hands over j1, which is acked; the late attempt must not lease j2 to nobody.
#[test]
fn a_delayed_ack_and_take_arriving_after_its_retry_was_settled_leases_nothing() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let name = "late-ack-take";
    let q = c
        .queue(name)
        .unwrap()
        .visibility(Duration::from_millis(500))
        .max_deliveries(1);
    warm(&q);
    for id in ["j0", "j1", "j2"] {
        q.push_unique(id, "p").unwrap();
    }
    let first = q.try_take().unwrap().unwrap();
    assert_eq!(first.id(), "j0");
    let settled = with_first_attempt_held(&proxy, move || {
        let out = first.ack_and_take();
        let next = out.next.expect("the retry hands over j1");
        let id = next.id().to_owned();
        out.ack.and_then(|()| next.ack()).map(|()| id)
    });
    assert_eq!(settled.unwrap(), "j1");
    next_job_still_goes_to_a_worker(&server, &proxy, name);
}

/// Item 2, nacked instead of acked (the same record, by the nack).
#[test]
fn a_delayed_take_arriving_after_its_retry_was_nacked_leases_nothing() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let name = "late-take-nack";
    let q = c
        .queue(name)
        .unwrap()
        .visibility(Duration::from_millis(500))
        .max_deliveries(1);
    warm(&q);
    q.push_unique("j1", "p").unwrap();
    q.push_unique("j2", "p").unwrap();
    let taker = q.clone();
    let failed = with_first_attempt_held(&proxy, move || {
        let job = taker.try_take().unwrap().expect("the retry takes j1");
        job.fail("no", Retry::Never)
    });
    failed.unwrap();
    next_job_still_goes_to_a_worker(&server, &proxy, name);
    // j1 went to the dead list by its own nack, and only j1.
    let dead = direct(&server).queue(name).unwrap().dead_jobs(10).unwrap();
    let ids: Vec<&str> = dead.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["j1"]);
}

fn lock_builder<'c>(c: &'c Client, kind: &str, name: &str) -> LockBuilder<'c> {
    let b = match kind {
        "lease" => c.lock(name),
        "reentrant" => c.reentrant_lock(name),
        "fair" => c.fair_lock(name),
        "read" => c.read_lock(name),
        "write" => c.write_lock(name),
        other => panic!("no kind {other}"),
    };
    b.ttl(Duration::from_secs(30))
}

/// Item 2 for locks: an acquisition whose first attempt is held back past the reply
/// timeout, granted by its retry and released before the held-back attempt reaches Redis:
/// that attempt must not take the lock for nobody (before the fix it held it until its ttl).
#[test]
fn a_delayed_acquisition_arriving_after_its_retry_was_released_takes_nothing() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    let mut for_nobody = Vec::new();
    for kind in ["lease", "reentrant", "fair", "read", "write"] {
        // Warm the pool and the script cache.
        let warm = lock_builder(&c, kind, "warm")
            .try_acquire()
            .unwrap()
            .unwrap();
        warm.release().unwrap();
        let name = format!("late-{kind}");
        let (c2, n) = (c.clone(), name.clone());
        let released = with_first_attempt_held(&proxy, move || {
            let guard = lock_builder(&c2, kind, &n)
                .try_acquire()
                .unwrap()
                .expect("the retry is granted");
            guard.release()
        });
        released.unwrap();
        await_condition(Duration::from_secs(5), || proxy.held() == 0);
        // The late attempt has run: another client gets the lock (a writer, which any
        // reader excludes, for the read lock).
        let other = direct(&server);
        let probe = if kind == "read" { "write" } else { kind };
        match lock_builder(&other, probe, &name).try_acquire().unwrap() {
            Some(free) => free.release().unwrap(),
            None => for_nobody.push(kind),
        }
    }
    assert!(
        for_nobody.is_empty(),
        "the late attempt took the lock for nobody: {for_nobody:?}"
    );
}

/// Item 2 for semaphore permits: the same, a permit for nobody.
#[test]
fn a_delayed_permit_acquisition_arriving_after_its_retry_was_released_takes_nothing() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = proxied(&proxy);
    fn sem(c: &Client) -> LockBuilder<'_> {
        c.semaphore("late-permit", 1).ttl(Duration::from_secs(30))
    }
    sem(&c).try_acquire().unwrap().unwrap().release().unwrap();
    let c2 = c.clone();
    let released = with_first_attempt_held(&proxy, move || {
        sem(&c2)
            .try_acquire()
            .unwrap()
            .expect("the retry is granted")
            .release()
    });
    released.unwrap();
    await_condition(Duration::from_secs(5), || proxy.held() == 0);
    let other = direct(&server);
    let free = sem(&other).try_acquire().unwrap();
    assert!(
        free.is_some(),
        "the late attempt took the only permit for nobody"
    );
    free.unwrap().release().unwrap();
}

/// Spins `try_take` until a job comes; returns it and when its reply was received. A job
/// received before `not_before` was taken before it was due (the take ran before its reply
/// came back).
fn spin_take(q: &Queue) -> (Job, Instant) {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(job) = q.try_take().unwrap() {
            return (job, Instant::now());
        }
        assert!(Instant::now() < give_up, "the job never came");
    }
}

/// The delays tried: sub-millisecond, odd fractions, whole milliseconds.
const DELAYS_US: [u64; 6] = [999, 1_500, 1_001, 2_999, 250, 2_000];
const ROUNDS: usize = 120;

/// Item 3: many rounds of a push with a sub-millisecond or odd delay, measured by the
/// caller's clock from before the push was sent: the job is never taken before that instant
/// plus the delay (before the fix, delays were truncated to whole ms and the server's push
/// time floored, and a 999 µs delay was ignored).
#[test]
fn a_delayed_push_is_never_taken_before_its_delay_has_passed() {
    let server = server();
    let q = direct(&server).queue("never-early").unwrap();
    warm(&q);
    let mut early = Vec::new();
    for round in 0..ROUNDS {
        let delay = Duration::from_micros(DELAYS_US[round % DELAYS_US.len()]);
        let start = Instant::now();
        q.push_with(
            format!("r{round}"),
            redlease::queue::PushOptions::new().delay(delay),
        )
        .unwrap();
        let (job, at) = spin_take(&q);
        if at < start + delay {
            early.push((delay, start + delay - at));
        }
        job.ack().unwrap();
    }
    assert!(
        early.is_empty(),
        "taken early (delay, by how much): {early:?}"
    );
}

/// Item 3 for retries: `nack_after` and `Retry::After` with such delays, measured from
/// before the nack was sent.
#[test]
fn a_nacked_job_is_never_taken_before_its_backoff_has_passed() {
    let server = server();
    let q = direct(&server)
        .queue("never-early-nack")
        .unwrap()
        .max_deliveries(1000);
    warm(&q);
    q.push_unique("j", "p").unwrap();
    let (mut job, _) = spin_take(&q);
    let mut early = Vec::new();
    for round in 0..ROUNDS {
        let delay = Duration::from_micros(DELAYS_US[round % DELAYS_US.len()]);
        let start = Instant::now();
        if round % 2 == 0 {
            job.nack_after(delay).unwrap();
        } else {
            job.fail("again", Retry::After(delay)).unwrap();
        }
        let (next, at) = spin_take(&q);
        if at < start + delay {
            early.push((delay, start + delay - at));
        }
        job = next;
    }
    job.ack().unwrap();
    assert!(
        early.is_empty(),
        "taken early (delay, by how much): {early:?}"
    );
}
