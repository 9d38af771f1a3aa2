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

/// Starts the thread that listens for `+switch-master` of `service` on `sentinels` (one at
/// a time, the next one after a failure). It ends within [`POLL`] once `watch` is dropped
/// (with the client). `None` if the thread could not be spawned (the periodic check still
/// finds a switch).
pub(crate) fn spawn_switch_listener(
    sentinels: Vec<redis::Client>,
    service: String,
    timeout: Duration,
    watch: Weak<SentinelWatch>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("redlease-sentinel".into())
        .spawn(move || listen(&sentinels, &service, timeout, &watch))
        .ok()
}

fn listen(
    sentinels: &[redis::Client],
    service: &str,
    timeout: Duration,
    watch: &Weak<SentinelWatch>,
) {
    let mut next = 0usize;
    loop {
        if watch.strong_count() == 0 || sentinels.is_empty() {
            return;
        }
        let sentinel = &sentinels[next % sentinels.len()];
        next = next.wrapping_add(1);
        let subscribed = sentinel
            .get_connection_with_timeout(timeout)
            .and_then(|mut conn| {
                conn.set_write_timeout(Some(timeout))?;
                conn.set_read_timeout(Some(POLL))?;
                let mut pubsub = conn.as_pubsub();
                pubsub.subscribe(SWITCH_CHANNEL)?;
                // Whatever was announced before this subscription was missed.
                if let Some(w) = watch.upgrade() {
                    w.force_check();
                }
                loop {
                    match pubsub.get_message() {
                        Ok(msg) => {
                            let payload: String = msg.get_payload().unwrap_or_default();
                            let Some(w) = watch.upgrade() else {
                                return Ok(());
                            };
                            if let Some((host, port)) = parse_switch(&payload, service) {
                                w.seen(host, port);
                            }
                        }
                        Err(e) if e.is_timeout() => {
                            if watch.strong_count() == 0 {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            });
        if subscribed.is_ok() {
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
