//! The snapshot in Prometheus' text exposition format (version 0.0.4). Absent numbers are
//! left out rather than written as zero. Each family is written whole, as the format
//! requires: its `# HELP` and `# TYPE` lines, then every one of its samples.

use std::fmt::Write;

use crate::data::Snapshot;

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One gauge family: its HELP and TYPE lines, then its samples (`{labels} value`, or
/// ` value` for one without labels).
fn gauge(out: &mut String, name: &str, help: &str, samples: impl IntoIterator<Item = String>) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    for sample in samples {
        let _ = writeln!(out, "{name}{sample}");
    }
}

fn seconds(ms: f64) -> f64 {
    ms / 1000.0
}

/// `/metrics`.
pub fn text(s: &Snapshot) -> String {
    let mut out = String::new();
    gauge(
        &mut out,
        "redlease_queue_jobs",
        "Jobs in a queue by state.",
        s.queues.iter().flat_map(|q| {
            let name = label(&q.name);
            q.stats.into_iter().flat_map(move |st| {
                let name = name.clone();
                [
                    ("ready", st.ready),
                    ("delayed", st.delayed),
                    ("in_flight", st.in_flight),
                    ("dead", st.dead),
                ]
                .into_iter()
                .map(move |(state, n)| format!("{{queue=\"{name}\",state=\"{state}\"}} {n}"))
            })
        }),
    );
    gauge(
        &mut out,
        "redlease_queue_oldest_ready_age_seconds",
        "Age of the oldest ready job.",
        s.queues.iter().filter_map(|q| {
            q.oldest_age_ms
                .map(|age| format!("{{queue=\"{}\"}} {}", label(&q.name), seconds(age as f64)))
        }),
    );
    gauge(
        &mut out,
        "redlease_queue_paused",
        "Whether a queue is paused (1) or not (0).",
        s.queues.iter().filter_map(|q| {
            q.paused
                .map(|p| format!("{{queue=\"{}\"}} {}", label(&q.name), u8::from(p)))
        }),
    );
    gauge(
        &mut out,
        "redlease_queue_groups",
        "Groups of a queue holding jobs (waiting or leased).",
        s.queues.iter().filter_map(|q| {
            q.groups
                .as_ref()
                .map(|g| format!("{{queue=\"{}\"}} {}", label(&q.name), g.ids.len()))
        }),
    );
    gauge(
        &mut out,
        "redlease_queue_groups_paused",
        "Groups of a queue holding jobs that are paused.",
        s.queues.iter().filter_map(|q| {
            q.groups
                .as_ref()
                .map(|g| format!("{{queue=\"{}\"}} {}", label(&q.name), g.paused.len()))
        }),
    );
    gauge(
        &mut out,
        "redlease_queue_schedules",
        "Schedules of a queue.",
        s.queues.iter().filter_map(|q| {
            q.schedules
                .as_ref()
                .map(|l| format!("{{queue=\"{}\"}} {}", label(&q.name), l.len()))
        }),
    );
    gauge(
        &mut out,
        "redlease_queue_schedule_next_timestamp_seconds",
        "Due time of a schedule's next occurrence (Unix seconds).",
        s.queues.iter().flat_map(|q| {
            let name = label(&q.name);
            q.schedules.iter().flatten().filter_map(move |sc| {
                sc.next_ms.map(|ms| {
                    format!(
                        "{{queue=\"{name}\",schedule=\"{}\"}} {}",
                        label(&sc.name),
                        seconds(ms as f64)
                    )
                })
            })
        }),
    );
    gauge(
        &mut out,
        "redlease_lock_ttl_seconds",
        "Time left on a held lock, by kind (lease, reentrant, fair, read, write, legacy).",
        s.locks.iter().filter_map(|l| {
            l.ttl_ms.map(|ttl| {
                format!(
                    "{{lock=\"{}\",kind=\"{}\"}} {}",
                    label(&l.name),
                    l.kind,
                    seconds(ttl as f64)
                )
            })
        }),
    );
    gauge(
        &mut out,
        "redlease_semaphore_holders",
        "Live holders of a semaphore.",
        s.semaphores.iter().filter_map(|m| {
            m.state
                .as_ref()
                .map(|st| format!("{{semaphore=\"{}\"}} {}", label(&m.name), st.holders.len()))
        }),
    );
    gauge(
        &mut out,
        "redlease_semaphore_waiters",
        "Live waiters of a semaphore.",
        s.semaphores.iter().filter_map(|m| {
            m.state
                .as_ref()
                .map(|st| format!("{{semaphore=\"{}\"}} {}", label(&m.name), st.waiters.len()))
        }),
    );
    gauge(
        &mut out,
        "redlease_redis_connections",
        "Connections open on the server.",
        [
            ("all", s.server.connected_clients),
            ("redlease", s.server.redlease_connections),
        ]
        .into_iter()
        .filter_map(|(kind, n)| n.map(|n| format!("{{kind=\"{kind}\"}} {n}"))),
    );
    gauge(
        &mut out,
        "redlease_ops_refresh_round_trips",
        "Round trips of the last refresh.",
        [format!(" {}", s.round_trips)],
    );
    out
}
