//! What kind of server a connection reaches (Redis or Valkey, its version, the native
//! compare-and-set and compare-and-delete it offers), and the check that a TLS connection
//! the `redis` crate would carry has the `redis-tls` feature. Above [`stream`]: it asks
//! through the pool's own connection.

use std::time::Duration;

use redis::ConnectionInfo;
use redlease_core::lease::NativeDelete;

use crate::wire::connect::{TlsSettings, is_tls};
use crate::wire::stream;

/// Refuses a TLS connection to `info` that would be the `redis` crate's (one to a node of a
/// Redis Cluster, a `?protocol=resp3` URL, a `#insecure` URL) in a build without
/// redlease's `redis-tls` feature: the `redis` crate's TLS is then not turned on by
/// redlease, and the connection could only fail later (redlease's own connections, which
/// speak TLS through its own rustls, need no such feature).
pub(crate) fn check_redis_crate_tls(info: &ConnectionInfo, cluster: bool) -> Result<(), String> {
    if !is_tls(info.addr()) || cfg!(feature = "redis-tls") {
        return Ok(());
    }
    let what = if cluster {
        "Redis Cluster over TLS"
    } else if stream::Wire::serves(info, Some(&TlsSettings::default())) {
        return Ok(());
    } else if info.redis_settings().protocol().supports_resp3() {
        "RESP3 (`?protocol=resp3`) over TLS"
    } else {
        "a TLS URL with `#insecure`"
    };
    Err(format!(
        "{what} goes through the `redis` crate's TLS: turn on redlease's `redis-tls` feature \
         (with `redis/tokio-comp` or `redis/smol-comp` in the same build, also \
         `redis/tokio-rustls-comp` or `redis/smol-rustls-comp`)"
    ))
}

/// The server's version (`major`, `minor`) from `INFO server` (`redis_version`; Valkey
/// reports the Redis version it is compatible with there), or `None` when the server does
/// not answer within `timeout`.
pub(crate) fn server_version(client: &redis::Client, timeout: Duration) -> Option<(u32, u32)> {
    let mut conn = client.get_connection_with_timeout(timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    parse_version(&info)
}

/// `redis_version:7.0.15` in an `INFO` reply, as `(7, 0)`.
fn parse_version(info: &str) -> Option<(u32, u32)> {
    let version = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Which server a connection reached: its product and version, from `INFO server`, learnt
/// at connection set-up. It says which native commands the server has, so that a step can
/// use one instead of a script where that is cheaper for the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerKind {
    /// Valkey (`server_name:valkey`), or Redis.
    pub(crate) valkey: bool,
    /// `(major, minor, patch)`: `valkey_version` on Valkey (whose `redis_version` is the
    /// Redis version it is compatible with), `redis_version` on Redis.
    pub(crate) version: (u16, u16, u16),
}

impl ServerKind {
    /// The server an `INFO server` reply describes, or `None` when it names no version.
    pub(crate) fn from_info(info: &str) -> Option<ServerKind> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
        };
        let valkey = field("server_name") == Some("valkey");
        let text = if valkey {
            field("valkey_version")?
        } else {
            field("redis_version")?
        };
        let mut parts = text.split('.').map(|p| p.parse::<u16>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(ServerKind {
            valkey,
            version: (major, minor, patch),
        })
    }

    /// How a lock release can compare and delete without a script: Valkey 9.0+ `DELIFEQ key
    /// value`, Redis 8.4+ `DELEX key IFEQ value` (both reply 1 deleted, 0 not).
    pub(crate) fn compare_and_delete(self) -> Option<NativeDelete> {
        let (major, minor, _) = self.version;
        match self.valkey {
            true if major >= 9 => Some(NativeDelete::DelIfEq),
            false if (major, minor) >= (8, 4) => Some(NativeDelete::DelExIfEq),
            _ => None,
        }
    }

    /// Whether a lock extension can compare and set without a script: `SET key value IFEQ
    /// value PX ttl`, Valkey 8.1+ and Redis 8.4+ (`OK` set, nil not).
    pub(crate) fn compare_and_set(self) -> bool {
        let (major, minor, _) = self.version;
        if self.valkey {
            (major, minor) >= (8, 1)
        } else {
            (major, minor) >= (8, 4)
        }
    }

    /// The kind as one number (0 is reserved for "unknown"), for [`ServerNote`].
    fn pack(self) -> u64 {
        let (a, b, c) = self.version;
        1 << 63
            | u64::from(self.valkey) << 48
            | u64::from(a) << 32
            | u64::from(b) << 16
            | u64::from(c)
    }

    fn unpack(n: u64) -> Option<ServerKind> {
        (n >> 63 == 1).then_some(ServerKind {
            valkey: (n >> 48) & 1 == 1,
            version: ((n >> 32) as u16, (n >> 16) as u16, n as u16),
        })
    }
}

/// What the newest connection set-up learnt about the server ([`ServerKind`]), shared by the
/// pool's manager (which sets connections up in the background) and the transport (which
/// reads it on every operation that has a native variant: one atomic load). After a
/// failover the next connection set-up updates it; a native command the server turns out
/// not to have comes back as an error reply, and the caller falls back to the script.
#[derive(Debug, Default)]
pub(crate) struct ServerNote(std::sync::atomic::AtomicU64);

impl ServerNote {
    /// The server of the newest set-up (`None`: not known yet, or it named no version).
    pub(crate) fn get(&self) -> Option<ServerKind> {
        ServerKind::unpack(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Notes what a set-up learnt (`None`: the server did not say; scripts only).
    pub(crate) fn set(&self, kind: Option<ServerKind>) {
        let n = kind.map_or(0, ServerKind::pack);
        self.0.store(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Asks a freshly opened connection which server it reached (`INFO server`). `Ok(None)` when
/// the server refuses (a least-privilege user without `info`) or names no version: the
/// scripts serve it. An I/O error is returned: the connection is not usable.
pub(crate) fn ask_server_kind(
    conn: &mut impl redis::ConnectionLike,
) -> redis::RedisResult<Option<ServerKind>> {
    match redis::cmd("INFO").arg("server").query::<String>(conn) {
        Ok(info) => Ok(ServerKind::from_info(&info)),
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "INFO server refused; the scripts serve every step");
            Ok(None)
        }
    }
}

/// [`ask_server_kind`] on the pool's own connection.
pub(crate) fn ask_server_kind_on(
    wire: &mut stream::Wire,
) -> redis::RedisResult<Option<ServerKind>> {
    match wire.request(&[b"INFO", b"server"])? {
        redlease_core::Reply::Bulk(info) => {
            Ok(ServerKind::from_info(&String::from_utf8_lossy(&info)))
        }
        other => {
            tracing::debug!(reply = %other.describe(), "INFO server refused; the scripts serve every step");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `redis-tls`, the connections left to the `redis` crate cannot speak TLS:
    /// refused when the client is built, naming the feature; redlease's own need nothing.
    #[cfg(all(feature = "tls-rustls", not(feature = "redis-tls")))]
    #[test]
    fn tls_the_redis_crate_would_carry_needs_the_redis_tls_feature() {
        use crate::wire::connect::ConnectionTarget;
        let info = |url: &str| url.connection_info().unwrap();
        assert_eq!(check_redis_crate_tls(&info("rediss://h/"), false), Ok(()));
        assert_eq!(check_redis_crate_tls(&info("redis://h/"), true), Ok(()));
        for (url, cluster) in [
            ("rediss://h/", true),
            ("rediss://h/?protocol=resp3", false),
            ("rediss://h/#insecure", false),
        ] {
            let e = check_redis_crate_tls(&info(url), cluster).unwrap_err();
            assert!(e.contains("`redis-tls` feature"), "{url}: {e}");
        }
    }

    #[test]
    fn server_kinds_from_info() {
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        let kind = ServerKind::from_info(valkey).unwrap();
        assert_eq!(
            kind,
            ServerKind {
                valkey: true,
                version: (9, 1, 2)
            }
        );
        assert_eq!(kind.compare_and_delete(), Some(NativeDelete::DelIfEq));
        let valkey8 = ServerKind::from_info("server_name:valkey\nvalkey_version:8.1.0\n").unwrap();
        assert_eq!(valkey8.compare_and_delete(), None);
        let redis7 = ServerKind::from_info("# Server\r\nredis_version:7.0.15\r\n").unwrap();
        assert!(!redis7.valkey);
        assert_eq!(redis7.compare_and_delete(), None);
        let redis84 = ServerKind::from_info("redis_version:8.4.0\n").unwrap();
        assert_eq!(redis84.compare_and_delete(), Some(NativeDelete::DelExIfEq));
        let redis82 = ServerKind::from_info("redis_version:8.2.3\n").unwrap();
        assert_eq!(redis82.compare_and_delete(), None);
        // SET ... IFEQ: Valkey 8.1+, Redis 8.4+.
        assert!(kind.compare_and_set() && valkey8.compare_and_set() && redis84.compare_and_set());
        let valkey80 = ServerKind::from_info("server_name:valkey\nvalkey_version:8.0.2\n").unwrap();
        assert!(
            !valkey80.compare_and_set() && !redis82.compare_and_set() && !redis7.compare_and_set()
        );
        // A Valkey without its own version field is not taken for anything.
        assert_eq!(
            ServerKind::from_info("server_name:valkey\nredis_version:7.2.4\n"),
            None
        );
        assert_eq!(ServerKind::from_info("no version here"), None);
    }

    #[test]
    fn a_server_note_keeps_the_kind() {
        let note = ServerNote::default();
        assert_eq!(note.get(), None);
        for kind in [
            ServerKind {
                valkey: true,
                version: (9, 1, 2),
            },
            ServerKind {
                valkey: false,
                version: (65535, 0, 65535),
            },
        ] {
            note.set(Some(kind));
            assert_eq!(note.get(), Some(kind));
        }
        note.set(None);
        assert_eq!(note.get(), None);
    }

    #[test]
    fn versions_from_info() {
        let info = "# Server\r\nredis_version:6.2.14\r\nredis_git_sha1:0\r\n";
        assert_eq!(parse_version(info), Some((6, 2)));
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(parse_version(valkey), Some((7, 2)));
        assert_eq!(parse_version("# Server\r\n"), None);
    }
}
