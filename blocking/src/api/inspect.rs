//! Who holds a lock, and who the clients are: the registry of live clients (kept by the
//! watchdog's tick), [`Client::lock_info`], [`Client::locks`], [`Client::force_release`] and
//! [`Client::clients`]. The scripts and their replies are the core's
//! ([`redlease_core::inspect`]).

use std::time::Duration;

use redlease_core::inspect::registry::{self, ClientInfo};
use redlease_core::inspect::{self, LockInfo, LockPage};
use redlease_core::{Error, InvalidArgument};

use crate::api::client::{Client, ClientBuilder};
use crate::driver::backend::{Route, drive};

impl ClientBuilder {
    /// A label for this client in the registry of live clients (say which service or
    /// worker it is: `"billing-worker"`), shown beside every lock it holds by
    /// [`Client::lock_info`] and listed by [`Client::clients`]. At most 128 bytes, no control
    /// characters. Setting a label turns the registry on (see [`registry`](Self::registry)).
    pub fn label(mut self, label: &str) -> Self {
        self.registry.label = label.to_owned();
        self.registry.on.get_or_insert(true);
        self
    }

    /// Whether this client keeps an entry in the registry of live clients
    /// (`<prefix>:{clients}:registry` and `:heartbeats`): its host, process id, label,
    /// library version, leases watched and last heartbeat, so that an operator can name the
    /// holder of a lock ([`Client::lock_info`]). **Off by default** (on when a
    /// [`label`](Self::label) is set): a client that does not ask sends exactly what it sent
    /// before, needs no right on the registry's keys and runs no thread before its first
    /// watched lease. On, the watchdog is started with the client and its tick sends one
    /// heartbeat per [`registry_heartbeat`](Self::registry_heartbeat) (one script, one
    /// round trip; nothing else); dropping the client removes its entry, and the entry of a
    /// client that died without that (killed, frozen, cut off) is dropped 3 intervals
    /// after its last heartbeat.
    pub fn registry(mut self, on: bool) -> Self {
        self.registry.on = Some(on);
        self
    }

    /// The interval between two heartbeats of this client in the registry: 10 ms to 1 h.
    /// Defaults to 10 s; its entry lives 3 intervals after each heartbeat.
    pub fn registry_heartbeat(mut self, every: Duration) -> Self {
        self.registry.heartbeat = Some(every);
        self
    }
}

/// One page of [`Client::locks`]: what it found, and where the next page starts.
pub type LockListing = LockPage;

impl Client {
    /// This client, its watchdog started when it keeps an entry in the registry (the
    /// watchdog's tick sends the heartbeats, the first one at once).
    pub(crate) fn registered(self) -> Client {
        if self.shared().registration.is_some()
            && let Some(watchdog) = self.watchdog()
        {
            watchdog.kick();
        }
        self
    }

    /// What exists under lock name `name`, of any kind (lease, reentrant, fair, read-write,
    /// semaphore; one entry per kind whose keys exist): each holder's token prefix (never the
    /// whole token: it is the holder's secret), time left on the server, hold count, and
    /// the client holding it when that client is in the registry (its label, host, process
    /// id); the last fence issued under the name; the waiters on record (a fair lock's line,
    /// a read-write lock's waiting writers, a semaphore's line) and the connections
    /// listening for its release; a semaphore's permits.
    ///
    /// One read-only script (one round trip), and one more to read the registry when
    /// something is held. Bounded by the op timeout.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// for kind in client.lock_info("invoice-42")?.kinds {
    ///     for h in &kind.holders {
    ///         let who = h.client.as_ref().map(|c| c.record.label.as_str()).unwrap_or("?");
    ///         println!("{:?} held by {} ({who}), {:?} left", kind.kind, h.token_prefix, h.remaining);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lock_info(&self, name: &str) -> Result<LockInfo, Error> {
        let shared = self.shared();
        let deadline = shared.time.now() + shared.op_timeout;
        let mut info = self.run(inspect::lock_info(&shared.keyspace, name, deadline)?)?;
        if info.holders().next().is_some() {
            let clients = self.run(registry::read(&shared.keyspace, deadline))?;
            info.name_holders(&clients);
        }
        Ok(info)
    }

    /// The live clients of the registry (see [`ClientBuilder::registry`]): those whose last
    /// heartbeat is recent enough; one read-only script. Bounded by the op timeout.
    pub fn clients(&self) -> Result<Vec<ClientInfo>, Error> {
        let shared = self.shared();
        let deadline = shared.time.now() + shared.op_timeout;
        self.run(registry::read(&shared.keyspace, deadline))
    }

    /// This client's id: the first characters of every token it draws, and its key in the
    /// registry of live clients.
    pub fn client_id(&self) -> &str {
        &self.shared().client_tag
    }

    /// One page of the locks and semaphores whose name matches `pattern` (a `SCAN MATCH`
    /// glob on the name, `*` for all), from `cursor` (0 to start, then the page's
    /// [`next`](LockPage::next) until it is `None`), examining about `count` keys (1 to
    /// 100,000): `SCAN`, never `KEYS`. A walk lists every lock held throughout it, once per
    /// key ([`FoundLock`](redlease_core::inspect::FoundLock)); see
    /// [`scan_locks`](redlease_core::inspect::scan_locks).
    ///
    /// On a Redis Cluster the walk visits every master in turn (sorted by address, as
    /// `CLUSTER SLOTS` names them): the cursor's top 16 bits are the master's index, the
    /// rest that master's own `SCAN` cursor. A master added, removed or resharded during a
    /// walk may make it miss or repeat the locks that moved.
    pub fn locks(&self, pattern: &str, cursor: u64, count: u32) -> Result<LockListing, Error> {
        let shared = self.shared();
        let deadline = shared.time.now() + shared.op_timeout;
        if let crate::driver::backend::Node::Redis(t) = &shared.node
            && t.is_cluster()
        {
            return self.locks_on_cluster(t, pattern, cursor, count, deadline);
        }
        self.run(inspect::scan_locks(
            &shared.keyspace,
            pattern,
            cursor,
            count,
            deadline,
        )?)
    }

    /// [`locks`](Self::locks) on a Cluster: one step on the master the cursor names.
    fn locks_on_cluster(
        &self,
        transport: &crate::transport::pool::Transport,
        pattern: &str,
        cursor: u64,
        count: u32,
        deadline: std::time::Instant,
    ) -> Result<LockListing, Error> {
        const NODE_SHIFT: u32 = 48;
        const STEP_MASK: u64 = (1 << NODE_SHIFT) - 1;
        let shared = self.shared();
        let [registry_key, _] = registry::keys(&shared.keyspace);
        let masters = transport.masters(&registry_key);
        let node = usize::try_from(cursor >> NODE_SHIFT).unwrap_or(usize::MAX);
        let Some(addr) = masters.get(node) else {
            if masters.is_empty() {
                return Err(Error::Unavailable {
                    attempts: 1,
                    last: redlease_core::TransportFailure::not_sent(
                        "the Cluster's masters are not known (CLUSTER SLOTS not answered)",
                    ),
                });
            }
            return Err(InvalidArgument::Setting(format!(
                "the cursor {cursor} names master {node} of {}",
                masters.len()
            ))
            .into());
        };
        let op = inspect::scan_locks(
            &shared.keyspace,
            pattern,
            cursor & STEP_MASK,
            count,
            deadline,
        )?;
        // Through the one driver loop, every batch sent to that master.
        let nodes = std::slice::from_ref(&shared.node);
        let route = Route {
            at: Some(addr),
            ..Route::new(nodes, &shared.time)
        };
        let mut page = drive(&route, op)?;
        let node = node as u64;
        page.next = match page.next {
            Some(step) if step <= STEP_MASK => Some((node << NODE_SHIFT) | step),
            Some(step) => {
                return Err(Error::UnexpectedReply {
                    context: "lock listing",
                    reply: format!("a SCAN cursor of more than 48 bits: {step}"),
                });
            }
            None if (node as usize) + 1 < masters.len() => Some((node + 1) << NODE_SHIFT),
            None => None,
        };
        Ok(page)
    }

    /// Releases by force the holds of lock `name` (any kind) whose token starts with
    /// `token_prefix`: the prefix [`lock_info`](Self::lock_info) showed (16 characters; at
    /// least 8, else [`InvalidArgument::BadTokenPrefix`] before anything is sent). Only that
    /// holder's hold is released, so a prefix read before the lock changed hands releases
    /// nothing. Waiters are woken as by the holder's own release. Returns whether it
    /// released anything.
    ///
    /// For an operator's hand on a stuck holder: the holder learns it at its next renewal
    /// (its guard then reports the lease lost) or release, not at once, and may still be
    /// working on what the lock protects meanwhile (its fence is what a resource can tell
    /// it by). After a lost reply, the retry may find the hold already released and answer
    /// `false`.
    pub fn force_release(&self, name: &str, token_prefix: &str) -> Result<bool, Error> {
        let shared = self.shared();
        let deadline = shared.time.now() + shared.op_timeout;
        let released = self.run(inspect::force_release(
            &shared.keyspace,
            name,
            token_prefix,
            deadline,
        )?)?;
        Ok(released > 0)
    }
}
