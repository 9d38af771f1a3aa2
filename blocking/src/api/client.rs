//! The client: a connection pool, settings, and the one loop that runs any core machine.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redlease_core::keys::{DEFAULT_PREFIX, Keyspace};
use redlease_core::limits;
use redlease_core::{Error, InvalidArgument, Protocol};

use crate::driver::backend::{Entropy, Node, Route, Time, random_bytes};
use crate::runtime::watchdog::Watchdog;
use crate::transport::listener::{Endpoint, Listeners, Listening};
use crate::transport::pool::{PoolSettings, Source, Transport};
use crate::wire::connect::{ConnectionTarget, TlsSettings, is_tls};

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
///
/// **How long a client lives.** Its connections and background threads (the watchdog that
/// renews leases, the pub/sub listener) live while any handle that makes calls through it
/// lives: a `Client` clone, a [`Queue`](crate::queue::Queue), a [`Job`](crate::queue::Job) or a
/// [`Workers`](crate::queue::Workers) pool made from it. A [`LockGuard`](crate::lock::LockGuard) is the
/// one handle that does not keep it alive: once nothing else does, the threads stop and
/// the guard's lease reports [`LossReason::WatchdogStopped`](crate::LossReason) (its
/// release is still sent). So dropping a `Client` value is not a crash while its queue or
/// jobs live; to test a crashed process, use
/// [`MemoryServer::crash_client`](crate::memory::MemoryServer::crash_client) (feature
/// `memory`): everything the client sends stops, and its handles are refused.
///
/// **Make clients after `fork()`, never before.** A process that forks a `Client` (or a
/// [`RedLock`](crate::lock::RedLock)) gives the child copies of its pooled sockets and of the
/// random bytes it has drawn but not yet used for tokens: parent and child would then share
/// connections and could issue the same owner token, which the acquire script takes for a
/// retry of its own. The background threads are not copied either. Open a new client in
/// the child.
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
    pub(crate) listener: OnceLock<Option<Listeners>>,
    /// Started on the first watched lease.
    pub(crate) watchdog: OnceLock<Option<Watchdog>>,
}

/// The pool and settings, shared by a client and its guards.
pub(crate) struct Shared {
    /// Random, per client: part of reentrant owner ids (it starts with `client_tag`).
    pub(crate) owner_id: String,
    /// The client's id in hex: the first characters of every token it draws, and its key
    /// in the registry of live clients.
    pub(crate) client_tag: String,
    /// `client_tag` as bytes.
    pub(crate) tag_bytes: [u8; 4],
    /// The client's entry in the registry of live clients, if it keeps one.
    pub(crate) registration: Option<Arc<crate::runtime::registry::RegistryEntry>>,
    /// Where commands go: the pool, or an in-process server.
    pub(crate) node: Node,
    /// The clock every timer of this client reads.
    pub(crate) time: Time,
    /// Tokens, jitter seeds and job ids come from here.
    pub(crate) entropy: Entropy,
    pub(crate) keyspace: Keyspace,
    pub(crate) op_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// Where the pub/sub listener connects.
    endpoint: Option<Endpoint>,
    /// For [`Client::status`].
    pub(crate) counters: crate::driver::backend::Counters,
}

impl Shared {
    /// Whether waiters can be woken by a listener (else they poll).
    pub(crate) fn can_listen(&self) -> bool {
        self.endpoint.is_some()
    }
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

/// Settings of a [`Client`]; made by [`Client::builder`]. Its `Debug` output hides passwords.
#[derive(Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct ClientBuilder {
    /// The server's connection settings (or why the URL was refused, password hidden).
    target: Result<redis::ConnectionInfo, String>,
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
    min_idle: u32,
    max_lifetime: Option<Duration>,
    idle_timeout: Option<Duration>,
    client_name: String,
    tls: TlsSettings,
    connect_timeout: Duration,
    io_timeout: Duration,
    op_timeout: Duration,
    prefix: String,
    pub(crate) registry: crate::runtime::registry::RegistrySettings,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls = |u: &[String]| {
            u.iter()
                .map(|u| crate::wire::redact::url(u))
                .collect::<Vec<_>>()
        };
        f.debug_struct("ClientBuilder")
            .field("target", &self.target.as_ref().map(shown_target))
            .field(
                "sentinel",
                &self.sentinel.as_ref().map(|(s, n)| (urls(s), n)),
            )
            .field("master_username", &self.master_username)
            .field(
                "master_password",
                &crate::wire::redact::secret(&self.master_password),
            )
            .field("cluster", &urls(&self.cluster))
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("op_timeout", &self.op_timeout)
            .field("prefix", &self.prefix)
            .field("registry", &self.registry)
            .finish()
    }
}

impl ClientBuilder {
    /// The most pooled connections: 1 to [`MAX_POOL_SIZE`](limits::MAX_POOL_SIZE) (10,000).
    /// Defaults to 16.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// How many idle connections the pool keeps open, opening them in the background
    /// (ahead of demand) when fewer are idle. Defaults to 0: connections are opened on
    /// first use. At most [`pool_size`](Self::pool_size).
    pub fn min_idle(mut self, n: u32) -> Self {
        self.min_idle = n;
        self
    }

    /// How long a pooled connection is used before it is closed and replaced (`None`:
    /// forever), so that connections are spread again after a load balancer or proxy
    /// changes. Defaults to `None`. At least 1 s. Setting it (or
    /// [`idle_timeout`](Self::idle_timeout)) starts r2d2's reaper: a task every 30 s on the
    /// pool threads shared by all clients, which r2d2 never cancels (after the client is
    /// dropped it finds nothing to do).
    pub fn max_lifetime(mut self, d: Option<Duration>) -> Self {
        self.max_lifetime = d;
        self
    }

    /// How long a connection may sit idle in the pool before it is closed (`None`: never),
    /// when more than [`min_idle`](Self::min_idle) are idle. Keep it below the server's
    /// `timeout` setting. Defaults to `None`: idle connections stay open (at most
    /// [`pool_size`](Self::pool_size)) and are PINGed before reuse after a second idle, so a
    /// connection the server closed is replaced. At least 1 s. See
    /// [`max_lifetime`](Self::max_lifetime) for its cost.
    pub fn idle_timeout(mut self, d: Option<Duration>) -> Self {
        self.idle_timeout = d;
        self
    }

    /// The name every connection of this client gives itself (`CLIENT SETNAME`), shown by
    /// `CLIENT LIST` so operators can tell redlease's connections apart (pooled ones and
    /// the pub/sub listener's). Defaults to `redlease`. 1 to 64 printable ASCII characters
    /// without spaces (what Redis accepts). Not set on Redis Cluster connections, which the
    /// `redis` crate opens node by node.
    pub fn client_name(mut self, name: &str) -> Self {
        self.client_name = name.to_owned();
        self
    }

    /// TLS (`rediss://` URLs): trust the CA certificate(s) in `pem` instead of the
    /// platform's trust store, for servers with a private CA. Used for every connection of
    /// the client, Sentinels and cluster nodes included. Needs the `tls-rustls` feature (on
    /// by default); a bad PEM fails [`build`](Self::build).
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca = Some(pem.into());
        self
    }

    /// TLS (`rediss://` URLs): present this client certificate (PEM chain) with its private
    /// key (PEM) to servers that check clients (`tls-auth-clients yes`). Needs the
    /// `tls-rustls` feature (on by default).
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_cert = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// How long to wait for a TCP connection (and for a free pooled connection): 1 ms to
    /// [`MAX_DURATION`](limits::MAX_DURATION) (100 years). Defaults to 1 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long to wait for a reply before the command counts as unanswered (the socket's
    /// read and write timeouts): 1 ms to [`MAX_DURATION`](limits::MAX_DURATION). Defaults to
    /// 1 s.
    pub fn io_timeout(mut self, d: Duration) -> Self {
        self.io_timeout = d;
        self
    }

    /// The deadline of a release, extension or inspection, retries included; a guard's drop
    /// blocks at most this long: 1 ms to [`MAX_DURATION`](limits::MAX_DURATION). Defaults to
    /// 3 s.
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
    /// so a release reaches only the waiters' shard instead of every node. By default
    /// [`build`](Self::build) asks a seed node its version (`INFO server`, bounded by the
    /// connect timeout): on for Redis 7.0 and later (and Valkey), off for older servers and
    /// when no seed answers (plain `PUBLISH`, which every version has and the cluster passes
    /// to every node). Set it to choose without asking.
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
        tls: bool,
    ) -> Result<crate::transport::pool::SentinelLookup, Error> {
        const MIN_CHECK: Duration = Duration::from_millis(10);
        if self.sentinel_check < MIN_CHECK {
            return Err(InvalidArgument::Setting(format!(
                "the Sentinel check interval must be at least {MIN_CHECK:?}, got {:?}",
                self.sentinel_check
            ))
            .into());
        }
        let watch = crate::transport::sentinel::SentinelWatch::new(self.sentinel_check);
        let tls = tls.then(|| self.tls.clone());
        let tls_config = Arc::new(crate::wire::stream::TlsConfig::default());
        // Detached: it ends by itself once the client (the last holder of `watch`) is gone.
        let _ = crate::transport::sentinel::spawn_switch_listener(
            crate::transport::sentinel::Sentinels {
                clients: sentinels.clone(),
                tls: tls.clone(),
                tls_config: tls_config.clone(),
            },
            service.to_owned(),
            self.connect_timeout,
            Arc::downgrade(&watch),
        );
        Ok(crate::transport::pool::SentinelLookup {
            sentinels,
            service: service.to_owned(),
            timeout: self.connect_timeout,
            master: self.master_auth_info(),
            tls,
            tls_config,
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

    /// Each setting within its range (see [`limits`]).
    fn check_ranges(&self) -> Result<(), Error> {
        limits::pool_size(self.pool_size)?;
        limits::timeout("connect timeout", self.connect_timeout)?;
        limits::timeout("io timeout", self.io_timeout)?;
        limits::timeout("op timeout", self.op_timeout)?;
        Ok(())
    }

    /// [`build`](Self::build), then [`Client::ping`]: fails at once when Redis cannot be
    /// reached ([`Error::Unavailable`], naming `host:port`) or refuses the configuration
    /// ([`Error::Configuration`]: a wrong or missing password, a database it does not have).
    /// For applications that should not start without Redis.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// let client = redlease::Client::builder("redis://:secret@127.0.0.1:6379/")
    ///     .build_and_check()?;
    /// # let _ = client;
    /// # Ok(()) }
    /// ```
    pub fn build_and_check(self) -> Result<Client, Error> {
        let client = self.build()?;
        client.ping()?;
        Ok(client)
    }

    /// Checks the settings and makes the client. Connections are opened on first use, so
    /// this succeeds while Redis is down (a cluster client asks a seed node its version
    /// first, unless [`sharded_pubsub`](Self::sharded_pubsub) was set; see there);
    /// [`build_and_check`](Self::build_and_check) does not.
    pub fn build(self) -> Result<Client, Error> {
        if self.sharded_pubsub == Some(true) && self.cluster.is_empty() {
            return Err(InvalidArgument::Setting(
                "sharded pub/sub is for Redis Cluster clients".into(),
            )
            .into());
        }
        let keyspace = Keyspace::new(&self.prefix)?;
        self.check_ranges()?;
        self.check_pool()?;
        self.registry.check()?;
        let setting = InvalidArgument::Setting;
        let url_info = |url: &str| url.connection_info().map_err(setting);
        let tls_client = |info: redis::ConnectionInfo| {
            self.tls
                .client(info)
                .map_err(|e| setting(format!("cannot set up the connection: {e}")))
        };
        let (source, info) = match &self.sentinel {
            None if !self.cluster.is_empty() => {
                let seeds = self
                    .cluster
                    .iter()
                    .map(|u| url_info(u))
                    .collect::<Result<Vec<_>, _>>()?;
                let info = seeds[0].clone();
                let tls = is_tls(info.addr());
                self.tls.check(tls).map_err(setting)?;
                crate::wire::server::check_redis_crate_tls(&info, true).map_err(setting)?;
                let seed = tls_client(info.clone())?;
                #[allow(unused_mut)]
                // No retries inside the `redis` crate: it would send a command again after a
                // lost reply (a second acquire, a second take) and sleep through TRYAGAIN
                // past any deadline. Every send is the core's decision; redirections are
                // followed by the transport within the batch deadline.
                let mut cluster = redis::cluster::ClusterClientBuilder::new(seeds)
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(self.io_timeout)
                    .retries(0);
                #[cfg(feature = "redis-tls")]
                if tls {
                    crate::wire::connect::install_crypto_provider();
                    cluster = cluster.certs(self.tls.certificates());
                }
                // The redis crate's cluster errors name no URL (so no password).
                let cluster = cluster
                    .build()
                    .map_err(|e| setting(format!("bad Redis Cluster settings: {e}")))?;
                (Source::Cluster(Box::new(cluster), seed), info)
            }
            None => {
                let info = self.target.clone().map_err(setting)?;
                self.tls.check(is_tls(info.addr())).map_err(setting)?;
                crate::wire::server::check_redis_crate_tls(&info, false).map_err(setting)?;
                let redis = tls_client(info.clone())?;
                (Source::Direct(redis), info)
            }
            Some((sentinels, service)) => {
                let infos = sentinels
                    .iter()
                    .map(|u| url_info(u))
                    .collect::<Result<Vec<_>, _>>()?;
                let tls = infos.first().is_some_and(|i| is_tls(i.addr()));
                self.tls.check(tls).map_err(setting)?;
                let clients = infos
                    .into_iter()
                    .map(tls_client)
                    .collect::<Result<Vec<_>, _>>()?;
                let info = clients
                    .first()
                    .map(|c| c.get_connection_info().clone())
                    .ok_or_else(|| InvalidArgument::Setting("no Sentinel URL given".into()))?;
                let lookup = self.sentinel_lookup(clients, service, tls)?;
                (Source::Sentinel(lookup), info)
            }
        };
        let sharded = match (&source, self.sharded_pubsub) {
            (_, Some(on)) => on,
            (Source::Cluster(_, seed), None) => {
                crate::wire::server::server_version(seed, self.connect_timeout)
                    .is_some_and(|v| v >= (7, 0))
            }
            _ => false,
        };
        let keyspace = keyspace.with_sharded_pubsub(sharded);
        let tag_bytes = random_bytes::<4>()?;
        let ids = Ids::new(tag_bytes, random_bytes::<4>()?);
        let registration = self.registry.registration(&keyspace, &ids.tag)?;
        let source = Arc::new(source);
        let endpoint = Some(Endpoint {
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
            tls: self.tls.clone(),
            client_name: Some(self.client_name.clone()),
        });
        let transport = Transport::with_settings(
            source,
            &self.pool_settings(),
            self.connect_timeout,
            self.io_timeout,
            true,
        );
        Ok(Client {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared {
                    owner_id: ids.client_id,
                    client_tag: ids.tag,
                    tag_bytes,
                    registration,
                    node: Node::Redis(Arc::new(transport)),
                    time: Time::Real,
                    entropy: Entropy::os(),
                    keyspace,
                    op_timeout: self.op_timeout,
                    io_timeout: self.io_timeout,
                    endpoint,
                    counters: Default::default(),
                }),
                listener: OnceLock::new(),
                watchdog: OnceLock::new(),
            }),
        }
        .registered())
    }
}

/// A client's ids: its tag (the first characters of its tokens) and its id (of reentrant
/// owners), which starts with the tag.
struct Ids {
    tag: String,
    client_id: String,
}

impl Ids {
    fn new(tag: [u8; 4], more: [u8; 4]) -> Ids {
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let tag = hex(&tag);
        Ids {
            client_id: format!("{tag}{}", hex(&more)),
            tag,
        }
    }
}

#[cfg(feature = "memory")]
impl ClientBuilder {
    /// Makes a client of the in-process `server` (feature `memory`) with these settings'
    /// key prefix, io timeout (what a reply swallowed by an injected fault costs) and op
    /// timeout; the connection settings are not used. Its every timer (ttl, waits, backoff,
    /// the watchdog's schedule) runs on the server's [`MemoryClock`](crate::memory::MemoryClock).
    pub fn build_in_memory(self, server: &crate::memory::MemoryServer) -> Result<Client, Error> {
        let keyspace = Keyspace::new(&self.prefix)?;
        self.check_ranges()?;
        self.registry.check()?;
        Client::on_server(
            server,
            keyspace,
            self.io_timeout,
            self.op_timeout,
            &self.registry,
        )
    }
}

impl ClientBuilder {
    /// Checks the pool settings (r2d2 would panic on some of them).
    fn check_pool(&self) -> Result<(), Error> {
        if self.min_idle > self.pool_size {
            return Err(InvalidArgument::Setting(format!(
                "min idle must be 0 to the pool size ({}), got {}",
                self.pool_size, self.min_idle
            ))
            .into());
        }
        for (what, d) in [
            ("max lifetime", self.max_lifetime),
            ("idle timeout", self.idle_timeout),
        ] {
            if let Some(got) = d
                && got < Duration::from_secs(1)
            {
                return Err(InvalidArgument::Setting(format!(
                    "{what} must be None or at least 1 s, got {got:?}"
                ))
                .into());
            }
        }
        crate::wire::connect::check_client_name(&self.client_name)
            .map_err(InvalidArgument::Setting)?;
        Ok(())
    }

    fn pool_settings(&self) -> PoolSettings {
        PoolSettings {
            max_size: self.pool_size,
            min_idle: self.min_idle,
            max_lifetime: self.max_lifetime,
            idle_timeout: self.idle_timeout,
            client_name: Some(self.client_name.clone()),
            tls: Some(self.tls.clone()),
        }
    }
}

impl Client {
    /// Settings for a client of the Redis at `target`: a URL
    /// (`redis://[[username]:password@]host[:port][/db]`, `rediss://` for TLS,
    /// `unix:///path/to/redis.sock` or `redis+unix://` for a Unix socket) or anything else
    /// the `redis` crate connects to (a `redis::ConnectionInfo`, `(host, port)`), see
    /// [`ConnectionTarget`]. A URL that does not parse fails [`build`](ClientBuilder::build)
    /// (its password is not shown in the error).
    ///
    /// A password alone authenticates as the `default` user (`requirepass`);
    /// `username:password` as a Redis 6+ ACL user (see `docs/acl.md` for the permissions).
    /// Characters such as `@` or `:` in a password are percent-encoded. A wrong or missing
    /// password gives [`Error::Configuration`] at once.
    pub fn builder(target: impl ConnectionTarget) -> ClientBuilder {
        ClientBuilder {
            target: target.connection_info(),
            sentinel: None,
            master_username: None,
            master_password: None,
            sentinel_check: Duration::from_secs(1),
            cluster: Vec::new(),
            sharded_pubsub: None,
            pool_size: 16,
            min_idle: 0,
            max_lifetime: None,
            idle_timeout: None,
            client_name: "redlease".to_owned(),
            tls: TlsSettings::default(),
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            op_timeout: Duration::from_secs(3),
            prefix: DEFAULT_PREFIX.to_owned(),
            registry: Default::default(),
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

    /// A client of the Redis at `target` (a URL, see [`builder`](Self::builder)) with
    /// default settings.
    pub fn open(target: impl ConnectionTarget) -> Result<Client, Error> {
        Client::builder(target).build()
    }

    /// Sets up a new connection (outside the pool, bounded by the connect timeout), sends
    /// `PING` (bounded by the io timeout) and returns the round trip. Fails at once, without
    /// retries: [`Error::Configuration`] when Redis refuses the client's configuration (a
    /// wrong password, a password it does not expect, a missing one, a database it does not
    /// have: the message says what to fix), [`Error::Unavailable`] naming `host:port` when
    /// it cannot be reached. Call it at start-up to fail fast; the locks and queues retry
    /// transient failures until their deadlines, but never a refused configuration.
    pub fn ping(&self) -> Result<Duration, Error> {
        match &self.inner.shared.node {
            Node::Redis(transport) => transport.ping(),
            #[cfg(feature = "memory")]
            Node::Memory { server, .. } => match server.call(&["PING"]) {
                Ok(_) => Ok(Duration::ZERO),
                Err(fault) => Err(Error::Unavailable {
                    attempts: 1,
                    last: fault.into(),
                }),
            },
        }
    }

    /// A client of the in-process `server` with default settings (feature `memory`): the
    /// whole API, no socket, on the server's clock. Several clients of one server play
    /// several processes. Same as [`MemoryServer::client`](crate::memory::MemoryServer::client).
    #[cfg(feature = "memory")]
    pub fn in_memory(server: &crate::memory::MemoryServer) -> Client {
        let (io, op) = (Duration::from_secs(1), Duration::from_secs(3));
        let off = crate::runtime::registry::RegistrySettings::default();
        match Client::on_server(server, Keyspace::default(), io, op, &off) {
            Ok(client) => client,
            // The default settings are valid, and the registry is off: nothing can fail.
            Err(_) => unreachable!("a default in-memory client cannot fail"),
        }
    }

    #[cfg(feature = "memory")]
    fn on_server(
        server: &crate::memory::MemoryServer,
        keyspace: Keyspace,
        io_timeout: Duration,
        op_timeout: Duration,
        registry: &crate::runtime::registry::RegistrySettings,
    ) -> Result<Client, Error> {
        // The n-th client of a server draws the same tokens and jitter in every run.
        let n = server.next_client();
        let seed = n.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0xE703_7ED1_A0B4_28DB;
        // Its id too: the seed's first bytes, then n.
        let tag_bytes = {
            let mut b = [0u8; 4];
            b.copy_from_slice(&seed.to_be_bytes()[..4]);
            b
        };
        let more = {
            let mut b = [0u8; 4];
            b.copy_from_slice(&n.to_be_bytes()[4..]);
            b
        };
        let ids = Ids::new(tag_bytes, more);
        let registration = registry.registration(&keyspace, &ids.tag)?;
        Ok(Client {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared {
                    owner_id: ids.client_id,
                    client_tag: ids.tag,
                    tag_bytes,
                    registration,
                    node: Node::Memory {
                        server: server.clone(),
                        io_timeout,
                        crashed: Default::default(),
                    },
                    time: Time::Memory(server.clock()),
                    entropy: Entropy::Seeded(std::sync::Mutex::new(seed)),
                    keyspace,
                    op_timeout,
                    io_timeout,
                    endpoint: None,
                    counters: Default::default(),
                }),
                listener: OnceLock::new(),
                watchdog: OnceLock::new(),
            }),
        }
        .registered())
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The in-process server this client talks to, and its crash switch.
    #[cfg(feature = "memory")]
    pub(crate) fn memory_node(
        &self,
    ) -> Option<(
        &crate::memory::MemoryServer,
        &Arc<std::sync::atomic::AtomicBool>,
    )> {
        match &self.inner.shared.node {
            Node::Memory {
                server, crashed, ..
            } => Some((server, crashed)),
            _ => None,
        }
    }

    pub(crate) fn owner(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The listener slot (`None`: not started; `Some(None)`: could not be started).
    pub(crate) fn listeners(&self) -> Option<&Option<Listeners>> {
        self.inner.listener.get()
    }

    /// The pub/sub listener(s), started on first use (`None`: no endpoint, as on the
    /// in-process server, or they could not be started).
    pub(crate) fn start_listeners(&self) -> Option<&Listeners> {
        let (endpoint, sharded) = (
            self.inner.shared.endpoint.as_ref(),
            self.inner.shared.keyspace.sharded_pubsub(),
        );
        self.inner
            .listener
            .get_or_init(|| endpoint.map(|e| Listeners::start(e.clone(), sharded)))
            .as_ref()
    }

    /// The watchdog if it was started.
    pub(crate) fn watchdog_if_started(&self) -> Option<&Watchdog> {
        self.inner.watchdog.get()?.as_ref()
    }

    /// The watchdog thread, started on first use (`None` if it could not be spawned).
    pub(crate) fn watchdog(&self) -> Option<&Watchdog> {
        let shared = &self.inner.shared;
        self.inner
            .watchdog
            .get_or_init(|| {
                Watchdog::start(
                    shared.node.clone(),
                    shared.time.clone(),
                    shared.io_timeout,
                    shared.registration.clone(),
                )
                .ok()
            })
            .as_ref()
    }

    /// [`Client::run`]'s body (that method is documented with the machines, after the
    /// primitives).
    pub(crate) fn run_machine<P: Protocol>(&self, machine: P) -> Result<P::Output, Error> {
        let listening = Listening::new(
            &self.inner.listener,
            self.inner.shared.endpoint.as_ref(),
            self.inner.shared.keyspace.sharded_pubsub(),
        );
        drive(&self.inner.shared, Some(listening), machine)
    }
}

/// The driver loop (see [`crate::driver::backend::drive`]) for a client (with its listener) or a
/// guard (`None`: waits sleep).
pub(crate) fn drive<P: Protocol>(
    shared: &Shared,
    listening: Option<Listening<'_>>,
    machine: P,
) -> Result<P::Output, Error> {
    let route = Route {
        nodes: std::slice::from_ref(&shared.node),
        time: &shared.time,
        listening,
        counters: Some(&shared.counters),
        checked: true,
        hold: false,
        at: None,
    };
    crate::driver::backend::drive(&route, machine)
}

/// A connection target as a URL with its password shown as `***`, for `Debug` output.
fn shown_target(info: &redis::ConnectionInfo) -> String {
    let redis = info.redis_settings();
    let auth = match (redis.username(), redis.password()) {
        (Some(user), Some(_)) => format!("{user}:***@"),
        (None, Some(_)) => ":***@".to_owned(),
        (Some(user), None) => format!("{user}@"),
        (None, None) => String::new(),
    };
    let db = redis.db();
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("redis://{auth}{host}:{port}/{db}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{auth}{host}:{port}/{db}")
        }
        redis::ConnectionAddr::Unix(path) => format!("unix://{auth}{}?db={db}", path.display()),
        other => format!("{auth}{other}/{db}"),
    }
}

/// The in-process server's clients (feature `memory`).
#[cfg(feature = "memory")]
impl crate::memory::MemoryServer {
    /// A client of this server with default settings: the whole blocking API (every lock,
    /// RedLock through [`RedLock::in_memory`](crate::lock::RedLock::in_memory), the semaphore, the
    /// queue, `run_once`, the watchdog), no socket, every timer on this server's
    /// [`clock`](Self::clock). Call it again for another client (another process, as far as
    /// the locks can tell). For other settings (key prefix, timeouts):
    /// [`ClientBuilder::build_in_memory`](ClientBuilder::build_in_memory).
    pub fn client(&self) -> Client {
        Client::in_memory(self)
    }

    /// Crashes `client` as its process would crash (a fault): from now on it sends nothing.
    /// Its watchdog renews nothing (its leases run out on the server: its jobs are
    /// redelivered after their visibility timeout, its locks free when their ttl ends), and
    /// every call through it, or through a handle made from it (a guard, a `Queue`, a
    /// `Job`, `Workers`), fails at once with [`Error::Unavailable`]
    /// without reaching the server: its acks and releases are refused. The handles stay as
    /// stale handles (dropping them sends nothing either). A crash cannot be undone: make a
    /// new client (a restarted process).
    ///
    /// Dropping a [`Client`] is not a crash: a `Queue`, `Job` or `Workers`
    /// made from it keeps it working while it lives (see [`Client`]).
    ///
    /// False (and nothing done) when `client` is not a client of this server.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redlease::memory::MemoryServer;
    ///
    /// # fn main() -> Result<(), redlease::Error> {
    /// let server = MemoryServer::new();
    /// let (a, b) = (server.client(), server.client());
    /// let queue = a.queue("mail")?.visibility(Duration::from_secs(60));
    /// queue.push("hello")?;
    /// let job = queue.try_take()?.expect("pushed");
    /// assert!(server.crash_client(&a));
    /// server.clock().advance(Duration::from_secs(61));
    /// // Redelivered to another worker; the crashed one's ack is refused.
    /// let again = b.queue("mail")?.try_take()?.expect("redelivered");
    /// assert_eq!(again.delivery(), 2);
    /// assert!(job.ack().is_err());
    /// again.ack()?;
    /// # Ok(()) }
    /// ```
    pub fn crash_client(&self, client: &Client) -> bool {
        match client.memory_node() {
            Some((server, crashed)) if server.same_server(self) => {
                crashed.store(true, std::sync::atomic::Ordering::SeqCst);
                // Waits of its threads end, to find the crash.
                self.clock().kick();
                true
            }
            _ => false,
        }
    }
}
