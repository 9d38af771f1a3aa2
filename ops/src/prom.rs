//! The snapshot in Prometheus' text exposition format (version 0.0.4). Absent numbers are
//! left out rather than written as zero.

use std::fmt::Write;

use crate::data::Snapshot;

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `/metrics`.
pub fn text(s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP redlease_queue_jobs Jobs in a queue by state.");
    let _ = writeln!(out, "# TYPE redlease_queue_jobs gauge");
    for q in &s.queues {
        if let Some(st) = q.stats {
            for (state, n) in [
                ("ready", st.ready),
                ("delayed", st.delayed),
                ("in_flight", st.in_flight),
                ("dead", st.dead),
            ] {
                let _ = writeln!(
                    out,
                    "redlease_queue_jobs{{queue=\"{}\",state=\"{state}\"}} {n}",
                    label(&q.name)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP redlease_queue_oldest_ready_age_seconds Age of the oldest ready job."
    );
    let _ = writeln!(out, "# TYPE redlease_queue_oldest_ready_age_seconds gauge");
    for q in &s.queues {
        if let Some(age) = q.oldest_age_ms {
            let _ = writeln!(
                out,
                "redlease_queue_oldest_ready_age_seconds{{queue=\"{}\"}} {}",
                label(&q.name),
                age as f64 / 1000.0
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP redlease_lock_ttl_seconds Time left on a held lease lock."
    );
    let _ = writeln!(out, "# TYPE redlease_lock_ttl_seconds gauge");
    for l in &s.locks {
        if let Some(ttl) = l.ttl_ms {
            let _ = writeln!(
                out,
                "redlease_lock_ttl_seconds{{lock=\"{}\"}} {}",
                label(&l.name),
                ttl as f64 / 1000.0
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP redlease_semaphore_holders Live holders of a semaphore."
    );
    let _ = writeln!(out, "# TYPE redlease_semaphore_holders gauge");
    let _ = writeln!(
        out,
        "# HELP redlease_semaphore_waiters Live waiters of a semaphore."
    );
    let _ = writeln!(out, "# TYPE redlease_semaphore_waiters gauge");
    for m in &s.semaphores {
        if let Some(st) = &m.state {
            let name = label(&m.name);
            let _ = writeln!(
                out,
                "redlease_semaphore_holders{{semaphore=\"{name}\"}} {}",
                st.holders.len()
            );
            let _ = writeln!(
                out,
                "redlease_semaphore_waiters{{semaphore=\"{name}\"}} {}",
                st.waiters.len()
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP redlease_redis_connections Connections open on the server."
    );
    let _ = writeln!(out, "# TYPE redlease_redis_connections gauge");
    if let Some(n) = s.server.connected_clients {
        let _ = writeln!(out, "redlease_redis_connections{{kind=\"all\"}} {n}");
    }
    if let Some(n) = s.server.redlease_connections {
        let _ = writeln!(out, "redlease_redis_connections{{kind=\"redlease\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP redlease_ops_refresh_round_trips Round trips of the last refresh."
    );
    let _ = writeln!(out, "# TYPE redlease_ops_refresh_round_trips gauge");
    let _ = writeln!(out, "redlease_ops_refresh_round_trips {}", s.round_trips);
    out
}
