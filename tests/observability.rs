//! What redlease tells `tracing`, and `Client::status`, against real redis-servers. A small
//! hand-written subscriber (installed once for this test binary, since events come from the
//! watchdog and listener threads too) collects spans and events; each test looks only at
//! records naming its own locks or queues.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use redlease::{Client, Error, LossReason};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{await_condition, connection, server};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as Values};
use tracing::{Event, Level, Metadata, Subscriber};

/// A span or an event as the subscriber saw it.
#[derive(Debug, Clone)]
struct Record {
    kind: &'static str,
    name: String,
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Record {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Collector {
    next: AtomicU64,
    spans: Mutex<HashMap<u64, Record>>,
    events: Mutex<Vec<Record>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Collector {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let record = Record {
            kind: "span",
            name: span.metadata().name().to_owned(),
            level: *span.metadata().level(),
            fields,
        };
        self.spans.lock().unwrap().insert(id, record);
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Values<'_>) {
        if let Some(r) = self.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut r.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(Record {
            kind: "event",
            name: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            fields,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

fn collector() -> &'static Collector {
    static COLLECTOR: OnceLock<&'static Collector> = OnceLock::new();
    COLLECTOR.get_or_init(|| {
        let c: &'static Collector = Box::leak(Box::default());
        tracing::subscriber::set_global_default(Forward(c)).expect("one subscriber per binary");
        c
    })
}

/// The global subscriber: forwards to the leaked collector.
struct Forward(&'static Collector);

impl Subscriber for Forward {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        self.0.enabled(m)
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.0.new_span(span)
    }
    fn record(&self, span: &Id, values: &Values<'_>) {
        self.0.record(span, values)
    }
    fn record_follows_from(&self, a: &Id, b: &Id) {
        self.0.record_follows_from(a, b)
    }
    fn event(&self, event: &Event<'_>) {
        self.0.event(event)
    }
    fn enter(&self, span: &Id) {
        self.0.enter(span)
    }
    fn exit(&self, span: &Id) {
        self.0.exit(span)
    }
}

/// Spans and events whose `field` is `value`.
fn records(field: &str, value: &str) -> Vec<Record> {
    let c = collector();
    let spans = c
        .spans
        .lock()
        .unwrap()
        .values()
        .cloned()
        .collect::<Vec<_>>();
    let events = c.events.lock().unwrap().clone();
    spans
        .into_iter()
        .chain(events)
        .filter(|r| r.field(field) == Some(value))
        .collect()
}

/// Events about lock `name` whose message contains `text`.
fn lock_events(name: &str, text: &str) -> Vec<Record> {
    records("redlease.lock", name)
        .into_iter()
        .filter(|r| r.kind == "event" && r.field("message").is_some_and(|m| m.contains(text)))
        .collect()
}

fn acquire_spans(name: &str) -> Vec<Record> {
    records("redlease.lock", name)
        .into_iter()
        .filter(|r| r.kind == "span" && r.name == "redlease.acquire")
        .collect()
}

fn client(server: &RedisServer) -> Client {
    Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(300))
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[test]
fn acquisitions_are_spans_with_kind_attempts_wait_and_outcome() {
    collector();
    let server = server();
    let client = client(&server);

    let held = client.lock("obs-acq").acquire().unwrap();
    let held_fence = held.fence().to_string();
    let busy = client.lock("obs-acq").try_acquire().unwrap();
    assert!(busy.is_none());
    let err = client
        .lock("obs-acq")
        .wait(Duration::from_millis(150))
        .retry(Duration::from_millis(10), Duration::from_millis(50))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    held.release().unwrap();
    let fair = client.fair_lock("obs-acq-fair").acquire().unwrap();
    fair.release().unwrap();

    let spans = acquire_spans("obs-acq");
    let outcome = |o: &str| {
        spans
            .iter()
            .find(|s| s.field("redlease.outcome") == Some(o))
            .unwrap_or_else(|| panic!("no {o} span in {spans:#?}"))
            .clone()
    };
    let acquired = outcome("acquired");
    assert_eq!(acquired.field("redlease.kind"), Some("lease"));
    assert_eq!(acquired.field("redlease.attempts"), Some("1"));
    assert_eq!(acquired.field("redlease.fence"), Some(held_fence.as_str()));
    assert!(acquired.field("redlease.waited_ms").is_some());
    outcome("busy");
    let timeout = outcome("timeout");
    assert!(
        timeout
            .field("redlease.attempts")
            .unwrap()
            .parse::<u32>()
            .unwrap()
            >= 2,
        "{timeout:?}"
    );
    let waited: u64 = timeout
        .field("redlease.waited_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(waited >= 150, "{timeout:?}");
    let fair = acquire_spans("obs-acq-fair");
    assert_eq!(fair.len(), 1, "{fair:?}");
    assert_eq!(fair[0].field("redlease.kind"), Some("fair"));
    assert_eq!(
        fair[0].name, "redlease.acquire",
        "span names do not carry the lock name"
    );

    assert_eq!(lock_events("obs-acq", "released").len(), 1);

    // Legacy locks and RedLock too.
    client
        .legacy_lock("obs-acq-legacy")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    let redlock = redlease::lock::RedLock::builder(&[server.url()])
        .build()
        .unwrap();
    redlock
        .lock("obs-acq-red")
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    for (name, kind) in [("obs-acq-legacy", "legacy"), ("obs-acq-red", "redlock")] {
        let spans = acquire_spans(name);
        assert_eq!(spans.len(), 1, "{spans:?}");
        assert_eq!(spans[0].field("redlease.kind"), Some(kind));
        assert_eq!(spans[0].field("redlease.outcome"), Some("acquired"));
        assert_eq!(lock_events(name, "released").len(), 1, "{name}");
    }
}

#[test]
fn a_refused_release_is_a_warning_with_its_reason() {
    collector();
    let server = server();
    let client = client(&server);
    let guard = client.lock("obs-rel").watchdog(false).acquire().unwrap();
    let _: () = redis::cmd("DEL")
        .arg("redlease:{obs-rel}:lock")
        .query(&mut connection(&server))
        .unwrap();
    drop(guard); // the drop's outcome is logged, not lost
    let refused = lock_events("obs-rel", "release refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].level, Level::WARN);
    assert!(
        refused[0]
            .field("redlease.reason")
            .unwrap()
            .contains("expired"),
        "{refused:?}"
    );
}

#[test]
fn renewal_failures_carry_the_redis_error_and_the_loss_its_cause() {
    collector();
    let server = server();
    let mut admin = connection(&server);
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "obs", "on", ">obs-pw", "~*", "&*", "+@all"])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://obs:obs-pw@127.0.0.1:{}/", server.port());
    let client = Client::builder(&url)
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = client
        .lock("obs-renew")
        .ttl(Duration::from_millis(900))
        .acquire()
        .unwrap();
    // Renewals now fail with a Redis error reply (NOPERM) until the lease must have expired:
    // the extend script, and the native `SET .. IFEQ` that renews where the server has it.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "obs", "-evalsha", "-eval", "-set"])
        .query(&mut admin)
        .unwrap();
    let reason = guard
        .lost()
        .recv_timeout(Duration::from_secs(10))
        .expect("the lease is reported lost");
    assert_eq!(reason, LossReason::RenewalFailed);
    let failures = lock_events("obs-renew", "renewal failed");
    assert!(!failures.is_empty());
    // Only the first failure of the run is a warning (retries are DEBUG).
    let warnings = failures.iter().filter(|e| e.level == Level::WARN).count();
    assert_eq!(warnings, 1, "{failures:#?}");
    let error = failures[0].field("error").unwrap();
    assert!(error.contains("NOPERM"), "the Redis error is kept: {error}");
    let lost = lock_events("obs-renew", "lease lost");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].field("redlease.reason"), Some("RenewalFailed"));
    // A NOPERM also says how to fix it.
    let fix = collector().events.lock().unwrap().iter().any(|e| {
        e.field("message")
            .is_some_and(|m| m.contains("NOPERM") && m.contains("docs/acl.md"))
    });
    assert!(fix);
}

#[test]
fn max_hold_is_its_own_loss_reason() {
    collector();
    let server = server();
    let client = client(&server);
    let guard = client
        .lock("obs-hold")
        // A 1 s lease: a renewal delayed on a loaded machine does not lose it first.
        .ttl(Duration::from_secs(1))
        .max_hold(Duration::from_millis(1500))
        .acquire()
        .unwrap();
    let reason = guard.lost().recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(reason, LossReason::MaxHoldReached);
    let err = guard.release().unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotOwner {
                reason: LossReason::MaxHoldReached,
                ..
            }
        ),
        "{err}"
    );
    let lost = lock_events("obs-hold", "lease lost");
    assert_eq!(lost[0].field("redlease.reason"), Some("MaxHoldReached"));
}

#[test]
fn status_counts_watched_leases_waiters_and_the_listener() {
    collector();
    let mut server = server();
    let client = client(&server);
    let before = client.status();
    assert_eq!(before.leases_watched, 0);
    assert_eq!(before.waiters, 0);
    assert!(!before.listener.started && before.listener.available);
    assert_eq!(before.pool.max, 16);

    let a = client.lock("obs-status-a").acquire().unwrap();
    let b = client.lock("obs-status-b").acquire().unwrap();
    assert_eq!(client.status().leases_watched, 2);
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            client
                .lock("obs-status-a")
                .wait(Duration::from_secs(20))
                .acquire()
                .map(|g| g.release())
        })
    };
    await_condition(Duration::from_secs(10), || {
        let s = client.status();
        s.waiters == 1 && s.listener.connected == 1 && s.listener.channels == 1
    });
    let status = client.status();
    assert!(status.listener.started && status.listener.refused.is_none());
    assert!(status.pool.connections >= 1 && status.pool.idle <= status.pool.connections);
    a.release().unwrap();
    waiter.join().unwrap().unwrap().unwrap();
    b.release().unwrap();
    let after = client.status();
    assert_eq!((after.leases_watched, after.waiters), (0, 0));

    // The listener's connection and its loss are events.
    let port = format!(" {})", server.port());
    let connected = |text: &str| {
        collector()
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.field("message").is_some_and(|m| m.contains(text)))
            .filter(|e| {
                e.field("redlease.listener")
                    .is_some_and(|l| l.contains(&port))
            })
            .count()
    };
    assert!(connected("listener connected") >= 1);
    let dropped = connected("listener disconnected");
    server.kill();
    await_condition(Duration::from_secs(10), || {
        client.status().listener.connected == 0
    });
    await_condition(Duration::from_secs(10), || {
        connected("listener disconnected") > dropped
    });
}

#[test]
fn pool_exhaustion_is_reported() {
    collector();
    let server = server();
    let client = Client::builder(server.url())
        .pool_size(1)
        .connect_timeout(Duration::from_secs(1))
        .io_timeout(Duration::from_secs(4))
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.lock("obs-pool-warm").try_acquire().unwrap();
    // One request in flight on the only connection, to a server that answers nothing.
    server.pause().unwrap();
    let stuck = {
        let client = client.clone();
        thread::spawn(move || client.lock("obs-pool-stuck").try_acquire().map(|_| ()))
    };
    await_condition(Duration::from_secs(10), || {
        let p = client.status().pool;
        p.connections == 1 && p.idle == 0
    });
    let err = client.lock("obs-pool-other").try_acquire().unwrap_err();
    server.resume().unwrap();
    let _ = stuck.join().unwrap();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let exhausted = collector().events.lock().unwrap().iter().any(|e| {
        e.level == Level::WARN
            && e.field("message")
                .is_some_and(|m| m.contains("pool exhausted"))
    });
    assert!(exhausted);
}

#[test]
fn a_missing_channel_right_is_logged_with_its_fix() {
    collector();
    let server = server();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "nochan",
            "on",
            ">pw",
            "~*",
            "resetchannels",
            "+@all",
        ])
        .query(&mut connection(&server))
        .unwrap();
    let url = format!("redis://nochan:pw@127.0.0.1:{}/", server.port());
    let client = Client::builder(&url)
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let held = client.lock("obs-nochan").watchdog(false).acquire().unwrap();
    let err = client
        .lock("obs-nochan")
        .wait(Duration::from_millis(300))
        .acquire()
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let refused = client
        .status()
        .listener
        .refused
        .expect("the refusal is kept");
    assert!(refused.contains("NOPERM"), "{refused}");
    // The release deletes the key but its PUBLISH is refused: an error, and a warning.
    let err = held.release().unwrap_err();
    assert!(matches!(err, Error::Redis { .. }), "{err}");
    let events = collector().events.lock().unwrap().clone();
    let said = |parts: &[&str]| {
        events.iter().any(|e| {
            e.field("message")
                .is_some_and(|m| parts.iter().all(|p| m.contains(p)))
        })
    };
    assert!(said(&[
        "SUBSCRIBE was refused",
        "ACL SETUSER",
        "&<prefix>:*"
    ]));
    assert!(said(&["ACL permissions", "docs/acl.md"]));
}

#[test]
fn queue_jobs_are_events_with_messaging_attributes() {
    collector();
    let server = server();
    let client = client(&server);
    let q = client
        .queue("obs-jobs")
        .unwrap()
        .max_deliveries(2)
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(1));
    let ok = q.push("fine").unwrap();
    let bad = q.push("broken").unwrap();
    let workers = q
        .work(1, |job| -> Result<(), String> {
            if job.payload() == b"broken" {
                Err("payload is broken".into())
            } else {
                Ok(())
            }
        })
        .unwrap();
    await_condition(Duration::from_secs(20), || q.stats().unwrap().dead == 1);
    workers.stop();

    let events = records("messaging.destination.name", "obs-jobs");
    let of = |id: &str, op: &str| {
        events
            .iter()
            .filter(|e| {
                e.field("messaging.message.id") == Some(id)
                    && e.field("messaging.operation.name") == Some(op)
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let taken = of(&ok, "take");
    assert_eq!(taken.len(), 1, "{events:#?}");
    assert_eq!(taken[0].field("messaging.system"), Some("redlease"));
    assert_eq!(taken[0].field("messaging.operation.type"), Some("receive"));
    let acked = of(&ok, "ack");
    assert_eq!(acked.len(), 1);
    assert_eq!(acked[0].field("messaging.operation.type"), Some("settle"));
    assert_eq!(of(&bad, "take").len(), 2);
    let nacked = of(&bad, "nack");
    assert_eq!(nacked.len(), 2);
    assert!(
        nacked
            .iter()
            .all(|e| e.field("error.message") == Some("payload is broken")),
        "{nacked:#?}"
    );
    let dead = of(&bad, "dead_letter");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].level, Level::WARN);
    assert_eq!(dead[0].field("error.message"), Some("payload is broken"));
    // Takes run in an acquisition span of kind "job", named by the queue.
    let spans = acquire_spans("obs-jobs");
    assert!(spans.iter().any(|s| s.field("redlease.kind") == Some("job")
        && s.field("redlease.outcome") == Some("acquired")));
}

#[test]
fn dropping_a_client_is_not_a_listener_disconnection() {
    collector();
    let server = server();
    let client = client(&server);
    let held = client.lock("obs-quiet").watchdog(false).acquire().unwrap();
    let _ = client
        .lock("obs-quiet")
        .wait(Duration::from_millis(50))
        .acquire();
    await_condition(Duration::from_secs(10), || {
        client.status().listener.connected == 1
    });
    drop(held);
    drop(client); // joins the listener thread
    let port = format!(" {})", server.port());
    let warned = collector().events.lock().unwrap().iter().any(|e| {
        e.field("message")
            .is_some_and(|m| m.contains("listener disconnected"))
            && e.field("redlease.listener")
                .is_some_and(|l| l.contains(&port))
    });
    assert!(!warned);
}
