//! The only code that talks to Redis: a pool of connections and one function that sends a
//! batch of commands and turns what comes back into core inputs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use redis::{ConnectionLike, Value};
use redlease_core::script::is_read_only_refusal;
use redlease_core::{
    Batch, Error, FailureKind, NodeId, Reply, Request, RequestId, Response, TransportFailure,
};

use crate::adapter;
use crate::transport::sentinel::{SentinelWatch, Tie};

/// The shortest read timeout used for a batch whose deadline is about to pass.
const MIN_IO_TIMEOUT: Duration = Duration::from_millis(1);

/// How far a batch's reply timeout must differ from the io timeout to change the socket's.
const SHORTEN_SLACK: Duration = Duration::from_millis(20);

/// A pooled connection, marked broken after any transport error so the pool discards it
/// (a reply that is still in flight must never be read as the answer to a later command).
pub(crate) struct Conn {
    inner: Link,
    broken: bool,
    last_used: Instant,
    /// Through Sentinel: the master this connection was opened for.
    tie: Option<Tie>,
    /// The bytes of the last batch written on a single server's connection, kept so the
    /// next batch is encoded without allocating (see [`KEEP_OUT`]).
    out: Vec<u8>,
}

/// A connection keeps its write buffer between batches up to this capacity; a larger one
/// (a batch of large values) is given back after its write.
const KEEP_OUT: usize = 16 * 1024;

impl Conn {
    /// Whether the Sentinels named another master since this connection was opened.
    fn is_stale(&self) -> bool {
        self.tie.as_ref().is_some_and(Tie::is_stale)
    }
}

/// A connection to one server, or to a Redis Cluster (which routes every command to the
/// node owning its first key's slot, and follows MOVED and ASK redirections).
///
/// Both are boxed so that a pooled connection is a few words: it moves into and out of the
/// pool on every checkout, and a move of the whole `redis::Connection` is a large copy.
pub(crate) enum Link {
    /// Our own connection (plain TCP or Unix socket, RESP2): see [`crate::wire::stream`].
    Own(Box<crate::wire::stream::Wire>),
    /// The `redis` crate's (TLS, or RESP3 asked for in the URL).
    Single(Box<redis::Connection>),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Link {
    fn set_read_timeout(&self, d: Option<Duration>) -> redis::RedisResult<()> {
        match self {
            Link::Own(w) => Ok(w.set_read_timeout(d)?),
            Link::Single(c) => c.set_read_timeout(d),
            Link::Cluster(c) => c.set_read_timeout(d),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Link::Own(w) => w.is_open(),
            Link::Single(c) => c.is_open(),
            Link::Cluster(c) => c.is_open(),
        }
    }

    fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Link::Own(w) => match w.request(&[b"PING"])? {
                Reply::Error(e) => Err(redis::make_extension_error(e.code, Some(e.message))),
                _ => Ok(()),
            },
            Link::Single(c) => redis::cmd("PING").query(c.as_mut()),
            Link::Cluster(c) => redis::cmd("PING").query(c.as_mut()),
        }
    }
}

/// A pooled connection idle longer than this is PINGed before use: a Redis restart or an
/// idle timeout leaves dead connections in the pool, and a command sent on one would come
/// back as "no reply" (outcome unknown) when it surely never ran. The PING is ours, not the
/// pool's (`test_on_check_out` only asks the Sentinels): it is bounded by the time left to
/// the caller's deadline, where the pool's would wait a whole io timeout on a frozen server
/// (see [`Transport::check_out`]).
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Opens connections with a connect timeout and sets their read and write timeouts.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    source: Arc<Source>,
    connect_timeout: Duration,
    io_timeout: Duration,
    setup: Arc<Setup>,
    /// Given to every new connection with `CLIENT SETNAME`.
    client_name: Option<String>,
    /// The client's TLS settings, for our own TLS connections (`None`: the `redis`
    /// crate's), and the configuration made from them.
    tls: Option<crate::wire::connect::TlsSettings>,
    tls_config: Arc<crate::wire::stream::TlsConfig>,
}

/// What the last connection set-up said about the client's configuration, shared by the
/// pool's manager (which sets up connections in the background) and the transport.
#[derive(Debug, Default)]
struct Setup {
    /// Why the last set-up was refused for a reason retrying cannot fix (a wrong password,
    /// a database the server does not have); cleared by the next set-up that succeeds.
    refused: Mutex<Option<String>>,
    /// A thread is setting up a connection outside the pool to learn its outcome now.
    probing: AtomicBool,
    /// Which server the newest connection reached (not asked on a cluster: scripts there).
    server: crate::wire::server::ServerNote,
    /// A read-only script call (`EVALSHA_RO`) was refused (Redis before 7.0, or a user not
    /// granted it): they are sent as `EVALSHA` from then on.
    read_only_refused: AtomicBool,
}

impl Setup {
    fn refused(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, problem: Option<String>) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = problem;
    }
}

/// The pool's size and connection lifetimes (see the `ClientBuilder` methods of the same
/// names).
#[derive(Debug, Clone)]
pub(crate) struct PoolSettings {
    pub(crate) max_size: u32,
    pub(crate) min_idle: u32,
    pub(crate) max_lifetime: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) client_name: Option<String>,
    /// The client's TLS settings (`None`: TLS connections are the `redis` crate's, made
    /// with the settings its client holds).
    pub(crate) tls: Option<crate::wire::connect::TlsSettings>,
}

impl PoolSettings {
    /// `max_size` connections, made on demand, kept for the client's lifetime (no reaper).
    pub(crate) fn sized(max_size: u32) -> Self {
        PoolSettings {
            max_size,
            min_idle: 0,
            max_lifetime: None,
            idle_timeout: None,
            client_name: None,
            tls: None,
        }
    }
}

/// Where connections go: one address, or whichever master the Sentinels name at the time
/// (so that after a failover, new connections reach the new master).
pub(crate) enum Source {
    /// A fixed server.
    Direct(redis::Client),
    /// The master of a Sentinel-monitored service.
    Sentinel(SentinelLookup),
    /// A Redis Cluster; the plain client (of a seed node) is for the pub/sub listener.
    Cluster(Box<redis::cluster::ClusterClient>, redis::Client),
}

/// Asks Sentinels which server is the master of a service: `SENTINEL
/// get-master-addr-by-name`, each Sentinel in turn, every connection and reply bounded by
/// `timeout` (so a dead or frozen Sentinel costs at most that; nothing is locked while
/// asking).
pub(crate) struct SentinelLookup {
    pub(crate) sentinels: Vec<redis::Client>,
    pub(crate) service: String,
    pub(crate) timeout: Duration,
    /// The master's connection settings (database, credentials) without its address.
    pub(crate) master: redis::RedisConnectionInfo,
    /// `Some`: the Sentinels were given as `rediss://` URLs, so the master is reached
    /// over TLS too, with these settings.
    pub(crate) tls: Option<crate::wire::connect::TlsSettings>,
    /// The TLS configuration made from `tls` once (the trust store is loaded once).
    pub(crate) tls_config: Arc<crate::wire::stream::TlsConfig>,
    /// Which master the Sentinels named last, and how many switches were seen.
    pub(crate) watch: Arc<SentinelWatch>,
}

impl SentinelLookup {
    fn master(&self) -> Result<redis::Client, redis::RedisError> {
        let mut last =
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no Sentinel to ask"));
        for sentinel in &self.sentinels {
            let asked = crate::transport::sentinel::ask_master(
                sentinel,
                self.tls.as_ref(),
                &self.tls_config,
                &self.service,
                self.timeout,
            );
            match asked {
                Ok(Some((host, port))) => {
                    use redis::IntoConnectionInfo;
                    self.watch.seen(&host, port);
                    let addr = match &self.tls {
                        None => redis::ConnectionAddr::Tcp(host, port),
                        Some(_) => redis::ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure: false,
                            tls_params: None,
                        },
                    };
                    let info = addr
                        .into_connection_info()?
                        .set_redis_settings(self.master.clone());
                    return match &self.tls {
                        Some(tls) => tls.client(info),
                        None => redis::Client::open(info),
                    };
                }
                Ok(None) => {
                    last = redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "the Sentinel does not know the service",
                    ));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Direct(c) => write!(f, "Direct({:?})", c.get_connection_info().addr()),
            Source::Sentinel(_) => f.write_str("Sentinel"),
            Source::Cluster(..) => f.write_str("Cluster"),
        }
    }
}

impl Source {
    /// The server, for messages: `host:port` (never the password), or how it is found.
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::Direct(c) => c.get_connection_info().addr().to_string(),
            Source::Sentinel(s) => format!(
                "the master of Sentinel service {:?} (Sentinels {})",
                s.service,
                s.sentinels
                    .iter()
                    .map(|c| c.get_connection_info().addr().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Source::Cluster(_, seed) => {
                format!("the cluster of {}", seed.get_connection_info().addr())
            }
        }
    }

    /// Through Sentinel: how many master switches were seen (`None` for other sources).
    pub(crate) fn master_generation(&self) -> Option<u64> {
        match self {
            Source::Sentinel(s) => Some(s.watch.generation()),
            _ => None,
        }
    }

    /// A client for the server to talk to now.
    pub(crate) fn client(&self) -> Result<redis::Client, redis::RedisError> {
        match self {
            Source::Direct(c) => Ok(c.clone()),
            Source::Sentinel(s) => s.master(),
            // Published messages reach every node of a cluster: any one will do.
            Source::Cluster(_, seed) => Ok(seed.clone()),
        }
    }
}

impl Manager {
    /// Opens one connection, waiting at most `connect_timeout` for it, and sets it up (its
    /// name, which server it reached) with each reply awaited at most the io timeout and
    /// never past `deadline` (a caller waiting for the set-up gives its own deadline: a
    /// frozen server that accepts the connection must not cost it a whole io timeout more);
    /// the connection then has the usual io timeout. On failure, also the client it tried
    /// (to look closer at why).
    #[allow(clippy::result_large_err)]
    fn set_up(
        &self,
        connect_timeout: Duration,
        deadline: Instant,
    ) -> Result<Conn, (redis::RedisError, Option<redis::Client>)> {
        // The read timeout for the set-up's round trips, read once connected.
        let set_up_timeout = || {
            deadline
                .saturating_duration_since(Instant::now())
                .clamp(MIN_IO_TIMEOUT, self.io_timeout)
        };
        let inner = match &*self.source {
            Source::Cluster(cluster, _) => {
                let set_up = || -> redis::RedisResult<Link> {
                    let c = cluster.get_connection()?;
                    c.set_read_timeout(Some(self.io_timeout))?;
                    c.set_write_timeout(Some(self.io_timeout))?;
                    Ok(Link::Cluster(Box::new(c)))
                };
                set_up().map_err(|e| (e, None))?
            }
            _ => {
                let client = self.source.client().map_err(|e| (e, None))?;
                let set_up = || -> redis::RedisResult<Link> {
                    let info = client.get_connection_info();
                    if crate::wire::stream::Wire::serves(info, self.tls.as_ref()) {
                        return self.set_up_own(info, connect_timeout, set_up_timeout);
                    }
                    let mut c = client.get_connection_with_timeout(connect_timeout)?;
                    let timeout = set_up_timeout();
                    c.set_read_timeout(Some(timeout))?;
                    c.set_write_timeout(Some(self.io_timeout))?;
                    if let Some(name) = &self.client_name {
                        // Best effort: a least-privilege user may not be granted
                        // `client|setname`; its connections then go unnamed.
                        let named = redis::cmd("CLIENT")
                            .arg("SETNAME")
                            .arg(name)
                            .query::<()>(&mut c);
                        match named {
                            Err(e) if e.code() == Some("NOPERM") => {
                                tracing::debug!(error = %e, "CLIENT SETNAME refused; connections stay unnamed");
                            }
                            other => other?,
                        }
                    }
                    let kind = crate::wire::server::ask_server_kind(&mut c)?;
                    self.setup.server.set(kind);
                    if timeout != self.io_timeout {
                        c.set_read_timeout(Some(self.io_timeout))?;
                    }
                    Ok(Link::Single(Box::new(c)))
                };
                set_up().map_err(|e| (e, Some(client.clone())))?
            }
        };
        // Tied to the master the Sentinels named just now (asked by `client()` above).
        let tie = match &*self.source {
            Source::Sentinel(s) => Some(Tie::now(&s.watch)),
            _ => None,
        };
        Ok(Conn {
            inner,
            broken: false,
            last_used: Instant::now(),
            tie,
            out: Vec::new(),
        })
    }

    /// Opens our own connection to `info` (see [`set_up`](Self::set_up)): connected,
    /// authenticated and its database selected within `connect_timeout`, then named and
    /// asked which server it reached, each reply awaited at most `set_up_timeout()` (read
    /// once connected).
    fn set_up_own(
        &self,
        info: &redis::ConnectionInfo,
        connect_timeout: Duration,
        set_up_timeout: impl Fn() -> Duration,
    ) -> redis::RedisResult<Link> {
        let mut w = crate::wire::stream::Wire::open(
            info,
            self.tls.as_ref(),
            &self.tls_config,
            connect_timeout,
        )?;
        let timeout = set_up_timeout();
        w.set_read_timeout(Some(timeout))?;
        w.set_write_timeout(Some(self.io_timeout))?;
        // One round trip: the connection's name and the library's name and version (best effort:
        // servers before Redis 7.2 do not know `CLIENT SETINFO`, and a user may not be
        // granted it; the `redis` crate ignores its failure too).
        const VERSION: &str = env!("CARGO_PKG_VERSION");
        let name = self.client_name.as_deref().unwrap_or_default();
        let set_name: &[&[u8]] = &[b"CLIENT", b"SETNAME", name.as_bytes()];
        let lib_name: &[&[u8]] = &[b"CLIENT", b"SETINFO", b"LIB-NAME", b"redlease"];
        let lib_ver: &[&[u8]] = &[b"CLIENT", b"SETINFO", b"LIB-VER", VERSION.as_bytes()];
        if self.client_name.is_some() {
            // Only with the name: alone, the library's would cost a round trip.
            let replies = w.requests(&[set_name, lib_name, lib_ver])?;
            // Best effort, as on the `redis` crate's connections (see `set_up`).
            match replies.into_iter().next() {
                Some(Reply::Error(e)) if e.is("NOPERM") => {
                    tracing::debug!(error = %e.message, "CLIENT SETNAME refused; connections stay unnamed");
                }
                Some(Reply::Error(e)) => {
                    return Err(redis::make_extension_error(e.code, Some(e.message)));
                }
                _ => {}
            }
        }
        let kind = crate::wire::server::ask_server_kind_on(&mut w)?;
        self.setup.server.set(kind);
        if timeout != self.io_timeout {
            w.set_read_timeout(Some(self.io_timeout))?;
        }
        Ok(Link::Own(Box::new(w)))
    }

    /// [`set_up`](Self::set_up) within `connect_timeout` and `deadline`, noting whether a
    /// failure was a refused configuration (looking closer before `deadline`).
    fn set_up_noting(&self, connect_timeout: Duration, deadline: Instant) -> Result<Conn, Refused> {
        match self.set_up(connect_timeout, deadline) {
            Ok(conn) => {
                self.setup.set(None);
                Ok(conn)
            }
            Err((e, client)) => {
                let problem = setup_problem(&e, client.as_ref(), deadline);
                if problem.is_some() {
                    self.setup.set(problem.clone());
                }
                Err(Refused { error: e, problem })
            }
        }
    }
}

/// A connection set-up that failed, and why in words when it was the configuration.
struct Refused {
    error: redis::RedisError,
    /// What to fix (`None`: a passing failure).
    problem: Option<String>,
}

/// Why a connection set-up failed for a reason that retrying cannot fix, in words that say
/// what to change (`None`: a passing failure, such as a refused or timed-out connection).
/// `client` is the client that failed, to tell a wrong password from a server without one
/// (asking it again, before `deadline`).
fn setup_problem(
    e: &redis::RedisError,
    client: Option<&redis::Client>,
    deadline: Instant,
) -> Option<String> {
    if let Some(problem) = adapter::error_reply(e).and_then(|r| adapter::refusal(&r)) {
        return Some(problem);
    }
    match e.kind() {
        redis::ErrorKind::AuthenticationFailed => {
            let info = client.map(redis::Client::get_connection_info);
            let user = info
                .and_then(|i| i.redis_settings().username())
                .map_or_else(String::new, |u| format!(" for user {u:?}"));
            if client.is_some_and(|c| answers_without_password(c, deadline)) {
                Some(
                    "a password was given (in the URL or master_auth), but the server has none \
                     configured (no requirepass, no ACL user): remove it"
                        .to_owned(),
                )
            } else {
                Some(format!(
                    "authentication failed{user}: the server rejected the password; check the \
                     password (and ACL username) in the URL"
                ))
            }
        }
        redis::ErrorKind::InvalidClientConfig => Some(format!("invalid client configuration: {e}")),
        _ if e.to_string().contains("refused to switch database") => Some(format!(
            "the server has no such database (SELECT refused: {}); use a database number \
             below its `databases` setting",
            e.detail().unwrap_or("")
        )),
        _ => None,
    }
}

/// Whether the server at `client`'s address answers `PING` on a connection without
/// credentials before `deadline` (so it has no password configured).
fn answers_without_password(client: &redis::Client, deadline: Instant) -> bool {
    use redis::IntoConnectionInfo;
    let timeout = deadline.saturating_duration_since(Instant::now());
    if timeout < MIN_IO_TIMEOUT {
        return false;
    }
    let info = client.get_connection_info();
    let Ok(bare) = info.addr().clone().into_connection_info() else {
        return false;
    };
    let Ok(bare) = redis::Client::open(bare) else {
        return false;
    };
    bare.get_connection_with_timeout(timeout)
        .and_then(|mut c| {
            c.set_read_timeout(Some(timeout))?;
            redis::cmd("PING").query::<String>(&mut c)
        })
        .is_ok()
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Conn, redis::RedisError> {
        // In the background (a caller waits for the pool at most its own time left).
        let deadline = redlease_core::backoff::saturating_add(
            Instant::now(),
            self.connect_timeout.saturating_add(self.io_timeout),
        );
        self.set_up_noting(self.connect_timeout, deadline)
            .map_err(|r| r.error)
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        if let Some(tie) = &conn.tie {
            // Through Sentinel: ask again after the check interval without news (a missed
            // +switch-master), and never hand out a connection to a demoted master.
            if tie.watch().begin_check() {
                // A Sentinel that cannot be asked leaves the connection in use: the
                // subscriber thread and the next check still find a switch.
                let _ = self.source.client();
            }
            if conn.is_stale() {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the Sentinels named another master",
                )));
            }
        }
        // No PING here: the pool's check cannot know the caller's deadline, so an idle
        // connection is checked after checkout, within it (`Transport::check_out`).
        Ok(())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || conn.is_stale() || !conn.inner.is_open()
    }
}

/// The threads r2d2 opens connections on. By default every r2d2 pool starts its own three
/// (which outlived a dropped client by up to 30 s, waiting for the pool's reaper task);
/// here every pool of the process shares one set, started with the first pool and stopped
/// at once (scheduled work discarded) when the last pool is dropped.
fn shared_thread_pool() -> Arc<ScheduledThreadPool> {
    static SHARED: Mutex<Weak<ScheduledThreadPool>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(pool) = shared.upgrade() {
        return pool;
    }
    let pool = Arc::new(
        ScheduledThreadPool::builder()
            .num_threads(POOL_THREADS)
            .thread_name_pattern("redlease-pool-{}")
            .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
            .build(),
    );
    *shared = Arc::downgrade(&pool);
    pool
}

/// Whether `input` answers a request of a batch holding a native command that stands in for
/// a script (a lock release's `DELIFEQ` / `DELEX`, and the `PUBLISH` beside it): a user not
/// granted the delete is no misconfiguration, since the machine falls back to the script
/// (and the driver stops choosing the native command); a refused announcement fails the
/// release as the script's refused `PUBLISH` does (`Error::Redis`, with the ACL warning).
fn is_native_step(batch: &Batch, input: &Response) -> bool {
    let native = |r: &Request| matches!(r.command.args().get(0), Some(b"DELIFEQ" | b"DELEX"));
    batch.requests.iter().any(native) && batch.requests.iter().any(|r| r.id == input.id)
}

/// Threads of the shared pool: connection attempts in progress at once, across clients
/// (each bounded by its client's connect timeout).
const POOL_THREADS: usize = 4;

/// The connection pool of one client, and its timeouts.
pub(crate) struct Transport {
    pool: r2d2::Pool<Manager>,
    /// A copy of the pool's manager, to set up a connection outside the pool and learn its
    /// outcome at once (the pool only says, after its timeout, that it has none).
    manager: Manager,
    /// The server, for messages.
    server: String,
    connect_timeout: Duration,
    io_timeout: Duration,
    /// For a Redis Cluster: which master owns which slot (for per-node renewal batches).
    nodes: Option<crate::transport::shards::SlotTable>,
    /// The connection kept out of the pool between batches, when the pool allows it.
    spare: Option<Arc<Spare>>,
    /// Whether a connection idle for [`CHECK_AFTER_IDLE`] is PINGed before use.
    check_idle: bool,
}

impl Transport {
    /// Which server the newest pooled connection reached (`None`: not known, or a cluster),
    /// for the steps that have a native command on some servers.
    pub(crate) fn server_kind(&self) -> Option<crate::wire::server::ServerKind> {
        self.manager.setup.server.get()
    }

    /// Whether read-only script calls go as the plain `EVALSHA` / `EVAL`: the server is
    /// Redis before 7.0 (which has no `EVALSHA_RO`), or one was refused (by the server or for
    /// the user). Otherwise they go as sent, and a refusal is answered by the core sending the
    /// plain command ([`redlease_core::script::is_read_only_refusal`]).
    pub(crate) fn read_only_as_plain(&self) -> bool {
        self.manager.setup.read_only_refused.load(Ordering::Relaxed)
            || self
                .server_kind()
                .is_some_and(|k| !k.valkey && k.version.0 < 7)
    }

    /// Notes a refused read-only script call among `inputs` (see
    /// [`read_only_as_plain`](Self::read_only_as_plain)).
    fn note_read_only_refusals(&self, inputs: &[Response]) {
        let refused = inputs
            .iter()
            .any(|i| matches!(&i.result, Ok(Reply::Error(e)) if is_read_only_refusal(e)));
        if refused {
            self.manager
                .setup
                .read_only_refused
                .store(true, Ordering::Relaxed);
        }
    }

    /// Forgets the server's kind (it refused a native command): scripts only, until the
    /// next connection set-up asks again.
    pub(crate) fn forget_server_kind(&self) {
        self.manager.setup.server.set(None);
    }

    /// `(open connections, idle connections, pool size)`.
    pub(crate) fn pool_state(&self) -> (u32, u32, u32) {
        let state = self.pool.state();
        // The spare connection is idle too (the pool counts it as in use).
        let spare = self.spare.as_ref().is_some_and(|s| s.holds());
        (
            state.connections,
            state.idle_connections + u32::from(spare),
            self.pool.max_size(),
        )
    }

    /// A pool with `settings` (checked by the builders: sizes at least 1, `min_idle` at
    /// most `max_size`, lifetimes not zero).
    ///
    /// `check_idle`: PING connections idle for [`CHECK_AFTER_IDLE`] on checkout. RedLock turns
    /// it off: a round must write to every node at once, not PING them one after another (a
    /// dead connection there only costs that node's vote).
    pub(crate) fn with_settings(
        source: Arc<Source>,
        settings: &PoolSettings,
        connect_timeout: Duration,
        io_timeout: Duration,
        check_idle: bool,
    ) -> Self {
        let server = source.describe();
        let nodes = matches!(*source, Source::Cluster(..))
            .then(crate::transport::shards::SlotTable::default);
        let manager = Manager {
            source,
            connect_timeout,
            io_timeout,
            setup: Arc::default(),
            client_name: settings.client_name.clone(),
            tls: settings.tls.clone(),
            tls_config: Arc::default(),
        };
        // By default connections are made on demand (no eager background connecting to a
        // Redis that may be down) and PINGed on checkout only after being idle (see
        // CHECK_AFTER_IDLE). The pool's background work runs on threads shared by every
        // client (see `shared_thread_pool`). r2d2's reaper (closing connections past
        // `max_lifetime` / `idle_timeout`) is a periodic task it never cancels, so it runs
        // only when one of those is set (they default to off).
        let pool = r2d2::Pool::builder()
            .max_size(settings.max_size.max(1))
            .min_idle(Some(settings.min_idle.min(settings.max_size)))
            .max_lifetime(settings.max_lifetime.filter(|d| !d.is_zero()))
            .idle_timeout(settings.idle_timeout.filter(|d| !d.is_zero()))
            .test_on_check_out(check_idle)
            .connection_timeout(connect_timeout)
            .thread_pool(shared_thread_pool())
            .build_unchecked(manager.clone());
        let plain = settings.min_idle == 0
            && settings.max_lifetime.is_none()
            && settings.idle_timeout.is_none()
            && !matches!(*manager.source, Source::Cluster(..) | Source::Sentinel(..));
        let spare = plain.then(|| {
            Arc::new(Spare {
                slot: Mutex::default(),
            })
        });
        Transport {
            pool,
            manager,
            server,
            connect_timeout,
            io_timeout,
            nodes,
            spare,
            check_idle,
        }
    }

    /// [`execute_keeping`](Self::execute_keeping), failing at once with
    /// [`Error::Configuration`] when the batch was not sent because Redis refuses the client's
    /// configuration (a wrong or missing password, a database it does not have), or when a
    /// reply says so (`NOAUTH`, `WRONGPASS`, `NOPERM`): retrying cannot help there.
    pub(crate) fn execute_checked(
        &self,
        batch: &Batch,
        kept: &mut Option<Pooled>,
    ) -> Result<Vec<Response>, Error> {
        let inputs = self.execute_keeping(batch, kept);
        let not_sent = inputs
            .iter()
            .any(|i| matches!(&i.result, Err(f) if f.kind == FailureKind::NotSent));
        if not_sent && let Some(problem) = self.manager.setup.refused() {
            return Err(self.configuration(problem));
        }
        for input in &inputs {
            if let Ok(Reply::Error(e)) = &input.result
                && let Some(problem) = adapter::refusal(e)
                && !is_native_step(batch, input)
                && !is_read_only_refusal(e)
            {
                *kept = None;
                return Err(self.configuration(problem));
            }
        }
        Ok(inputs)
    }

    fn configuration(&self, problem: String) -> Error {
        Error::Configuration {
            server: self.server.clone(),
            problem,
        }
    }

    /// Sets up a connection outside the pool and sends `PING` on it, bounded by the connect
    /// and io timeouts: the round trip, or what is wrong (typed, at once).
    pub(crate) fn ping(&self) -> Result<Duration, Error> {
        let unavailable = |message: String| Error::Unavailable {
            attempts: 1,
            last: TransportFailure::not_sent(message),
        };
        let deadline = redlease_core::backoff::saturating_add(
            Instant::now(),
            self.connect_timeout.saturating_add(self.io_timeout),
        );
        let mut conn = match self.manager.set_up_noting(self.connect_timeout, deadline) {
            Ok(conn) => conn,
            Err(Refused { error, problem }) => {
                return Err(match problem {
                    Some(problem) => self.configuration(problem),
                    None => unavailable(self.setup_failed(&error)),
                });
            }
        };
        let started = Instant::now();
        match conn.inner.ping() {
            Ok(()) => Ok(started.elapsed()),
            Err(e) => match adapter::error_reply(&e).and_then(|r| adapter::refusal(&r)) {
                Some(problem) => Err(self.configuration(problem)),
                None => match e.code() {
                    Some(code) => Err(Error::Redis {
                        code: code.to_owned(),
                        message: e.detail().unwrap_or_default().to_owned(),
                    }),
                    None => Err(Error::Unavailable {
                        attempts: 1,
                        last: TransportFailure::no_reply(format!("PING to {}: {e}", self.server)),
                    }),
                },
            },
        }
    }

    /// Before waiting on the pool: when it has no connection at all (first use, a refused
    /// configuration, or every connection died), one thread sets up a connection itself
    /// (before `deadline`), so that a refusal or an unreachable server is known now instead
    /// of after the pool's timeout (the connection is then dropped; the pool makes its own).
    /// A pool that has connections is used as it is, even if a newer set-up was refused (a
    /// password changed on the server leaves the connections made before working). `Some`:
    /// the failure to report (a refused configuration, or an unreachable server).
    fn probe(&self, deadline: Instant) -> Option<TransportFailure> {
        if self.pool.state().connections != 0 {
            return None;
        }
        let timeout = deadline
            .saturating_duration_since(Instant::now())
            .min(self.connect_timeout);
        if timeout < MIN_IO_TIMEOUT || self.manager.setup.probing.swap(true, Ordering::AcqRel) {
            return None; // no time left for it, or another thread is finding out
        }
        let outcome = self.manager.set_up_noting(timeout, deadline);
        self.manager.setup.probing.store(false, Ordering::Release);
        match outcome {
            Ok(_) => None,
            Err(Refused { error, .. }) => {
                Some(TransportFailure::not_sent(self.setup_failed(&error)))
            }
        }
    }

    /// What a failed connection set-up means, in words. A socket read or write that timed
    /// out reads as `WouldBlock` (`EAGAIN`, "Resource temporarily unavailable"): the server
    /// accepted the connection, then did not answer the set-up in time (it is frozen or
    /// overloaded), which is not a failure to connect.
    fn setup_failed(&self, error: &redis::RedisError) -> String {
        let server = &self.server;
        let text = error.to_string();
        // A connect that timed out says "timed out" (and so do the set-up's own deadlines);
        // a read or write past its timeout does not.
        if error.is_timeout() && !text.contains("timed out") {
            format!(
                "no reply within the timeout (connect {:?}, io {:?}) from {server}, which \
                 accepted the connection: is it frozen or overloaded?",
                self.connect_timeout, self.io_timeout
            )
        } else {
            format!("cannot connect to {server}: {error}")
        }
    }

    /// Names the node that holds `key` (the master's address on a Cluster, as far as known;
    /// empty for a single server or when not known yet), to group commands by node.
    pub(crate) fn node_of(&self, key: &str) -> String {
        self.nodes
            .as_ref()
            .map(|n| n.node_of(key))
            .unwrap_or_default()
    }

    /// Whether this is a Cluster client whose slot table is missing or old.
    pub(crate) fn nodes_stale(&self) -> bool {
        self.nodes.as_ref().is_some_and(|n| n.is_stale())
    }

    /// On a Cluster whose slot table is missing or old, asks the master owning `key`'s slot
    /// for `CLUSTER SLOTS` (bounded by the io timeout). Nothing for a single server.
    pub(crate) fn refresh_nodes(&self, key: &str) {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let Some(nodes) = &self.nodes else { return };
        if !nodes.is_stale() {
            return;
        }
        let Ok(mut conn) = self.pool.get_timeout(self.connect_timeout) else {
            return;
        };
        let Link::Cluster(cluster) = &mut conn.inner else {
            return;
        };
        let route = Route::new(
            crate::transport::shards::slot(key.as_bytes()),
            SlotAddr::Master,
        );
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        match cluster.route_command(redis::cmd("CLUSTER").arg("SLOTS"), routing) {
            Ok(reply) => nodes.update(&reply),
            Err(_) => conn.broken = true,
        }
        conn.last_used = Instant::now();
    }

    /// Whether this is a Redis Cluster client.
    pub(crate) fn is_cluster(&self) -> bool {
        self.nodes.is_some()
    }

    /// Like [`execute_keeping`](Self::execute_keeping), but on the connection in `kept`
    /// whenever there is one (a Cluster renewal thread keeps its own connection between
    /// batches, so that another node's thread, breaking connection after connection on a
    /// frozen master, cannot drain the pool under it).
    pub(crate) fn execute_held(&self, batch: &Batch, kept: &mut Option<Pooled>) -> Vec<Response> {
        match kept.take().and_then(Pooled::into_checked) {
            Some(conn) => {
                let flight = self.write(
                    conn,
                    batch.requests.iter(),
                    batch.deadline,
                    batch.server_wait,
                    Instant::now(),
                );
                let (inputs, conn) = flight.receive_keeping(ids_of(&batch.requests));
                *kept = conn;
                self.note_read_only_refusals(&inputs);
                inputs
            }
            None => self.execute_keeping(batch, kept),
        }
    }

    /// Returns a connection no longer needed: to the spare slot if it can be kept there.
    fn give_back(&self, conn: Checked) {
        if let Some(spare) = &self.spare {
            spare.put(conn);
        }
    }

    /// Sends `batch` and returns one input per request, in request order.
    pub(crate) fn execute(&self, batch: &Batch) -> Vec<Response> {
        self.execute_keeping(batch, &mut None)
    }

    /// Like [`execute`](Self::execute), keeping the connection in `kept` afterwards: a
    /// following batch that asks for [`Batch::same_connection`] (a `WAIT`, which only
    /// covers the writes of its own connection) is sent on it. Dropping `kept` returns the
    /// connection to the pool.
    pub(crate) fn execute_keeping(
        &self,
        batch: &Batch,
        kept: &mut Option<Pooled>,
    ) -> Vec<Response> {
        if let Some(r) = batch
            .requests
            .iter()
            .find(|r| r.command.node() != NodeId::PRIMARY)
        {
            let failure = TransportFailure::not_sent(format!(
                "this client talks to one node; node {} does not exist",
                r.command.node().0
            ));
            return batch
                .requests
                .iter()
                .map(|r| Response::failed(r.id, failure.clone()))
                .collect();
        }
        let previous = kept.take();
        let flight = match previous.and_then(Pooled::into_checked) {
            Some(conn) if batch.same_connection => self.write(
                conn,
                batch.requests.iter(),
                batch.deadline,
                batch.server_wait,
                Instant::now(),
            ),
            None if batch.same_connection => unreachable_same_connection(batch),
            // The previous connection goes back first: with a pool of one, holding it while
            // asking for another would wait out the connect timeout.
            previous => {
                if let Some(conn) = previous {
                    self.give_back(conn);
                }
                self.send(batch.requests.iter(), batch.deadline, batch.server_wait)
            }
        };
        let (inputs, conn) = flight.receive_keeping(ids_of(&batch.requests));
        *kept = conn;
        self.note_read_only_refusals(&inputs);
        inputs
    }

    /// Writes `requests` (pipelined, whatever node they name) without waiting for the
    /// replies, so that several nodes can be asked at once; [`Flight::receive`] reads them.
    pub(crate) fn send<'a>(
        &self,
        requests: impl ExactSizeIterator<Item = &'a Request> + Clone,
        deadline: Instant,
        server_wait: Duration,
    ) -> Flight {
        if let Some(failure) = self.probe(deadline) {
            return Flight {
                count: requests.len(),
                deadline,
                state: FlightState::Failed(failure),
                spare: None,
            };
        }
        match self.check_out(deadline) {
            Ok((conn, now)) => self.write(conn, requests, deadline, server_wait, now),
            Err(message) => Flight {
                count: requests.len(),
                deadline,
                state: FlightState::Failed(TransportFailure::not_sent(message)),
                spare: None,
            },
        }
    }

    /// A connection for a batch due by `deadline`, and the instant last read: the spare, or
    /// one from the pool (waiting at most the time left, and at most the connect timeout).
    /// One idle for [`CHECK_AFTER_IDLE`] is PINGed first, the PING bounded by the time left
    /// to `deadline` (never a whole io timeout past it, as the pool's own check was); one
    /// that fails the check is discarded and the next one tried (or a new one made) while
    /// time is left. `Err`: why there is none, for a "not sent" failure.
    fn check_out(&self, deadline: Instant) -> Result<(Checked, Instant), String> {
        let mut now = Instant::now();
        let mut failed_check: Option<String> = None;
        loop {
            let conn = match self.spare.as_ref().and_then(|s| s.take()) {
                Some(conn) => conn,
                None => {
                    let remaining = deadline.saturating_duration_since(now).max(MIN_IO_TIMEOUT);
                    match self.pool.get_timeout(remaining.min(self.connect_timeout)) {
                        Ok(conn) => {
                            now = Instant::now();
                            Box::new(conn)
                        }
                        Err(e) => {
                            crate::observe::events::no_connection(
                                self.pool.state(),
                                self.pool.max_size(),
                                &e,
                            );
                            return Err(match failed_check {
                                Some(why) => format!("no connection to {}: {why}", self.server),
                                None => format!("no connection to {}: {e}", self.server),
                            });
                        }
                    }
                }
            };
            let mut conn = match self.checked(conn, deadline, now) {
                Ok(checked) => return Ok(checked),
                Err((conn, why)) => {
                    failed_check = Some(why);
                    conn
                }
            };
            // Discarded by the pool when it comes back.
            conn.broken = true;
            drop(conn);
            now = Instant::now();
            if now >= deadline {
                let why = failed_check.unwrap_or_default();
                return Err(format!("no connection to {}: {why}", self.server));
            }
        }
    }

    /// `conn` as it is, or PINGed first when it has been idle for [`CHECK_AFTER_IDLE`] (a
    /// Redis restart or an idle timeout may have closed it): that PING waits at most the
    /// time left to `deadline` (and at most the io timeout). `now`: read just before. `Ok`:
    /// the connection and the instant last read; `Err`: the connection (unfit) and why.
    fn checked(
        &self,
        mut conn: Checked,
        deadline: Instant,
        now: Instant,
    ) -> Result<(Checked, Instant), (Checked, String)> {
        // A cluster connection talks to every master: a PING goes to any one of them, so
        // one frozen master would fail checkouts meant for the others (and stall their
        // renewals). Its per-node sockets report their own failures as no reply instead.
        if !self.check_idle
            || now.saturating_duration_since(conn.last_used) < CHECK_AFTER_IDLE
            || matches!(conn.inner, Link::Cluster(_))
        {
            return Ok((conn, now));
        }
        let timeout = deadline
            .saturating_duration_since(now)
            .max(MIN_IO_TIMEOUT)
            .min(self.io_timeout);
        // The socket keeps its usual io timeout between batches (`write` relies on it).
        let shortened = timeout != self.io_timeout;
        let pinged = (|| {
            if shortened {
                conn.inner.set_read_timeout(Some(timeout))?;
            }
            conn.inner.ping()?;
            if shortened {
                conn.inner.set_read_timeout(Some(self.io_timeout))?;
            }
            Ok::<(), redis::RedisError>(())
        })();
        match pinged {
            Ok(()) => {
                let now = Instant::now();
                conn.last_used = now;
                Ok((conn, now))
            }
            Err(e) => Err((
                conn,
                format!("an idle connection did not answer PING within {timeout:?}: {e}"),
            )),
        }
    }

    /// Like [`send`](Self::send), but only on an idle pooled connection: gives the requests
    /// `None` at once when there is none, nothing sent (so a caller asking several nodes
    /// never waits on one node's connection attempt before writing to the others).
    pub(crate) fn try_send<'a>(
        &self,
        requests: impl ExactSizeIterator<Item = &'a Request> + Clone,
        deadline: Instant,
        server_wait: Duration,
    ) -> Option<Flight> {
        let now = Instant::now();
        let conn = match self.spare.as_ref().and_then(|s| s.take()) {
            Some(conn) => conn,
            None => Box::new(self.pool.try_get()?),
        };
        match self.checked(conn, deadline, now) {
            Ok((conn, now)) => Some(self.write(conn, requests, deadline, server_wait, now)),
            Err((mut conn, why)) => {
                conn.broken = true;
                drop(conn);
                let count = requests.len();
                Some(Flight {
                    count,
                    deadline,
                    state: FlightState::Failed(TransportFailure::not_sent(format!(
                        "no connection to {}: {why}",
                        self.server
                    ))),
                    spare: None,
                })
            }
        }
    }

    /// Writes `requests` on `conn`: a single server's as one pipeline, encoded straight from
    /// the core commands into the connection's own buffer; a cluster's one by one (each
    /// routed by its key, replies read at once).
    /// `now`: read just before (the time left to `deadline` bounds the reply timeout).
    fn write<'a>(
        &self,
        mut conn: Checked,
        requests: impl ExactSizeIterator<Item = &'a Request> + Clone,
        deadline: Instant,
        server_wait: Duration,
        now: Instant,
    ) -> Flight {
        let count = requests.len();
        let fail = |failure: TransportFailure| Flight {
            count,
            deadline,
            state: FlightState::Failed(failure),
            spare: None,
        };
        let remaining = deadline.saturating_duration_since(now).max(MIN_IO_TIMEOUT);
        // The reply timeout: the io timeout (plus what the server may hold the reply back),
        // never past the deadline. The socket is only touched when that differs from its
        // usual io timeout by more than a little (no extra syscalls on the common path).
        let wanted = remaining.min(self.io_timeout + server_wait);
        let changed = wanted.abs_diff(self.io_timeout) > SHORTEN_SLACK;
        if changed && let Err(e) = conn.inner.set_read_timeout(Some(wanted)) {
            conn.broken = true;
            return fail(TransportFailure::not_sent(format!("socket: {e}")));
        }
        let plain = self.read_only_as_plain();
        if let Link::Cluster(cluster) = &mut conn.inner {
            let requests: Vec<&Request> = requests.collect();
            let timeouts = ReadTimeouts {
                reply: self.io_timeout + server_wait,
                now: if changed { wanted } else { self.io_timeout },
                usual: self.io_timeout,
            };
            let (inputs, broken) = send_to_cluster(cluster, &requests, deadline, timeouts, plain);
            conn.broken |= broken;
            return Flight {
                count,
                deadline,
                state: FlightState::Answered { inputs, conn },
                spare: None,
            };
        }
        let Conn {
            inner, out, broken, ..
        } = &mut **conn;
        out.clear();
        for r in requests {
            if plain {
                crate::wire::resp::encode_command_plain(out, &r.command);
            } else {
                crate::wire::resp::encode_command(out, &r.command);
            }
        }
        let sent = match inner {
            Link::Own(wire) => wire.write_all(out).map_err(redis::RedisError::from),
            Link::Single(single) => single.send_packed_command(out),
            Link::Cluster(_) => return fail(TransportFailure::not_sent("no connection")),
        };
        if out.capacity() > KEEP_OUT {
            *out = Vec::new();
        }
        if let Err(e) = sent {
            *broken = true;
            return fail(adapter::failure(&e));
        }
        Flight {
            count,
            deadline,
            state: FlightState::Sent {
                conn,
                timeout: if changed { wanted } else { self.io_timeout },
                io_timeout: self.io_timeout,
            },
            spare: self.spare.clone(),
        }
    }
}

/// The read timeouts of a cluster batch.
#[derive(Debug, Clone, Copy)]
struct ReadTimeouts {
    /// The longest wait for one reply (the io timeout plus what the server may hold it).
    reply: Duration,
    /// What the sockets are set to now.
    now: Duration,
    /// The client's io timeout, put back afterwards.
    usual: Duration,
}

/// How many `MOVED`/`ASK` redirections one command follows (a slot moves once per
/// resharding step; more means the cluster is still converging, and the core decides).
const MAX_REDIRECTS: usize = 2;

/// Sends `requests` on a cluster connection, one after another (each is routed by its first
/// key's slot), each exactly once as far as this library can tell: the `redis` crate's own
/// retries are off (see `ClientBuilder::build`), so a reply that does not come within the
/// read timeout is a `NoReply` failure for the core, as on a single server.
///
/// `MOVED` and `ASK` say that the command did not run and where to send it: they are
/// followed here (at most [`MAX_REDIRECTS`] times, never past `deadline`). One that cannot be
/// followed in time becomes a "not sent" failure, which the core retries within the call's
/// own deadline (or reports as `Unavailable`). `TRYAGAIN` (a multi-key command during a
/// slot migration) reaches the core as the error reply it is, which treats it as transient.
///
/// Every read is bounded by what is left of `deadline` (at most `reply_timeout`), so a batch
/// never outlives its deadline by more than the connection's own timeouts. Returns the inputs,
/// and whether the connection must be dropped (a lost reply may still arrive on it, or its
/// slot map is stale after a `MOVED`).
fn send_to_cluster(
    cluster: &mut redis::cluster::ClusterConnection,
    requests: &[&Request],
    deadline: Instant,
    timeouts: ReadTimeouts,
    plain: bool,
) -> (Vec<Response>, bool) {
    let ReadTimeouts {
        reply: reply_timeout,
        now: mut timeout,
        usual: io_timeout,
    } = timeouts;
    let mut inputs = Vec::with_capacity(requests.len());
    let mut broken = false;
    for (i, r) in requests.iter().enumerate() {
        let fail_rest = |inputs: &mut Vec<Response>, failure: TransportFailure| {
            inputs.extend(
                requests[i..]
                    .iter()
                    .map(|r| Response::failed(r.id, failure.clone())),
            );
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            fail_rest(
                &mut inputs,
                TransportFailure::not_sent("the batch deadline passed before it was sent"),
            );
            break;
        }
        let wanted = left.max(MIN_IO_TIMEOUT).min(reply_timeout);
        if wanted.abs_diff(timeout) > SHORTEN_SLACK {
            if let Err(e) = cluster.set_read_timeout(Some(wanted)) {
                broken = true;
                fail_rest(
                    &mut inputs,
                    TransportFailure::not_sent(format!("socket: {e}")),
                );
                break;
            }
            timeout = wanted;
        }
        let cmd = match r.command.args().get(0) {
            Some(verb @ (b"EVALSHA_RO" | b"EVAL_RO")) if plain => {
                let mut cmd = redis::Cmd::new();
                cmd.arg(&verb[..verb.len() - 3]);
                for a in r.command.args().iter().skip(1) {
                    cmd.arg(a);
                }
                cmd
            }
            _ => adapter::command(&r.command),
        };
        let (outcome, stale) = cluster_request(cluster, &cmd, deadline);
        broken |= stale;
        match outcome {
            Ok(value) => inputs.push(Response::reply(r.id, reply_of(value))),
            // An error reply from the server.
            Err(e) if e.code().is_some() => {
                let input = adapter::response(r.id, Err(e));
                if let Ok(Reply::Error(e)) = &input.result {
                    crate::observe::events::error_reply(&e.code, Some(&e.message));
                }
                inputs.push(input);
            }
            Err(e) if e.detail().is_some_and(|d| d.starts_with(NOT_FOLLOWED)) => {
                // A redirection not followed: the command did not run.
                fail_rest(&mut inputs, TransportFailure::not_sent(e.to_string()));
                break;
            }
            Err(e) => {
                // No reply (or no connection): a reply may still be in flight on it.
                broken = true;
                fail_rest(&mut inputs, adapter::failure(&e));
                break;
            }
        }
    }
    if timeout != io_timeout && cluster.set_read_timeout(Some(io_timeout)).is_err() {
        broken = true;
    }
    (inputs, broken)
}

/// The start of the detail of a redirection that was not followed (the command did not run).
const NOT_FOLLOWED: &str = "redirected, not followed";

/// Sends one command to the node owning its slot, following `MOVED`/`ASK` (see
/// [`send_to_cluster`]). A redirection that is not followed comes back as an error whose
/// detail starts with [`NOT_FOLLOWED`] (the command did not run). Also says whether the slot
/// map proved stale.
fn cluster_request(
    cluster: &mut redis::cluster::ClusterConnection,
    cmd: &redis::Cmd,
    deadline: Instant,
) -> (redis::RedisResult<Value>, bool) {
    let mut result = cluster.req_command(cmd);
    let mut stale = false;
    let mut redirects = 0;
    while let Err(e) = &result
        && let Some((addr, _slot)) = e.redirect_node()
    {
        let ask = e.code() == Some("ASK");
        // A MOVED slot: this connection's slot map is stale; a new one reads it afresh.
        stale |= !ask;
        let target = addr.rsplit_once(':').and_then(|(host, port)| {
            Some((host.trim_matches(['[', ']']).to_owned(), port.parse().ok()?))
        });
        let in_time = redirects < MAX_REDIRECTS && Instant::now() + MIN_IO_TIMEOUT < deadline;
        let Some((host, port)) = target.filter(|_| in_time) else {
            let not_followed = format!("{NOT_FOLLOWED}: {e}");
            return (
                Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "not sent",
                    not_followed,
                ))),
                stale,
            );
        };
        redirects += 1;
        let routing = || {
            redis::cluster_routing::RoutingInfo::SingleNode(
                redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port,
                },
            )
        };
        if ask {
            // ASKING lets the importing node serve the next command of this connection.
            if let Err(e) = cluster.route_command(&redis::cmd("ASKING"), routing()) {
                return (Err(e), stale);
            }
        }
        result = cluster.route_command(cmd, routing());
    }
    (result, stale)
}

/// A connection checked out of the pool, boxed once at checkout: it then moves through a
/// batch's steps, and in and out of the spare slot batch after batch, as one pointer (the
/// pool's wrapper is some 160 bytes, copied on every move).
type Checked = Box<r2d2::PooledConnection<Manager>>;

/// A connection kept between batches (see [`Transport::execute_keeping`]). Dropping it
/// returns the connection: to the transport's spare slot when that is empty and the
/// connection fit for reuse, to the pool otherwise.
pub(crate) struct Pooled {
    /// `None` only once handed on ([`Pooled::into_checked`]).
    conn: Option<Checked>,
    spare: Option<Arc<Spare>>,
}

impl Pooled {
    fn into_checked(mut self) -> Option<Checked> {
        self.conn.take()
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let (Some(conn), Some(spare)) = (self.conn.take(), &self.spare) {
            spare.put(conn);
        }
    }
}

/// One connection held out of the pool between batches: the next batch takes it without
/// the pool's checkout and check-in (a lock, two clock reads and several moves of the
/// connection each; about 900 instructions per round trip, a quarter of its client cost).
/// Only for a pool without a reaper or idle minimum (`max_lifetime`, `idle_timeout` and
/// `min_idle` unset: the pool's own bookkeeping then has nothing to do for an idle
/// connection), and only for connections to one server without Sentinel (whose checkout
/// asks the Sentinels).
#[derive(Default)]
struct Spare {
    slot: Mutex<Option<Checked>>,
}

impl Spare {
    /// Keeps `conn` if the slot is empty and the connection fit for reuse; otherwise it goes
    /// back to the pool (or is discarded by it, if broken).
    fn put(&self, conn: Checked) {
        let fit = !conn.broken
            && conn.tie.is_none()
            && matches!(conn.inner, Link::Own(_) | Link::Single(_))
            && conn.inner.is_open();
        if !fit {
            return;
        }
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(conn);
            return;
        }
        // Slot taken: the connection goes back to the pool, outside the lock.
        drop(slot);
        drop(conn);
    }

    /// The spare connection, if there is one (checked after idling by the caller, see
    /// [`Transport::check_out`]).
    fn take(&self) -> Option<Checked> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Whether it holds a connection.
    fn holds(&self) -> bool {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

/// A batch that must follow its predecessor's connection, without one to follow: its
/// commands are not sent (a `WAIT` elsewhere would vouch for writes it cannot see).
fn unreachable_same_connection(batch: &Batch) -> Flight {
    Flight {
        count: batch.requests.len(),
        deadline: batch.deadline,
        state: FlightState::Failed(TransportFailure::not_sent(
            "the connection of the previous batch is gone",
        )),
        spare: None,
    }
}

/// The id of each request of `requests`, by position (for [`Flight::receive`]).
pub(crate) fn ids_of(requests: &[Request]) -> impl Fn(usize) -> RequestId + '_ {
    // A flight asks only for positions below its count, the number of requests written.
    |i| requests[i].id
}

/// Requests written to one connection, their replies not yet read. The flight keeps only
/// how many there are: whoever reads it names each request's id by its position.
pub(crate) struct Flight {
    count: usize,
    deadline: Instant,
    state: FlightState,
    /// Where the connection goes once done with, if not to the pool.
    spare: Option<Arc<Spare>>,
}

enum FlightState {
    Sent {
        conn: Checked,
        /// The read timeout the socket has now.
        timeout: Duration,
        /// The usual one, put back after reading.
        io_timeout: Duration,
    },
    Failed(TransportFailure),
    /// Already answered (a cluster connection sends and reads each request in turn).
    Answered {
        inputs: Vec<Response>,
        conn: Checked,
    },
}

impl Flight {
    /// Reads one reply per request, in order (a transport failure stands in for each reply
    /// that did not come); `id(i)` is the id of the `i`-th request written.
    pub(crate) fn receive(self, id: impl Fn(usize) -> RequestId) -> Vec<Response> {
        self.receive_keeping(id).0
    }

    /// [`receive`](Self::receive), also handing back the connection unless it broke.
    pub(crate) fn receive_keeping(
        self,
        id: impl Fn(usize) -> RequestId,
    ) -> (Vec<Response>, Option<Pooled>) {
        let count = self.count;
        let failed_from = |first: usize, failure: &TransportFailure| -> Vec<Response> {
            (first..count)
                .map(|i| Response::failed(id(i), failure.clone()))
                .collect()
        };
        let (mut conn, mut timeout, io_timeout) = match self.state {
            FlightState::Failed(failure) => {
                return (failed_from(0, &failure), None);
            }
            FlightState::Sent {
                conn,
                timeout,
                io_timeout,
            } => (conn, timeout, io_timeout),
            FlightState::Answered { inputs, mut conn } => {
                conn.last_used = Instant::now();
                let keep = (!conn.broken).then(|| Pooled {
                    conn: Some(conn),
                    spare: None,
                });
                return (inputs, keep);
            }
        };
        let mut inputs = Vec::with_capacity(count);
        let mut now = Instant::now();
        for i in 0..count {
            // Never read past the batch deadline, however long the earlier reads (or other
            // nodes' reads) took.
            if i > 0 {
                now = Instant::now();
            }
            let left = self
                .deadline
                .saturating_duration_since(now)
                .max(MIN_IO_TIMEOUT);
            if left + SHORTEN_SLACK < timeout {
                if conn.inner.set_read_timeout(Some(left)).is_err() {
                    conn.broken = true;
                }
                timeout = left;
            }
            let received = match &mut conn.inner {
                Link::Own(wire) => wire.read_reply().map_err(|e| e.to_string()),
                Link::Single(single) => single
                    .recv_response()
                    .map(adapter::to_reply)
                    .map_err(|e| e.to_string()),
                Link::Cluster(_) => break,
            };
            match received {
                Ok(reply) => {
                    let reply = noted(reply);
                    // A master demoted by a failover answers READONLY: reconnect (through
                    // the Sentinels, to the new master) next time.
                    // An unauthenticated connection (NOAUTH) must not be reused either: Redis
                    // answers its next large command with a protocol error and closes it.
                    if let Reply::Error(e) = &reply
                        && (e.is("READONLY") || e.is("MASTERDOWN") || adapter::refusal(e).is_some())
                    {
                        conn.broken = true;
                    }
                    inputs.push(Response::reply(id(i), reply));
                }
                Err(e) => {
                    // A reply may still be in flight: this connection must never be reused.
                    // Written already, so never "not sent", whatever the error.
                    conn.broken = true;
                    let failure = TransportFailure::no_reply(e);
                    inputs.extend(failed_from(i, &failure));
                    return (inputs, None);
                }
            }
        }
        if timeout != io_timeout && conn.inner.set_read_timeout(Some(io_timeout)).is_err() {
            conn.broken = true;
        }
        if let Link::Own(wire) = &conn.inner
            && wire.has_unread()
        {
            // More came than was asked for: the next batch would read it as its reply.
            conn.broken = true;
        }
        if conn.is_stale() {
            // The Sentinels named another master while (or before) these commands ran: what
            // the demoted master answered does not hold for the service (its writes are
            // lost), so the outcome is unknown. The protocols resolve it on the new master.
            conn.broken = true;
            let failure =
                TransportFailure::no_reply("answered by a master the Sentinels have replaced");
            return (failed_from(0, &failure), None);
        }
        // Used until the last read began: a little earlier than its end, so the idle check
        // comes a little early, never late (one clock read less per batch).
        conn.last_used = now;
        let spare = self.spare;
        let keep = (!conn.broken).then(|| Pooled {
            conn: Some(conn),
            spare,
        });
        (inputs, keep)
    }
}

/// [`adapter::to_reply`], noting an error reply for the diagnostics (a `NOPERM` warns).
fn reply_of(value: Value) -> Reply {
    noted(adapter::to_reply(value))
}

/// `reply`, an error reply noted for the diagnostics (a `NOPERM` warns).
fn noted(reply: Reply) -> Reply {
    if let Reply::Error(e) = &reply {
        crate::observe::events::error_reply(&e.code, Some(&e.message));
    }
    reply
}

/// Commands for one master of a Cluster, by address: a keyless command (a `SCAN` step) that
/// the cluster connection would send to any node.
impl Transport {
    /// On a Cluster: every master's address (`host:port`), sorted, as `CLUSTER SLOTS` said
    /// (asked again now if the table is old); empty for a single server or when unknown.
    pub(crate) fn masters(&self, key: &str) -> Vec<String> {
        let Some(nodes) = &self.nodes else {
            return Vec::new();
        };
        self.refresh_nodes(key);
        nodes.masters()
    }

    /// Sends `batch` to the Cluster master at `addr`, every command routed to that node.
    pub(crate) fn execute_at(&self, addr: &str, batch: &Batch) -> Vec<Response> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let fail = |why: String| -> Vec<Response> {
            let failure = TransportFailure::not_sent(why);
            batch
                .requests
                .iter()
                .map(|r| Response::failed(r.id, failure.clone()))
                .collect()
        };
        let target = addr.rsplit_once(':').and_then(|(host, port)| {
            Some((host.trim_matches(['[', ']']).to_owned(), port.parse().ok()?))
        });
        let Some((host, port)) = target else {
            return fail(format!("not a node address: {addr:?}"));
        };
        let left = batch.deadline.saturating_duration_since(Instant::now());
        let wait = left.min(self.connect_timeout).max(Duration::from_millis(1));
        let mut conn = match self.pool.get_timeout(wait) {
            Ok(conn) => conn,
            Err(e) => return fail(format!("no connection: {e}")),
        };
        let Link::Cluster(cluster) = &mut conn.inner else {
            return fail("not a Redis Cluster connection".into());
        };
        let mut out = Vec::with_capacity(batch.requests.len());
        let mut broken = false;
        for r in &batch.requests {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port,
            });
            match cluster.route_command(&adapter::command(&r.command), routing) {
                Ok(value) => out.push(Response::reply(r.id, reply_of(value))),
                Err(e) if e.code().is_some() => out.push(adapter::response(r.id, Err(e))),
                Err(e) => {
                    broken = true;
                    out.push(Response::failed(r.id, adapter::failure(&e)));
                }
            }
        }
        conn.broken |= broken;
        conn.last_used = Instant::now();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A scripted server (not Redis: it answers `INFO` with a bulk string naming no version,
    /// and every other request with `extra`), on every connection it is given, until the
    /// test ends.
    fn scripted(extra: &'static [u8]) -> u16 {
        scripted_with_info(b"$7\r\nunknown\r\n", extra)
    }

    /// [`scripted`], answering `INFO` with `info`.
    fn scripted_with_info(info: &'static [u8], extra: &'static [u8]) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf)
                        && n > 0
                    {
                        let asked = &buf[..n];
                        let answer: &[u8] = if asked.windows(4).any(|w| w == b"INFO") {
                            info
                        } else {
                            extra
                        };
                        if s.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    fn transport_to(port: u16) -> Transport {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let secs = Duration::from_secs(5);
        Transport::with_settings(
            Arc::new(Source::Direct(client)),
            &PoolSettings::sized(1),
            secs,
            secs,
            false,
        )
    }

    fn ping_batch() -> Batch {
        let request = Request {
            id: RequestId(7),
            command: redlease_core::Command::new("PING"),
        };
        Batch::new(vec![request], Instant::now() + Duration::from_secs(5))
    }

    /// A connection on which more replies came than requests were sent is never handed out
    /// again: the next batch would take the extra reply for its own.
    #[test]
    fn a_connection_with_an_unasked_reply_is_not_reused() {
        let transport = transport_to(scripted(b":1\r\n:2\r\n"));
        let inputs = transport.execute(&ping_batch());
        assert_eq!(inputs, vec![Response::reply(RequestId(7), Reply::Int(1))]);
        assert_eq!(transport.pool_state().0, 0, "the connection was dropped");
    }

    /// The same server answering one reply per request keeps its connection pooled (the
    /// test above fails for the reason it names).
    #[test]
    fn a_connection_in_step_is_reused() {
        let transport = transport_to(scripted(b":1\r\n"));
        for _ in 0..3 {
            let inputs = transport.execute(&ping_batch());
            assert_eq!(inputs, vec![Response::reply(RequestId(7), Reply::Int(1))]);
        }
        assert_eq!(transport.pool_state(), (1, 1, 1));
    }

    /// The connection of the last batch is kept out of the pool for the next one, and
    /// still PINGed first when it has been idle for [`CHECK_AFTER_IDLE`] (as a pooled one
    /// is); a broken one is never kept.
    #[test]
    fn the_spare_connection_is_reused_and_checked_after_idling() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (p, a) = (pings.clone(), accepted.clone());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                a.fetch_add(1, Ordering::SeqCst);
                let p = p.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf)
                        && n > 0
                    {
                        let asked = &buf[..n];
                        let answer: &[u8] = if asked.windows(4).any(|w| w == b"INFO") {
                            b"$7\r\nunknown\r\n"
                        } else {
                            p.fetch_add(1, Ordering::SeqCst);
                            b"+PONG\r\n"
                        };
                        if s.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let secs = Duration::from_secs(5);
        let transport = Transport::with_settings(
            Arc::new(Source::Direct(client)),
            &PoolSettings::sized(2),
            secs,
            secs,
            true,
        );
        let pong = vec![Response::reply(RequestId(7), Reply::Status("PONG".into()))];
        for _ in 0..3 {
            assert_eq!(transport.execute(&ping_batch()), pong);
        }
        // (The first use may also open a probe connection of its own: counted from here.)
        let opened = accepted.load(Ordering::SeqCst);
        let spare = transport.spare.as_ref().unwrap();
        assert!(spare.holds());
        assert_eq!(
            transport.pool_state(),
            (1, 1, 2),
            "the spare counts as idle"
        );
        assert_eq!(pings.load(Ordering::SeqCst), 3, "no checks while in use");
        // As if idle for longer than CHECK_AFTER_IDLE: it is PINGed before use.
        {
            let mut slot = spare.slot.lock().unwrap();
            let conn = slot.as_mut().unwrap();
            conn.last_used = Instant::now() - CHECK_AFTER_IDLE - Duration::from_millis(10);
        }
        assert_eq!(transport.execute(&ping_batch()), pong);
        assert_eq!(pings.load(Ordering::SeqCst), 5, "a PING before the batch");
        assert!(spare.holds());
        assert_eq!(accepted.load(Ordering::SeqCst), opened, "no new connection");
        // A broken connection goes back to the pool (which discards it), not to the spare.
        let mut conn = spare.take().unwrap();
        conn.broken = true;
        transport.give_back(conn);
        assert!(!spare.holds());
        assert_eq!(transport.pool_state().0, 0);
    }

    /// Bytes that are not RESP: the request has no reply (its outcome is unknown, never
    /// "not sent") and the connection is dropped.
    #[test]
    fn a_protocol_error_is_no_reply_and_drops_the_connection() {
        let transport = transport_to(scripted(b"!garbage\r\n"));
        let inputs = transport.execute(&ping_batch());
        assert!(
            matches!(&inputs[..], [Response { result: Err(f), .. }] if f.kind == FailureKind::NoReply),
            "{inputs:?}"
        );
        assert_eq!(transport.pool_state().0, 0);
    }

    /// An unasked reply after a set-up step (here `INFO`) fails the set-up: the batch
    /// sent next would have read it as its own reply.
    #[test]
    fn a_set_up_answered_out_of_step_gives_no_connection() {
        let transport = transport_to(scripted_with_info(b"$7\r\nunknown\r\n:9\r\n", b":1\r\n"));
        let inputs = transport.execute(&ping_batch());
        assert!(
            matches!(&inputs[..], [Response { result: Err(_), .. }]),
            "{inputs:?}"
        );
        assert_eq!(transport.pool_state().0, 0);
    }

    /// A named connection's set-up sends the library's name and version with its name, in
    /// one write (no round trip of their own), and an error reply to them (a server before
    /// Redis 7.2) does not fail the set-up.
    #[test]
    fn the_library_is_named_with_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (first_read, seen) = std::sync::mpsc::channel::<Vec<Vec<u8>>>();
        // Every connection it is given (the transport may open more than one), each
        // reporting the commands of each read.
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                let first_read = first_read.clone();
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = s.read(&mut chunk)
                        && n > 0
                    {
                        buf.extend_from_slice(&chunk[..n]);
                        let mut commands = Vec::new();
                        let mut answer = Vec::new();
                        while let Ok(Some((Reply::Array(args), used))) =
                            crate::wire::resp::parse(&buf)
                        {
                            buf.drain(..used);
                            let args: Vec<Vec<u8>> = args
                                .into_iter()
                                .map(|a| match a {
                                    Reply::Bulk(b) => b,
                                    _ => Vec::new(),
                                })
                                .collect();
                            answer.extend_from_slice(match args[0].as_slice() {
                                b"INFO" => b"$7\r\nunknown\r\n".as_slice(),
                                _ if args.get(1).is_some_and(|a| a == b"SETINFO") => {
                                    b"-ERR unknown subcommand 'SETINFO'\r\n"
                                }
                                _ => b"+OK\r\n",
                            });
                            commands.push(args.concat());
                        }
                        let _ = first_read.send(commands);
                        if s.write_all(&answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let settings = PoolSettings {
            client_name: Some("named".into()),
            ..PoolSettings::sized(1)
        };
        let secs = Duration::from_secs(5);
        let transport = Transport::with_settings(
            Arc::new(Source::Direct(client)),
            &settings,
            secs,
            secs,
            false,
        );
        let inputs = transport.execute(&ping_batch());
        assert_eq!(
            inputs,
            vec![Response::reply(RequestId(7), Reply::Status("OK".into()))]
        );
        let version = env!("CARGO_PKG_VERSION");
        let expected: Vec<Vec<u8>> = vec![
            b"CLIENTSETNAMEnamed".to_vec(),
            b"CLIENTSETINFOLIB-NAMEredlease".to_vec(),
            format!("CLIENTSETINFOLIB-VER{version}").into_bytes(),
        ];
        assert_eq!(seen.recv_timeout(secs).unwrap(), expected, "one write");
    }
}
