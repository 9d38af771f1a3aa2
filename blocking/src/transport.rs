//! The only code that talks to Redis: a pool of connections and one function that sends a
//! batch of commands and turns what comes back into core inputs.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use redis::{ConnectionLike, Value};
use redlease_core::{
    Batch, ErrorReply, Input, NodeId, Protocol, Reply, Request, Step, TransportFailure,
};

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
}

/// A connection to one server, or to a Redis Cluster (which routes every command to the
/// node owning its first key's slot, and follows MOVED and ASK redirections).
pub(crate) enum Link {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Link {
    fn set_read_timeout(&self, d: Option<Duration>) -> redis::RedisResult<()> {
        match self {
            Link::Single(c) => c.set_read_timeout(d),
            Link::Cluster(c) => c.set_read_timeout(d),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Link::Single(c) => c.is_open(),
            Link::Cluster(c) => c.is_open(),
        }
    }

    fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Link::Single(c) => redis::cmd("PING").query(c),
            Link::Cluster(c) => redis::cmd("PING").query(c.as_mut()),
        }
    }
}

/// A pooled connection idle longer than this is PINGed before use: a Redis restart or an
/// idle timeout leaves dead connections in the pool, and a command sent on one would come
/// back as "no reply" (outcome unknown) when it surely never ran.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Opens connections with a connect timeout and sets their read and write timeouts.
#[derive(Debug)]
pub(crate) struct Manager {
    source: Arc<Source>,
    connect_timeout: Duration,
    io_timeout: Duration,
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
}

impl SentinelLookup {
    fn master(&self) -> Result<redis::Client, redis::RedisError> {
        let mut last =
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no Sentinel to ask"));
        for sentinel in &self.sentinels {
            let asked = sentinel
                .get_connection_with_timeout(self.timeout)
                .and_then(|mut c| {
                    c.set_read_timeout(Some(self.timeout))?;
                    c.set_write_timeout(Some(self.timeout))?;
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(&self.service)
                        .query::<Option<(String, u16)>>(&mut c)
                });
            match asked {
                Ok(Some((host, port))) => {
                    use redis::IntoConnectionInfo;
                    let info = redis::ConnectionAddr::Tcp(host, port)
                        .into_connection_info()?
                        .set_redis_settings(self.master.clone());
                    return redis::Client::open(info);
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

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Conn, redis::RedisError> {
        let inner = match &*self.source {
            Source::Cluster(cluster, _) => {
                let c = cluster.get_connection()?;
                c.set_read_timeout(Some(self.io_timeout))?;
                c.set_write_timeout(Some(self.io_timeout))?;
                Link::Cluster(Box::new(c))
            }
            _ => {
                let c = self
                    .source
                    .client()?
                    .get_connection_with_timeout(self.connect_timeout)?;
                c.set_read_timeout(Some(self.io_timeout))?;
                c.set_write_timeout(Some(self.io_timeout))?;
                Link::Single(c)
            }
        };
        Ok(Conn {
            inner,
            broken: false,
            last_used: Instant::now(),
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        if conn.last_used.elapsed() < CHECK_AFTER_IDLE {
            return Ok(());
        }
        conn.inner.ping()?;
        conn.last_used = Instant::now();
        Ok(())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.inner.is_open()
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

/// Threads of the shared pool: connection attempts in progress at once, across clients
/// (each bounded by its client's connect timeout).
const POOL_THREADS: usize = 4;

/// The connection pool of one client, and its timeouts.
pub(crate) struct Transport {
    pool: r2d2::Pool<Manager>,
    connect_timeout: Duration,
    io_timeout: Duration,
    /// For a Redis Cluster: which master owns which slot (for per-node renewal batches).
    nodes: Option<crate::shards::SlotTable>,
}

impl Transport {
    pub(crate) fn new(
        source: Arc<Source>,
        pool_size: u32,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> Self {
        Self::with_checks(source, pool_size, connect_timeout, io_timeout, true)
    }

    /// `check_idle`: PING connections idle for [`CHECK_AFTER_IDLE`] on checkout. RedLock turns
    /// it off: a round must write to every node at once, not PING them one after another (a
    /// dead connection there only costs that node's vote).
    pub(crate) fn with_checks(
        source: Arc<Source>,
        pool_size: u32,
        connect_timeout: Duration,
        io_timeout: Duration,
        check_idle: bool,
    ) -> Self {
        let nodes = matches!(*source, Source::Cluster(..)).then(crate::shards::SlotTable::default);
        let manager = Manager {
            source,
            connect_timeout,
            io_timeout,
        };
        // Connections are made on demand (no eager background connecting to a Redis that
        // may be down) and PINGed on checkout only after being idle (see CHECK_AFTER_IDLE).
        // No reaper: it would be a periodic task that outlives the pool on the shared
        // thread pool; idle connections stay (at most `pool_size`), checked before reuse.
        let pool = r2d2::Pool::builder()
            .max_size(pool_size)
            .min_idle(Some(0))
            .test_on_check_out(check_idle)
            .connection_timeout(connect_timeout)
            .idle_timeout(None)
            .max_lifetime(None)
            .thread_pool(shared_thread_pool())
            .build_unchecked(manager);
        Transport {
            pool,
            connect_timeout,
            io_timeout,
            nodes,
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
        let route = Route::new(crate::shards::slot(key.as_bytes()), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        match cluster.route_command(redis::cmd("CLUSTER").arg("SLOTS"), routing) {
            Ok(reply) => nodes.update(&reply),
            Err(_) => conn.broken = true,
        }
        conn.last_used = Instant::now();
    }

    /// Sends `batch` and returns one input per request, in request order.
    pub(crate) fn execute(&self, batch: &Batch) -> Vec<Input> {
        self.execute_keeping(batch, &mut None)
    }

    /// Like [`execute`](Self::execute), keeping the connection in `kept` afterwards: a
    /// following batch that asks for [`Batch::same_connection`] (a `WAIT`, which only
    /// covers the writes of its own connection) is sent on it. Dropping `kept` returns the
    /// connection to the pool.
    pub(crate) fn execute_keeping(&self, batch: &Batch, kept: &mut Option<Pooled>) -> Vec<Input> {
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
                .map(|r| Input::failed(r.id, failure.clone()))
                .collect();
        }
        let previous = kept.take();
        let flight = match previous {
            Some(conn) if batch.same_connection => self.write(
                *conn,
                batch.requests.clone(),
                batch.deadline,
                batch.server_wait,
            ),
            None if batch.same_connection => unreachable_same_connection(batch),
            _ => self.send(batch.requests.clone(), batch.deadline, batch.server_wait),
        };
        let (inputs, conn) = flight.receive_keeping();
        *kept = conn;
        inputs
    }

    /// Writes `requests` (pipelined, whatever node they name) without waiting for the
    /// replies, so that several nodes can be asked at once; [`Flight::receive`] reads them.
    pub(crate) fn send(
        &self,
        requests: Vec<Request>,
        deadline: Instant,
        server_wait: Duration,
    ) -> Flight {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(MIN_IO_TIMEOUT);
        match self.pool.get_timeout(remaining.min(self.connect_timeout)) {
            Ok(conn) => self.write(conn, requests, deadline, server_wait),
            Err(e) => Flight {
                requests,
                deadline,
                state: FlightState::Failed(TransportFailure::not_sent(format!(
                    "no connection: {e}"
                ))),
            },
        }
    }

    /// Like [`send`](Self::send), but only on an idle pooled connection: gives the requests
    /// back at once when there is none (so a caller asking several nodes never waits on one
    /// node's connection attempt before writing to the others).
    pub(crate) fn try_send(
        &self,
        requests: Vec<Request>,
        deadline: Instant,
        server_wait: Duration,
    ) -> Result<Flight, Vec<Request>> {
        match self.pool.try_get() {
            Some(conn) => Ok(self.write(conn, requests, deadline, server_wait)),
            None => Err(requests),
        }
    }

    fn write(
        &self,
        mut conn: r2d2::PooledConnection<Manager>,
        requests: Vec<Request>,
        deadline: Instant,
        server_wait: Duration,
    ) -> Flight {
        let fail = |requests: Vec<Request>, failure: TransportFailure| Flight {
            requests,
            deadline,
            state: FlightState::Failed(failure),
        };
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(MIN_IO_TIMEOUT);
        // The reply timeout: the io timeout (plus what the server may hold the reply back),
        // never past the deadline. The socket is only touched when that differs from its
        // usual io timeout by more than a little (no extra syscalls on the common path).
        let wanted = remaining.min(self.io_timeout + server_wait);
        let changed = wanted.abs_diff(self.io_timeout) > SHORTEN_SLACK;
        if changed && let Err(e) = conn.inner.set_read_timeout(Some(wanted)) {
            conn.broken = true;
            return fail(requests, TransportFailure::not_sent(format!("socket: {e}")));
        }
        if let Link::Cluster(cluster) = &mut conn.inner {
            // A cluster connection routes command by command (by each command's first key),
            // so the batch is sent and answered here, one request after another.
            let mut inputs = Vec::with_capacity(requests.len());
            for r in &requests {
                let mut cmd = redis::Cmd::new();
                for a in r.command.args() {
                    cmd.arg(a.as_slice());
                }
                match cluster.req_command(&cmd) {
                    Ok(value) => inputs.push(Input::reply(r.id, to_reply(value))),
                    Err(e) => match e.code() {
                        // An error reply from the server.
                        Some(code) => inputs.push(Input::reply(
                            r.id,
                            Reply::Error(ErrorReply::new(code, e.detail().unwrap_or_default())),
                        )),
                        None => {
                            conn.broken = true;
                            let failure = TransportFailure::no_reply(e.to_string());
                            inputs.extend(
                                requests[inputs.len()..]
                                    .iter()
                                    .map(|r| Input::failed(r.id, failure.clone())),
                            );
                            break;
                        }
                    },
                }
            }
            return Flight {
                requests,
                deadline,
                state: FlightState::Answered {
                    inputs,
                    conn: Box::new(conn),
                },
            };
        }
        let Link::Single(single) = &mut conn.inner else {
            return fail(requests, TransportFailure::not_sent("no connection"));
        };
        let mut pipe = redis::pipe();
        for r in &requests {
            let mut cmd = redis::Cmd::new();
            for a in r.command.args() {
                cmd.arg(a.as_slice());
            }
            pipe.add_command(cmd);
        }
        if let Err(e) = single.send_packed_command(&pipe.get_packed_pipeline()) {
            conn.broken = true;
            let failure = if e.is_connection_refusal() {
                TransportFailure::not_sent(e.to_string())
            } else {
                TransportFailure::no_reply(e.to_string())
            };
            return fail(requests, failure);
        }
        Flight {
            requests,
            deadline,
            state: FlightState::Sent {
                conn: Box::new(conn),
                timeout: if changed { wanted } else { self.io_timeout },
                io_timeout: self.io_timeout,
            },
        }
    }
}

/// A pooled connection.
pub(crate) type Pooled = Box<r2d2::PooledConnection<Manager>>;

/// A batch that must follow its predecessor's connection, without one to follow: its
/// commands are not sent (a `WAIT` elsewhere would vouch for writes it cannot see).
fn unreachable_same_connection(batch: &Batch) -> Flight {
    Flight {
        requests: batch.requests.clone(),
        deadline: batch.deadline,
        state: FlightState::Failed(TransportFailure::not_sent(
            "the connection of the previous batch is gone",
        )),
    }
}

/// Requests written to one connection, their replies not yet read.
pub(crate) struct Flight {
    requests: Vec<Request>,
    deadline: Instant,
    state: FlightState,
}

enum FlightState {
    Sent {
        conn: Pooled,
        /// The read timeout the socket has now.
        timeout: Duration,
        /// The usual one, put back after reading.
        io_timeout: Duration,
    },
    Failed(TransportFailure),
    /// Already answered (a cluster connection sends and reads each request in turn).
    Answered {
        inputs: Vec<Input>,
        conn: Pooled,
    },
}

impl Flight {
    /// Reads one reply per request, in order (a transport failure stands in for each reply
    /// that did not come).
    pub(crate) fn receive(self) -> Vec<Input> {
        self.receive_keeping().0
    }

    /// [`receive`](Self::receive), also handing back the connection unless it broke.
    pub(crate) fn receive_keeping(self) -> (Vec<Input>, Option<Pooled>) {
        let (mut conn, mut timeout, io_timeout) = match self.state {
            FlightState::Failed(failure) => {
                let inputs = self
                    .requests
                    .iter()
                    .map(|r| Input::failed(r.id, failure.clone()))
                    .collect();
                return (inputs, None);
            }
            FlightState::Sent {
                conn,
                timeout,
                io_timeout,
            } => (conn, timeout, io_timeout),
            FlightState::Answered { inputs, mut conn } => {
                conn.last_used = Instant::now();
                let keep = (!conn.broken).then_some(conn);
                return (inputs, keep);
            }
        };
        let mut inputs = Vec::with_capacity(self.requests.len());
        for r in &self.requests {
            // Never read past the batch deadline, however long the earlier reads (or other
            // nodes' reads) took.
            let left = self
                .deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_IO_TIMEOUT);
            if left + SHORTEN_SLACK < timeout {
                if conn.inner.set_read_timeout(Some(left)).is_err() {
                    conn.broken = true;
                }
                timeout = left;
            }
            let Link::Single(single) = &mut conn.inner else {
                break;
            };
            match single.recv_response() {
                Ok(value) => {
                    let reply = to_reply(value);
                    // A master demoted by a failover answers READONLY: reconnect (through
                    // the Sentinels, to the new master) next time.
                    if let Reply::Error(e) = &reply
                        && (e.is("READONLY") || e.is("MASTERDOWN"))
                    {
                        conn.broken = true;
                    }
                    inputs.push(Input::reply(r.id, reply));
                }
                Err(e) => {
                    // A reply may still be in flight: this connection must never be reused.
                    conn.broken = true;
                    let failure = TransportFailure::no_reply(e.to_string());
                    inputs.extend(
                        self.requests[inputs.len()..]
                            .iter()
                            .map(|r| Input::failed(r.id, failure.clone())),
                    );
                    return (inputs, None);
                }
            }
        }
        if timeout != io_timeout && conn.inner.set_read_timeout(Some(io_timeout)).is_err() {
            conn.broken = true;
        }
        conn.last_used = Instant::now();
        let keep = (!conn.broken).then_some(conn);
        (inputs, keep)
    }
}

/// Advances several machines side by side until each is done or asks to wait: in every
/// round their sends go out together in one pipelined batch. Returns each machine's last step.
pub(crate) fn run_together<P: Protocol>(
    transport: &Transport,
    machines: &mut [P],
) -> Vec<Step<P::Output>> {
    let mut last: Vec<Option<Step<P::Output>>> = machines.iter().map(|_| None).collect();
    loop {
        let now = Instant::now();
        let mut requests = Vec::new();
        let mut owners = Vec::new();
        let mut deadline: Option<Instant> = None;
        for (i, machine) in machines.iter_mut().enumerate() {
            if last[i].is_some() {
                continue;
            }
            match machine.poll(now) {
                Step::Send(batch) => {
                    deadline = Some(deadline.map_or(batch.deadline, |d| d.min(batch.deadline)));
                    for r in batch.requests {
                        owners.push(i);
                        requests.push(r);
                    }
                }
                other => last[i] = Some(other),
            }
        }
        let Some(deadline) = deadline else { break };
        let inputs = transport.execute(&Batch::new(requests, deadline));
        for (i, input) in owners.into_iter().zip(inputs) {
            if let Some(machine) = machines.get_mut(i) {
                machine.handle(input, Instant::now());
            }
        }
    }
    last.into_iter()
        .map(|s| s.unwrap_or(Step::Awaiting))
        .collect()
}

/// Maps a `redis` value onto the core's RESP mirror.
pub(crate) fn to_reply(v: Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(b) => Reply::Bulk(b),
        Value::Array(items) | Value::Set(items) => {
            Reply::Array(items.into_iter().map(to_reply).collect())
        }
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::Map(pairs) => Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [to_reply(k), to_reply(v)])
                .collect(),
        ),
        Value::Attribute { data, .. } => to_reply(*data),
        Value::Double(d) => Reply::Bulk(d.to_string().into_bytes()),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::VerbatimString { text, .. } => Reply::Bulk(text.into_bytes()),
        Value::BigNumber(n) => Reply::Bulk(n),
        Value::Push { data, .. } => Reply::Array(data.into_iter().map(to_reply).collect()),
        Value::ServerError(e) => {
            Reply::Error(ErrorReply::new(e.code(), e.details().unwrap_or_default()))
        }
        // `Value` is non-exhaustive; a future kind reaches the machine as a shape it rejects.
        #[allow(unreachable_patterns)]
        other => Reply::Status(format!("{other:?}")),
    }
}
