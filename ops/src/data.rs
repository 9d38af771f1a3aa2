//! Where every view gets its numbers: one refresh reads the server, the queues, the locks and
//! the semaphores in a handful of pipelines ([`Source::snapshot`]); the dead list and the
//! actions are here too. The CLI, `check`, the dashboard, `/api/` and `/metrics` only format
//! what this module returns.
//!
//! A number that could not be read is `None` and shows as `n/a`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlease::core::inspect as core_locks;
use redlease::core::keys::Keyspace;
use redlease::core::queue::inspect::{self as core_inspect, JobCursor, JobPage, JobStatus, event};
use redlease::core::queue::pause::{self as core_pause, PauseScope};
use redlease::core::queue::schedule as core_schedule;
use redlease::core::queue::{self as core_queue, QueueKeys};
use redlease::core::semaphore::{self as core_semaphore, SemaphoreKeys};
use redlease::core::{Command, Reply};
use redlease::inspect::JobInfo;
use redlease::{lock::LeaseKind, lock::LockKind};
use redlease::{
    lock::SemaphoreState, queue::QueueStats, queue::dead::DeadJob, queue::dead::DeathCause,
};
use serde_json::{Value, json};

use crate::drive::Conn;
use crate::layout;

/// How many characters of an owner token are ever shown: as many as
/// `Client::force_release` needs at least, so that the prefix shown releases the holder.
pub const TOKEN_SHOWN: usize = 8;

/// Where the numbers come from: one server, one key prefix.
pub struct Source {
    url: String,
    prefix: String,
    keyspace: Keyspace,
    conn: Conn,
    timeout: Duration,
}

/// The server's identity.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    /// The URL, password hidden.
    pub url: String,
    /// `redis_version` (or `valkey_version`).
    pub version: Option<String>,
    /// `redis_mode`: standalone, cluster, sentinel.
    pub mode: Option<String>,
    /// `role`: master or replica.
    pub role: Option<String>,
    /// Seconds since the server started.
    pub uptime_s: Option<u64>,
    /// Connections open now (all of them, not only redlease's).
    pub connected_clients: Option<u64>,
    /// Connections whose name starts with `redlease` (`CLIENT LIST`; `None` when the user
    /// may not run it).
    pub redlease_connections: Option<u64>,
    /// Live clients of the library's registry (`Client::clients`: the clients built with
    /// `ClientBuilder::registry`).
    pub live_clients: Option<u64>,
    /// Memory used, as the server words it.
    pub used_memory: Option<String>,
}

/// One queue.
#[derive(Debug, Clone)]
pub struct QueueRow {
    /// Its name.
    pub name: String,
    /// Depth by state, its grouped jobs included (`None` with `error` set when it could not
    /// be read).
    pub stats: Option<QueueStats>,
    /// The grouped jobs alone (`PushOptions::group`; the queue's `groups()`).
    pub grouped: Option<QueueStats>,
    /// Why it could not be read.
    pub error: Option<String>,
    /// Age of the oldest ready job, ms (`None`: no ready job, or none with an enqueue time).
    pub oldest_age_ms: Option<u64>,
    /// The least lease time left among jobs in flight, ms.
    pub least_lease_left_ms: Option<u64>,
    /// Pushed, acked, failed and dead in the last complete minute of the server's clock.
    pub per_minute: Option<Rates>,
    /// Whether the queue is paused (`Queue::pause`).
    pub paused: Option<bool>,
    /// Its schedules (`Queue::schedules`), by name.
    pub schedules: Option<Vec<ScheduleRow>>,
    /// Its groups' figures.
    pub groups: Option<GroupFigures>,
}

/// One schedule of a queue.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    /// Its name.
    pub name: String,
    /// Its spec (`every 60000ms`, a cron line).
    pub spec: String,
    /// Its next occurrence's due time, Unix ms (`None`: none is left).
    pub next_ms: Option<u64>,
}

/// A queue's groups: those found holding jobs, and which of them are paused.
#[derive(Debug, Clone, Default)]
pub struct GroupFigures {
    /// The groups holding jobs (waiting or leased), by id.
    pub ids: Vec<String>,
    /// Those of them paused (`Queue::pause_group`).
    pub paused: Vec<String>,
    /// Set aside as full: not readable (the library has no call that says it).
    pub full: Option<u64>,
    /// Rate-blocked: not readable (the library has no call that says it).
    pub rate_blocked: Option<u64>,
}

impl ScheduleRow {
    /// The next occurrence as a UTC time (`2026-12-02T05:30:00Z`).
    pub fn next_utc(&self) -> Option<String> {
        self.next_ms.map(utc)
    }
}

/// Unix ms as a UTC time to the second (`2026-12-02T05:30:00Z`).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Counts per minute: (minute start in Unix ms, counts), oldest first.
pub type Minutes = Vec<(u64, Rates)>;

/// Counts over the last minute.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    /// Jobs pushed.
    pub pushed: u64,
    /// Jobs acked.
    pub acked: u64,
    /// Jobs failed (nacked).
    pub failed: u64,
    /// Jobs that went dead.
    pub dead: u64,
    /// Grouped jobs whose handler was rate limited (put back without costing a delivery).
    pub deferred: u64,
}

/// One held lock (one row per kind held under a name).
#[derive(Debug, Clone)]
pub struct LockRow {
    /// Its name.
    pub name: String,
    /// Its kind: `lease` (plain, unfenced or a RedLock's hold on this server: they share
    /// the key), `reentrant`, `fair`, `read`, `write` or `legacy`.
    pub kind: &'static str,
    /// The first characters of the holder's token (never all of it).
    pub holder: Option<String>,
    /// Time left, ms.
    pub ttl_ms: Option<i64>,
    /// The last fencing token.
    pub fence: Option<String>,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// One semaphore.
#[derive(Debug, Clone)]
pub struct SemaphoreRow {
    /// Its name.
    pub name: String,
    /// The state (`None` with `error` set when it could not be read).
    pub state: Option<SemaphoreState>,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// Everything one refresh reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When, Unix ms.
    pub at_ms: u64,
    /// The server.
    pub server: ServerInfo,
    /// Queues by name.
    pub queues: Vec<QueueRow>,
    /// Held locks by name.
    pub locks: Vec<LockRow>,
    /// Semaphores by name.
    pub semaphores: Vec<SemaphoreRow>,
    /// Whether the key walk stopped at its bound (the lists are then partial).
    pub truncated: bool,
    /// Round trips this refresh cost.
    pub round_trips: u64,
}

/// `token` cut to [`TOKEN_SHOWN`] characters followed by `…`.
pub fn short_token(token: &str) -> String {
    let shown: String = token.chars().take(TOKEN_SHOWN).collect();
    if shown.len() < token.len() {
        format!("{shown}…")
    } else {
        shown
    }
}

/// `url` with its password replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((auth, host)) => (Some(auth), host),
        None => (None, rest),
    };
    match auth {
        Some(auth) => match auth.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://***@{host}"),
        },
        None => url.to_owned(),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Source {
    /// Connects to `url`; keys under `prefix`.
    pub fn open(url: &str, prefix: &str, timeout: Duration) -> Result<Source, String> {
        let keyspace = Keyspace::new(prefix).map_err(|e| e.to_string())?;
        let conn = Conn::open(url, prefix, timeout)?;
        Ok(Source {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            keyspace,
            conn,
            timeout,
        })
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// One refresh of every view.
    pub fn snapshot(&mut self) -> Result<Snapshot, String> {
        let before = self.conn.round_trips;
        let server = self.server()?;
        let found = layout::discover(&mut self.conn, &self.prefix)?;
        let queues = self.queues(found.queues.into_iter().collect(), &found.groups)?;
        let lock_names: Vec<String> = found.locks.into_iter().collect();
        let reads = layout::read_locks(&mut self.conn, &self.prefix, &lock_names)?;
        let mut locks: Vec<LockRow> = lock_names
            .into_iter()
            .zip(reads)
            .filter(|(_, r)| r.ttl_ms.is_some() || r.token.is_some())
            .map(|(name, r)| LockRow {
                name,
                kind: "lease",
                holder: r.token.as_deref().map(short_token),
                ttl_ms: r.ttl_ms,
                fence: r.fence,
                error: None,
            })
            .collect();
        let legacy: Vec<String> = found.legacy_locks.into_iter().collect();
        let reads = layout::read_legacy(&mut self.conn, &self.prefix, &legacy)?;
        locks.extend(
            legacy
                .into_iter()
                .zip(reads)
                .filter(|(_, r)| r.token.is_some())
                .map(|(name, r)| LockRow {
                    name,
                    kind: "legacy",
                    holder: r.token.as_deref().map(short_token),
                    ttl_ms: r.ttl_ms,
                    fence: None,
                    error: None,
                }),
        );
        locks.extend(self.other_locks(found.other_locks.into_iter().collect())?);
        locks.sort_by(|a, b| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
        let semaphores = self.semaphores(found.semaphores.into_iter().collect())?;
        Ok(Snapshot {
            at_ms: now_ms(),
            server,
            queues,
            locks,
            semaphores,
            truncated: found.truncated,
            round_trips: self.conn.round_trips - before,
        })
    }

    /// The server's identity and connection counts (two pipelines: `CLIENT LIST` alone,
    /// since a user without the right to it would fail the whole pipeline).
    pub fn server(&mut self) -> Result<ServerInfo, String> {
        let info: Vec<Command> = ["server", "clients", "memory", "replication"]
            .into_iter()
            .map(|section| Command::new("INFO").arg(section))
            .collect();
        let replies = self.conn.commands(info)?;
        let text = |r: &Reply| match r {
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        let info: String = replies.iter().map(|r| text(r) + "\n").collect();
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let redlease_connections =
            match self.conn.commands(vec![Command::new("CLIENT").arg("LIST")]) {
                Ok(replies) => match replies.first() {
                    Some(r @ Reply::Bulk(_)) => Some(
                        text(r)
                            .lines()
                            .filter(|l| {
                                l.split(' ').any(|f| {
                                    f.starts_with("name=redlease") && f != "name=redlease-ops"
                                })
                            })
                            .count() as u64,
                    ),
                    _ => None,
                },
                Err(_) => None,
            };
        let live_clients = self.conn.client().clients().ok().map(|c| c.len() as u64);
        Ok(ServerInfo {
            url: redact_url(&self.url),
            live_clients,
            version: field("valkey_version").or_else(|| field("redis_version")),
            mode: field("server_mode").or_else(|| field("redis_mode")),
            role: field("role"),
            uptime_s: field("uptime_in_seconds").and_then(|v| v.parse().ok()),
            connected_clients: field("connected_clients").and_then(|v| v.parse().ok()),
            redlease_connections,
            used_memory: field("used_memory_human"),
        })
    }

    fn queue_keys(&self, name: &str) -> Result<QueueKeys, String> {
        QueueKeys::new(&self.keyspace, name).map_err(|e| e.to_string())
    }

    /// Every queue of `names`, read in a few pipelines (whatever their number); `groups`
    /// are the groups found of each.
    pub fn queues(
        &mut self,
        names: Vec<String>,
        groups: &BTreeMap<String, BTreeSet<String>>,
    ) -> Result<Vec<QueueRow>, String> {
        let deadline = self.deadline();
        // Per queue: its plain jobs' and its grouped jobs' stats, in one pipeline; whether
        // it is paused, in another.
        let mut machines = Vec::new();
        let mut pauses = Vec::new();
        let mut lists = Vec::new();
        let mut group_pauses = Vec::new();
        let mut rows = Vec::new();
        for name in names {
            let Ok(keys) = self.queue_keys(&name) else {
                continue;
            };
            let Ok(grouped) = QueueKeys::grouped(&self.keyspace, &name) else {
                continue;
            };
            let Ok(paused) = core_pause::paused_at(&keys, &PauseScope::Queue, deadline) else {
                continue;
            };
            machines.push(core_queue::stats(&keys, deadline));
            machines.push(core_queue::stats(&grouped, deadline));
            pauses.push(paused);
            lists.push(core_schedule::list(&keys, deadline));
            let ids: Vec<String> = groups
                .get(&name)
                .map(|g| g.iter().cloned().collect())
                .unwrap_or_default();
            for id in &ids {
                let scope = PauseScope::Group(id.clone());
                if let Ok(read) = core_pause::paused_at(&keys, &scope, deadline) {
                    group_pauses.push((rows.len(), id.clone(), read));
                }
            }
            let mut row = QueueRow::new(name);
            row.groups = Some(GroupFigures {
                ids,
                ..GroupFigures::default()
            });
            rows.push(row);
        }
        let mut results = self.conn.drive_all(machines)?.into_iter();
        for row in rows.iter_mut() {
            match (results.next(), results.next()) {
                (Some(Ok(plain)), Some(Ok(grouped))) => {
                    let mut all = plain;
                    all.ready += grouped.ready;
                    all.delayed += grouped.delayed;
                    all.in_flight += grouped.in_flight;
                    all.dead += grouped.dead;
                    all.oldest_ready_age = plain.oldest_ready_age.max(grouped.oldest_ready_age);
                    all.least_lease_left = match (plain.least_lease_left, grouped.least_lease_left)
                    {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    row.oldest_age_ms = all.oldest_ready_age.map(|d| d.as_millis() as u64);
                    row.least_lease_left_ms = all.least_lease_left.map(|d| d.as_millis() as u64);
                    row.stats = Some(all);
                    row.grouped = Some(grouped);
                }
                (Some(Err(e)), _) | (_, Some(Err(e))) => row.error = Some(e),
                _ => row.error = Some("no answer".to_owned()),
            }
        }
        // The pause read is a read-only script, as the stats: a user who may read the
        // stats may read it too, and a failure is the row's error.
        // The queues' pauses and their groups', in one batch.
        let queue_pauses = pauses.len();
        let (owners, group_reads): (Vec<_>, Vec<_>) = group_pauses
            .into_iter()
            .map(|(row, id, read)| ((row, id), read))
            .unzip();
        pauses.extend(group_reads);
        let mut read = self.conn.drive_all(pauses)?.into_iter();
        for (row, paused) in rows.iter_mut().zip(read.by_ref().take(queue_pauses)) {
            match paused {
                Ok(at) => row.paused = Some(at.is_some()),
                Err(e) => {
                    row.error.get_or_insert(e);
                }
            }
        }
        for ((i, id), paused) in owners.into_iter().zip(read) {
            let row = &mut rows[i];
            match paused {
                Ok(Some(_)) => {
                    if let Some(g) = row.groups.as_mut() {
                        g.paused.push(id);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    row.groups = None;
                    row.error.get_or_insert(e);
                }
            }
        }
        // The schedules, all queues in one batch (one read-only script a queue).
        for (row, listed) in rows.iter_mut().zip(self.conn.drive_all(lists)?) {
            match listed {
                Ok(list) => {
                    row.schedules = Some(
                        list.into_iter()
                            .map(|s| ScheduleRow {
                                spec: s.schedule.spec(),
                                name: s.name,
                                next_ms: s.next,
                            })
                            .collect(),
                    )
                }
                Err(e) => {
                    row.error.get_or_insert(e);
                }
            }
        }
        // The last complete minute's counts, all queues in one batch (that minute alone is
        // read: seven counters a queue).
        let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
        let last_minute = (now_ms() / 60_000).saturating_sub(1) * 60_000;
        let start = UNIX_EPOCH + Duration::from_millis(last_minute);
        let minutes = self.counts_between(&names, start, start + Duration::from_secs(59))?;
        for (row, counts) in rows.iter_mut().zip(minutes) {
            if let Ok(counts) = counts {
                let rates = counts
                    .into_iter()
                    .find(|(start, _)| *start == last_minute)
                    .map(|(_, r)| r)
                    .unwrap_or_default();
                row.per_minute = Some(rates);
            }
        }
        Ok(rows)
    }

    /// Each queue's counts per minute over the last `span`: (minute start in Unix ms,
    /// counts), oldest first; one batch for all queues.
    pub fn counts(
        &mut self,
        names: &[String],
        span: Duration,
    ) -> Result<Vec<Result<Minutes, String>>, String> {
        let to = SystemTime::now();
        let from = to.checked_sub(span).unwrap_or(UNIX_EPOCH);
        self.counts_between(names, from, to)
    }

    /// Each queue's counts per minute from `from` to `to` (the minutes they fall in); one
    /// batch for all queues.
    pub fn counts_between(
        &mut self,
        names: &[String],
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Vec<Result<Minutes, String>>, String> {
        let deadline = self.deadline();
        let mut machines = Vec::new();
        for name in names {
            let keys = self.queue_keys(name)?;
            machines
                .push(core_inspect::counts(&keys, from, to, deadline).map_err(|e| e.to_string())?);
        }
        Ok(self
            .conn
            .drive_all(machines)?
            .into_iter()
            .map(|r| {
                r.map(|minutes| {
                    minutes
                        .iter()
                        .map(|m| {
                            let start = m
                                .start
                                .duration_since(UNIX_EPOCH)
                                .map_or(0, |d| d.as_millis() as u64);
                            let n = |e: &str| m.get(e).max(0) as u64;
                            let rates = Rates {
                                pushed: n(event::PUSHED),
                                acked: n(event::ACKED),
                                failed: n(event::FAILED),
                                dead: n(event::DEAD),
                                deferred: n(event::DEFERRED),
                            };
                            (start, rates)
                        })
                        .collect()
                })
            })
            .collect())
    }

    /// A page of `queue`'s jobs in `state`, from `cursor`.
    /// With `grouped`, of its grouped jobs (the queue's `groups().jobs(..)`), each id as
    /// `<group>/<id>`.
    pub fn jobs(
        &mut self,
        queue: &str,
        state: JobStatus,
        cursor: Option<&JobCursor>,
        limit: usize,
        grouped: bool,
    ) -> Result<JobPage, String> {
        let keys = if grouped {
            QueueKeys::grouped(&self.keyspace, queue).map_err(|e| e.to_string())?
        } else {
            self.queue_keys(queue)?
        };
        let limit = limit.clamp(1, core_inspect::MAX_PAGE);
        let machine = core_inspect::list_jobs(&keys, state, cursor, limit, self.deadline())
            .map_err(|e| e.to_string())?;
        let mut page = self
            .conn
            .drive_all(vec![machine])?
            .pop()
            .unwrap_or_else(|| Err("no answer".to_owned()))?;
        for job in &mut page.jobs {
            if let (Some(group), id) = redlease::core::queue::groups::split_id(&job.id) {
                job.id = format!("{group}/{id}");
            }
        }
        Ok(page)
    }

    /// Job `id` of `queue`, wherever it is.
    pub fn job(&mut self, queue: &str, id: &str) -> Result<Option<JobInfo>, String> {
        let keys = self.queue_keys(queue)?;
        let machine = core_inspect::job_info(&keys, id, self.deadline());
        self.conn
            .drive_all(vec![machine])?
            .pop()
            .unwrap_or_else(|| Err("no answer".to_owned()))
    }

    /// The held locks of the kinds a lease lock's read does not see (reentrant, fair,
    /// read-write), each through the library's `lock_info` machine, all in one batch; one
    /// row per kind held.
    pub fn other_locks(&mut self, names: Vec<String>) -> Result<Vec<LockRow>, String> {
        let deadline = self.deadline();
        let machines: Vec<_> = names
            .iter()
            .filter_map(|n| core_locks::lock_info(&self.keyspace, n, deadline).ok())
            .collect();
        let mut rows = Vec::new();
        for (name, read) in names.iter().zip(self.conn.drive_all(machines)?) {
            let info = match read {
                Ok(info) => info,
                Err(e) => {
                    // Shown, not dropped: a lock that could not be read is still a lock.
                    rows.push(LockRow {
                        name: name.clone(),
                        kind: "n/a",
                        holder: None,
                        ttl_ms: None,
                        fence: None,
                        error: Some(lock_read_error(e)),
                    });
                    continue;
                }
            };
            for k in &info.kinds {
                let kind = match k.kind {
                    core_locks::Primitive::Reentrant => "reentrant",
                    core_locks::Primitive::Fair => "fair",
                    core_locks::Primitive::ReadWrite => match k.holders.first().map(|h| h.kind) {
                        Some(LeaseKind::Lock(LockKind::Read)) => "read",
                        _ => "write",
                    },
                    // Lease locks and semaphores have views of their own.
                    _ => continue,
                };
                if k.holders.is_empty() {
                    continue;
                }
                rows.push(LockRow {
                    name: info.name.clone(),
                    kind,
                    holder: Some(
                        k.holders
                            .iter()
                            .map(|h| short_token(&h.token_prefix))
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                    ttl_ms: k
                        .holders
                        .iter()
                        .filter_map(|h| h.remaining)
                        .min()
                        .map(|d| d.as_millis() as i64),
                    fence: info.fence.map(|f| f.to_string()),
                    error: None,
                });
            }
        }
        Ok(rows)
    }

    /// Every semaphore of `names`, read in one pipeline.
    pub fn semaphores(&mut self, names: Vec<String>) -> Result<Vec<SemaphoreRow>, String> {
        let deadline = self.deadline();
        let mut machines = Vec::new();
        let mut rows = Vec::new();
        for name in names {
            if let Ok(keys) = SemaphoreKeys::new(&self.keyspace, &name) {
                machines.push(core_semaphore::read(&keys, deadline));
                rows.push(SemaphoreRow {
                    name,
                    state: None,
                    error: None,
                });
            }
        }
        let results = self.conn.drive_all(machines)?;
        for (row, result) in rows.iter_mut().zip(results) {
            match result {
                Ok(state) => row.state = Some(state),
                Err(e) => row.error = Some(e),
            }
        }
        Ok(rows)
    }

    /// The oldest `limit` dead jobs of `queue`: its plain jobs' and its grouped jobs' dead
    /// lists (each `Queue::dead_jobs`, the grouped one through `groups()`), read in one
    /// batch and merged by time of death.
    pub fn dead(&mut self, queue: &str, limit: usize) -> Result<Vec<DeadJob>, String> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let keys = self.queue_keys(queue)?;
        let grouped = QueueKeys::grouped(&self.keyspace, queue).map_err(|e| e.to_string())?;
        let limit = limit.min(u32::MAX as usize);
        let deadline = self.deadline();
        let machines = vec![
            core_queue::dead_jobs(&keys, limit, deadline),
            core_queue::dead_jobs(&grouped, limit, deadline),
        ];
        let mut all = Vec::new();
        for listed in self.conn.drive_all(machines)? {
            all.extend(listed?);
        }
        // Oldest first; a job without a recorded time of death first of all (it died
        // before deaths were recorded). The sort is stable: each list keeps its order.
        all.sort_by_key(|d| d.died_at);
        all.truncate(limit);
        Ok(all)
    }

    /// Requeues (or with `delete`, deletes) the dead jobs of `queue` that `filter` picks,
    /// at most `limit` of them, oldest first; returns the jobs acted on (a grouped one as
    /// `<group>/<id>`). Without ids or a group, the library's bulk action pages through
    /// the whole list on the server (a page of 1,000 entries looked at, 100 acted on, per
    /// round trip), the plain jobs' list then the grouped jobs'; with ids or a group, the
    /// oldest `scan` of both lists are looked at and each job picked is acted on by its
    /// group and id.
    pub fn act_on_dead(
        &mut self,
        queue: &str,
        filter: &DeadFilter,
        action: DeadAction,
    ) -> Result<Vec<String>, String> {
        let q = self.conn.client().queue(queue).map_err(|e| e.to_string())?;
        let shown = |group: Option<&str>, id: &str| match group {
            Some(g) => format!("{g}/{id}"),
            None => id.to_owned(),
        };
        if filter.ids.is_empty() && filter.group.is_none() {
            let picked = filter.library();
            let mut done = Vec::new();
            let groups = q.groups().map_err(|e| e.to_string())?;
            for handle in [&q, &groups] {
                let left = filter.limit.saturating_sub(done.len());
                if left == 0 {
                    break;
                }
                let acted = match action {
                    DeadAction::Requeue => handle.requeue_dead_where(&picked, left),
                    DeadAction::Delete => handle.delete_dead_where(&picked, left),
                }
                .map_err(|e| e.to_string())?;
                done.extend(acted.iter().map(|r| shown(r.group.as_deref(), &r.id)));
            }
            return Ok(done);
        }
        let dead = self.dead(queue, filter.scan)?;
        let picked: Vec<DeadJob> = dead
            .into_iter()
            .filter(|d| filter.picks(d))
            .take(filter.limit)
            .collect();
        let mut done = Vec::new();
        for d in picked {
            let acted = match (action, d.group.as_deref()) {
                (DeadAction::Requeue, Some(g)) => q.requeue_dead_grouped(g, &d.id),
                (DeadAction::Requeue, None) => q.requeue_dead(&d.id),
                (DeadAction::Delete, Some(g)) => q.delete_dead_grouped(g, &d.id),
                (DeadAction::Delete, None) => q.delete_dead(&d.id),
            }
            .map_err(|e| e.to_string())?;
            if acted {
                done.push(shown(d.group.as_deref(), &d.id));
            }
        }
        Ok(done)
    }
}

/// What a forced release of `lock` by `token_prefix` would do, read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleasePlan {
    /// Nobody holds it.
    NotHeld,
    /// Another holder (its shown prefix) holds it now.
    OtherHolder(String),
    /// The holder the operator named holds it, with this much time left (ms).
    Matches(Option<i64>),
}

impl Source {
    /// What releasing `lock` held by the holder whose token starts with `token_prefix`
    /// would do (nothing is changed).
    pub fn release_plan(&mut self, lock: &str, token_prefix: &str) -> Result<ReleasePlan, String> {
        let read = layout::read_locks(&mut self.conn, &self.prefix, &[lock.to_owned()])?
            .pop()
            .unwrap_or_default();
        let token = match read.token {
            Some(t) => Some(t),
            // Not a lease lock: a lock of another kind held by one holder (the prefix the
            // library shows is 16 characters; `locks` shows 8 of them).
            None => self
                .other_locks(vec![lock.to_owned()])?
                .into_iter()
                .filter_map(|r| r.holder)
                .find(|h| !h.contains(", ")),
        };
        Ok(match token {
            None => ReleasePlan::NotHeld,
            Some(t) if t.trim_end_matches('…').starts_with(token_prefix) => {
                ReleasePlan::Matches(read.ttl_ms)
            }
            Some(t) => ReleasePlan::OtherHolder(short_token(&t)),
        })
    }
}

impl Source {
    /// Releases by force the hold of `lock` whose token starts with `token_prefix`
    /// (`Client::force_release`); whether anything was released.
    pub fn force_release(&mut self, lock: &str, token_prefix: &str) -> Result<bool, String> {
        self.conn
            .client()
            .force_release(lock, token_prefix)
            .map_err(|e| e.to_string())
    }

    /// Whether `queue` (or its `group`) is paused.
    pub fn is_paused(&mut self, queue: &str, group: Option<&str>) -> Result<bool, String> {
        let q = self.conn.client().queue(queue).map_err(|e| e.to_string())?;
        match group {
            Some(g) => q.is_group_paused(g),
            None => q.is_paused(),
        }
        .map_err(|e| e.to_string())
    }

    /// Pauses (or resumes) `queue`, or its `group`.
    pub fn set_paused(
        &mut self,
        queue: &str,
        group: Option<&str>,
        pause: bool,
    ) -> Result<(), String> {
        let q = self.conn.client().queue(queue).map_err(|e| e.to_string())?;
        match (group, pause) {
            (Some(g), true) => q.pause_group(g),
            (Some(g), false) => q.resume_group(g),
            (None, true) => q.pause(),
            (None, false) => q.resume(),
        }
        .map_err(|e| e.to_string())
    }

    /// Cancels job `id` of `queue` (of its `group`, for a grouped job).
    pub fn cancel(
        &mut self,
        queue: &str,
        group: Option<&str>,
        id: &str,
        message: &str,
    ) -> Result<redlease::queue::Cancelled, String> {
        let q = self.conn.client().queue(queue).map_err(|e| e.to_string())?;
        match group {
            Some(g) => q.cancel_grouped(g, id, message),
            None => q.cancel(id, message),
        }
        .map_err(|e| e.to_string())
    }
}

/// What to do with dead jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadAction {
    /// Back to ready.
    Requeue,
    /// Gone for good.
    Delete,
}

/// Which dead jobs an action picks.
#[derive(Debug, Clone)]
pub struct DeadFilter {
    /// Only these ids (empty: any).
    pub ids: Vec<String>,
    /// Only the jobs of this group (`None`: plain and grouped jobs alike; with ids, the
    /// ids are plain jobs' unless a group is given).
    pub group: Option<String>,
    /// Only jobs whose reason contains this text.
    pub reason_contains: Option<String>,
    /// Only jobs that died of this.
    pub cause: Option<DeathCause>,
    /// Only jobs that died at or before this time (the server's clock).
    pub died_before: Option<SystemTime>,
    /// At most this many.
    pub limit: usize,
    /// With ids: how many of the oldest dead jobs are looked at.
    pub scan: usize,
}

impl DeadFilter {
    /// The library's filter for the same jobs (all but the ids).
    fn library(&self) -> redlease::queue::dead::DeadFilter {
        let mut f = redlease::queue::dead::DeadFilter::new();
        if let Some(text) = &self.reason_contains {
            f = f.reason_contains(text.clone());
        }
        if let Some(c) = self.cause {
            f = f.cause(c);
        }
        if let Some(at) = self.died_before {
            f = f.died_before(at);
        }
        f
    }

    fn picks(&self, d: &DeadJob) -> bool {
        let group_fits = match (&self.group, &d.group) {
            (Some(want), Some(g)) => want == g,
            (Some(_), None) => false,
            // Ids without a group name plain jobs.
            (None, g) => self.ids.is_empty() || g.is_none(),
        };
        group_fits
            && (self.ids.is_empty() || self.ids.iter().any(|i| i == &d.id))
            && self
                .library()
                .picks(d.cause, d.died_at, d.reason.as_deref())
    }
}

impl QueueRow {
    /// The soonest next occurrence of its schedules, Unix ms.
    pub fn next_due(&self) -> Option<u64> {
        self.schedules
            .as_ref()?
            .iter()
            .filter_map(|s| s.next_ms)
            .min()
    }

    fn new(name: String) -> Self {
        QueueRow {
            name,
            stats: None,
            grouped: None,
            error: None,
            oldest_age_ms: None,
            least_lease_left_ms: None,
            per_minute: None,
            paused: None,
            schedules: None,
            groups: None,
        }
    }
}

/// A job as JSON (payload as a preview).
pub fn job_json(j: &JobInfo) -> Value {
    let ms = |t: Option<SystemTime>| {
        t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
    };
    json!({
        "id": j.id,
        "state": j.state.as_str(),
        "priority": j.priority,
        "enqueued_at_ms": ms(j.enqueued_at),
        "age_ms": j.age.map(|d| d.as_millis() as u64),
        "due_at_ms": ms(j.due_at),
        "deliveries": j.deliveries,
        "died_at_ms": ms(j.died_at),
        "lease_left_ms": j.lease_left.map(|d| d.as_millis() as u64),
        "payload_len": j.payload_size,
        "preview": String::from_utf8_lossy(&j.preview),
    })
}

/// A dead job as JSON (payload as a preview of at most 200 characters).
pub fn dead_json(d: &DeadJob) -> Value {
    let preview: String = String::from_utf8_lossy(&d.payload)
        .chars()
        .take(200)
        .collect();
    json!({
        "id": d.id,
        "group": d.group,
        "deliveries": d.deliveries,
        "payload_len": d.payload.len(),
        "preview": preview,
        "reason": d.reason,
        "cause": d.cause.map(|c| c.as_str()),
        "died_at_ms": d.died_at
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64),
    })
}

impl Snapshot {
    /// The whole snapshot as JSON (absent numbers are `null`).
    pub fn to_json(&self) -> Value {
        let s = &self.server;
        json!({
            "at_ms": self.at_ms,
            "server": {
                "url": s.url, "version": s.version, "mode": s.mode, "role": s.role,
                "uptime_s": s.uptime_s, "connected_clients": s.connected_clients,
                "redlease_connections": s.redlease_connections, "used_memory": s.used_memory,
                "live_clients": s.live_clients,
            },
            "queues": self.queues.iter().map(|q| json!({
                "name": q.name,
                "ready": q.stats.map(|s| s.ready),
                "delayed": q.stats.map(|s| s.delayed),
                "in_flight": q.stats.map(|s| s.in_flight),
                "dead": q.stats.map(|s| s.dead),
                "oldest_age_ms": q.oldest_age_ms,
                "least_lease_left_ms": q.least_lease_left_ms,
                "per_minute": q.per_minute.map(|r| json!({"pushed": r.pushed, "acked": r.acked, "failed": r.failed, "dead": r.dead, "deferred": r.deferred})),
                "paused": q.paused,
                "grouped_jobs": q.grouped.map(|g| g.ready + g.delayed + g.in_flight + g.dead),
                "grouped": q.grouped.map(|g| json!({"ready": g.ready, "delayed": g.delayed, "in_flight": g.in_flight, "dead": g.dead})),
                "groups": q.groups.as_ref().map(|g| g.ids.len()),
                "paused_groups": q.groups.as_ref().map(|g| g.paused.len()),
                "paused_group_ids": q.groups.as_ref().map(|g| g.paused.clone()),
                "full_groups": q.groups.as_ref().and_then(|g| g.full),
                "rate_blocked_groups": q.groups.as_ref().and_then(|g| g.rate_blocked),
                "schedules": q.schedules.as_ref().map(|l| l.iter().map(|s| json!({
                    "name": s.name, "spec": s.spec, "next_ms": s.next_ms, "next": s.next_utc(),
                })).collect::<Vec<_>>()),
                "next_due": q.next_due().map(utc),
                "next_due_ms": q.next_due(),
                "error": q.error,
            })).collect::<Vec<_>>(),
            "locks": self.locks.iter().map(|l| json!({
                "name": l.name, "kind": l.kind, "holder": l.holder, "ttl_ms": l.ttl_ms, "fence": l.fence,
                "error": l.error,
            })).collect::<Vec<_>>(),
            "semaphores": self.semaphores.iter().map(|m| json!({
                "name": m.name,
                "permits": m.state.as_ref().and_then(|s| s.permits),
                "holders": m.state.as_ref().map(|s| s.holders.iter().map(|(t, left)| json!({
                    "holder": short_token(t), "ttl_ms": left.as_millis() as u64,
                })).collect::<Vec<_>>()),
                "waiters": m.state.as_ref().map(|s| s.waiters.iter().map(|t| short_token(t)).collect::<Vec<_>>()),
                "error": m.error,
            })).collect::<Vec<_>>(),
            "truncated": self.truncated,
            "round_trips": self.round_trips,
        })
    }
}

/// A lock read refused by the server's ACL names what the read needs, whatever the
/// server's wording: Redis 6.2 and 7 say "can't run this command", Valkey "has no
/// permissions to run the 'pubsub|numsub' command".
fn lock_read_error(e: String) -> String {
    let lower = e.to_ascii_lowercase();
    let acl = ["acl failure", "noperm", "no permissions", "can't run"];
    if acl.iter().any(|m| lower.contains(m)) {
        format!(
            "not allowed to read this lock: the read needs +pubsub|numsub \
             (docs/acl.md, the read-only rule); the server said: {e}"
        )
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_tokens_are_never_shown_in_full() {
        assert_eq!(redact_url("redis://u:secret@h:1/"), "redis://u:***@h:1/");
        assert_eq!(redact_url("redis://secret@h:1/"), "redis://***@h:1/");
        assert_eq!(redact_url("redis://h:1/"), "redis://h:1/");
        assert_eq!(short_token("0123456789abcdef"), "01234567…");
        assert_eq!(short_token("abc"), "abc");
    }
}
