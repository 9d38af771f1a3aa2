//! Who holds my lock, and for how long (issue 30, redisson#2116), against real redis-server:
//! the registry of live clients, `lock_info` for every kind, listing with `SCAN`, and the
//! forced release that frees only the holder the operator saw.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redlease::core::inspect::SHOWN_PREFIX;
use redlease::memory::MemoryServer;
use redlease::{
    Client, Error, InvalidArgument, LossReason, inspect::ClientInfo, inspect::Primitive,
    lock::LeaseKind, lock::LockKind,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{Monitor, await_condition, server};

const S: Duration = Duration::from_secs(1);

fn client(server: &RedisServer) -> Client {
    Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(500))
        .op_timeout(S)
        .build()
        .unwrap()
}

fn labelled(server: &RedisServer, label: &str, heartbeat: Duration) -> Client {
    Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(500))
        .op_timeout(S)
        .label(label)
        .registry_heartbeat(heartbeat)
        .build()
        .unwrap()
}

fn entry(of: &Client, id: &str) -> Option<ClientInfo> {
    of.clients().unwrap().into_iter().find(|c| c.id == id)
}

#[test]
fn a_labelled_client_is_seen_by_others_and_leaves_when_dropped() {
    let server = server();
    let operator = client(&server);
    assert!(operator.clients().unwrap().is_empty(), "off by default");
    let app = labelled(&server, "billing-worker", Duration::from_millis(100));
    let id = app.client_id().to_owned();
    assert_eq!(id.len(), 8);
    // The first heartbeat goes out when the client is built.
    await_condition(5 * S, || entry(&operator, &id).is_some());
    let seen = entry(&operator, &id).unwrap();
    assert_eq!(seen.record.label, "billing-worker");
    assert_eq!(seen.record.pid, std::process::id());
    assert_eq!(seen.record.version, env!("CARGO_PKG_VERSION"));
    assert!(seen.expires_in <= Duration::from_millis(300), "{seen:?}");
    // A held lease is counted at the next heartbeat.
    let guard = app.lock("report").ttl(30 * S).acquire().unwrap();
    await_condition(5 * S, || {
        entry(&operator, &id).is_some_and(|c| c.record.leases == 1)
    });
    guard.release().unwrap();
    // Heartbeats keep coming: past one entry's life (300 ms), a recent one is seen (awaited,
    // as a busy machine may delay a heartbeat; the entry would not come back without one).
    thread::sleep(Duration::from_millis(350));
    await_condition(5 * S, || {
        entry(&operator, &id).is_some_and(|c| c.since_heartbeat < Duration::from_millis(300))
    });
    drop(app);
    assert!(
        entry(&operator, &id).is_none(),
        "a dropped client leaves at once"
    );
}

/// The tick's cost: one heartbeat script per interval, nothing else (a held lease's renewals
/// aside); a client without the registry sends nothing at all while idle.
#[test]
fn the_tick_costs_one_script_per_interval_and_nothing_when_off() {
    let server = server();
    let mut monitor = Monitor::start(&server);
    let off = client(&server);
    off.lock("warm").acquire().unwrap().release().unwrap();
    let _ = monitor.commands_during(Duration::from_millis(200));
    assert_eq!(
        monitor.commands_during(Duration::from_millis(500)),
        Vec::<String>::new()
    );
    drop(off);
    let beat = redlease::core::inspect::registry::BEAT.sha1;
    let on = labelled(&server, "ticking", Duration::from_millis(100));
    monitor.await_command(beat, 5 * S);
    let window = Duration::from_millis(1000);
    let sent = monitor.commands_during(window);
    // (The first may be resent as EVAL after a NOSCRIPT: both name the registry's keys.)
    let beats = sent
        .iter()
        .filter(|c| c.contains("{clients}:heartbeats"))
        .count();
    println!("{beats} heartbeats in {window:?} at 100 ms");
    assert_eq!(beats, sent.len(), "only heartbeats: {sent:?}");
    // 10 due; a loaded machine may send a few late, never more than one per interval.
    assert!((5..=11).contains(&beats), "{beats}");
    drop(on);
}

#[test]
fn a_bad_label_or_heartbeat_is_refused_at_build() {
    let server = server();
    let built = |b: redlease::ClientBuilder| b.build().map(|_| ());
    assert!(built(Client::builder(server.url()).label("two\nlines")).is_err());
    assert!(built(Client::builder(server.url()).label(&"x".repeat(129))).is_err());
    assert!(
        built(
            Client::builder(server.url())
                .registry(true)
                .registry_heartbeat(Duration::ZERO)
        )
        .is_err()
    );
}

/// The child side of the SIGKILL test: holds a labelled client and a lock until killed.
/// Does nothing when run as a test of its own.
#[test]
fn child_holding_a_lock_until_killed() {
    let Ok(url) = std::env::var("REDLEASE_CHILD_URL") else {
        return;
    };
    let client = Client::builder(url.as_str())
        .label("doomed")
        .registry_heartbeat(Duration::from_millis(200))
        .build()
        .unwrap();
    let _guard = client.lock("stuck").ttl(30 * S).acquire().unwrap();
    println!("READY {}", client.client_id());
    thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_killed_clients_entry_expires_after_three_heartbeats() {
    let server = server();
    let operator = client(&server);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holding_a_lock_until_killed",
            "--nocapture",
        ])
        .env("REDLEASE_CHILD_URL", server.url())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut id = None;
    await_condition(20 * S, || {
        id = operator
            .clients()
            .unwrap()
            .into_iter()
            .find(|c| c.record.label == "doomed")
            .map(|c| c.id);
        id.is_some()
    });
    let id = id.unwrap();
    await_condition(10 * S, || {
        !operator.lock_info("stuck").unwrap().kinds.is_empty()
    });
    let info = operator.lock_info("stuck").unwrap();
    let holder = info.holders().next().unwrap();
    assert_eq!(
        holder.client.as_ref().map(|c| c.id.as_str()),
        Some(id.as_str())
    );
    assert_eq!(holder.client.as_ref().unwrap().record.pid, child.id());
    // The entry's expiry as last seen before the kill: 3 heartbeats (600 ms) after the last
    // heartbeat; a later heartbeat before the kill only moves it later.
    let seen_at = Instant::now();
    let last_seen = entry(&operator, &id).expect("the child's entry");
    assert!(
        last_seen.expires_in <= Duration::from_millis(600),
        "{last_seen:?}"
    );
    child.kill().unwrap(); // SIGKILL: no drop, no leave
    child.wait().unwrap();
    let killed = Instant::now();
    assert!(
        entry(&operator, &id).is_some() || seen_at.elapsed() >= last_seen.expires_in,
        "a killed client cannot leave"
    );
    await_condition(5 * S, || entry(&operator, &id).is_none());
    let gone = killed.elapsed();
    // Not gone before the expiry seen (the server's clock counts whole milliseconds).
    let gone_from_seen = seen_at.elapsed();
    assert!(
        gone_from_seen + Duration::from_millis(2) >= last_seen.expires_in,
        "gone {gone_from_seen:?} after an entry seen expiring in {:?}",
        last_seen.expires_in
    );
    println!("a killed client's entry was gone {gone:?} after the kill");
}

#[test]
fn a_crashed_in_memory_client_drops_out_after_its_window() {
    let server = MemoryServer::new();
    let operator = server.client();
    let app = Client::builder("redis://unused/")
        .label("in-memory")
        .registry_heartbeat(S)
        .build_in_memory(&server)
        .unwrap();
    let id = app.client_id().to_owned();
    assert!(
        entry(&operator, &id).is_some(),
        "the first heartbeat at build"
    );
    // Heartbeats follow the test's clock.
    server.clock().advance(10 * S);
    let seen = entry(&operator, &id).unwrap();
    assert!(seen.since_heartbeat <= S, "{seen:?}");
    assert!(server.crash_client(&app));
    server.clock().advance(2 * S);
    assert!(entry(&operator, &id).is_some(), "within 3 heartbeats");
    server.clock().advance(2 * S);
    assert!(
        entry(&operator, &id).is_none(),
        "gone 3 heartbeats after the last"
    );
}

#[test]
fn lock_info_of_a_lease_lock_names_its_holder_fence_time_left_and_listeners() {
    let server = server();
    let (app, operator, waiter) = (
        labelled(&server, "app", Duration::from_secs(10)),
        client(&server),
        client(&server),
    );
    // The first heartbeat goes out from the watchdog thread just after the build.
    await_condition(5 * S, || entry(&operator, app.client_id()).is_some());
    let guard = app.lock("invoice").ttl(10 * S).acquire().unwrap();
    let info = operator.lock_info("invoice").unwrap();
    assert_eq!(info.fence, Some(guard.fence()));
    assert_eq!(info.kinds.len(), 1, "{info:?}");
    let kind = &info.kinds[0];
    assert_eq!(
        (kind.kind, kind.waiters, kind.permits),
        (Primitive::Lease, None, None)
    );
    let holder = &kind.holders[0];
    let token = guard.lease().token.as_str();
    assert_eq!(holder.token_prefix, token[..SHOWN_PREFIX]);
    assert!(
        token.starts_with(app.client_id()),
        "tokens start with the client id"
    );
    assert_eq!(holder.kind, LeaseKind::Lock(LockKind::Lease));
    let left = holder.remaining.unwrap();
    assert!(left <= 10 * S && left > 8 * S, "{left:?}");
    assert_eq!(holder.client.as_ref().unwrap().record.label, "app");
    assert_eq!(kind.subscribers, 0);
    // A waiter of another client listens for the release.
    let t = thread::spawn(move || {
        waiter
            .lock("invoice")
            .wait(20 * S)
            .acquire()
            .map(|g| g.release())
    });
    await_condition(5 * S, || {
        operator.lock_info("invoice").unwrap().kinds[0].subscribers == 1
    });
    guard.release().unwrap();
    t.join().unwrap().unwrap().unwrap();
    assert!(operator.lock_info("invoice").unwrap().kinds.is_empty());
    assert!(operator.lock_info("").is_err());
}

#[test]
fn lock_info_reads_every_kind() {
    let server = server();
    let (a, b, op) = (client(&server), client(&server), client(&server));
    let ttl = 10 * S;
    // Reentrant: one owner, two holds.
    let r1 = a.reentrant_lock("re").ttl(ttl).acquire().unwrap();
    let r2 = a.reentrant_lock("re").ttl(ttl).acquire().unwrap();
    let info = op.lock_info("re").unwrap();
    let kind = &info.kinds[0];
    assert_eq!(kind.kind, Primitive::Reentrant);
    assert_eq!(kind.holders.len(), 1);
    assert_eq!(kind.holders[0].holds, 2);
    assert!(kind.holders[0].token_prefix.starts_with(a.client_id()));
    assert_eq!(info.fence, Some(r1.fence()));
    drop((r2, r1));

    // Fair: a holder and one waiter in line.
    let held = a.fair_lock("fair").ttl(ttl).acquire().unwrap();
    let b2 = b.clone();
    let t = thread::spawn(move || {
        b2.fair_lock("fair")
            .wait(20 * S)
            .acquire()
            .map(|g| g.fence())
    });
    await_condition(5 * S, || {
        op.lock_info("fair").unwrap().kinds[0].waiters == Some(1)
    });
    let info = op.lock_info("fair").unwrap();
    assert_eq!(info.kinds[0].kind, Primitive::Fair);
    assert_eq!(
        info.kinds[0].holders[0].kind,
        LeaseKind::Lock(LockKind::Fair)
    );
    assert_eq!(
        info.kinds[0].holders[0].token_prefix,
        held.lease().token.as_str()[..16]
    );
    held.release().unwrap();
    assert!(t.join().unwrap().unwrap() > 0);

    // Read-write: two readers, a writer waiting.
    let (x, y) = (
        a.read_lock("rw").ttl(ttl).acquire().unwrap(),
        b.read_lock("rw").ttl(ttl).acquire().unwrap(),
    );
    let b2 = b.clone();
    let t = thread::spawn(move || {
        b2.write_lock("rw")
            .wait(20 * S)
            .acquire()
            .map(|g| g.fence())
    });
    await_condition(5 * S, || {
        op.lock_info("rw").unwrap().kinds[0].waiters == Some(1)
    });
    let kind = op.lock_info("rw").unwrap().kinds.remove(0);
    assert_eq!(kind.kind, Primitive::ReadWrite);
    assert_eq!(kind.holders.len(), 2);
    assert!(
        kind.holders
            .iter()
            .all(|h| h.kind == LeaseKind::Lock(LockKind::Read))
    );
    assert!(kind.holders.iter().all(|h| h.remaining.unwrap() > 8 * S));
    drop((x, y));
    let fence = t.join().unwrap().unwrap();
    assert_eq!(op.lock_info("rw").unwrap().fence, Some(fence));

    // Semaphore: 2 of 3 permits used.
    let p1 = a.semaphore("pool", 3).ttl(ttl).acquire().unwrap();
    let p2 = b.semaphore("pool", 3).ttl(ttl).acquire().unwrap();
    let kind = op.lock_info("pool").unwrap().kinds.remove(0);
    assert_eq!(
        (kind.kind, kind.permits, kind.permits_used()),
        (Primitive::Semaphore, Some(3), 2)
    );
    assert_eq!(kind.waiters, Some(0));
    assert!(kind.holders.iter().all(|h| h.kind == LeaseKind::Permit));
    drop((p1, p2));
}

#[test]
fn scan_pages_list_every_lock_exactly_once() {
    let server = server();
    let (a, op) = (client(&server), client(&server));
    let ttl = 30 * S;
    let mut guards = Vec::new();
    let mut expected = BTreeMap::new();
    for i in 0..40 {
        let (name, kind) = (format!("job-{i:02}"), i % 5);
        let guard = match kind {
            0 => a.lock(&name),
            1 => a.reentrant_lock(&name),
            2 => a.fair_lock(&name),
            3 => a.read_lock(&name),
            _ => a.semaphore(&name, 2),
        }
        .ttl(ttl)
        .acquire()
        .unwrap();
        expected.insert(name, guard.lease().kind);
        guards.push(guard);
    }
    // Not locks: a queue's keys, a lock released (its fence stays).
    a.queue("jobs-queue").unwrap().push("x").unwrap();
    a.lock("gone").acquire().unwrap().release().unwrap();
    let mut seen: BTreeMap<String, Vec<LeaseKind>> = BTreeMap::new();
    let (mut cursor, mut pages) = (0, 0);
    loop {
        let page = op.locks("*", cursor, 7).unwrap();
        pages += 1;
        for lock in page.locks {
            seen.entry(lock.name).or_default().push(lock.kind);
        }
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert!(pages > 1, "paged");
    let listed: BTreeMap<String, LeaseKind> = seen
        .iter()
        .map(|(name, kinds)| {
            assert_eq!(kinds.len(), 1, "{name} listed {kinds:?}");
            (name.clone(), kinds[0])
        })
        .collect();
    assert_eq!(listed, expected);
    // A pattern narrows the walk.
    let mut some = Vec::new();
    let mut cursor = 0;
    loop {
        let page = op.locks("job-1?", cursor, 1000).unwrap();
        some.extend(page.locks.into_iter().map(|l| l.name));
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    some.sort();
    assert_eq!(
        some,
        (10..20).map(|i| format!("job-{i}")).collect::<Vec<_>>()
    );
    assert!(op.locks("", 0, 10).is_err());
    assert!(op.locks("*", 0, 0).is_err());
}

#[test]
fn a_forced_release_frees_the_holder_seen_and_wakes_a_waiter() {
    let server = server();
    let (stuck, waiter, op) = (client(&server), client(&server), client(&server));
    let guard = stuck.lock("printer").ttl(S).acquire().unwrap();
    let started = Instant::now();
    let w = waiter.clone();
    let t = thread::spawn(move || {
        let g = w
            .lock("printer")
            .ttl(30 * S)
            .wait(20 * S)
            .acquire()
            .unwrap();
        (g.lease().token.as_str().to_owned(), Instant::now(), g)
    });
    await_condition(5 * S, || {
        op.lock_info("printer").unwrap().kinds[0].subscribers == 1
    });
    let seen = op
        .lock_info("printer")
        .unwrap()
        .holders()
        .next()
        .unwrap()
        .token_prefix
        .clone();
    assert!(matches!(
        op.force_release("printer", &seen[..7]),
        Err(Error::InvalidArgument(InvalidArgument::BadTokenPrefix {
            len: 7,
            ..
        }))
    ));
    assert!(op.force_release("printer", &seen).unwrap());
    let (token, got_at, new_guard) = t.join().unwrap();
    // Woken by the release's announcement, not by the old lease running out (its watchdog
    // would have renewed it for ever).
    println!(
        "the waiter got the lock {:?} after the forced release",
        got_at.elapsed()
    );
    assert!(got_at.duration_since(started) < 5 * S);
    // The old holder learns it at its next renewal: the key gone, or another's token.
    let reason = guard.lost().recv_timeout(5 * S);
    assert!(
        matches!(reason, Ok(LossReason::Taken | LossReason::Expired)),
        "{reason:?}"
    );
    // The prefix the operator saw is stale now: the new holder is not touched.
    assert!(!op.force_release("printer", &seen).unwrap());
    let now_held = op.lock_info("printer").unwrap();
    assert_eq!(
        now_held.holders().next().unwrap().token_prefix,
        token[..SHOWN_PREFIX]
    );
    assert!(!new_guard.is_lost());
    new_guard.release().unwrap();
}

#[test]
fn a_forced_release_frees_one_reader_or_one_permit_only() {
    let server = server();
    let (a, b, op) = (client(&server), client(&server), client(&server));
    let ttl = 30 * S;
    let ra = a.read_lock("doc").ttl(ttl).acquire().unwrap();
    let rb = b.read_lock("doc").ttl(ttl).acquire().unwrap();
    let prefix = &ra.lease().token.as_str()[..SHOWN_PREFIX];
    assert!(op.force_release("doc", prefix).unwrap());
    let left: Vec<String> = op
        .lock_info("doc")
        .unwrap()
        .holders()
        .map(|h| h.token_prefix.clone())
        .collect();
    assert_eq!(left, [rb.lease().token.as_str()[..SHOWN_PREFIX].to_owned()]);

    let pa = a.semaphore("slots", 1).ttl(ttl).acquire().unwrap();
    let b2 = b.clone();
    let t = thread::spawn(move || {
        b2.semaphore("slots", 1)
            .ttl(ttl)
            .wait(20 * S)
            .acquire()
            .map(|g| g.release())
    });
    await_condition(5 * S, || {
        op.lock_info("slots").unwrap().kinds[0].waiters == Some(1)
    });
    assert!(
        op.force_release("slots", &pa.lease().token.as_str()[..SHOWN_PREFIX])
            .unwrap()
    );
    // The waiter in line is woken and takes the freed permit.
    t.join().unwrap().unwrap().unwrap();
    drop((pa, rb));
}

#[test]
fn on_a_cluster_the_walk_visits_every_master_and_force_release_works() {
    let cluster = redlease_suite::RedisCluster::start().expect("a 3-master cluster");
    let c = Client::cluster(&cluster.urls())
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..30 {
        guards.push(c.lock(&format!("l{i}")).ttl(30 * S).acquire().unwrap());
    }
    // The names are spread over the masters (each holds some).
    let per_node: Vec<i64> = cluster
        .nodes()
        .iter()
        .map(|n| {
            redis::cmd("DBSIZE")
                .query(&mut redlease_suite::testkit::connection(n))
                .unwrap()
        })
        .collect();
    assert!(
        per_node.iter().filter(|n| **n > 0).count() >= 2,
        "{per_node:?}"
    );
    let mut seen = BTreeMap::new();
    let (mut cursor, mut pages) = (0, 0);
    loop {
        let page = c.locks("*", cursor, 5).unwrap();
        pages += 1;
        for lock in page.locks {
            *seen.entry(lock.name).or_insert(0) += 1;
        }
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert!(pages >= 3, "{pages} pages");
    assert_eq!(seen.len(), 30, "{seen:?}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    // lock_info and force_release go to the name's own slot.
    let info = c.lock_info("l7").unwrap();
    let prefix = info.holders().next().unwrap().token_prefix.clone();
    assert!(c.force_release("l7", &prefix).unwrap());
    assert!(c.lock_info("l7").unwrap().kinds.is_empty());
}
