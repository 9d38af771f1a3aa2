//! [`Client::status`]: a cheap snapshot of what a client is doing, for health pages and
//! debugging. Reading it takes a few uncontended locks and sends nothing to Redis.

use crate::api::client::Client;
use crate::transport::listener::ListenerStatus;

/// What a client is doing now; made by [`Client::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStatus {
    /// The connection pool.
    pub pool: PoolStatus,
    /// Leases of live guards (and jobs) that the watchdog renews.
    pub leases_watched: usize,
    /// Threads of this client waiting right now between two attempts: acquisitions and
    /// queue takes waiting for a busy lock or an empty queue (and, briefly, a release or
    /// extension retrying after a failure).
    pub waiters: usize,
    /// The pub/sub listener that wakes waiters.
    pub listener: ListenerStatus,
}

/// The connection pool of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStatus {
    /// Open connections (in use or idle).
    pub connections: u32,
    /// Open connections not in use.
    pub idle: u32,
    /// The most connections the pool opens ([`ClientBuilder::pool_size`](crate::ClientBuilder::pool_size)).
    pub max: u32,
}

impl Client {
    /// A snapshot of the client: its pool, the leases its watchdog renews, the threads
    /// waiting, and its listener. Cheap (nothing is sent to Redis); for health checks and
    /// debugging.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let status = client.status();
    /// println!("{} of {} connections idle", status.pool.idle, status.pool.max);
    /// # Ok(()) }
    /// ```
    pub fn status(&self) -> ClientStatus {
        let shared = self.shared();
        let (connections, idle, max) = match &shared.node {
            crate::driver::backend::Node::Redis(transport) => transport.pool_state(),
            // An in-process server needs no connection.
            #[cfg(feature = "memory")]
            crate::driver::backend::Node::Memory { .. } => (0, 0, 0),
        };
        let listener = match self.listeners() {
            Some(Some(l)) => l.status(),
            Some(None) => ListenerStatus {
                started: true,
                ..ListenerStatus::default()
            },
            None => ListenerStatus {
                available: shared.can_listen(),
                ..ListenerStatus::default()
            },
        };
        ClientStatus {
            pool: PoolStatus {
                connections,
                idle,
                max,
            },
            leases_watched: self.watchdog_if_started().map_or(0, |w| w.watched()),
            waiters: shared.counters.waiters(),
            listener,
        }
    }
}
