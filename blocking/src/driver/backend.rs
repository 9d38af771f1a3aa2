//! The backend seam and the one driver loop.
//!
//! Every primitive, RedLock and the watchdog run core machines through [`drive`] /
//! [`drive_set`]: poll the machines, send their batch (fanned out by node), feed the replies
//! back, wait when they ask to. What a batch is sent to is a [`Node`]: the pooled Redis
//! connections of a [`Transport`], or (feature `memory`) an in-process
//! [`MemoryServer`](crate::memory::MemoryServer). Time comes through the same seam
//! ([`Time`]): the real clock, or the [`MemoryClock`](crate::memory::MemoryClock) a test
//! moves, so the whole blocking API runs on the test's clock.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
#[cfg(feature = "memory")]
use std::time::Duration;
use std::time::Instant;

use redlease_core::{Batch, Error, Protocol, Request, Response, Step, TransportFailure, Wait};

use crate::transport::listener::{Listening, Waiter};
use crate::transport::pool::{Pooled, Transport};

/// Where a batch's commands go.
#[derive(Clone)]
pub(crate) enum Node {
    /// A Redis deployment behind a connection pool.
    Redis(Arc<Transport>),
    /// An in-process server (its replies lost to a fault cost the io timeout, as a silent
    /// connection does).
    #[cfg(feature = "memory")]
    Memory {
        server: crate::memory::MemoryServer,
        io_timeout: Duration,
        /// Set by [`MemoryServer::crash_client`](crate::memory::MemoryServer::crash_client):
        /// this client sends nothing any more.
        crashed: Arc<std::sync::atomic::AtomicBool>,
    },
}

impl Node {
    /// Whether the test crashed this in-process client (it sends nothing).
    #[inline]
    fn crashed(&self) -> bool {
        match self {
            Node::Redis(_) => false,
            #[cfg(feature = "memory")]
            Node::Memory { crashed, .. } => crashed.load(Ordering::SeqCst),
        }
    }

    /// Names the node (of a Cluster) that holds `key`, to group renewals by node; empty for
    /// one server.
    pub(crate) fn node_of(&self, key: &str) -> String {
        match self {
            Node::Redis(t) => t.node_of(key),
            #[cfg(feature = "memory")]
            Node::Memory { .. } => String::new(),
        }
    }

    /// Whether this is a Cluster client whose slot table is missing or old.
    pub(crate) fn nodes_stale(&self) -> bool {
        match self {
            Node::Redis(t) => t.nodes_stale(),
            #[cfg(feature = "memory")]
            Node::Memory { .. } => false,
        }
    }

    /// On a Cluster, learns the slot table from the master owning `key`.
    pub(crate) fn refresh_nodes(&self, key: &str) {
        match self {
            Node::Redis(t) => t.refresh_nodes(key),
            #[cfg(feature = "memory")]
            Node::Memory { .. } => {}
        }
    }
}

/// Where a client's randomness (tokens, retry jitter seeds, job ids) comes from.
// The small variant exists only with feature `memory` (tests); one per client, so the pool
// stays inline rather than behind a pointer on every draw.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Entropy {
    /// The operating system, drawn a pool at a time (see [`OsPool`]).
    Os(OsPool),
    /// A generator seeded by the in-process server: the same test draws the same tokens and
    /// the same jitter every run.
    #[cfg(feature = "memory")]
    Seeded(std::sync::Mutex<u64>),
}

/// How many bytes of the operating system's randomness a client draws at once: one
/// `getrandom` call serves 21 lock acquisitions (24 bytes each: token and jitter seed)
/// instead of one.
pub(crate) const OS_POOL: usize = 512;

/// Random bytes from the operating system, drawn [`OS_POOL`] at a time and handed out once
/// each, so that an acquisition costs no system call of its own (a `getrandom` call took
/// about 0.5 µs where measured: a sixth of the client's user-space work per lock cycle,
/// the one system call the cycle made beyond the raw cycle's). The bytes are the operating
/// system's, unchanged: nothing is derived or stretched. The pool belongs to one client (a
/// process forked after drawing gets a copy, as it gets a copy of the client's connections:
/// build a new client in the child). A thread that finds the pool in use by another draws
/// from the operating system directly rather than wait.
pub(crate) struct OsPool {
    pool: Mutex<PoolState>,
    /// `getrandom` calls made (refills and direct draws), for tests.
    draws: AtomicU64,
}

struct PoolState {
    bytes: [u8; OS_POOL],
    /// Bytes of `bytes` already handed out (or never filled).
    used: usize,
}

impl OsPool {
    /// An empty pool (the first draw fills it).
    pub(crate) fn new() -> OsPool {
        OsPool {
            pool: Mutex::new(PoolState {
                bytes: [0; OS_POOL],
                used: OS_POOL,
            }),
            draws: AtomicU64::new(0),
        }
    }

    /// `N` bytes never handed out before.
    fn bytes<const N: usize>(&self) -> Result<[u8; N], Error> {
        let direct = || {
            self.draws.fetch_add(1, Ordering::Relaxed);
            random_bytes::<N>()
        };
        if N > OS_POOL {
            return direct();
        }
        let Ok(mut pool) = self.pool.try_lock() else {
            // In use by another thread (or poisoned: a panic while copying bytes).
            return direct();
        };
        if OS_POOL - pool.used < N {
            self.draws.fetch_add(1, Ordering::Relaxed);
            pool.bytes = random_bytes::<OS_POOL>()?;
            pool.used = 0;
        }
        let start = pool.used;
        let mut out = [0u8; N];
        out.copy_from_slice(&pool.bytes[start..start + N]);
        // Handed out once: the copy left in the pool is cleared.
        pool.bytes[start..start + N].fill(0);
        pool.used = start + N;
        Ok(out)
    }

    /// `getrandom` calls made so far.
    #[cfg(test)]
    pub(crate) fn draws(&self) -> u64 {
        self.draws.load(Ordering::Relaxed)
    }
}

impl Entropy {
    /// Randomness from the operating system (see [`OsPool`]).
    pub(crate) fn os() -> Entropy {
        Entropy::Os(OsPool::new())
    }

    /// `N` random bytes.
    #[inline]
    pub(crate) fn bytes<const N: usize>(&self) -> Result<[u8; N], Error> {
        match self {
            Entropy::Os(pool) => pool.bytes::<N>(),
            #[cfg(feature = "memory")]
            Entropy::Seeded(state) => {
                let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                let mut out = [0u8; N];
                for chunk in out.chunks_mut(8) {
                    // splitmix64
                    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut z = *state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    z ^= z >> 31;
                    chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
                }
                Ok(out)
            }
        }
    }
}

/// The clock a driver reads and sleeps on.
#[derive(Clone, Debug)]
pub(crate) enum Time {
    /// Real time.
    Real,
    /// A test's clock (never real time).
    #[cfg(feature = "memory")]
    Memory(crate::memory::MemoryClock),
}

thread_local! {
    /// Set on a thread whose waits on a test clock must end when it is set (a queue worker
    /// being stopped).
    static CANCEL: std::cell::RefCell<Option<Arc<std::sync::atomic::AtomicBool>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// [`Time::now`] calls made on this thread (tests count the driver's clock reads).
    static CLOCK_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Marks this thread's waits on a test clock as ended by `flag` (a worker pool's stop).
#[cfg(feature = "memory")]
pub(crate) fn cancel_waits_on(flag: Arc<std::sync::atomic::AtomicBool>) {
    CANCEL.with(|c| *c.borrow_mut() = Some(flag));
}

/// The error a wait ended by [`cancel_waits_on`] gives.
const CANCELLED: Error = Error::Driver("the wait was cancelled: the worker pool is stopping");

impl Time {
    /// Now, on this clock.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        #[cfg(test)]
        CLOCK_READS.with(|n| n.set(n.get() + 1));
        match self {
            Time::Real => Instant::now(),
            #[cfg(feature = "memory")]
            Time::Memory(clock) => clock.instant(),
        }
    }

    /// Sleeps until `until` on this clock. False if the wait was cancelled.
    pub(crate) fn sleep_until(&self, until: Instant) -> bool {
        match self {
            Time::Real => {
                let left = until.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    std::thread::sleep(left);
                }
                true
            }
            #[cfg(feature = "memory")]
            Time::Memory(clock) => CANCEL.with(|c| {
                let cancel = c.borrow();
                clock.wait_until(until, None, cancel.as_deref())
                    != crate::memory::clock::Woke::Cancelled
            }),
        }
    }

    /// The test clock, if this is one.
    #[cfg(feature = "memory")]
    pub(crate) fn memory(&self) -> Option<&crate::memory::MemoryClock> {
        match self {
            Time::Memory(clock) => Some(clock),
            Time::Real => None,
        }
    }
}

/// Counters a client keeps for its status.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    waiting: AtomicUsize,
}

impl Counters {
    /// The threads counted as waiting now.
    pub(crate) fn waiters(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Counts the calling thread as waiting until the returned value is dropped.
    pub(crate) fn waiting(&self) -> Counted<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Counted(&self.waiting)
    }
}

/// A thread counted as waiting.
pub(crate) struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Draws `N` random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| Error::Random(e.to_string()))?;
    Ok(buf)
}

/// Where and how a driver runs its machines.
pub(crate) struct Route<'a> {
    /// The nodes: one for a client, N for RedLock (a command names its node by index).
    pub(crate) nodes: &'a [Node],
    pub(crate) time: &'a Time,
    /// The client's pub/sub listener (Redis), for waits that name a channel.
    pub(crate) listening: Option<Listening<'a>>,
    /// Counts waiting threads, for `Client::status`.
    pub(crate) counters: Option<&'a Counters>,
    /// End at once with [`Error::Configuration`] when Redis refuses the client's
    /// configuration.
    pub(crate) checked: bool,
    /// Keep the last connection across waits and give it back to the caller (a renewal
    /// thread's own connection on a Cluster).
    pub(crate) hold: bool,
    /// Send every batch to this one master of the Redis Cluster (`host:port`), whatever its
    /// keys: a listing that walks the masters in turn.
    pub(crate) at: Option<&'a str>,
}

impl<'a> Route<'a> {
    /// A route to `nodes` on `time`, checked, without a listener.
    pub(crate) fn new(nodes: &'a [Node], time: &'a Time) -> Self {
        Route {
            nodes,
            time,
            listening: None,
            counters: None,
            checked: true,
            hold: false,
            at: None,
        }
    }
}

/// Runs one machine to its end: the driver loop of every primitive.
pub(crate) fn drive<P: Protocol>(route: &Route<'_>, mut machine: P) -> Result<P::Output, Error> {
    let mut out = [None];
    drive_set(
        route,
        std::slice::from_mut(&mut machine),
        &mut out,
        &mut None,
    );
    let [out] = out;
    out.unwrap_or(Err(Error::Driver("the machine never finished")))
}

/// The sends of one round: one machine's batch as it is, or several merged (with the
/// machine owning each request, in order).
enum Sends {
    One(usize, Batch),
    Many(Vec<usize>, Batch),
}

impl Sends {
    fn add(sends: Option<Sends>, i: usize, batch: Batch) -> Sends {
        let (mut owners, mut all) = match sends {
            None => return Sends::One(i, batch),
            Some(Sends::One(j, first)) => (vec![j; first.requests.len()], first),
            Some(Sends::Many(owners, all)) => (owners, all),
        };
        owners.extend(std::iter::repeat_n(i, batch.requests.len()));
        all.deadline = all.deadline.min(batch.deadline);
        all.server_wait = all.server_wait.max(batch.server_wait);
        all.same_connection |= batch.same_connection;
        all.requests.extend(batch.requests);
        Sends::Many(owners, all)
    }
}

/// What wakes a lone waiting machine, kept across its waits.
#[derive(Default)]
struct Waiting {
    /// Registered with the client's listener (Redis).
    waiter: Option<Waiter>,
    /// Subscribed to the in-process server, with the channel.
    #[cfg(feature = "memory")]
    subscriber: Option<(String, crate::memory::Subscriber)>,
    /// The in-process server's data version right after the last batch was answered: a
    /// wait may sleep past its poll while the data stays at it.
    #[cfg(feature = "memory")]
    seen: Option<u64>,
}

/// How a wait ended.
enum Waited {
    Deadline,
    Woken,
    Cancelled,
}

/// Runs `machines` side by side until each is done, writing each one's result to `out`
/// (slots already `Some` are skipped). In every round their sends go out together, in one
/// batch fanned out by node; when none has anything to send, the driver waits for the
/// earliest of their deadlines (a lone machine waiting on a channel is woken early by a
/// message on it). `kept`: the connection kept between calls when the route holds one.
pub(crate) fn drive_set<P: Protocol>(
    route: &Route<'_>,
    machines: &mut [P],
    out: &mut [Option<Result<P::Output, Error>>],
    kept: &mut Option<Pooled>,
) {
    if route.nodes.iter().any(Node::crashed) {
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            *slot = Some(Err(Error::Unavailable {
                attempts: 0,
                last: TransportFailure::not_sent(
                    "the client crashed (MemoryServer::crash_client): it sends nothing",
                ),
            }));
        }
        return;
    }
    let mut wakeups = Waiting::default();
    let mut sent_epoch: Option<u64> = None;
    // The instant the last replies were handled at: the next poll comes right after, at
    // that instant (one clock read per round trip less).
    let mut handled_at: Option<Instant> = None;
    loop {
        let now = handled_at.take().unwrap_or_else(|| route.time.now());
        // The common case (one machine sending) moves its batch as it is.
        let mut sends: Option<Sends> = None;
        let mut earliest: Option<(usize, Wait)> = None;
        let mut waiting = 0usize;
        for (i, machine) in machines.iter_mut().enumerate() {
            if out.get(i).is_none_or(Option::is_some) {
                continue;
            }
            match machine.poll(now) {
                Step::Send(batch) => sends = Some(Sends::add(sends.take(), i, batch)),
                Step::Wait(wait) => {
                    waiting += 1;
                    if earliest.as_ref().is_none_or(|(_, w)| wait.until < w.until) {
                        earliest = Some((i, wait));
                    }
                }
                Step::Done(result) => out[i] = Some(result),
            }
        }
        if let Some(sends) = sends {
            sent_epoch = route
                .listening
                .as_ref()
                .and_then(Listening::current)
                .map(crate::transport::listener::Listeners::epoch);
            match sends {
                Sends::One(i, batch) => match send(route, &batch, kept, &mut wakeups) {
                    Ok(inputs) => {
                        // Every reply is in: they are handled at one instant.
                        let at = route.time.now();
                        for input in inputs {
                            machines[i].handle(input, at);
                        }
                        handled_at = Some(at);
                    }
                    Err(e) => out[i] = Some(Err(e)),
                },
                Sends::Many(owners, batch) => match send(route, &batch, kept, &mut wakeups) {
                    Ok(inputs) => {
                        let at = route.time.now();
                        for (i, input) in owners.into_iter().zip(inputs) {
                            machines[i].handle(input, at);
                        }
                        handled_at = Some(at);
                    }
                    Err(e) => {
                        for i in owners {
                            out[i] = Some(Err(e.clone()));
                        }
                    }
                },
            }
            continue;
        }
        let Some((i, wait)) = earliest else { return };
        if !route.hold {
            // No connection is held while waiting.
            *kept = None;
        }
        match wait_for(route, &wait, waiting == 1, &mut wakeups, sent_epoch) {
            Waited::Deadline => {}
            Waited::Woken => machines[i].wake(route.time.now()),
            Waited::Cancelled => {
                for slot in out.iter_mut().filter(|s| s.is_none()) {
                    *slot = Some(Err(CANCELLED));
                }
                return;
            }
        }
    }
}

/// Waits as `wait` asks: until its deadline, or (`lone`, and it names a channel) until a
/// message on the channel.
fn wait_for(
    route: &Route<'_>,
    wait: &Wait,
    lone: bool,
    waiting: &mut Waiting,
    sent_epoch: Option<u64>,
) -> Waited {
    let _counted = route.counters.map(Counters::waiting);
    let on = wait.wake_on.as_ref().filter(|_| lone);
    #[cfg(feature = "memory")]
    if let (Some(clock), [Node::Memory { server, .. }]) = (route.time.memory(), route.nodes) {
        // The in-process server's own subscribers carry the release messages. No gap: a
        // subscription made after the attempt was sent may have missed its release, so the
        // first wait on a channel ends at once (the machine tries again, now subscribed);
        // the next ones sleep.
        if let Some(on) = on
            && waiting
                .subscriber
                .as_ref()
                .is_none_or(|(c, _)| *c != on.channel)
        {
            let s = server.subscriber();
            s.subscribe(&[on.channel.as_bytes()]);
            s.ssubscribe(&[on.channel.as_bytes()]);
            waiting.subscriber = Some((on.channel.clone(), s));
            return Waited::Woken;
        }
        let receiver = on
            .and(waiting.subscriber.as_ref())
            .map(|(_, s)| s.receiver());
        // Every change to the server's data and every message is seen here: a machine that
        // says when its answer changes by itself sleeps until then, not poll by poll, and
        // goes back to its poll once the data changes (as a poll on Redis would notice).
        let quiet = wait
            .unchanged_until
            .filter(|q| *q > wait.until)
            .zip(waiting.seen);
        return CANCEL.with(|c| {
            let cancel = c.borrow();
            let woke = match quiet {
                Some((quiet, seen)) => clock.wait_quiet(
                    quiet,
                    wait.until,
                    (seen, &|| server.version()),
                    receiver,
                    cancel.as_deref(),
                ),
                None => clock.wait_until(wait.until, receiver, cancel.as_deref()),
            };
            match woke {
                crate::memory::clock::Woke::Deadline => Waited::Deadline,
                crate::memory::clock::Woke::Message => Waited::Woken,
                crate::memory::clock::Woke::Cancelled => Waited::Cancelled,
            }
        });
    }
    let listener = on.and_then(|on| Some((on, route.listening.as_ref()?.start()?)));
    match listener {
        Some((on, listener)) => {
            // This thread's first attempt, found busy, no longer counts as held here.
            crate::transport::listener::attempt_refused(listener, &on.channel);
            if waiting.waiter.as_ref().is_none_or(|w| w.wakes_on() != on) {
                waiting.waiter = listener.register(on, sent_epoch);
            } else if let Some(w) = &waiting.waiter {
                // Its last attempt was just answered: patience starts again.
                w.attempted(Instant::now());
            }
            match &waiting.waiter {
                Some(w) if w.wait_until(wait.until).is_some() => Waited::Woken,
                // The retry pause is over, but the lock is held by this client: nothing
                // changes before its release announces it, or before the holder's lease
                // runs out (the machine's `unchanged_until`): an attempt now could only
                // find it held.
                Some(w) => match wait.unchanged_until.filter(|q| *q > wait.until) {
                    // Out of patience, with a release here since its last attempt, it
                    // attempts all the same (`redlease_core::wake`, *Patience*).
                    Some(quiet) if w.held_here() => {
                        if w.wait_until(quiet.min(w.patient_until())).is_some() {
                            Waited::Woken
                        } else {
                            let now = Instant::now();
                            if now >= quiet || !w.held_here() || w.impatient(now) {
                                Waited::Deadline
                            } else if w.wait_until(quiet).is_some() {
                                Waited::Woken
                            } else {
                                Waited::Deadline
                            }
                        }
                    }
                    _ => Waited::Deadline,
                },
                // No listener serves the channel (a cluster node not found): poll at the
                // machine's pace, never in a tight loop.
                None => {
                    tracing::debug!(redlease.channel = %on.channel, "no listener for the channel: polling");
                    sleep(route.time, wait.until)
                }
            }
        }
        None => {
            if let Some(on) = &wait.wake_on {
                tracing::debug!(redlease.channel = %on.channel, "no listener for the channel: polling");
            }
            sleep(route.time, wait.until)
        }
    }
}

fn sleep(time: &Time, until: Instant) -> Waited {
    if time.sleep_until(until) {
        Waited::Deadline
    } else {
        Waited::Cancelled
    }
}

/// Sends `batch` to the node(s) it names: one input per request, in request order.
#[cfg_attr(not(feature = "memory"), allow(unused_variables))]
fn send(
    route: &Route<'_>,
    batch: &Batch,
    kept: &mut Option<Pooled>,
    waiting: &mut Waiting,
) -> Result<Vec<Response>, Error> {
    match route.nodes {
        [Node::Redis(transport)] => {
            if let Some(addr) = route.at {
                Ok(transport.execute_at(addr, batch))
            } else if route.hold && transport.is_cluster() {
                Ok(transport.execute_held(batch, kept))
            } else if route.checked {
                // A refused configuration (wrong password, ...) ends the machine at once:
                // nothing was carried out, and no retry can succeed.
                transport.execute_checked(batch, kept)
            } else {
                Ok(transport.execute(batch))
            }
        }
        #[cfg(feature = "memory")]
        [
            Node::Memory {
                server, io_timeout, ..
            },
        ] => {
            let (inputs, silent, seen) = execute_in_memory(server, &batch.requests, 0);
            waiting.seen = seen;
            if silent {
                wait_out_reply(route.time, *io_timeout, batch);
            }
            Ok(inputs)
        }
        nodes => Ok(fan_out(route.time, nodes, batch)),
    }
}

/// Runs `requests` (all for node `node`) on an in-process server, in order; also whether a
/// fault swallowed a reply.
#[cfg(feature = "memory")]
fn execute_in_memory(
    server: &crate::memory::MemoryServer,
    requests: &[Request],
    node: u16,
) -> (Vec<Response>, bool, Option<u64>) {
    let mut silent = false;
    let mut seen = None;
    let inputs = requests
        .iter()
        .map(|r| {
            if r.command.node().0 != node {
                return Response::failed(r.id, TransportFailure::not_sent("no such node"));
            }
            let (result, version) = server.execute_seen(&r.command);
            seen = Some(version);
            match result {
                Ok(reply) => Response::reply(r.id, reply),
                Err(fault) => {
                    silent |= fault != crate::memory::MemoryFault::Refused;
                    Response::failed(r.id, fault.into())
                }
            }
        })
        .collect();
    (inputs, silent, seen)
}

/// A reply swallowed by a fault costs what a silent connection costs: the wait for it, until
/// the io timeout (plus what the server may hold it) or the batch deadline.
#[cfg(feature = "memory")]
fn wait_out_reply(time: &Time, io_timeout: Duration, batch: &Batch) {
    let now = time.now();
    let until = redlease_core::backoff::saturating_add(now, io_timeout + batch.server_wait)
        .min(batch.deadline.max(now));
    let _ = time.sleep_until(until);
}

/// The requests of one node: the `run`-th positions of the batch grouped by node, that is
/// `requests[run]` itself when the batch comes grouped (`order` is `None`), else the
/// positions `order[run]` lists.
fn picked<'a>(
    requests: &'a [Request],
    order: Option<&'a [usize]>,
    run: std::ops::Range<usize>,
) -> impl ExactSizeIterator<Item = &'a Request> + Clone + Send + 'a {
    // Every position of `run` is below the batch's length, and `order` (when given) is a
    // permutation of the batch's positions.
    run.map(move |k| &requests[position(order, k)])
}

/// The batch position of the `k`-th request in node order.
#[inline]
fn position(order: Option<&[usize]>, k: usize) -> usize {
    order.map_or(k, |o| o[k])
}

/// Sends a batch that names several nodes: every node is written before any reply is read,
/// so a round costs about one round trip (the slowest node's), not N. Nodes with an idle
/// connection are written at once; the others (cold, or down: a connection attempt may take
/// the whole node timeout) each get a thread, so no node's connection attempt delays another.
/// Replies are then read node by node in the order the nodes were written (the first
/// written is the likeliest to have answered).
///
/// A batch whose requests come grouped by node (RedLock's rounds are in node order) is sent
/// as it is, each node's requests a run of the batch: no per-node lists are built. Another
/// batch is first ordered by node (stable, so each node's requests keep their order).
#[cfg_attr(not(feature = "memory"), allow(unused_variables))]
fn fan_out(time: &Time, nodes: &[Node], batch: &Batch) -> Vec<Response> {
    let requests = &batch.requests;
    let node_of = |r: &Request| usize::from(r.command.node().0);
    let grouped = requests
        .windows(2)
        .all(|w| node_of(&w[0]) <= node_of(&w[1]));
    let order: Option<Vec<usize>> = (!grouped).then(|| {
        let mut order: Vec<usize> = (0..requests.len()).collect();
        order.sort_by_key(|&i| node_of(&requests[i]));
        order
    });
    let order = order.as_deref();
    let mut slots: Vec<Option<Response>> = (0..requests.len()).map(|_| None).collect();
    let (deadline, wait) = (batch.deadline, batch.server_wait);
    let mut flights = Vec::with_capacity(nodes.len().min(requests.len()));
    let mut cold = Vec::new();
    #[cfg(feature = "memory")]
    let mut in_memory = Vec::new();
    let mut start = 0;
    while start < requests.len() {
        let n = node_of(&requests[position(order, start)]);
        let mut end = start + 1;
        while end < requests.len() && node_of(&requests[position(order, end)]) == n {
            end += 1;
        }
        let run = start..end;
        start = end;
        match nodes.get(n) {
            None => {
                for k in run {
                    let i = position(order, k);
                    slots[i] = Some(Response::failed(
                        requests[i].id,
                        TransportFailure::not_sent("no such node"),
                    ));
                }
            }
            Some(Node::Redis(t)) => {
                match t.try_send(picked(requests, order, run.clone()), deadline, wait) {
                    Some(flight) => flights.push((run, flight)),
                    None => cold.push((run, t)),
                }
            }
            #[cfg(feature = "memory")]
            Some(Node::Memory {
                server, io_timeout, ..
            }) => {
                let n = u16::try_from(n).unwrap_or(u16::MAX);
                let reqs: Vec<Request> = picked(requests, order, run.clone()).cloned().collect();
                in_memory.push((n, run, server, *io_timeout, reqs));
            }
        }
    }
    if !cold.is_empty() {
        std::thread::scope(|s| {
            let handles: Vec<_> = cold
                .into_iter()
                .map(|(run, node)| {
                    s.spawn(move || {
                        let flight =
                            node.send(picked(requests, order, run.clone()), deadline, wait);
                        (run, flight)
                    })
                })
                .collect();
            for h in handles {
                // A send never panics; were one to, its node counts as unanswered (its
                // requests get a failure below).
                if let Ok(sent) = h.join() {
                    flights.push(sent);
                }
            }
        });
    }
    #[cfg(feature = "memory")]
    {
        // In-process nodes answer in turn; replies lost to faults cost the io timeout once
        // for the round (the nodes are asked at once).
        let mut silent: Option<Duration> = None;
        for (n, run, server, io_timeout, reqs) in in_memory {
            let (inputs, lost, _) = execute_in_memory(server, &reqs, n);
            if lost {
                silent = Some(silent.map_or(io_timeout, |s| s.max(io_timeout)));
            }
            for (k, input) in run.zip(inputs) {
                slots[position(order, k)] = Some(input);
            }
        }
        if let Some(io_timeout) = silent {
            wait_out_reply(time, io_timeout, batch);
        }
    }
    for (run, flight) in flights {
        let first = run.start;
        let inputs = flight.receive(|k| requests[position(order, first + k)].id);
        for (k, input) in run.zip(inputs) {
            slots[position(order, k)] = Some(input);
        }
    }
    slots
        .into_iter()
        .zip(requests)
        .map(|(slot, r)| {
            slot.unwrap_or_else(|| {
                Response::failed(r.id, TransportFailure::no_reply("the node's sender ended"))
            })
        })
        .collect()
}

#[cfg(test)]
mod entropy_tests {
    use super::*;

    #[test]
    fn os_randomness_costs_one_draw_per_pool_not_per_token() {
        let entropy = Entropy::os();
        let n = 1000;
        let tokens: std::collections::HashSet<[u8; 24]> =
            (0..n).map(|_| entropy.bytes::<24>().unwrap()).collect();
        assert_eq!(tokens.len(), n, "a token was handed out twice");
        #[allow(irrefutable_let_patterns)] // Without `memory`, the only kind.
        let Entropy::Os(pool) = &entropy else {
            panic!("Entropy::os() is not the operating system's");
        };
        // One `getrandom` per 21 tokens (512 / 24), not one per token.
        let most = (n * 24).div_ceil(OS_POOL) as u64 + 1;
        assert!(
            pool.draws() <= most,
            "{} draws for {n} tokens (at most {most})",
            pool.draws()
        );
    }

    #[test]
    fn os_randomness_shared_by_threads_hands_out_distinct_bytes() {
        let entropy = Entropy::os();
        let drawn: Vec<[u8; 16]> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..2000)
                            .map(|_| entropy.bytes::<16>().unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let distinct: std::collections::HashSet<_> = drawn.iter().collect();
        assert_eq!(
            distinct.len(),
            drawn.len(),
            "two threads got the same bytes"
        );
        assert!(
            drawn.iter().all(|b| b != &[0u8; 16]),
            "cleared bytes handed out"
        );
    }

    #[test]
    fn os_randomness_larger_than_the_pool_is_drawn_directly() {
        let entropy = Entropy::os();
        let a = entropy.bytes::<{ OS_POOL + 8 }>().unwrap();
        let b = entropy.bytes::<{ OS_POOL + 8 }>().unwrap();
        assert_ne!(a, b);
        #[allow(irrefutable_let_patterns)] // Without `memory`, the only kind.
        let Entropy::Os(pool) = &entropy else {
            panic!("Entropy::os() is not the operating system's");
        };
        assert_eq!(pool.draws(), 2);
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;
    use redlease_core::{Command, Reply, RequestId};

    /// Sends `rounds` PINGs, waiting 1 s (of the clock) between them, then ends with the
    /// number of replies it got.
    struct Pinger {
        rounds: u32,
        replies: u32,
        next_at: Option<Instant>,
        in_flight: bool,
    }

    impl Protocol for Pinger {
        type Output = u32;
        fn poll(&mut self, now: Instant) -> Step<u32> {
            if self.in_flight {
                // The driver answers every request before it polls again.
                return Step::Done(Err(redlease_core::Error::Driver(
                    "polled with a PING unanswered",
                )));
            }
            if self.replies == self.rounds {
                return Step::Done(Ok(self.replies));
            }
            if let Some(at) = self.next_at.filter(|at| now < *at) {
                return Step::Wait(Wait::until(at));
            }
            self.in_flight = true;
            let request = Request {
                id: RequestId(u64::from(self.replies)),
                command: Command::new("PING"),
            };
            Step::Send(Batch::new(vec![request], now + Duration::from_secs(1)))
        }
        fn handle(&mut self, input: Response, now: Instant) {
            self.in_flight = false;
            if input.result.is_ok() {
                self.replies += 1;
            }
            self.next_at = Some(now + Duration::from_secs(1));
        }
    }

    /// A batch over several nodes that does not come grouped by node (a machine given to
    /// `RedLock::run` may interleave them) is answered in request order, each request by
    /// its own node and in its order there, and a request for a node that does not exist
    /// fails as not sent.
    #[test]
    fn a_batch_interleaving_nodes_is_answered_in_request_order() {
        let clock = crate::memory::MemoryClock::new();
        let servers = [
            crate::memory::MemoryServer::with_clock(clock.clone()),
            crate::memory::MemoryServer::with_clock(clock.clone()),
        ];
        let nodes: Vec<Node> = servers
            .iter()
            .map(|server| Node::Memory {
                server: server.clone(),
                io_timeout: Duration::from_secs(1),
                crashed: Default::default(),
            })
            .collect();
        let time = Time::Memory(clock);
        let on = |id: u64, node: u16, words: &[&str]| Request {
            id: RequestId(id),
            command: words[1..]
                .iter()
                .fold(Command::new(words[0]), |c, w| c.arg(w))
                .on(redlease_core::NodeId(node)),
        };
        let batch = Batch::new(
            vec![
                on(10, 1, &["SET", "k", "a"]),
                on(11, 0, &["GET", "k"]),
                on(12, 7, &["PING"]),
                on(13, 1, &["GET", "k"]),
                on(14, 0, &["SET", "k", "b"]),
                on(15, 0, &["GET", "k"]),
            ],
            time.now() + Duration::from_secs(1),
        );
        let replies = fan_out(&time, &nodes, &batch);
        let ids: Vec<u64> = replies.iter().map(|r| r.id.0).collect();
        assert_eq!(ids, [10, 11, 12, 13, 14, 15]);
        let ok = |s: &str| Ok(Reply::Status(s.into()));
        let bulk = |s: &str| Ok(Reply::Bulk(s.as_bytes().to_vec()));
        assert_eq!(replies[0].result, ok("OK"));
        assert_eq!(replies[1].result, Ok(Reply::Nil), "node 0 has no k yet");
        assert!(
            matches!(&replies[2].result, Err(f) if f.kind == redlease_core::FailureKind::NotSent),
            "{:?}",
            replies[2]
        );
        assert_eq!(replies[3].result, bulk("a"));
        assert_eq!(replies[4].result, ok("OK"));
        assert_eq!(
            replies[5].result,
            bulk("b"),
            "node 0's requests in their order"
        );
    }

    /// A machine whose batch is answered is polled next at the instant its replies were
    /// handled at: a one-batch machine costs the driver two clock reads (its first poll,
    /// the handling), not three.
    #[test]
    fn a_round_trip_reads_the_clock_once_after_the_first_poll() {
        let server = crate::memory::MemoryServer::new();
        let nodes = [Node::Memory {
            server: server.clone(),
            io_timeout: Duration::from_secs(1),
            crashed: Default::default(),
        }];
        let time = Time::Memory(server.clock());
        let route = Route::new(&nodes, &time);
        let mut machines = [Pinger {
            rounds: 1,
            replies: 0,
            next_at: None,
            in_flight: false,
        }];
        let mut out = [None];
        let before = CLOCK_READS.with(std::cell::Cell::get);
        drive_set(&route, &mut machines, &mut out, &mut None);
        let reads = CLOCK_READS.with(std::cell::Cell::get) - before;
        assert_eq!(out, [Some(Ok(1))]);
        assert_eq!(reads, 2, "clock reads of one round trip");
    }

    /// A machine of a set that waits between its sends runs to its end (the watchdog's
    /// renewals retry within their round), beside one that ends at once.
    #[test]
    fn a_set_runs_every_machine_through_its_waits() {
        let server = crate::memory::MemoryServer::new();
        let clock = server.clock();
        let nodes = [Node::Memory {
            server,
            io_timeout: Duration::from_secs(1),
            crashed: Default::default(),
        }];
        let time = Time::Memory(clock.clone());
        let route = Route::new(&nodes, &time);
        let mut machines = [
            Pinger {
                rounds: 1,
                replies: 0,
                next_at: None,
                in_flight: false,
            },
            Pinger {
                rounds: 3,
                replies: 0,
                next_at: None,
                in_flight: false,
            },
        ];
        let mut out = [None, None];
        drive_set(&route, &mut machines, &mut out, &mut None);
        assert_eq!(out, [Some(Ok(1)), Some(Ok(3))]);
        assert_eq!(clock.elapsed(), Duration::from_secs(2), "two waits of 1 s");
    }
}
