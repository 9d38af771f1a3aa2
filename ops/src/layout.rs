//! The one place of this tool that knows how redlease names its keys: finding which queues,
//! locks and semaphores exist (a `SCAN` over `<prefix>:{*`, never `KEYS`), and reading a
//! lease lock's holder, which the library does not offer yet to anyone but the holder.
//!
//! Everything here gives way to the library's own listing and `lock_info` when they land
//! (issue 30's data plane, branch `observe`); the views do not change.

use std::collections::BTreeSet;

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
    /// Lease locks held now (their `:lock` key exists).
    pub locks: BTreeSet<String>,
    /// Semaphores (a `:sem:` key).
    pub semaphores: BTreeSet<String>,
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
    let pattern = format!("{}:{{*", glob_escape(prefix));
    let mut cursor: u64 = 0;
    for step in 0.. {
        if step == MAX_SCAN_STEPS {
            found.truncated = true;
            break;
        }
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let reply = conn.command(&cmd)?;
        let (next, keys) = scan_reply(reply)?;
        for key in keys {
            let Some((name, part)) = split(prefix, &key) else {
                continue;
            };
            if part.starts_with("q:") {
                found.queues.insert(name.to_owned());
            } else if part.starts_with("sem:") {
                found.semaphores.insert(name.to_owned());
            } else if part == "lock" {
                found.locks.insert(name.to_owned());
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(found)
}

fn scan_reply(reply: redis::Value) -> Result<(u64, Vec<String>), String> {
    let bad = || "unexpected SCAN reply".to_owned();
    let redis::Value::Array(mut parts) = reply else {
        return Err(bad());
    };
    if parts.len() != 2 {
        return Err(bad());
    }
    let keys = parts.pop().ok_or_else(bad)?;
    let cursor = parts.pop().ok_or_else(bad)?;
    let cursor = match cursor {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).parse().map_err(|_| bad())?,
        _ => return Err(bad()),
    };
    let redis::Value::Array(keys) = keys else {
        return Err(bad());
    };
    let keys = keys
        .into_iter()
        .filter_map(|k| match k {
            redis::Value::BulkString(b) => String::from_utf8(b).ok(),
            _ => None,
        })
        .collect();
    Ok((cursor, keys))
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
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

/// Reads every lock of `names` in one pipeline (`GET`, `PTTL` of the lock, `GET` of its
/// fence).
pub fn read_locks(
    conn: &mut Conn,
    prefix: &str,
    names: &[String],
) -> Result<Vec<LockRead>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for name in names {
        let stem = format!("{prefix}:{{{name}}}");
        pipe.cmd("GET").arg(format!("{stem}:lock"));
        pipe.cmd("PTTL").arg(format!("{stem}:lock"));
        pipe.cmd("GET").arg(format!("{stem}:fence"));
    }
    let values = conn.pipeline(&mut pipe)?;
    Ok(values
        .chunks(3)
        .map(|c| {
            let text = |v: &redis::Value| match v {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            LockRead {
                token: text(&c[0]),
                ttl_ms: match c[1] {
                    redis::Value::Int(n) if n >= 0 => Some(n),
                    _ => None,
                },
                fence: c.get(2).and_then(text),
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
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
