//! RedLock over N independent Redis masters: a lease held while a majority of them grant it.
//!
//! Every node is asked in the same round: the requests are written to all nodes before any
//! reply is read, so an acquisition costs about one round trip (the slowest node's, capped
//! by the node timeout), not N. See [`redlease_core::redlock`] for what RedLock can and
//! cannot promise.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redlease_core::keys::{DEFAULT_PREFIX, Keyspace};
use redlease_core::lease::{LockSpec, NativeDelete, Token};
use redlease_core::limits;
use redlease_core::redlock::{QuorumAction, QuorumOp, RedLease, RedLockAcquire, RedLockOptions};
use redlease_core::{Error, InvalidArgument, Protocol};

use crate::driver::backend::{Entropy, Node, Route, Time};
use crate::transport::pool::Transport;

/// A client of N independent masters for RedLock; cheap to clone.
#[derive(Clone)]
pub struct RedLock {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    /// The clock of the nodes (real, or the test's).
    time: Time,
    /// Tokens and jitter seeds.
    entropy: Entropy,
    keyspace: Keyspace,
    node_timeout: Duration,
}

impl std::fmt::Debug for RedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLock")
            .field("nodes", &self.inner.nodes.len())
            .field("node_timeout", &self.inner.node_timeout)
            .finish_non_exhaustive()
    }
}

/// Settings of a [`RedLock`] client; made by [`RedLock::builder`]. Its `Debug` output hides
/// passwords.
#[derive(Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct RedLockBuilder {
    urls: Vec<String>,
    node_timeout: Duration,
    pool_size: u32,
    prefix: String,
    tls: crate::wire::connect::TlsSettings,
    client_name: String,
}

impl std::fmt::Debug for RedLockBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self
            .urls
            .iter()
            .map(|u| crate::wire::redact::url(u))
            .collect();
        f.debug_struct("RedLockBuilder")
            .field("urls", &urls)
            .field("node_timeout", &self.node_timeout)
            .field("pool_size", &self.pool_size)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedLockBuilder {
    /// How long each node may take to connect or answer: 1 ms to
    /// [`MAX_DURATION`](limits::MAX_DURATION), and under half of each lock's ttl (checked at
    /// acquisition); keep it much smaller than the ttl. Defaults to 50 ms.
    pub fn node_timeout(mut self, d: Duration) -> Self {
        self.node_timeout = d;
        self
    }

    /// Pooled connections per node: 1 to [`MAX_POOL_SIZE`](limits::MAX_POOL_SIZE). Defaults
    /// to 8.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// The key prefix (the same on every node). Defaults to `redlease`.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// The name each node connection gives itself (`CLIENT SETNAME`), shown by `CLIENT
    /// LIST`. Defaults to `redlease`. 1 to 64 printable ASCII characters without spaces.
    pub fn client_name(mut self, name: &str) -> Self {
        self.client_name = name.to_owned();
        self
    }

    /// TLS (`rediss://` URLs): trust the CA certificate(s) in `pem` instead of the
    /// platform's trust store. Needs the `tls-rustls` feature (on by default).
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca = Some(pem.into());
        self
    }

    /// TLS (`rediss://` URLs): present this client certificate (PEM chain) and private key
    /// (PEM) to nodes that check clients. Needs the `tls-rustls` feature (on by default).
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_cert = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Each setting within its range (see [`limits`]), and nodes that are distinct servers.
    fn check(&self) -> Result<(), Error> {
        limits::timeout("node timeout", self.node_timeout)?;
        limits::pool_size(self.pool_size)?;
        // The same server named twice (even with another db) is one failure domain counted
        // as two votes, and its second SET NX always finds the first: refuse it.
        let mut seen = std::collections::HashSet::new();
        for url in &self.urls {
            use crate::wire::connect::ConnectionTarget;
            let info = url.connection_info().map_err(InvalidArgument::Setting)?;
            let addr = info.addr().to_string();
            if !seen.insert(addr.clone()) {
                return Err(InvalidArgument::Setting(format!(
                    "RedLock nodes must be distinct servers: {addr} is given twice (as {:?})",
                    crate::wire::connect::redact_url(url)
                ))
                .into());
            }
        }
        Ok(())
    }

    /// Checks the settings and makes the client (connections open on first use). The nodes
    /// must be distinct servers (host and port, as written; a server named twice is
    /// refused).
    pub fn build(self) -> Result<RedLock, Error> {
        let keyspace = Keyspace::new(&self.prefix)?;
        if self.urls.is_empty() || self.urls.len() > usize::from(redlease_core::redlock::MAX_NODES)
        {
            return Err(InvalidArgument::Setting(format!(
                "RedLock needs 1 to {} nodes, got {}",
                redlease_core::redlock::MAX_NODES,
                self.urls.len()
            ))
            .into());
        }
        self.check()?;
        crate::wire::connect::check_client_name(&self.client_name)
            .map_err(InvalidArgument::Setting)?;
        let nodes = self
            .urls
            .iter()
            .map(|url| {
                use crate::wire::connect::ConnectionTarget;
                let info = url.connection_info().map_err(InvalidArgument::Setting)?;
                self.tls
                    .check(crate::wire::connect::is_tls(info.addr()))
                    .map_err(InvalidArgument::Setting)?;
                crate::wire::server::check_redis_crate_tls(&info, false)
                    .map_err(InvalidArgument::Setting)?;
                let redis = self.tls.client(info).map_err(|e| {
                    InvalidArgument::Setting(format!("cannot set up the connection: {e}"))
                })?;
                let mut settings = crate::transport::pool::PoolSettings::sized(self.pool_size);
                settings.client_name = Some(self.client_name.clone());
                settings.tls = Some(self.tls.clone());
                Ok(Node::Redis(Arc::new(Transport::with_settings(
                    std::sync::Arc::new(crate::transport::pool::Source::Direct(redis)),
                    &settings,
                    self.node_timeout,
                    self.node_timeout,
                    false,
                ))))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(RedLock {
            inner: Arc::new(Inner {
                nodes,
                time: Time::Real,
                entropy: Entropy::os(),
                keyspace,
                node_timeout: self.node_timeout,
            }),
        })
    }
}

impl RedLock {
    /// Settings for a client of the masters at `urls` (independent: not replicas of each other).
    pub fn builder<S: AsRef<str>>(urls: &[S]) -> RedLockBuilder {
        RedLockBuilder {
            urls: urls.iter().map(|u| u.as_ref().to_owned()).collect(),
            node_timeout: Duration::from_millis(50),
            pool_size: 8,
            prefix: DEFAULT_PREFIX.to_owned(),
            tls: crate::wire::connect::TlsSettings::default(),
            client_name: "redlease".to_owned(),
        }
    }

    /// A RedLock client of in-process servers (feature `memory`), one node each, with the
    /// default settings (50 ms node timeout, key prefix `redlease`). The servers must share
    /// one clock ([`MemoryServer::with_clock`](crate::memory::MemoryServer::with_clock)), and
    /// be distinct servers (1 to 16 of them): otherwise [`InvalidArgument`].
    ///
    /// ```
    /// use redlease::memory::{MemoryClock, MemoryServer};
    ///
    /// # fn main() -> Result<(), redlease::Error> {
    /// let clock = MemoryClock::new();
    /// let nodes: Vec<_> = (0..3).map(|_| MemoryServer::with_clock(clock.clone())).collect();
    /// let red = redlease::lock::RedLock::in_memory(&[&nodes[0], &nodes[1], &nodes[2]])?;
    /// nodes[2].pause(); // one node down: a majority still grants it
    /// let guard = red.lock("job").try_acquire()?.expect("two of three nodes grant it");
    /// assert_eq!(guard.granted(), 2);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "memory")]
    pub fn in_memory(servers: &[&crate::memory::MemoryServer]) -> Result<RedLock, Error> {
        let Some(first) = servers.first() else {
            return Err(
                InvalidArgument::Setting("RedLock needs 1 to 16 nodes, got 0".into()).into(),
            );
        };
        if servers.len() > usize::from(redlease_core::redlock::MAX_NODES) {
            return Err(InvalidArgument::Setting(format!(
                "RedLock needs 1 to {} nodes, got {}",
                redlease_core::redlock::MAX_NODES,
                servers.len()
            ))
            .into());
        }
        let clock = first.clock();
        for (i, s) in servers.iter().enumerate() {
            if !s.clock().same_as(&clock) {
                return Err(InvalidArgument::Setting(format!(
                    "RedLock's in-process nodes must share one clock: node {i} has its own"
                ))
                .into());
            }
            if servers[..i].iter().any(|o| o.same_server(s)) {
                return Err(InvalidArgument::Setting(format!(
                    "RedLock nodes must be distinct servers: node {i} is given twice"
                ))
                .into());
            }
        }
        let node_timeout = Duration::from_millis(50);
        Ok(RedLock {
            inner: Arc::new(Inner {
                nodes: servers
                    .iter()
                    .map(|s| Node::Memory {
                        server: (*s).clone(),
                        io_timeout: node_timeout,
                        crashed: Default::default(),
                    })
                    .collect(),
                time: Time::Memory(clock),
                entropy: Entropy::Seeded(std::sync::Mutex::new(
                    first.next_client().wrapping_mul(0xA076_1D64_78BD_642F) ^ 0x5EED,
                )),
                keyspace: Keyspace::default(),
                node_timeout,
            }),
        })
    }

    /// How many nodes.
    pub fn nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    /// The lock `name`, to configure and acquire.
    pub fn lock(&self, name: &str) -> QuorumLockBuilder<'_> {
        QuorumLockBuilder {
            client: self,
            name: name.to_owned(),
            ttl: Duration::from_secs(10),
            wait: Duration::from_secs(10),
            retry_max: Duration::from_millis(100),
            spec: OnceLock::new(),
        }
    }

    /// Runs a multi-node machine: each batch is written to every node it names before any
    /// reply is read (the one driver loop every primitive uses, fanned out by node).
    pub fn run<P: Protocol>(&self, machine: P) -> Result<P::Output, Error> {
        let route = Route {
            checked: false,
            ..Route::new(&self.inner.nodes, &self.inner.time)
        };
        crate::driver::backend::drive(&route, machine)
    }

    /// [`run`](Self::run), leaving the machine to the caller (to read what it found besides
    /// its output).
    fn run_mut<P: Protocol>(&self, machine: &mut P) -> Result<P::Output, Error> {
        let route = Route {
            checked: false,
            ..Route::new(&self.inner.nodes, &self.inner.time)
        };
        let mut out = [None];
        crate::driver::backend::drive_set(
            &route,
            std::slice::from_mut(machine),
            &mut out,
            &mut None,
        );
        let [out] = out;
        out.unwrap_or(Err(Error::Driver("the machine never finished")))
    }

    fn now(&self) -> Instant {
        self.inner.time.now()
    }

    /// Each node's native compare-and-delete, where its server has one (learnt when its
    /// connections were set up): cheaper for it than the release script. `None` when no
    /// node has one.
    fn native_deletes(&self) -> Option<Vec<Option<NativeDelete>>> {
        let native = |n: &Node| match n {
            Node::Redis(t) => t.server_kind().and_then(|k| k.compare_and_delete()),
            #[cfg(feature = "memory")]
            Node::Memory { .. } => None,
        };
        let nodes = &self.inner.nodes;
        nodes
            .iter()
            .any(|n| native(n).is_some())
            .then(|| nodes.iter().map(native).collect())
    }

    /// Stops choosing the native compare-and-delete on the nodes that refused it (no right
    /// to it, or not the server it seemed): the script from now on.
    fn forget_native(&self, refused: impl Iterator<Item = u16>) {
        for n in refused {
            if let Some(Node::Redis(t)) = self.inner.nodes.get(usize::from(n)) {
                t.forget_server_kind();
            }
        }
    }
}

/// Settings of one acquisition of a RedLock (a lock held by a majority of the nodes); made
/// by [`RedLock::lock`].
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until try_acquire() or acquire()"]
pub struct QuorumLockBuilder<'c> {
    client: &'c RedLock,
    name: String,
    ttl: Duration,
    wait: Duration,
    retry_max: Duration,
    /// The spec of the first acquisition: later ones bind their token to it
    /// ([`LockSpec::with_token`]) instead of building the keys and script calls again.
    /// Reset by [`ttl`](Self::ttl).
    spec: OnceLock<LockSpec>,
}

impl QuorumLockBuilder<'_> {
    /// The lease length on every node: [`MIN_TTL`](limits::MIN_TTL) (10 ms) to
    /// [`MAX_DURATION`](limits::MAX_DURATION), and more than twice the node timeout.
    /// Defaults to 10 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.spec = OnceLock::new();
        self
    }

    /// How long [`acquire`](Self::acquire) keeps retrying. Any duration: one past
    /// [`MAX_DURATION`](limits::MAX_DURATION) (100 years), such as `Duration::MAX` for "as
    /// long as it takes", counts as that, never refused. Defaults to 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Retries wait a random time up to this: [`MIN_PAUSE`](limits::MIN_PAUSE) (1 ms) to
    /// [`MAX_DURATION`](limits::MAX_DURATION). Defaults to 100 ms.
    pub fn retry_max(mut self, max: Duration) -> Self {
        self.retry_max = max;
        self
    }

    /// Tries once: `Ok(None)` when another owner holds it on a majority.
    pub fn try_acquire(&self) -> Result<Option<RedLockGuard>, Error> {
        match self.run(None) {
            Err(Error::Timeout { .. }) => Ok(None),
            other => other.map(Some),
        }
    }

    /// Retries (after random delays) until the wait time has passed.
    pub fn acquire(&self) -> Result<RedLockGuard, Error> {
        self.run(Some(self.wait))
    }

    /// The spec of one acquisition with `token`: the cached one rebound to it, or built (and
    /// cached) on the first acquisition.
    fn spec(&self, token: Token) -> Result<LockSpec, Error> {
        if let Some(spec) = self.spec.get().and_then(|s| s.with_token(token.clone())) {
            return Ok(spec);
        }
        let spec =
            LockSpec::lease(&self.client.inner.keyspace, &self.name, token, self.ttl)?.compact();
        let _ = self.spec.set(spec.clone());
        Ok(spec)
    }

    fn run(&self, wait: Option<Duration>) -> Result<RedLockGuard, Error> {
        let random: [u8; 24] = self.client.inner.entropy.bytes()?;
        let mut token = [0u8; 16];
        token.copy_from_slice(&random[..16]);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&random[16..]);
        let spec = self.spec(Token::from_random(token))?;
        let options = RedLockOptions {
            nodes: u16::try_from(self.client.nodes()).unwrap_or(u16::MAX),
            wait,
            retry_max: self.retry_max,
            node_timeout: self.client.inner.node_timeout,
        };
        let started = self.client.now();
        let mut machine = RedLockAcquire::new(spec, options, u64::from_le_bytes(seed), started)?;
        // A failed round is undone with each node's native compare-and-delete where it has one.
        if let Some(native) = self.client.native_deletes() {
            machine = machine.with_native_release(&native);
        }
        let span = crate::observe::events::span(&self.name, "redlock");
        let out = span.in_scope(|| self.client.run_mut(&mut machine));
        self.client.forget_native(machine.native_refused());
        let waited = self.client.now().saturating_duration_since(started);
        crate::observe::events::ended_as(&span, "redlock", waited, &out, |r| {
            Some((r.lease.attempts, None))
        });
        let red = out?;
        crate::observe::events::held_as("redlock");
        Ok(RedLockGuard {
            client: self.client.clone(),
            red,
            done: false,
        })
    }
}

/// A RedLock held on a majority of the nodes. Released on every node when dropped.
#[must_use = "if unused the lock is released at once"]
#[derive(Debug)]
pub struct RedLockGuard {
    client: RedLock,
    red: RedLease,
    done: bool,
}

impl RedLockGuard {
    /// Until when the lock is safely held by the local clock (the quorum's validity).
    pub fn valid_until(&self) -> Instant {
        self.red.lease.valid_until
    }

    /// Time left before [`valid_until`](Self::valid_until).
    pub fn remaining(&self) -> Duration {
        self.red.lease.remaining(self.client.now())
    }

    /// On how many nodes the key is ours: the nodes that granted it, then, after each
    /// [`extend`](Self::extend), the nodes where the key was still ours and was extended. A
    /// node that restarted empty (or where the key expired) stops counting; an extension
    /// never writes the key back there (see [`redlease_core::redlock`]).
    pub fn granted(&self) -> u16 {
        self.red.granted
    }

    /// Whether the lease is surely no longer held by a majority: an extension found the key
    /// ours on too few nodes for a quorum (nodes restarted without persistence, or the
    /// lease expired), or its validity ran out. [`remaining`](Self::remaining) is then 0.
    pub fn is_lost(&self) -> bool {
        self.remaining().is_zero()
    }

    /// Extends the lease on every node; needs a majority of nodes where the key is still
    /// ours ([`Error::NoQuorum`] when some did not answer, [`Error::NotOwner`] when too few
    /// still hold it). Afterwards [`granted`](Self::granted) is the number of nodes
    /// extended; when a quorum is surely gone the lease ends at once
    /// ([`is_lost`](Self::is_lost)); when nodes did not answer, the previous validity stands.
    pub fn extend(&mut self) -> Result<(), Error> {
        let op = QuorumOp::new(
            &self.red,
            QuorumAction::Extend(self.red.lease.ttl),
            self.client.inner.node_timeout,
        )?;
        let outcome = self.client.run(op)?;
        self.red.apply(outcome, self.client.now())
    }

    /// Releases on every node. `Ok` if at least one node still held it for us.
    pub fn release(mut self) -> Result<(), Error> {
        self.done = true;
        self.release_inner()
    }

    fn release_inner(&self) -> Result<(), Error> {
        let mut op = QuorumOp::new(
            &self.red,
            QuorumAction::Release,
            self.client.inner.node_timeout,
        )?;
        // Each node's native compare-and-delete, where its server has one.
        if let Some(native) = self.client.native_deletes() {
            op = op.with_native_release(&native);
        }
        let out = self.client.run_mut(&mut op);
        self.client.forget_native(op.native_refused());
        let out = out.and_then(|o| o.result).map(|_| ());
        crate::observe::events::released_as(&self.red.lease.target.name, "redlock", &out);
        out
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        crate::observe::events::unheld_as("redlock", self.red.lease.acquired_at, || {
            self.client.now()
        });
        if !self.done {
            let _ = self.release_inner();
        }
    }
}
