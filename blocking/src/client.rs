//! The client: a connection pool, settings, and the one loop that runs any core machine.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use redlease_core::keys::{DEFAULT_PREFIX, Keyspace};
use redlease_core::{Error, InvalidArgument, Protocol, Step};

use crate::listener::{Endpoint, Listeners, Waiter};
use crate::transport::{Source, Transport};
use crate::watchdog::Watchdog;

/// A handle to one Redis deployment: a pool of connections and the settings every
/// primitive made from it shares. Cheap to clone (clones share the pool).
///
/// ```no_run
/// # fn main() -> Result<(), redlease::Error> {
/// let client = redlease::Client::open("redis://127.0.0.1/")?;
/// let guard = client.lock("nightly-report").acquire()?;
/// println!("fencing token {}", guard.fence());
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// What a client owns: the shared settings and pool, and its background threads. Guards
/// hold only a weak reference to it, so dropping every `Client` handle stops the threads
/// even while guards live (their leases are then no longer renewed, and say so).
pub(crate) struct Inner {
    pub(crate) shared: Arc<Shared>,
    /// Started on the first wait that names a channel.
    listener: OnceLock<Option<Listeners>>,
    /// Started on the first watched lease.
    pub(crate) watchdog: OnceLock<Option<Watchdog>>,
}

/// The pool and settings, shared by a client and its guards.
pub(crate) struct Shared {
    /// Random, per client: part of reentrant owner ids.
    pub(crate) client_id: String,
    pub(crate) transport: Arc<Transport>,
    pub(crate) keyspace: Keyspace,
    pub(crate) op_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// Where the pub/sub listener connects (`None`: not a plain TCP URL).
    endpoint: Option<Endpoint>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("prefix", &self.inner.shared.keyspace.prefix())
            .field("op_timeout", &self.inner.shared.op_timeout)
            .field("io_timeout", &self.inner.shared.io_timeout)
            .finish_non_exhaustive()
    }
}

/// Settings of a [`Client`]; made by [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct ClientBuilder {
    url: String,
    /// `(sentinel URLs, service name)` when connecting through Sentinel.
    sentinel: Option<(Vec<String>, String)>,
    master_username: Option<String>,
    master_password: Option<String>,
    /// Through Sentinel: ask the Sentinels again after this long without news.
    sentinel_check: Duration,
    /// Seed nodes when connecting to a Redis Cluster.
    cluster: Vec<String>,
    sharded_pubsub: Option<bool>,
    pool_size: u32,
    connect_timeout: Duration,
    io_timeout: Duration,
    op_timeout: Duration,
    prefix: String,
}

impl ClientBuilder {
    /// The most pooled connections. Defaults to 16.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// How long to wait for a TCP connection (and for a free pooled connection).
    /// Defaults to 1 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long to wait for a reply before the command counts as unanswered (the socket's
    /// read and write timeouts). Defaults to 1 s.
    pub fn io_timeout(mut self, d: Duration) -> Self {
        self.io_timeout = d;
        self
    }

    /// The deadline of a release, extension or inspection, retries included; a guard's drop
    /// blocks at most this long. Defaults to 3 s.
    pub fn op_timeout(mut self, d: Duration) -> Self {
        self.op_timeout = d;
        self
    }

    /// The first part of every key (`<prefix>:{<name>}:<part>`). Defaults to `redlease`.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Redis Cluster: announce releases on shard channels (`SPUBLISH`/`SSUBSCRIBE`, Redis 7),
    /// so a release reaches only the waiters' shard instead of every node. Defaults to on for
    /// a cluster client; turn it off for a cluster older than Redis 7 (plain `PUBLISH`, which
    /// the cluster passes to every node).
    pub fn sharded_pubsub(mut self, on: bool) -> Self {
        self.sharded_pubsub = Some(on);
        self
    }

    /// Through Sentinel: the credentials of the master (and of the replica promoted in its
    /// place). Not needed for a plain URL, which carries its own.
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_username = username.map(str::to_owned);
        self.master_password = Some(password.to_owned());
        self
    }

    /// Through Sentinel: how long a client trusts the master it knows without news. A
    /// `+switch-master` announcement is followed at once (a thread per client listens for
    /// it); a connection taken from the pool after this long without news first asks a
    /// Sentinel which server is the master, so a missed announcement delays noticing a
    /// switch by at most this (plus one renewal period for a held lease to learn of it).
    /// Connections to a replaced master are dropped, and what they answered after the switch
    /// counts as unanswered. Defaults to 1 s; at least 10 ms.
    pub fn sentinel_check(mut self, every: Duration) -> Self {
        self.sentinel_check = every;
        self
    }

    /// The Sentinel lookup of `build`, with its switch watch (and the thread that listens
    /// for `+switch-master`).
    fn sentinel_lookup(
        &self,
        sentinels: Vec<redis::Client>,
        service: &str,
    ) -> Result<crate::transport::SentinelLookup, Error> {
        const MIN_CHECK: Duration = Duration::from_millis(10);
        if self.sentinel_check < MIN_CHECK {
            return Err(InvalidArgument::Setting(format!(
                "the Sentinel check interval must be at least {MIN_CHECK:?}, got {:?}",
                self.sentinel_check
            ))
            .into());
        }
        let watch = crate::sentinel::SentinelWatch::new(self.sentinel_check);
        // Detached: it ends by itself once the client (the last holder of `watch`) is gone.
        let _ = crate::sentinel::spawn_switch_listener(
            sentinels.clone(),
            service.to_owned(),
            self.connect_timeout,
            Arc::downgrade(&watch),
        );
        Ok(crate::transport::SentinelLookup {
            sentinels,
            service: service.to_owned(),
            timeout: self.connect_timeout,
            master: self.master_auth_info(),
            watch,
        })
    }

    fn master_auth_info(&self) -> redis::RedisConnectionInfo {
        let mut info = redis::RedisConnectionInfo::default();
        if let Some(user) = &self.master_username {
            info = info.set_username(user);
        }
        if let Some(password) = &self.master_password {
            info = info.set_password(password);
        }
        info
    }

    /// Checks the settings and makes the client. Connections are opened on first use, so
    /// this succeeds while Redis is down.
    pub fn build(self) -> Result<Client, Error> {
        let sharded = self.sharded_pubsub.unwrap_or(!self.cluster.is_empty());
        if sharded && self.cluster.is_empty() {
            return Err(InvalidArgument::Setting(
                "sharded pub/sub is for Redis Cluster clients".into(),
            )
            .into());
        }
        let keyspace = Keyspace::new(&self.prefix)?.with_sharded_pubsub(sharded);
        if self.pool_size == 0 {
            return Err(InvalidArgument::Setting("the pool size must be at least 1".into()).into());
        }
        for (what, d) in [
            ("connect timeout", self.connect_timeout),
            ("io timeout", self.io_timeout),
            ("op timeout", self.op_timeout),
        ] {
            if d < Duration::from_millis(1) {
                return Err(InvalidArgument::DurationTooShort { what, got: d }.into());
            }
        }
        let bad_url = |url: &str, e: redis::RedisError| {
            InvalidArgument::Setting(format!("bad Redis URL {url:?}: {e}"))
        };
        let (source, info) = match &self.sentinel {
            None if !self.cluster.is_empty() => {
                let seed = redis::Client::open(self.cluster[0].as_str())
                    .map_err(|e| bad_url(&self.cluster[0], e))?;
                let info = seed.get_connection_info().clone();
                // No retries inside the `redis` crate: it would send a command again after a
                // lost reply (a second acquire, a second take) and sleep through TRYAGAIN
                // past any deadline. Every send is the core's decision; redirections are
                // followed by the transport within the batch deadline.
                let cluster = redis::cluster::ClusterClientBuilder::new(self.cluster.clone())
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(self.io_timeout)
                    .retries(0)
                    .build()
                    .map_err(|e| bad_url(&self.cluster.join(","), e))?;
                (Source::Cluster(Box::new(cluster), seed), info)
            }
            None => {
                let redis =
                    redis::Client::open(self.url.as_str()).map_err(|e| bad_url(&self.url, e))?;
                let info = redis.get_connection_info().clone();
                (Source::Direct(redis), info)
            }
            Some((sentinels, service)) => {
                let clients = sentinels
                    .iter()
                    .map(|u| redis::Client::open(u.as_str()).map_err(|e| bad_url(u, e)))
                    .collect::<Result<Vec<_>, _>>()?;
                let info = clients
                    .first()
                    .map(|c| c.get_connection_info().clone())
                    .ok_or_else(|| InvalidArgument::Setting("no Sentinel URL given".into()))?;
                let lookup = self.sentinel_lookup(clients, service)?;
                (Source::Sentinel(lookup), info)
            }
        };
        let source = Arc::new(source);
        // Pub/sub needs plain TCP (a Unix socket or TLS URL waits without notifications).
        let endpoint = matches!(info.addr(), redis::ConnectionAddr::Tcp(..)).then(|| Endpoint {
            source: source.clone(),
            // Through Sentinel, the master's credentials are the ones given for it.
            username: match &self.sentinel {
                Some(_) => self.master_username.clone(),
                None => info.redis_settings().username().map(str::to_owned),
            },
            password: match &self.sentinel {
                Some(_) => self.master_password.clone(),
                None => info.redis_settings().password().map(str::to_owned),
            },
            connect_timeout: self.connect_timeout,
        });
        let transport = Transport::new(
            source,
            self.pool_size,
            self.connect_timeout,
            self.io_timeout,
        );
        Ok(Client {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared {
                    client_id: random_bytes::<8>()?
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                    transport: Arc::new(transport),
                    keyspace,
                    op_timeout: self.op_timeout,
                    io_timeout: self.io_timeout,
                    endpoint,
                }),
                listener: OnceLock::new(),
                watchdog: OnceLock::new(),
            }),
        })
    }
}

impl Client {
    /// Settings for a client of the Redis at `url` (`redis://[:password@]host[:port][/db]`).
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            sentinel: None,
            master_username: None,
            master_password: None,
            sentinel_check: Duration::from_secs(1),
            cluster: Vec::new(),
            sharded_pubsub: None,
            pool_size: 16,
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            op_timeout: Duration::from_secs(3),
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }

    /// Settings for a client of the master of `service`, found through the Sentinels at
    /// `sentinels` (`redis://host:port` each). New connections (and the pub/sub listener's
    /// reconnections) ask the Sentinels for the current master, so after a failover the
    /// client follows the new master. A switch is noticed when a Sentinel announces it
    /// (`+switch-master`) or, if that message is missed, at the first use of a pooled
    /// connection after [`ClientBuilder::sentinel_check`]; connections to the demoted master
    /// are then dropped (also on a `READONLY` reply). See `docs/deployment.md`.
    pub fn sentinel<S: AsRef<str>>(sentinels: &[S], service: &str) -> ClientBuilder {
        let mut b = Client::builder("");
        b.sentinel = Some((
            sentinels.iter().map(|s| s.as_ref().to_owned()).collect(),
            service.to_owned(),
        ));
        b
    }

    /// Settings for a client of the Redis Cluster that the seed nodes at `nodes` belong to.
    /// Every primitive's keys share one hash tag (`<prefix>:{<name>}:*`), so each script runs
    /// on the node owning that slot; MOVED and ASK redirections (resharding) are followed.
    /// Release notifications use shard channels (`SPUBLISH`; one listener connection per
    /// shard with waiters, `SSUBSCRIBE`), see [`ClientBuilder::sharded_pubsub`].
    pub fn cluster<S: AsRef<str>>(nodes: &[S]) -> ClientBuilder {
        let mut b = Client::builder("");
        b.cluster = nodes.iter().map(|s| s.as_ref().to_owned()).collect();
        b
    }

    /// A client of the Redis at `url` with default settings.
    pub fn open(url: &str) -> Result<Client, Error> {
        Client::builder(url).build()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn owner(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The watchdog thread, started on first use (`None` if it could not be spawned).
    pub(crate) fn watchdog(&self) -> Option<&Watchdog> {
        let shared = &self.inner.shared;
        self.inner
            .watchdog
            .get_or_init(|| Watchdog::start(shared.transport.clone(), shared.io_timeout).ok())
            .as_ref()
    }

    /// Runs a core machine to completion over the pool: the whole driver. Nothing here
    /// knows which protocol it runs.
    ///
    /// Each batch goes out on one pooled connection (pipelined) and every outcome is fed
    /// back; the connection returns to the pool before any wait, so a waiting acquisition
    /// holds no connection. A wait that names a channel is ended early by a message on it
    /// (through the client's pub/sub listener); otherwise, or while the listener is
    /// disconnected, it lasts until the machine's deadline.
    pub fn run<P: Protocol>(&self, machine: P) -> Result<P::Output, Error> {
        let listening = Listening {
            slot: &self.inner.listener,
            endpoint: self.inner.shared.endpoint.as_ref(),
            sharded: self.inner.shared.keyspace.sharded_pubsub(),
        };
        drive(&self.inner.shared, Some(listening), machine)
    }
}

/// A client's listener slot: the listener if it runs, started on demand.
pub(crate) struct Listening<'a> {
    slot: &'a OnceLock<Option<Listeners>>,
    endpoint: Option<&'a Endpoint>,
    sharded: bool,
}

impl Listening<'_> {
    fn current(&self) -> Option<&Listeners> {
        self.slot.get()?.as_ref()
    }

    fn start(&self) -> Option<&Listeners> {
        self.slot
            .get_or_init(|| {
                self.endpoint
                    .map(|e| Listeners::start(e.clone(), self.sharded))
            })
            .as_ref()
    }
}

/// The driver loop, for a client (with its listener) or a guard (`None`: waits sleep).
pub(crate) fn drive<P: Protocol>(
    shared: &Shared,
    listening: Option<Listening<'_>>,
    mut machine: P,
) -> Result<P::Output, Error> {
    let mut waiter: Option<Waiter> = None;
    let mut sent_epoch: Option<u64> = None;
    // The last batch's connection, for a batch that must follow it (a WAIT); given back to
    // the pool before any wait and at the end.
    let mut kept = None;
    loop {
        match machine.poll(Instant::now()) {
            Step::Send(batch) => {
                sent_epoch = listening
                    .as_ref()
                    .and_then(Listening::current)
                    .map(Listeners::epoch);
                for input in shared.transport.execute_keeping(&batch, &mut kept) {
                    machine.handle(input, Instant::now());
                }
            }
            Step::Wait(wait) => {
                kept = None;
                let found = wait
                    .wake_on
                    .as_ref()
                    .and_then(|on| Some((on, listening.as_ref()?.start()?)));
                match found {
                    Some((on, listener)) => {
                        if waiter.as_ref().is_none_or(|w| w.wakes_on() != on) {
                            waiter = listener.register(on, sent_epoch);
                        }
                        if let Some(w) = &waiter
                            && w.wait_until(wait.until).is_some()
                        {
                            machine.wake(Instant::now());
                        }
                    }
                    None => sleep_until(wait.until),
                }
            }
            Step::Awaiting => {
                return Err(Error::Driver("every reply of the batch was delivered"));
            }
            Step::Done(result) => return result,
        }
    }
}

fn sleep_until(until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

/// Draws `N` random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| Error::Random(e.to_string()))?;
    Ok(buf)
}
