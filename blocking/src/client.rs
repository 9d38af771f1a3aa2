//! The client: a connection pool, settings, and the one loop that runs any core machine.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use redlease_core::keys::{DEFAULT_PREFIX, Keyspace};
use redlease_core::limits;
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
    /// The most pooled connections: 1 to [`MAX_POOL_SIZE`](limits::MAX_POOL_SIZE) (10,000).
    /// Defaults to 16.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
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
    /// this succeeds while Redis is down; [`build_and_check`](Self::build_and_check) does not.
    pub fn build(self) -> Result<Client, Error> {
        let sharded = self.sharded_pubsub.unwrap_or(!self.cluster.is_empty());
        if sharded && self.cluster.is_empty() {
            return Err(InvalidArgument::Setting(
                "sharded pub/sub is for Redis Cluster clients".into(),
            )
            .into());
        }
        let keyspace = Keyspace::new(&self.prefix)?.with_sharded_pubsub(sharded);
        self.check_ranges()?;
        let bad_url = |url: &str, e: redis::RedisError| {
            InvalidArgument::Setting(format!("bad Redis URL {:?}: {e}", redacted(url)))
        };
        let (source, info) = match &self.sentinel {
            None if !self.cluster.is_empty() => {
                let seed = redis::Client::open(self.cluster[0].as_str())
                    .map_err(|e| bad_url(&self.cluster[0], e))?;
                let info = seed.get_connection_info().clone();
                let cluster = redis::cluster::ClusterClientBuilder::new(self.cluster.clone())
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(self.io_timeout)
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
                let lookup = crate::transport::SentinelLookup {
                    sentinels: clients,
                    service: service.clone(),
                    timeout: self.connect_timeout,
                    master: self.master_auth_info(),
                };
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
    /// Settings for a client of the Redis at `url`:
    /// `redis://[[username]:password@]host[:port][/db]`. A password alone authenticates as
    /// the `default` user (`requirepass`); `username:password` as a Redis 6+ ACL user, which
    /// needs the permissions to run scripts (`EVALSHA`, `EVAL`), on the keys of the prefix,
    /// and to subscribe to their release channels (Redis 7 ACL users get no pub/sub channels
    /// unless granted, e.g. `&redlease:*`). Characters such as `@` or `:` in a password are
    /// percent-encoded. A wrong or missing password gives [`Error::Configuration`] at once.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            sentinel: None,
            master_username: None,
            master_password: None,
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
    /// client follows the new master; a connection to a demoted master is dropped on its
    /// first `READONLY` reply.
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

    /// Sets up a new connection (outside the pool, bounded by the connect timeout), sends
    /// `PING` (bounded by the io timeout) and returns the round trip. Fails at once, without
    /// retries: [`Error::Configuration`] when Redis refuses the client's configuration (a
    /// wrong password, a password it does not expect, a missing one, a database it does not
    /// have: the message says what to fix), [`Error::Unavailable`] naming `host:port` when
    /// it cannot be reached. Call it at start-up to fail fast; the locks and queues retry
    /// transient failures until their deadlines, but never a refused configuration.
    pub fn ping(&self) -> Result<Duration, Error> {
        self.inner.shared.transport.ping()
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

    /// [`Client::run`]'s body (that method is documented with the machines, after the
    /// primitives).
    pub(crate) fn run_machine<P: Protocol>(&self, machine: P) -> Result<P::Output, Error> {
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
                // A refused configuration (wrong password, ...) ends the machine at once:
                // nothing was carried out, and no retry can succeed.
                for input in shared.transport.execute_checked(&batch, &mut kept)? {
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

/// `url` (or several, comma separated) with every password replaced by `***`, for messages.
pub(crate) fn redacted(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let Some((scheme, rest)) = one.split_once("://") else {
                return one.to_owned();
            };
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
                    format!("{scheme}://{user}:***@{host}{path}")
                }
                None => one.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Draws `N` random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| Error::Random(e.to_string()))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(redacted("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redacted("redis://alice:pw@h:1"), "redis://alice:***@h:1");
        assert_eq!(redacted("rediss://a:p%40w@h/2"), "rediss://a:***@h/2");
        assert_eq!(redacted("redis://h:1/"), "redis://h:1/");
        assert_eq!(
            redacted("redis://:x@a:1,redis://:y@b:2"),
            "redis://:***@a:1,redis://:***@b:2"
        );
        assert_eq!(redacted("not a url"), "not a url");
    }
}
