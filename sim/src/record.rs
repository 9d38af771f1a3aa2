//! The server's own record: which token held which lock, permit or job on which node, from
//! when to when, on the server's clock. The simulator reads the keys a primitive keeps after
//! every command a server runs (and after every fault that touches a server's data), so the
//! record is what the scripts did, not what a client computed. The checker judges each
//! client's belief against it (`held-on-server`), and who ended whose hold
//! (`settled-by-holder`), and what a late attempt took (`late-attempt`).
//!
//! A hold on the server ends when its key or score expires (the server's own rule: a key
//! expired when its clock in ms is past the expiry; a score is held while the clock in ms is
//! below it), or when an observation after a command no longer finds it.

use std::collections::HashMap;

use redlease::memory::MemoryServer;
use redlease_core::Reply;
use redlease_core::keys::Keyspace;

use crate::history::Span;

/// What the observer reads on each node, for the primitive of the run.
#[derive(Debug, Clone)]
pub enum Watched {
    /// A string key holding the holder's token, its expiry the lease (lease lock, fair
    /// lock, write lock, RedLock).
    Token {
        /// The key.
        key: String,
        /// The resource name the holds are recorded under.
        resource: String,
    },
    /// A sorted set of holders, token -> expiry in server ms (semaphore permits, readers),
    /// the key's own expiry bounding them all.
    Scored {
        /// The key.
        key: String,
        /// The resource name.
        resource: String,
    },
    /// A reentrant lock's hash: a field `<owner>:h:<op>` for each hold (token: the op), the
    /// key's expiry the lease.
    Reentrant {
        /// The key.
        key: String,
        /// The resource name.
        resource: String,
    },
    /// A queue: leases (hash id -> token) and in flight (zset id -> lease expiry, server
    /// ms); each job id is its own resource.
    Jobs {
        /// The leases hash.
        leases: String,
        /// The in-flight zset.
        inflight: String,
    },
}

impl Watched {
    /// The lease lock, fair lock, read-write lock, reentrant lock or RedLock named `name`.
    pub fn lock(kind: &str, name: &str) -> Vec<Watched> {
        let stem = Keyspace::default().stem(name).unwrap_or_default();
        let resource = name.to_owned();
        match kind {
            "fair" => vec![Watched::Token {
                key: format!("{stem}:fair"),
                resource,
            }],
            "rw" => vec![
                Watched::Token {
                    key: format!("{stem}:rw:writer"),
                    resource: resource.clone(),
                },
                Watched::Scored {
                    key: format!("{stem}:rw:readers"),
                    resource,
                },
            ],
            "reentrant" => vec![Watched::Reentrant {
                key: format!("{stem}:reentrant"),
                resource,
            }],
            "semaphore" => vec![Watched::Scored {
                key: format!("{stem}:sem:holders"),
                resource,
            }],
            _ => vec![Watched::Token {
                key: format!("{stem}:lock"),
                resource,
            }],
        }
    }

    /// The jobs of queue `name`'s groups.
    pub fn grouped(name: &str) -> Vec<Watched> {
        let stem = Keyspace::default().stem(name).unwrap_or_default();
        vec![Watched::Jobs {
            leases: format!("{stem}:q:g:leases"),
            inflight: format!("{stem}:q:g:inflight"),
        }]
    }

    /// The queue named `name`.
    pub fn queue(name: &str) -> Vec<Watched> {
        let stem = Keyspace::default().stem(name).unwrap_or_default();
        vec![Watched::Jobs {
            leases: format!("{stem}:q:leases"),
            inflight: format!("{stem}:q:inflight"),
        }]
    }
}

/// The observer: the spans still open, by (node, resource, token).
#[derive(Debug, Default)]
pub struct Observer {
    /// What to read.
    pub watched: Vec<Watched>,
    /// Open spans: (node, resource, token) -> index in the span list.
    live: HashMap<(u16, String, String), usize>,
    /// The server clock's reading at global time 0 (µs since the Unix epoch).
    pub start_us: u64,
}

fn int(r: &Reply) -> Option<i64> {
    r.as_int()
}

fn text(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Reply::Status(s) => Some(s.clone()),
        _ => None,
    }
}

impl Observer {
    /// Global µs at which a key expiring at server ms `at` is gone (expired when the
    /// server's ms clock is past `at`).
    fn key_end(&self, at_ms: i64) -> u64 {
        (u64::try_from(at_ms + 1).unwrap_or(0) * 1_000).saturating_sub(self.start_us)
    }

    /// Global µs at which a score (server ms) stops holding (held while the ms clock is
    /// below it).
    fn score_end(&self, score_ms: f64) -> u64 {
        // Scores are whole ms.
        let ms = score_ms.max(0.0) as u64;
        (ms * 1_000).saturating_sub(self.start_us)
    }

    /// The key's expiry as a global µs end (`u64::MAX`: no expiry; `None`: no key).
    fn key_expiry(&self, server: &MemoryServer, key: &str, now_ms: i64) -> Option<u64> {
        match server.call(&["PTTL", key]).ok().as_ref().and_then(int) {
            Some(-2) | None => None,
            Some(-1) => Some(u64::MAX),
            Some(ms) => Some(self.key_end(now_ms + ms)),
        }
    }

    /// What node `server` holds now: (resource, token) -> end (global µs).
    /// The rate slot a grouped job's take booked for `token` (global µs), from the server's
    /// record (`<stem>s:<token>` beside the grouped keys, kept until the slot).
    fn booked(&self, server: &MemoryServer, resource: &str, token: &str) -> Option<u64> {
        if !resource.contains('\u{1f}') {
            return None;
        }
        self.watched.iter().find_map(|w| match w {
            Watched::Jobs { leases, .. } => {
                let stem = leases.strip_suffix("leases")?;
                let key = format!("{stem}s:{token}");
                let us: u64 = text(&server.call(&["GET", &key]).ok()?)?.parse().ok()?;
                us.checked_sub(self.start_us)
            }
            _ => None,
        })
    }

    fn read(&self, server: &MemoryServer, now: u64) -> Vec<(String, String, u64)> {
        let now_ms = i64::try_from((self.start_us + now) / 1_000).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        for w in &self.watched {
            match w {
                Watched::Token { key, resource } => {
                    let Some(end) = self.key_expiry(server, key, now_ms) else {
                        continue;
                    };
                    if let Some(token) = server.call(&["GET", key]).ok().as_ref().and_then(text) {
                        out.push((resource.clone(), token, end));
                    }
                }
                Watched::Scored { key, resource } => {
                    let Some(end) = self.key_expiry(server, key, now_ms) else {
                        continue;
                    };
                    if let Ok(Reply::Array(items)) =
                        server.call(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
                    {
                        for pair in items.chunks(2) {
                            let (Some(token), Some(score)) = (
                                pair.first().and_then(text),
                                pair.get(1)
                                    .and_then(text)
                                    .and_then(|s| s.parse::<f64>().ok()),
                            ) else {
                                continue;
                            };
                            let until = self.score_end(score).min(end);
                            if until > now {
                                out.push((resource.clone(), token, until));
                            }
                        }
                    }
                }
                Watched::Reentrant { key, resource } => {
                    let Some(end) = self.key_expiry(server, key, now_ms) else {
                        continue;
                    };
                    if let Ok(Reply::Array(items)) = server.call(&["HGETALL", key]) {
                        for pair in items.chunks(2) {
                            let Some(field) = pair.first().and_then(text) else {
                                continue;
                            };
                            if let Some((_, op)) = field.split_once(":h:") {
                                out.push((resource.clone(), op.to_owned(), end));
                            }
                        }
                    }
                }
                Watched::Jobs { leases, inflight } => {
                    let Ok(Reply::Array(items)) = server.call(&["HGETALL", leases]) else {
                        continue;
                    };
                    for pair in items.chunks(2) {
                        let (Some(id), Some(token)) =
                            (pair.first().and_then(text), pair.get(1).and_then(text))
                        else {
                            continue;
                        };
                        let score = server
                            .call(&["ZSCORE", inflight, &id])
                            .ok()
                            .as_ref()
                            .and_then(text)
                            .and_then(|s| s.parse::<f64>().ok());
                        if let Some(score) = score {
                            let until = self.score_end(score);
                            if until > now {
                                out.push((id, token, until));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Observes node `node` at global time `now`, after a command of `runner` (`None`: a
    /// fault or the passing of time) ran on it; updates `spans`. `set`: the command was an
    /// unfenced lock's bare `SET NX PX`.
    pub fn observe(
        &mut self,
        server: &MemoryServer,
        node: u16,
        now: u64,
        runner: Option<usize>,
        set: bool,
        spans: &mut Vec<Span>,
    ) {
        if self.watched.is_empty() {
            return;
        }
        let held = self.read(server, now);
        // Close what is no longer held: expired by then, or ended by this command.
        let mut gone = Vec::new();
        for ((n, resource, token), &i) in &self.live {
            if *n != node {
                continue;
            }
            let s = &mut spans[i];
            if s.until <= now {
                gone.push((resource.clone(), token.clone()));
                continue;
            }
            if !held.iter().any(|(r, t, _)| r == resource && t == token) {
                s.until = now;
                s.closed_by = runner;
                gone.push((resource.clone(), token.clone()));
            }
        }
        for (r, t) in gone {
            self.live.remove(&(node, r, t));
        }
        for (resource, token, until) in held {
            let k = (node, resource, token);
            match self.live.get(&k) {
                Some(&i) => spans[i].until = until,
                None => {
                    let booked = self.booked(server, &k.1, &k.2);
                    let i = spans.len();
                    spans.push(Span {
                        node,
                        resource: k.1.clone(),
                        token: k.2.clone(),
                        from: now,
                        until,
                        opened_by: runner,
                        booked,
                        opened_by_set: set,
                        closed_by: None,
                    });
                    self.live.insert(k, i);
                }
            }
        }
    }
}
