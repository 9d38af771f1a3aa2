//! Following a Sentinel switch promptly.
//!
//! After `SENTINEL FAILOVER` the old master keeps answering as a master for several
//! seconds (until the Sentinels reconfigure it), so a pooled connection to it keeps
//! "succeeding": renewals land there while the key expires on the new master. A client of a
//! Sentinel-monitored service therefore tracks which master the Sentinels name:
//!
//! - a thread subscribed to `+switch-master` on one Sentinel at a time learns of a switch
//!   as it is announced;
//! - a connection taken from the pool after [`SentinelWatch::check_every`] without news asks
//!   a Sentinel again (so a missed message costs at most that interval);
//! - every connection remembers the *generation* (the count of switches seen) it was opened
//!   under. A connection of an older generation is discarded by the pool, and replies read
//!   on it after the switch was seen are not trusted: they reach the core as "no reply"
//!   (the outcome is unknown for the service, since the demoted master's writes are lost),
//!   so a renewal is retried on the new master and an acquisition or release is resolved
//!   there by the protocol's own rules.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redlease_core::Reply;

use crate::wire::connect::TlsSettings;
use crate::wire::stream::{TlsConfig, Wire, WireError};

/// The Sentinel channel announcing a new master:
/// `<service> <old ip> <old port> <new ip> <new port>`.
const SWITCH_CHANNEL: &str = "+switch-master";

/// How often the subscriber thread looks whether its client is gone (its read timeout).
const POLL: Duration = Duration::from_millis(200);

/// What a client knows about the master of its Sentinel-monitored service.
#[derive(Debug)]
pub(crate) struct SentinelWatch {
    generation: AtomicU64,
    state: Mutex<WatchState>,
    check_every: Duration,
}

#[derive(Debug, Default)]
struct WatchState {
    master: Option<(String, u16)>,
    checked_at: Option<Instant>,
}

impl SentinelWatch {
    /// A watch that asks the Sentinels again after `check_every` without news.
    pub(crate) fn new(check_every: Duration) -> Arc<SentinelWatch> {
        Arc::new(SentinelWatch {
            generation: AtomicU64::new(0),
            state: Mutex::new(WatchState::default()),
            check_every,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WatchState> {
        // Every update is a few assignments that leave a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many switches were seen.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Records the master the Sentinels named now; another one than before is a switch.
    pub(crate) fn seen(&self, host: &str, port: u16) {
        let mut state = self.state();
        state.checked_at = Some(Instant::now());
        let named = (host.to_owned(), port);
        if state.master.as_ref() != Some(&named) {
            if state.master.is_some() {
                self.generation.fetch_add(1, Ordering::SeqCst);
            }
            state.master = Some(named);
        }
    }

    /// Whether the Sentinels should be asked again before a pooled connection is used; a
    /// `true` answer books the check for the caller, so that checks are at most one per
    /// interval whatever happens (concurrent checkouts, or Sentinels that cannot be reached
    /// and would otherwise be asked on every checkout).
    pub(crate) fn begin_check(&self) -> bool {
        let mut state = self.state();
        let due = state
            .checked_at
            .is_none_or(|t| t.elapsed() >= self.check_every);
        if due {
            state.checked_at = Some(Instant::now());
        }
        due
    }

    /// Asks for a check on the next checkout (news may have been missed).
    fn force_check(&self) {
        self.state().checked_at = None;
    }
}

/// A connection's tie to the master it was opened for.
#[derive(Debug, Clone)]
pub(crate) struct Tie {
    watch: Arc<SentinelWatch>,
    generation: u64,
}

impl Tie {
    /// Ties a connection opened now (after the Sentinels were asked) to the current master.
    pub(crate) fn now(watch: &Arc<SentinelWatch>) -> Tie {
        Tie {
            watch: watch.clone(),
            generation: watch.generation(),
        }
    }

    /// Whether the master changed since the connection was opened.
    pub(crate) fn is_stale(&self) -> bool {
        self.watch.generation() != self.generation
    }

    /// The watch it belongs to.
    pub(crate) fn watch(&self) -> &Arc<SentinelWatch> {
        &self.watch
    }
}

/// The Sentinels of a client and how they are reached (over redlease's own connections:
/// plain, or TLS through its own rustls when the Sentinel URLs are `rediss://`).
pub(crate) struct Sentinels {
    /// One per Sentinel URL (only their connection settings are used).
    pub(crate) clients: Vec<redis::Client>,
    /// `Some`: the Sentinels are reached over TLS, with these settings.
    pub(crate) tls: Option<TlsSettings>,
    /// The TLS configuration made from `tls` once.
    pub(crate) tls_config: Arc<TlsConfig>,
}

/// A connection to `sentinel`, authenticated, within `timeout`.
fn open(
    sentinel: &redis::Client,
    tls: Option<&TlsSettings>,
    tls_config: &TlsConfig,
    timeout: Duration,
) -> Result<Wire, redis::RedisError> {
    let wire = Wire::open(sentinel.get_connection_info(), tls, tls_config, timeout)?;
    wire.set_read_timeout(Some(timeout))?;
    wire.set_write_timeout(Some(timeout))?;
    Ok(wire)
}

/// Asks `sentinel` which server is the master of `service` (`SENTINEL
/// get-master-addr-by-name`): `None` when it does not know the service. The connection
/// and the reply are each bounded by `timeout`.
pub(crate) fn ask_master(
    sentinel: &redis::Client,
    tls: Option<&TlsSettings>,
    tls_config: &TlsConfig,
    service: &str,
    timeout: Duration,
) -> Result<Option<(String, u16)>, redis::RedisError> {
    let mut wire = open(sentinel, tls, tls_config, timeout)?;
    let reply = wire.request(&[b"SENTINEL", b"get-master-addr-by-name", service.as_bytes()])?;
    let bad = |what: &str| {
        redis::RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected reply to SENTINEL get-master-addr-by-name",
            what.to_owned(),
        ))
    };
    match reply {
        Reply::Nil => Ok(None),
        Reply::Array(parts) => match parts.as_slice() {
            [Reply::Bulk(host), port] => {
                let host =
                    String::from_utf8(host.clone()).map_err(|_| bad("a host that is not UTF-8"))?;
                let port = port
                    .as_int()
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| bad("a port that is not a number"))?;
                Ok(Some((host, port)))
            }
            _ => Err(bad("not a host and a port")),
        },
        Reply::Error(e) => Err(redis::make_extension_error(e.code, Some(e.message))),
        other => Err(bad(&format!("{other:?}"))),
    }
}

/// Starts the thread that listens for `+switch-master` of `service` on `sentinels` (one at
/// a time, the next one after a failure). It ends within [`POLL`] once `watch` is dropped
/// (with the client). `None` if the thread could not be spawned (the periodic check still
/// finds a switch).
pub(crate) fn spawn_switch_listener(
    sentinels: Sentinels,
    service: String,
    timeout: Duration,
    watch: Weak<SentinelWatch>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("redlease-sentinel".into())
        .spawn(move || listen(&sentinels, &service, timeout, &watch))
        .ok()
}

fn listen(sentinels: &Sentinels, service: &str, timeout: Duration, watch: &Weak<SentinelWatch>) {
    let mut next = 0usize;
    loop {
        if watch.strong_count() == 0 || sentinels.clients.is_empty() {
            return;
        }
        let sentinel = &sentinels.clients[next % sentinels.clients.len()];
        next = next.wrapping_add(1);
        let subscribed = || -> Result<(), redis::RedisError> {
            let mut wire = open(
                sentinel,
                sentinels.tls.as_ref(),
                &sentinels.tls_config,
                timeout,
            )?;
            wire.write_all(&crate::wire::resp::encode(&[
                b"SUBSCRIBE",
                SWITCH_CHANNEL.as_bytes(),
            ]))?;
            // The confirmation, within the timeout.
            if let Reply::Error(e) = wire.read_reply()? {
                return Err(redis::make_extension_error(e.code, Some(e.message)));
            }
            wire.set_read_timeout(Some(POLL))?;
            // Whatever was announced before this subscription was missed.
            if let Some(w) = watch.upgrade() {
                w.force_check();
            }
            loop {
                match wire.read_reply() {
                    Ok(Reply::Array(parts)) => {
                        let Some(w) = watch.upgrade() else {
                            return Ok(());
                        };
                        if let [Reply::Bulk(kind), _, Reply::Bulk(payload)] = parts.as_slice()
                            && kind.as_slice() == b"message"
                            && let Some((host, port)) =
                                parse_switch(&String::from_utf8_lossy(payload), service)
                        {
                            w.seen(host, port);
                        }
                    }
                    Ok(_) => {}
                    // No message within the poll: look whether the client is gone.
                    Err(WireError::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        if watch.strong_count() == 0 {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if subscribed().is_ok() {
            return;
        }
        // This Sentinel is down or gone: try the next after a pause (checking for the end).
        let until = Instant::now() + timeout.max(POLL);
        while Instant::now() < until {
            if watch.strong_count() == 0 {
                return;
            }
            std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
        }
    }
}

/// The new master's address in a `+switch-master` payload for `service`.
fn parse_switch<'a>(payload: &'a str, service: &str) -> Option<(&'a str, u16)> {
    let parts: Vec<&str> = payload.split_ascii_whitespace().collect();
    match parts.as_slice() {
        [name, _, _, host, port] if *name == service => Some((host, port.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_message_names_the_new_master_of_its_service_only() {
        let msg = "svc 127.0.0.1 6379 127.0.0.1 6380";
        assert_eq!(parse_switch(msg, "svc"), Some(("127.0.0.1", 6380)));
        assert_eq!(parse_switch(msg, "other"), None);
        assert_eq!(parse_switch("svc 1 2 3", "svc"), None);
    }

    #[test]
    fn only_a_different_master_is_a_switch() {
        let w = SentinelWatch::new(Duration::from_secs(60));
        assert!(w.begin_check());
        assert!(!w.begin_check(), "one check per interval");
        w.seen("127.0.0.1", 1);
        assert_eq!(w.generation(), 0);
        assert!(!w.begin_check());
        let tie = Tie::now(&w);
        w.seen("127.0.0.1", 1);
        assert!(!tie.is_stale());
        w.seen("127.0.0.1", 2);
        assert_eq!(w.generation(), 1);
        assert!(tie.is_stale());
        w.force_check();
        assert!(w.begin_check());
    }
}
