//! Crashing a client of the in-process server (feature `memory`): `MemoryServer::crash_client`
//! stops everything the client sends, so its leases run out on the server and its stale
//! handles are refused; dropping a `Client` is not a crash (its handles keep it working).

use std::time::Duration;

use redlease::Error;
use redlease::memory::MemoryServer;

const S: Duration = Duration::from_secs(1);

#[test]
fn a_crashed_workers_job_is_redelivered_and_its_ack_refused() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let queue = a.queue("mail").unwrap().visibility(60 * S);
    queue.push("hello").unwrap();
    let job = queue.try_take().unwrap().expect("pushed");
    assert!(server.crash_client(&a));
    // Nothing renews the job any more: after its visibility it goes to another worker.
    server.clock().advance(61 * S);
    let other = b.queue("mail").unwrap();
    let again = other
        .try_take()
        .unwrap()
        .expect("redelivered after the crash");
    assert_eq!((again.payload(), again.delivery()), (&b"hello"[..], 2));
    // Refused: its lease is known lost (nothing renewed it), or the client sends nothing.
    let refused = job.ack().unwrap_err();
    assert!(
        matches!(refused, Error::Unavailable { .. } | Error::NotOwner { .. }),
        "{refused}"
    );
    assert!(matches!(queue.push("more"), Err(Error::Unavailable { .. })));
    again.ack().unwrap();
    assert!(other.try_take().unwrap().is_none());
}

#[test]
fn a_crashed_holders_lock_frees_at_its_ttl_and_its_release_is_refused() {
    let server = MemoryServer::new();
    let (a, b) = (server.client(), server.client());
    let guard = a.lock("l").ttl(30 * S).acquire().unwrap();
    assert!(server.crash_client(&a));
    assert!(b.lock("l").try_acquire().unwrap().is_none());
    server.clock().advance(31 * S);
    let next = b
        .lock("l")
        .try_acquire()
        .unwrap()
        .expect("freed at its ttl");
    assert!(next.fence() > guard.fence());
    assert!(matches!(guard.release(), Err(Error::Unavailable { .. })));
    assert!(!next.is_lost());
}

#[test]
fn a_client_of_another_server_is_not_crashed() {
    let (one, two) = (MemoryServer::new(), MemoryServer::new());
    let client = two.client();
    assert!(!one.crash_client(&client));
    assert!(client.lock("l").try_acquire().unwrap().is_some());
}

#[test]
fn dropping_a_client_is_not_a_crash_its_queue_and_job_keep_it_working() {
    let server = MemoryServer::new();
    let a = server.client();
    let queue = a.queue("mail").unwrap().visibility(60 * S);
    drop(a);
    queue.push("hello").unwrap();
    let job = queue.try_take().unwrap().expect("pushed");
    // The job's lease is renewed while the job lives: no one else gets it.
    server.clock().advance(600 * S);
    let other = server.client().queue("mail").unwrap();
    assert!(other.try_take().unwrap().is_none());
    job.ack().unwrap();
}
