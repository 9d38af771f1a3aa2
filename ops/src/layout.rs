//! The one place of this tool that knows how redlease names its keys: finding which queues,
//! locks and semaphores exist (a `SCAN` over `<prefix>:{*`, never `KEYS`), and reading a
//! lease lock's holder.
//!
//! Everything here can give way to the library's own listings (`Client::locks`,
//! `Client::lock_info`); the views do not change.

use std::collections::{BTreeMap, BTreeSet};

use redlease::core::{Command, Reply};

use crate::drive::Conn;

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: usize = 1000;
/// A bound on `SCAN` steps per refresh, so that a huge keyspace cannot stall a refresh.
const MAX_SCAN_STEPS: usize = 50;

/// What one walk over the keyspace found, by name.
#[derive(Debug, Default, Clone)]
pub struct Found {
    /// Queues (any `:q:` key).
    pub queues: BTreeSet<String>,
    /// Lease locks held now (their `:lock` key exists): plain, unfenced and RedLock's
    /// holds on this server alike (they share the key).
    pub locks: BTreeSet<String>,
    /// Locks of the other kinds with a key now: reentrant (`:reentrant`), fair (`:fair`,
    /// `:fair:*`), read-write (`:rw:*`); read through the library's `lock_info`.
    pub other_locks: BTreeSet<String>,
    /// Legacy locks held now (`:legacy`).
    pub legacy_locks: BTreeSet<String>,
    /// Semaphores (a `:sem:` key).
    pub semaphores: BTreeSet<String>,
    /// Each queue's groups that hold jobs: waiting (`:q:g:r:<group>`) or leased
    /// (`:q:g:i:<group>`). A group with no job (paused or not) has no such key and is not
    /// found: the library lists no groups.
    pub groups: BTreeMap<String, BTreeSet<String>>,
    /// Whether the walk stopped at its bound before the end of the keyspace.
    pub truncated: bool,
}

/// `<name>` and its part from `key` = `<prefix>:{<name>}:<part>`.
fn split<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{")?;
    // The part never contains `}`; a name may.
    let close = rest.rfind("}:")?;
    Some((&rest[..close], &rest[close + 2..]))
}

/// Walks the keyspace once with `SCAN MATCH <prefix>:{*`.
pub fn discover(conn: &mut Conn, prefix: &str) -> Result<Found, String> {
    let mut found = Found::default();
    let pattern = format!("{}:{{*", redlease::core::inspect::glob_escape(prefix));
    let mut cursor: u64 = 0;
    for step in 0.. {
        if step == MAX_SCAN_STEPS {
            found.truncated = true;
            break;
        }
        let scan = Command::new("SCAN")
            .arg(cursor.to_string())
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT.to_string());
        let reply = conn.commands(vec![scan])?.pop().unwrap_or(Reply::Nil);
        let (next, keys) = scan_reply(reply)?;
        for key in keys {
            let Some((name, part)) = split(prefix, &key) else {
                continue;
            };
            if part.starts_with("q:") {
                found.queues.insert(name.to_owned());
                if let Some(group) = part
                    .strip_prefix("q:g:r:")
                    .or_else(|| part.strip_prefix("q:g:i:"))
                {
                    found
                        .groups
                        .entry(name.to_owned())
                        .or_default()
                        .insert(group.to_owned());
                }
            } else if part.starts_with("sem:") {
                found.semaphores.insert(name.to_owned());
            } else if part == "lock" {
                found.locks.insert(name.to_owned());
            } else if part == "reentrant"
                || part == "fair"
                || part.starts_with("fair:")
                || part.starts_with("rw:")
            {
                found.other_locks.insert(name.to_owned());
            } else if part == "legacy" {
                found.legacy_locks.insert(name.to_owned());
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(found)
}

fn scan_reply(reply: Reply) -> Result<(u64, Vec<String>), String> {
    let bad = || format!("unexpected SCAN reply: {reply:?}");
    let Reply::Array(parts) = &reply else {
        return Err(bad());
    };
    let [Reply::Bulk(cursor), Reply::Array(keys)] = parts.as_slice() else {
        return Err(bad());
    };
    let cursor = String::from_utf8_lossy(cursor).parse().map_err(|_| bad())?;
    let keys = keys
        .iter()
        .filter_map(|k| match k {
            Reply::Bulk(b) => String::from_utf8(b.clone()).ok(),
            _ => None,
        })
        .collect();
    Ok((cursor, keys))
}

/// A held lock as far as can be read without being its holder.
#[derive(Debug, Clone, Default)]
pub struct LockRead {
    /// The holder's token (a reentrant lock's owners are a hash: `None`).
    pub token: Option<String>,
    /// Time left on the lease in ms (`None`: gone, or no expiry).
    pub ttl_ms: Option<i64>,
    /// The last fencing token handed out.
    pub fence: Option<String>,
}

/// Reads every lock of `names` in one pipeline: the tokens and the fences with one `MGET`
/// each (per 500 names), and each lock's `PTTL` (a key of another type, such as a reentrant
/// lock's hash, reads as no token).
pub fn read_locks(
    conn: &mut Conn,
    prefix: &str,
    names: &[String],
) -> Result<Vec<LockRead>, String> {
    const CHUNK: usize = 500;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let stems: Vec<String> = names.iter().map(|n| format!("{prefix}:{{{n}}}")).collect();
    let mut commands = Vec::new();
    for chunk in stems.chunks(CHUNK) {
        let mut tokens = Command::new("MGET");
        let mut fences = Command::new("MGET");
        for stem in chunk {
            tokens = tokens.arg(format!("{stem}:lock"));
            fences = fences.arg(format!("{stem}:fence"));
        }
        commands.push(tokens);
        commands.push(fences);
    }
    for stem in &stems {
        commands.push(Command::new("PTTL").arg(format!("{stem}:lock")));
    }
    let replies = conn.commands(commands)?;
    let chunks = stems.len().div_ceil(CHUNK);
    if replies.len() != 2 * chunks + stems.len() {
        return Err("unexpected number of replies".into());
    }
    let (multi, ttls) = replies.split_at(2 * chunks);
    let text = |v: &Reply| match v {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let items = |v: &Reply| match v {
        Reply::Array(items) => items.iter().map(text).collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    let mut tokens = Vec::new();
    let mut fences = Vec::new();
    for pair in multi.chunks(2) {
        tokens.extend(items(&pair[0]));
        fences.extend(items(&pair[1]));
    }
    Ok(ttls
        .iter()
        .enumerate()
        .map(|(i, ttl)| LockRead {
            token: tokens.get(i).cloned().flatten(),
            ttl_ms: match ttl {
                Reply::Int(n) if *n >= 0 => Some(*n),
                _ => None,
            },
            fence: fences.get(i).cloned().flatten(),
        })
        .collect())
}

/// Reads every legacy lock of `names` in one pipeline: its value (`<expiry ms>:<token>`)
/// and its `PTTL`. The library has no read of a legacy lock's holder.
pub fn read_legacy(
    conn: &mut Conn,
    prefix: &str,
    names: &[String],
) -> Result<Vec<LockRead>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut commands = Vec::new();
    for n in names {
        let key = format!("{prefix}:{{{n}}}:legacy");
        commands.push(Command::new("GET").arg(&key));
        commands.push(Command::new("PTTL").arg(&key));
    }
    let replies = conn.commands(commands)?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Ok(replies
        .chunks(2)
        .map(|pair| {
            // `SETNX + GETSET` stores `<expiry ms>:<token>` (no key expiry), `SETNX +
            // PEXPIRE` the token with a key expiry.
            let value = match &pair[0] {
                Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            let (expiry, token) = match value.as_deref().map(|v| (v, v.split_once(':'))) {
                Some((_, Some((ms, token)))) if ms.parse::<i64>().is_ok() => {
                    (ms.parse::<i64>().ok(), Some(token.to_owned()))
                }
                Some((v, _)) => (None, Some(v.to_owned())),
                None => (None, None),
            };
            let pttl = match pair.get(1) {
                Some(Reply::Int(n)) if *n >= 0 => Some(*n),
                _ => None,
            };
            LockRead {
                token,
                ttl_ms: pttl.or(expiry.map(|e| e - now_ms)),
                fence: None,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_out_of_keys_even_with_braces_inside() {
        assert_eq!(
            split("redlease", "redlease:{jobs}:q:ready"),
            Some(("jobs", "q:ready"))
        );
        assert_eq!(
            split("redlease", "redlease:{a}:b}:lock"),
            Some(("a}:b", "lock"))
        );
        assert_eq!(split("redlease", "other:{jobs}:q:ready"), None);
    }
}
