//! Waits on the in-process server (feature `memory`) jump to the next instant anything can
//! change, whatever the poll settings; and `MemoryClock::run_until` pumps the clock for
//! tests with several threads. The costs asserted are counts of commands the server ran,
//! not real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redlease::Error;
use redlease::memory::{Loss, MemoryServer, RunError};
use redlease_suite::testkit::await_condition;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// Counts the commands `server` runs from now on (a loss rule that never strikes, but is
/// asked about every command).
fn count_commands(server: &MemoryServer) -> Arc<AtomicU64> {
    let n = Arc::new(AtomicU64::new(0));
    let seen = n.clone();
    server.lose_next_reply_if(Loss::BeforeRun, move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        false
    });
    n
}

#[test]
fn a_take_of_a_job_due_in_two_hours_at_a_10_ms_idle_check_costs_a_handful_of_commands() {
    let server = MemoryServer::new();
    let q = server.client().queue("later").unwrap().idle_check(10 * MS);
    q.push_with(
        "in two hours",
        redlease::queue::PushOptions::new().delay(7200 * S),
    )
    .unwrap();
    let commands = count_commands(&server);
    let job = q.take(3 * 3600 * S).unwrap().expect("due within the wait");
    assert_eq!(job.payload(), b"in two hours");
    let elapsed = server.clock().elapsed();
    assert!(
        elapsed >= 7200 * S && elapsed < 7201 * S,
        "taken at {elapsed:?}"
    );
    // Polling every 10 ms was 720,000 takes.
    let n = commands.load(Ordering::SeqCst);
    assert!(n <= 10, "{n} commands for one take");
    job.ack().unwrap();
}

#[test]
fn a_take_on_an_empty_queue_waits_out_its_deadline_in_a_handful_of_commands() {
    let server = MemoryServer::new();
    let q = server.client().queue("empty").unwrap().idle_check(10 * MS);
    let commands = count_commands(&server);
    assert!(q.take(600 * S).unwrap().is_none());
    assert_eq!(server.clock().elapsed(), 600 * S);
    let n = commands.load(Ordering::SeqCst);
    assert!(n <= 10, "{n} commands for one empty take");
}

#[test]
fn a_600_s_lock_wait_at_10_ms_retries_retries_once_per_renewal_not_per_poll() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let held = a.lock("busy").ttl(30 * S).acquire().unwrap();
    let err = b
        .lock("busy")
        .retry(10 * MS, 10 * MS)
        .wait(600 * S)
        .acquire()
        .map(|_| ())
        .unwrap_err();
    let Error::Timeout { attempts, .. } = err else {
        panic!("not a timeout: {err}");
    };
    // The holder's watchdog renews every 10 s; the waiter tries again when the ttl it was
    // told runs out (20 s later): about 30 attempts, not 60,000.
    assert!(attempts <= 70, "{attempts} attempts");
    assert!(!held.is_lost());
    assert_eq!(server.clock().elapsed(), 600 * S);
}

#[test]
fn a_waiter_takes_a_lock_freed_without_a_message_at_its_next_poll() {
    // An eviction changes the data without a release message: the waiter, asleep until
    // the holder's ttl (60 s), goes back to its poll (every 1 s), as on Redis.
    let server = MemoryServer::new();
    server.clock().set_auto_advance(false);
    let (a, b) = (server.client(), server.client());
    let _held = a.lock("l").ttl(60 * S).watchdog(false).acquire().unwrap();
    let waiter = std::thread::spawn(move || b.lock("l").retry(S, S).wait(120 * S).acquire());
    let clock = server.clock();
    // It asked once, subscribed, asked again, and sleeps.
    await_condition(30 * S, || clock.sleepers() == 1);
    assert!(server.evict("redlease:{l}:lock"));
    clock.run_until(120 * S, || waiter.is_finished()).unwrap();
    let elapsed = clock.elapsed();
    drop(waiter.join().unwrap().unwrap());
    assert!(elapsed <= 2 * S, "woken after {elapsed:?}");
}

#[test]
fn a_waiter_whose_release_message_was_dropped_goes_on_polling() {
    let server = MemoryServer::new();
    server.clock().set_auto_advance(false);
    let (a, b) = (server.client(), server.client());
    let held = a.lock("l").ttl(60 * S).watchdog(false).acquire().unwrap();
    let waiter = std::thread::spawn(move || b.lock("l").retry(S, S).wait(120 * S).acquire());
    let clock = server.clock();
    await_condition(30 * S, || clock.sleepers() == 1);
    server.drop_next_messages(1);
    held.release().unwrap();
    assert_eq!(server.dropped_messages(), 1);
    clock.run_until(120 * S, || waiter.is_finished()).unwrap();
    let elapsed = clock.elapsed();
    drop(waiter.join().unwrap().unwrap());
    assert!(elapsed <= 2 * S, "woken after {elapsed:?}, not at its poll");
}

#[test]
fn run_until_moves_the_clock_to_each_wake_up_until_the_workers_are_done() {
    let server = MemoryServer::new();
    let clock = server.clock();
    let q = server.client().queue("mail").unwrap().idle_check(10 * MS);
    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let workers = q
        .work(2, move |_job| -> Result<(), String> {
            d.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    q.push_with(
        "in an hour",
        redlease::queue::PushOptions::new().delay(3600 * S),
    )
    .unwrap();
    q.push_with(
        "in two hours",
        redlease::queue::PushOptions::new().delay(7200 * S),
    )
    .unwrap();
    let commands = count_commands(&server);
    // Both workers make calls: the clock moves only while both wait on it, so it never
    // jumps past one in the middle of a take (plain `run_until` may: its documented limit).
    let moved = clock
        .run_until_waiting(2, 3 * 3600 * S, || done.load(Ordering::SeqCst) == 2)
        .unwrap();
    assert!(moved >= 7200 * S && moved < 7201 * S, "moved {moved:?}");
    let n = commands.load(Ordering::SeqCst);
    assert!(n <= 60, "{n} commands for two delayed jobs and two workers");
    assert_eq!(workers.stop().acked, 2);
}

#[test]
fn run_until_stops_at_its_limit_and_when_nothing_waits() {
    let server = MemoryServer::new();
    let clock = server.clock();
    let q = server.client().queue("never").unwrap();
    let workers = q.work(1, |_job| -> Result<(), String> { Ok(()) }).unwrap();
    let err = clock.run_until(60 * S, || false).unwrap_err();
    assert_eq!(err, RunError::TimeLimit { limit: 60 * S });
    assert_eq!(clock.elapsed(), 60 * S);
    workers.stop();
}
