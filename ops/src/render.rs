//! Tables for people, and the `check` verdict. Every number comes from [`crate::data`].

use std::fmt::Display;
use std::time::SystemTime;

use redlease::queue::dead::DeadJob;
use serde_json::{Value, json};

use crate::data::{Snapshot, short_token};

const NA: &str = "n/a";

fn opt<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| NA.to_owned(), |v| v.to_string())
}

fn ms(v: Option<i64>) -> String {
    v.map_or_else(|| NA.to_owned(), |v| format!("{:.1}s", v as f64 / 1000.0))
}

/// Rows as a table with a header, columns padded to their widest cell. Every row has one
/// cell per header cell (a missing cell is left empty, an extra one is a bug: it would sit
/// under the wrong header).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    debug_assert!(
        rows.iter().all(|r| r.len() == header.len()),
        "a row with another number of cells than the header {header:?}"
    );
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            out.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.clone()));
    }
    if rows.is_empty() {
        out.push_str("\n(none)");
    }
    out
}

/// `redlease status`.
pub fn status(s: &Snapshot) -> String {
    let v = &s.server;
    let mut out = table(
        &[
            "server",
            "version",
            "mode",
            "role",
            "uptime",
            "connections",
            "redlease connections",
            "live clients",
            "memory",
        ],
        &[vec![
            v.url.clone(),
            opt(v.version.as_ref()),
            opt(v.mode.as_ref()),
            opt(v.role.as_ref()),
            opt(v.uptime_s.map(|u| format!("{u}s"))),
            opt(v.connected_clients),
            opt(v.redlease_connections),
            opt(v.live_clients),
            opt(v.used_memory.as_ref()),
        ]],
    );
    out.push_str(&format!(
        "\n\n{} queue(s), {} held lock(s), {} semaphore(s){}",
        s.queues.len(),
        s.locks.len(),
        s.semaphores.len(),
        if s.truncated {
            " (key walk stopped at its bound: lists are partial)"
        } else {
            ""
        }
    ));
    out
}

/// `redlease queues`.
pub fn queues(s: &Snapshot) -> String {
    let rows: Vec<Vec<String>> = s
        .queues
        .iter()
        .map(|q| {
            let st = q.stats;
            vec![
                q.name.clone(),
                opt(st.map(|s| s.ready)),
                opt(st.map(|s| s.delayed)),
                opt(st.map(|s| s.in_flight)),
                opt(st.map(|s| s.dead)),
                ms(q.oldest_age_ms.map(|v| v as i64)),
                ms(q.least_lease_left_ms.map(|v| v as i64)),
                opt(q.per_minute.map(|r| r.acked)),
                opt(q.per_minute.map(|r| r.failed)),
                opt(q.paused),
                opt(q
                    .grouped
                    .map(|g| g.ready + g.delayed + g.in_flight + g.dead)),
                opt(q.groups.as_ref().map(|g| g.ids.len())),
                opt(q.groups.as_ref().map(|g| g.paused.len())),
                opt(q.groups.as_ref().and_then(|g| g.full)),
                opt(q.groups.as_ref().and_then(|g| g.rate_blocked)),
                q.schedules.as_ref().map_or_else(
                    || NA.to_owned(),
                    |l| {
                        l.iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                ),
                opt(q.next_due().map(crate::data::utc)),
                q.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "queue",
            "ready",
            "delayed",
            "in-flight",
            "dead",
            "oldest-age",
            "least-lease-left",
            "acked/min",
            "failed/min",
            "paused",
            "grouped-jobs",
            "groups",
            "paused-groups",
            "full-groups",
            "rate-blocked-groups",
            "schedules",
            "next-due",
            "error",
        ],
        &rows,
    )
}

/// `redlease locks`.
pub fn locks(s: &Snapshot) -> String {
    let rows: Vec<Vec<String>> = s
        .locks
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.kind.to_owned(),
                opt(l.holder.as_ref()),
                ms(l.ttl_ms),
                opt(l.fence.as_ref()),
                l.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["lock", "kind", "holder", "ttl", "fence", "error"], &rows)
}

/// `redlease semaphores`.
pub fn semaphores(s: &Snapshot) -> String {
    let rows: Vec<Vec<String>> = s
        .semaphores
        .iter()
        .map(|m| match &m.state {
            Some(st) => vec![
                m.name.clone(),
                opt(st.permits),
                st.holders.len().to_string(),
                st.holders
                    .iter()
                    .map(|(t, left)| format!("{} {:.1}s", short_token(t), left.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(", "),
                st.waiters.len().to_string(),
                st.waiters
                    .iter()
                    .map(|t| short_token(t))
                    .collect::<Vec<_>>()
                    .join(", "),
            ],
            None => vec![
                m.name.clone(),
                NA.into(),
                NA.into(),
                m.error.clone().unwrap_or_default(),
                NA.into(),
                String::new(),
            ],
        })
        .collect();
    table(
        &[
            "semaphore",
            "permits",
            "held",
            "holders",
            "waiting",
            "waiters",
        ],
        &rows,
    )
}

/// `redlease jobs`.
pub fn jobs(page: &redlease::inspect::JobPage) -> String {
    let rows: Vec<Vec<String>> = page
        .jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.state.as_str().to_owned(),
                j.priority.to_string(),
                ms(j.age.map(|d| d.as_millis() as i64)),
                j.deliveries.to_string(),
                ms(j.lease_left.map(|d| d.as_millis() as i64)),
                j.payload_size.to_string(),
                String::from_utf8_lossy(&j.preview)
                    .chars()
                    .take(40)
                    .collect(),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "id",
            "state",
            "priority",
            "age",
            "deliveries",
            "lease-left",
            "payload-len",
            "preview",
        ],
        &rows,
    );
    if let Some(next) = &page.next {
        out.push_str(&format!("\nmore: --cursor {next}"));
    }
    out
}

/// `redlease dead`.
pub fn dead(jobs: &[DeadJob]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|d| {
            let preview: String = String::from_utf8_lossy(&d.payload)
                .chars()
                .take(40)
                .collect();
            let died = match d
                .died_at
                .and_then(|t| SystemTime::now().duration_since(t).ok())
            {
                Some(ago) => format!("{} ago", ms(Some(ago.as_millis() as i64))),
                None if d.died_at.is_some() => "just now".to_owned(),
                None => NA.to_owned(),
            };
            vec![
                d.id.clone(),
                d.group.clone().unwrap_or_else(|| "(none)".into()),
                d.deliveries.to_string(),
                died,
                d.cause.map_or(NA, |c| c.as_str()).to_owned(),
                d.reason.clone().unwrap_or_else(|| "(none given)".into()),
                d.payload.len().to_string(),
                preview,
            ]
        })
        .collect();
    table(
        &[
            "id",
            "group",
            "deliveries",
            "died",
            "cause",
            "reason",
            "payload-len",
            "preview",
        ],
        &rows,
    )
}

/// A JSON value as indented text.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// What `check` found.
pub struct Verdict {
    /// 0 ok, 1 crossed, 3 unknown.
    pub code: u8,
    /// One line per finding.
    pub lines: Vec<String>,
}

impl Verdict {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code, "status": match self.code { 0 => "ok", 1 => "crossed", _ => "unknown" }, "findings": self.lines })
    }
}

/// `redlease check`.
pub fn check(
    s: &Snapshot,
    max_age: Option<f64>,
    max_dead: Option<u64>,
    min_connections: Option<u64>,
    only: &[String],
) -> Verdict {
    let mut crossed = Vec::new();
    let mut unknown = Vec::new();
    let queues: Vec<_> = s
        .queues
        .iter()
        .filter(|q| only.is_empty() || only.contains(&q.name))
        .collect();
    for name in only {
        if !queues.iter().any(|q| &q.name == name) {
            unknown.push(format!("UNKNOWN queue {name}: not found"));
        }
    }
    for q in &queues {
        if let Some(limit) = max_dead {
            match q.stats {
                Some(st) if st.dead > limit => crossed.push(format!(
                    "CROSSED queue {}: {} dead > {limit}",
                    q.name, st.dead
                )),
                Some(_) => {}
                None => unknown.push(format!(
                    "UNKNOWN queue {}: {}",
                    q.name,
                    q.error.clone().unwrap_or_default()
                )),
            }
        }
        if let Some(limit) = max_age {
            match q.oldest_age_ms {
                Some(age) if age as f64 / 1000.0 > limit => crossed.push(format!(
                    "CROSSED queue {}: oldest ready job {:.1}s old > {limit}s",
                    q.name,
                    age as f64 / 1000.0
                )),
                Some(_) => {}
                // No ready job (or none with an enqueue time): nothing waits.
                None => {}
            }
        }
    }
    if let Some(min) = min_connections {
        match s.server.redlease_connections {
            Some(n) if n < min => {
                crossed.push(format!("CROSSED {n} redlease connection(s) < {min}"))
            }
            Some(_) => {}
            None => {
                unknown.push("UNKNOWN redlease connections n/a (CLIENT LIST refused)".to_owned())
            }
        }
    }
    let code = if !crossed.is_empty() {
        1
    } else if !unknown.is_empty() {
        3
    } else {
        0
    };
    let mut lines = crossed;
    lines.extend(unknown);
    if lines.is_empty() {
        lines.push(format!("OK {} queue(s) checked", queues.len()));
    }
    Verdict { code, lines }
}
