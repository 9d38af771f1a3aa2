//! One pub/sub listener thread per client: one subscriber connection, release notifications
//! routed to the threads waiting for them. The rules (which waiter a message wakes, the
//! epochs, lingering, shard routing) are the core's [`redlease_core::wake`]; this module
//! does the I/O around them.
//!
//! Waiting never depends on a message arriving: a waiter always has its own deadline (the
//! retry time its machine asked for), and while the connection is down waiters simply wait
//! out that deadline (backoff polling) until the listener is back.
//!
//! The listener keeps a [`Registry`] under its state lock and feeds it what the connection
//! sees: every confirmation and message bumps the epoch (shared by a cluster's shard
//! listeners) and is passed to the registry, which names the waiters to wake; each waiter has
//! a doorbell (a one-slot channel) that the listener rings. A waiter that woke takes its wake
//! from the registry, so it can be woken again; one that leaves unregisters (an untaken
//! release wake passes on). Subscriptions linger [`LINGER`] after their last waiter leaves.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use redlease_core::wake::{
    NodeAddr, PATIENCE, Registry, RouteCache, SlotRange, WaiterId, node_for_slot,
    subscription_commands,
};
use redlease_core::{Reply, WakeOn};

use crate::wire::connect::{ReadHalf, TlsSettings, WriteHalf, open_split};
use crate::wire::resp;

/// How long a subscription without waiters is kept.
pub(crate) const LINGER: Duration = Duration::from_secs(10);
/// The read timeout of the subscriber connection: housekeeping runs at least this often.
const TICK: Duration = Duration::from_millis(500);
/// A silent connection is PINGed after this long, and dropped if the PING goes unanswered.
const KEEPALIVE: Duration = Duration::from_secs(5);

pub(crate) use redlease_core::wake::Wake;

#[derive(Default)]
struct State {
    /// The wake rules' state: waiters by channel, subscriptions, epochs.
    wake: Registry,
    /// How to ring each registered waiter (a wake decided by `wake` is sent here).
    doorbells: HashMap<WaiterId, Doorbell>,
    /// The last (S)SUBSCRIBE refusal of the current connection (an ACL without the channel).
    refused: Option<String>,
}

impl State {
    fn ring(&self, id: WaiterId, why: Wake) {
        if let Some(bell) = self.doorbells.get(&id) {
            let _ = bell.tx.try_send(why);
            // A waiter parked in `Waiter::wait_until` (a no-op for one selecting on the
            // receiver, which the send wakes).
            bell.thread.unpark();
        }
    }

    fn ring_all(&self, ids: impl IntoIterator<Item = WaiterId>, why: Wake) {
        for id in ids {
            self.ring(id, why);
        }
    }
}

/// How a waiter is rung: its channel (which `select!` can wait on), and its thread, which
/// `Waiter::wait_until` parks instead of blocking on the channel (whose blocking receive
/// spins and yields the CPU about ten times before it sleeps: measured as `sched_yield`
/// calls by `scripts/cpu.sh sys`, on two cores shared by every waiting thread).
struct Doorbell {
    tx: Sender<Wake>,
    thread: std::thread::Thread,
}

struct Shared {
    state: Mutex<State>,
    /// The write half of the current connection (`None` while disconnected).
    writer: Mutex<Option<WriteHalf>>,
    epoch: Arc<AtomicU64>,
    /// Shard channels (SSUBSCRIBE) instead of plain ones.
    sharded: bool,
}

impl Shared {
    /// Sends the (un)subscriptions of `channels` (see [`subscription_commands`]).
    fn send_each(&self, subscribe: bool, channels: &[String]) {
        for cmd in subscription_commands(self.sharded, subscribe, channels) {
            let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
            self.send(&args);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a waiter thread panicked while holding it; the map is
        // still consistent (every update is a single step), so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writer(&self) -> MutexGuard<'_, Option<WriteHalf>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn send(&self, args: &[&[u8]]) {
        let mut writer = self.writer();
        if let Some(stream) = writer.as_mut()
            && stream.write_all(&resp::encode(args)).is_err()
        {
            // The reader notices the broken connection and reconnects.
            stream.shutdown();
        }
    }
}

/// Where the listener connects. Its `Debug` hides the password.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// Resolved at every (re)connection, so a Sentinel failover is followed.
    pub(crate) source: Arc<crate::transport::pool::Source>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) connect_timeout: Duration,
    /// For `rediss://` servers.
    pub(crate) tls: TlsSettings,
    /// Given with `CLIENT SETNAME` after connecting.
    pub(crate) client_name: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("source", &self.source)
            .field("username", &self.username)
            .field("password", &crate::wire::redact::secret(&self.password))
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// The listener thread's handle; dropping it stops and joins the thread.
pub(crate) struct Listener {
    shared: Arc<Shared>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Starts the listener thread. If the thread cannot be spawned, waiters wait out their
    /// retry deadlines.
    pub(crate) fn start(endpoint: Endpoint) -> Listener {
        Self::start_with(endpoint, Arc::new(AtomicU64::new(0)), false)
    }

    /// A listener sharing `epoch` with others (the listeners of a cluster's shards), on
    /// shard channels when `sharded`.
    fn start_with(endpoint: Endpoint, epoch: Arc<AtomicU64>, sharded: bool) -> Listener {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            writer: Mutex::new(None),
            epoch,
            sharded,
        });
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("redlease-listener".into())
                .spawn(move || run(&shared, &endpoint, &stop_rx))
                .ok()
        };
        Listener {
            shared,
            stop: Some(stop_tx),
            thread,
        }
    }

    /// The current epoch (note it when sending an attempt).
    pub(crate) fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::SeqCst)
    }

    /// This client holds the lock announced on `channel` (see [`Registry::hold`]).
    pub(crate) fn hold(&self, channel: &str, holder: u64) {
        self.shared
            .state()
            .wake
            .hold(channel, holder, Instant::now());
    }

    /// Before the release of a lock held on `channel` is sent (see [`Registry::unhold`]).
    pub(crate) fn unhold(&self, channel: &str, holder: u64) {
        let mut state = self.shared.state();
        if let Some(next) = state.wake.unhold(channel, holder, Instant::now()) {
            state.ring(next, Wake::Message);
        }
    }

    /// Before a release that announces itself is sent (see [`Registry::release_begun`]).
    pub(crate) fn release_begun(&self, channel: &str, holder: u64) -> bool {
        self.shared
            .state()
            .wake
            .release_begun(channel, holder, Instant::now())
    }

    /// That release's outcome (see [`Registry::release_ended`]).
    pub(crate) fn release_ended(&self, channel: &str, announced: bool) {
        let mut state = self.shared.state();
        if let Some(next) = state.wake.release_ended(channel, announced) {
            state.ring(next, Wake::Message);
        }
    }

    /// A thread's first attempt at the lock announced on `channel` is sent (see
    /// [`Registry::attempt`]).
    pub(crate) fn attempt(&self, channel: &str, holder: u64) {
        self.shared
            .state()
            .wake
            .attempt(channel, holder, Instant::now());
    }

    /// That attempt was not granted (see [`Registry::attempt_failed`]).
    pub(crate) fn attempt_failed(&self, channel: &str) {
        let mut state = self.shared.state();
        if let Some(next) = state.wake.attempt_failed(channel) {
            state.ring(next, Wake::Message);
        }
    }

    /// Registers a waiter; `sent_epoch` is the epoch noted when the attempt that found the
    /// lock busy was sent.
    pub(crate) fn register(&self, on: &WakeOn, sent_epoch: Option<u64>) -> Waiter {
        let (tx, rx) = bounded(1);
        let mut state = self.shared.state();
        let registered = state.wake.register(on, sent_epoch);
        let id = registered.id;
        if registered.wake_now {
            let _ = tx.try_send(Wake::Message);
        }
        let thread = std::thread::current();
        let parks = thread.id();
        state.doorbells.insert(id, Doorbell { tx, thread });
        drop(state);
        if let Some(channel) = registered.subscribe {
            self.shared.send_each(true, &[channel]);
        }
        Waiter {
            shared: self.shared.clone(),
            on: on.clone(),
            id,
            rx,
            parks,
            born: Instant::now(),
            patient_ns: AtomicU64::new(nanos(PATIENCE)),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(stream) = self.shared.writer().as_ref() {
            stream.shutdown();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

thread_local! {
    /// The channel of this thread's first attempt at a lock while it counts as held here
    /// ([`Listeners::attempt`]): ended by the driver's first wait on that channel, or by
    /// the lock once its acquisition returns.
    static ATTEMPT: std::cell::RefCell<Option<Arc<String>>> = const { std::cell::RefCell::new(None) };
}

/// Notes this thread's attempt on `channel` (after [`Listeners::attempt`] said it was).
pub(crate) fn attempt_begun(channel: Arc<String>) {
    ATTEMPT.with(|a| *a.borrow_mut() = Some(channel));
}

/// This thread's noted attempt, taken: `None` when a wait ended it already.
pub(crate) fn attempt_take() -> Option<Arc<String>> {
    ATTEMPT.with(|a| a.borrow_mut().take())
}

/// The driver is about to wait on `channel`: the attempt it noted (if on that channel)
/// was refused; it ends here (see [`Registry::attempt_failed`]).
pub(crate) fn attempt_refused(listeners: &Listeners, channel: &str) {
    let noted = ATTEMPT.with(|a| {
        let mut a = a.borrow_mut();
        match a.as_deref() {
            Some(c) if c.as_str() == channel => a.take(),
            _ => None,
        }
    });
    if noted.is_some() {
        listeners.attempt_failed(channel);
    }
}

/// A thread waiting for a release message on one channel.
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    on: WakeOn,
    id: WaiterId,
    rx: Receiver<Wake>,
    /// The thread that registered it, which a ring unparks ([`Doorbell`]).
    parks: std::thread::ThreadId,
    /// When it registered, and until when (ns after that) it defers to holders of this
    /// client ([`PATIENCE`] after its last attempt).
    born: Instant,
    patient_ns: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Waiter {
    pub(crate) fn wakes_on(&self) -> &WakeOn {
        &self.on
    }

    /// Whether this client holds the lock this waiter waits for ([`Registry::held`]).
    pub(crate) fn held_here(&self) -> bool {
        self.on.tag.is_none() && self.shared.state().wake.held(&self.on.channel)
    }

    /// Its attempt was just answered (refused): it defers to holders of this client for
    /// [`PATIENCE`] from `now` (see `redlease_core::wake`, *Patience*).
    pub(crate) fn attempted(&self, now: Instant) {
        let since = now.saturating_duration_since(self.born);
        self.patient_ns
            .store(nanos(since + PATIENCE), Ordering::Relaxed);
    }

    /// Until when it still defers to holders of this client.
    pub(crate) fn patient_until(&self) -> Instant {
        self.born + Duration::from_nanos(self.patient_ns.load(Ordering::Relaxed))
    }

    /// Out of patience, with a release here since its last attempt ([`PATIENCE`],
    /// [`Registry::released_since`]): it attempts, held here or not.
    pub(crate) fn impatient(&self, now: Instant) -> bool {
        now >= self.patient_until()
            && self
                .shared
                .state()
                .wake
                .released_since(&self.on.channel, self.last_attempt())
    }

    /// When its last attempt was answered (its registration, before the first).
    fn last_attempt(&self) -> Instant {
        self.patient_until()
            .checked_sub(PATIENCE)
            .unwrap_or(self.born)
    }

    /// A ring, or `None` at `until`: parked until rung ([`Doorbell`]) on the thread that
    /// registered it, on the channel's blocking receive elsewhere.
    fn recv_until(&self, until: Instant) -> Option<Wake> {
        if std::thread::current().id() != self.parks {
            return self.rx.recv_deadline(until).ok();
        }
        loop {
            match self.rx.try_recv() {
                Ok(rung) => return Some(rung),
                Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
                Err(crossbeam_channel::TryRecvError::Empty) => {}
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            // Returns when unparked (a ring, or a stale unpark: the loop looks again), or
            // at the timeout.
            std::thread::park_timeout(left);
        }
    }

    /// The doorbell: a ring received from it must be passed to [`rung`](Self::rung).
    pub(crate) fn doorbell(&self) -> &Receiver<Wake> {
        &self.rx
    }

    /// Consumes a wake received from the [`doorbell`](Self::doorbell) (so this waiter may be
    /// woken again); returns why it woke.
    pub(crate) fn rung(&self, rung: Wake) -> Wake {
        let pending = self.shared.state().wake.take(&self.on.channel, self.id);
        pending.unwrap_or(rung)
    }

    /// Blocks until woken or until `until`; returns why it woke (`None`: the deadline).
    /// A release wake that comes while this client holds the lock (its holder re-took it
    /// first) is let pass: the waiter sleeps on until the next release (the holder's own
    /// announces it) or `until` ([`Registry::held`]). A release by a holder of this client
    /// that comes back at once is left to it for a grace ([`Registry::grace`]) first.
    pub(crate) fn wait_until(&self, until: Instant) -> Option<Wake> {
        let channel = self.on.channel.as_str();
        loop {
            let rung = self.recv_until(until)?;
            // The wake is consumed: from now on this waiter may be woken again.
            let mut state = self.shared.state();
            let pending = state.wake.take(channel, self.id).unwrap_or(rung);
            if pending != Wake::Message || self.on.tag.is_some() {
                return Some(pending);
            }
            // Out of patience, and the lock changed hands here since the last attempt:
            // attempt at once, held here or not.
            let now = Instant::now();
            if now >= self.patient_until()
                && state.wake.released_since(channel, self.last_attempt())
            {
                return Some(pending);
            }
            if state.wake.held(channel) {
                continue;
            }
            let Some(grace) = state.wake.grace(channel, now) else {
                return Some(pending);
            };
            drop(state);
            // A ring meanwhile is another release: the re-check below decides for both.
            let _ = self.recv_until(grace.min(until));
            let mut state = self.shared.state();
            let _ = state.wake.take(channel, self.id);
            if !state.wake.held(channel) {
                return Some(pending);
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.doorbells.remove(&self.id);
        // An untaken release wake passes to the next waiter.
        if let Some(next) = state
            .wake
            .unregister(&self.on.channel, self.id, Instant::now())
        {
            state.ring(next, Wake::Message);
        }
    }
}

/// The listener thread: connect, subscribe, read, route; reconnect with backoff.
fn run(shared: &Shared, endpoint: &Endpoint, stop: &Receiver<()>) {
    let mut pause = Duration::from_millis(50);
    loop {
        // Through Sentinel: the master this connection is for (asked in `connect`).
        let generation = endpoint.source.master_generation();
        // Nothing that happens while serving may end the thread: a panic counts as a lost
        // connection (waiters wait out their own deadlines meanwhile), and it reconnects.
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            connect(endpoint).map(|(reader, writer)| {
                tracing::info!(redlease.listener = ?endpoint.source, "listener connected");
                // A Sentinel switch moves the subscriptions to the new master.
                let current = || endpoint.source.master_generation() == generation;
                serve(shared, reader, writer, stop, &current)
            })
        }));
        match served {
            Ok(Ok(())) => {
                pause = Duration::from_millis(50);
                disconnect(shared);
                if let Err(crossbeam_channel::TryRecvError::Disconnected) = stop.try_recv() {
                    return; // the client is gone: not worth a warning
                }
                tracing::warn!(redlease.listener = ?endpoint.source, "listener disconnected; waiters poll until it reconnects");
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "listener could not connect; waiters poll meanwhile");
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(_) => {
                tracing::error!(redlease.listener = ?endpoint.source, "listener panicked; reconnecting (waiters poll meanwhile)");
                disconnect(shared);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
        // Wait before reconnecting; a closed stop channel ends the thread at once.
        match stop.recv_timeout(pause) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Connects (plain TCP, Unix socket or TLS, whatever the server's address is), then
/// authenticates and names the connection, each reply awaited at most the connect timeout.
fn connect(endpoint: &Endpoint) -> std::io::Result<(ReadHalf, WriteHalf)> {
    let client = endpoint.source.client().map_err(std::io::Error::other)?;
    let addr = client.get_connection_info().addr();
    let (mut reader, mut writer) = open_split(addr, &endpoint.tls, endpoint.connect_timeout)?;
    let mut buf = Vec::new();
    if let Some(password) = &endpoint.password {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(user) = &endpoint.username {
            args.push(user.as_bytes());
        }
        args.push(password.as_bytes());
        writer.write_all(&resp::encode(&args))?;
        match read_frame(&mut reader, &mut buf)? {
            Reply::Status(_) => {}
            Reply::Error(e) => {
                return Err(std::io::Error::other(format!("AUTH refused: {e}")));
            }
            _ => return Err(std::io::Error::other("AUTH: unexpected reply")),
        }
    }
    if let Some(name) = &endpoint.client_name {
        writer.write_all(&resp::encode(&[b"CLIENT", b"SETNAME", name.as_bytes()]))?;
        // Best effort, as for pooled connections: NOPERM leaves the connection unnamed.
        if let Reply::Error(e) = read_frame(&mut reader, &mut buf)?
            && !e.is("NOPERM")
        {
            return Err(std::io::Error::other(format!(
                "CLIENT SETNAME refused: {e}"
            )));
        }
    }
    reader.set_read_timeout(TICK)?;
    // Writes happen under the state lock: a stuck socket must not hold it long.
    writer.set_write_timeout(TICK)?;
    Ok((reader, writer))
}

fn read_frame(stream: &mut ReadHalf, buf: &mut Vec<u8>) -> std::io::Result<Reply> {
    let mut chunk = [0u8; 512];
    loop {
        if let Some((frame, used)) = resp::parse(buf).map_err(|e| std::io::Error::other(e.0))? {
            buf.drain(..used);
            return Ok(frame);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Serves one connection until it breaks, `current` says its server was replaced (a
/// Sentinel switch), or the client is dropped.
fn serve(
    shared: &Shared,
    mut reader: ReadHalf,
    writer: WriteHalf,
    stop: &Receiver<()>,
    current: &dyn Fn() -> bool,
) {
    // Publish the writer and subscribe to every channel someone waits on (or lingers).
    {
        let mut state = shared.state();
        let channels = state.wake.connected();
        *shared.writer() = Some(writer);
        drop(state);
        shared.send_each(true, &channels);
    }
    let mut frames = Frames::default();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut last_heard = Instant::now();
    let mut ping_sent: Option<Instant> = None;
    loop {
        if matches!(
            stop.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ) {
            return;
        }
        match reader.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                last_heard = Instant::now();
                ping_sent = None;
                if frames
                    .push(&chunk[..n], |frame| route(shared, frame))
                    .is_err()
                {
                    return; // not RESP: reconnect
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        // Housekeeping, at least every TICK.
        if !current() {
            return;
        }
        let now = Instant::now();
        if let Some(sent) = ping_sent {
            if now.duration_since(sent) > KEEPALIVE {
                return; // half-open connection: reconnect
            }
        } else if now.duration_since(last_heard) > KEEPALIVE {
            shared.send(&[b"PING"]);
            ping_sent = Some(now);
        }
        unsubscribe_idle(shared, now);
    }
}

/// The subscriber connection's bytes, cut into frames as they arrive. The buffer holds only
/// bytes received (never room for what a header announced), each byte is scanned once
/// ([`resp::Scan`]) and a frame is parsed once, when complete: a large or hostile frame
/// read in many pieces costs time and memory linear in what arrived.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    buf: Vec<u8>,
    /// The frame at the front of `buf`, measured so far.
    scan: resp::Scan,
}

impl Frames {
    /// Takes `bytes` and hands `each` every frame they complete, in order. `Err`: the bytes
    /// are not RESP (the connection is then given up).
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
        mut each: impl FnMut(Reply),
    ) -> Result<(), resp::ProtocolError> {
        self.buf.extend_from_slice(bytes);
        loop {
            match self.scan.advance(&self.buf)? {
                resp::Scanned::NeedsAtLeast(_) => return Ok(()),
                resp::Scanned::Complete(len) => {
                    let Some((frame, used)) = resp::parse(&self.buf[..len])? else {
                        return Err(resp::ProtocolError(
                            "a frame measured complete did not parse".into(),
                        ));
                    };
                    self.buf.drain(..used);
                    self.scan = resp::Scan::default();
                    each(frame);
                }
            }
        }
    }

    /// The bytes held (received, not yet part of a complete frame).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }
}

fn unsubscribe_idle(shared: &Shared, now: Instant) {
    let mut state = shared.state();
    let idle = state.wake.idle(now, LINGER);
    // Sent while the state is locked, so a waiter re-registering one of these channels
    // sends its SUBSCRIBE after this UNSUBSCRIBE, never before.
    shared.send_each(false, &idle);
    drop(state);
}

fn route(shared: &Shared, frame: Reply) {
    let items = match frame {
        Reply::Array(items) => items,
        Reply::Error(e) => return refused(shared, &e.to_string()),
        _ => return,
    };
    let text = |i: usize| match items.get(i) {
        Some(Reply::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let (Some(kind), Some(channel)) = (text(0), text(1)) else {
        return;
    };
    let mut state = shared.state();
    match kind.as_str() {
        "subscribe" | "ssubscribe" => {
            let woken = state.wake.confirmed(&channel, shared.bump());
            for (id, why) in woken {
                state.ring(id, why);
            }
        }
        // Re-requested while the UNSUBSCRIBE was in flight: its SUBSCRIBE follows.
        "unsubscribe" | "sunsubscribe" => state.wake.unsubscribed(&channel),
        "message" | "smessage" => {
            let payload = match items.get(2) {
                Some(Reply::Bulk(b)) => Some(b.as_slice()),
                _ => None,
            };
            let woken = state.wake.message(&channel, payload, shared.bump());
            state.ring_all(woken, Wake::Message);
        }
        _ => {}
    }
}

/// The server refused a subscription (Redis 7 ACL users get no channels unless granted):
/// waiters of that channel poll; say how to fix it, once per connection.
fn refused(shared: &Shared, message: &str) {
    let first = shared.state().refused.replace(message.to_owned()).is_none();
    if first {
        tracing::error!(
            error = message,
            "the listener's SUBSCRIBE was refused, so waiters poll instead of being woken: \
             grant the Redis user the release channels (`ACL SETUSER <user> &<prefix>:*`, see docs/acl.md)"
        );
    }
}

/// The connection is gone: nothing is subscribed any more.
fn disconnect(shared: &Shared) {
    if let Some(stream) = shared.writer().take() {
        stream.shutdown();
    }
    let mut state = shared.state();
    state.refused = None;
    state.wake.disconnected();
    // Waiters keep waiting on their own deadlines; the next confirmation wakes them.
}

/// The listeners of a client: one connection, or (Redis Cluster) one per shard that has
/// waiters, each subscribed with `SSUBSCRIBE` to the shard channels its node serves.
pub(crate) enum Listeners {
    /// One server (or one node that sees every `PUBLISH`).
    One(Listener),
    /// A cluster's shards.
    Shards(Box<Shards>),
}

impl Listeners {
    /// A listener for `endpoint`; per shard when `sharded`.
    pub(crate) fn start(endpoint: Endpoint, sharded: bool) -> Listeners {
        if sharded {
            Listeners::Shards(Box::new(Shards {
                seed: endpoint,
                epoch: Arc::new(AtomicU64::new(0)),
                nodes: Mutex::new(HashMap::new()),
                routes: Mutex::new(RouteCache::new(ROUTE_TTL)),
            }))
        } else {
            Listeners::One(Listener::start(endpoint))
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        match self {
            Listeners::One(l) => l.epoch(),
            Listeners::Shards(s) => s.epoch.load(Ordering::SeqCst),
        }
    }

    /// This client holds the lock announced on `channel` (one server only: a cluster's
    /// shard listeners are not told, their waiters wake as before).
    pub(crate) fn hold(&self, channel: &str, holder: u64) {
        if let Listeners::One(l) = self {
            l.hold(channel, holder);
        }
    }

    /// Before the release of a lock held on `channel` is sent.
    pub(crate) fn unhold(&self, channel: &str, holder: u64) {
        if let Listeners::One(l) = self {
            l.unhold(channel, holder);
        }
    }

    /// Before a release that announces itself is sent: whether a message is owed (then
    /// tell [`release_ended`](Self::release_ended) the outcome).
    pub(crate) fn release_begun(&self, channel: &str, holder: u64) -> bool {
        match self {
            Listeners::One(l) => l.release_begun(channel, holder),
            Listeners::Shards(_) => false,
        }
    }

    /// The outcome of the release [`release_begun`](Self::release_begun) owed a message.
    pub(crate) fn release_ended(&self, channel: &str, announced: bool) {
        if let Listeners::One(l) = self {
            l.release_ended(channel, announced);
        }
    }

    /// A thread's first attempt at the lock on `channel` is sent (one server only, as
    /// [`hold`](Self::hold)): whether it was noted (then end it with
    /// [`attempt_failed`](Self::attempt_failed) unless granted).
    pub(crate) fn attempt(&self, channel: &str, holder: u64) -> bool {
        match self {
            Listeners::One(l) => {
                l.attempt(channel, holder);
                true
            }
            Listeners::Shards(_) => false,
        }
    }

    /// The noted attempt was not granted.
    pub(crate) fn attempt_failed(&self, channel: &str) {
        if let Listeners::One(l) = self {
            l.attempt_failed(channel);
        }
    }

    /// A waiter, or `None` when no listener can serve the channel (the caller then waits
    /// out its deadline).
    pub(crate) fn register(&self, on: &WakeOn, sent_epoch: Option<u64>) -> Option<Waiter> {
        match self {
            Listeners::One(l) => Some(l.register(on, sent_epoch)),
            Listeners::Shards(s) => s.register(on, sent_epoch),
        }
    }
}

/// How long a learned channel -> node route is trusted (after a resharding, waiters of a
/// moved slot re-check on their backoff until this has passed).
const ROUTE_TTL: Duration = Duration::from_secs(5);

/// One listener per cluster node that serves a channel someone waits on.
pub(crate) struct Shards {
    seed: Endpoint,
    epoch: Arc<AtomicU64>,
    /// `host:port` -> that node's listener.
    nodes: Mutex<HashMap<NodeAddr, Listener>>,
    /// Channel -> the node serving its slot, and when that was learned: looked up again
    /// after [`ROUTE_TTL`], so a resharded slot's waiters move to its new node.
    routes: Mutex<RouteCache>,
}

impl Shards {
    fn register(&self, on: &WakeOn, sent_epoch: Option<u64>) -> Option<Waiter> {
        let route = self.route(&on.channel)?;
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if !nodes.contains_key(&route) {
            let seed = self.seed.source.client().ok()?;
            let addr = match seed.get_connection_info().addr() {
                redis::ConnectionAddr::TcpTls { .. } => redis::ConnectionAddr::TcpTls {
                    host: route.0.clone(),
                    port: route.1,
                    insecure: false,
                    tls_params: None,
                },
                _ => redis::ConnectionAddr::Tcp(route.0.clone(), route.1),
            };
            let info = seed.get_connection_info().clone().set_addr(addr);
            let client = self.seed.tls.client(info).ok()?;
            let mut endpoint = self.seed.clone();
            endpoint.source = Arc::new(crate::transport::pool::Source::Direct(client));
            let listener = Listener::start_with(endpoint, self.epoch.clone(), true);
            nodes.insert(route.clone(), listener);
        }
        Some(nodes.get(&route)?.register(on, sent_epoch))
    }

    /// The node serving `channel`'s slot: `CLUSTER KEYSLOT` and `CLUSTER SLOTS` on a seed
    /// node, each bounded by the connect timeout.
    fn route(&self, channel: &str) -> Option<NodeAddr> {
        if let Some(r) = self
            .routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(channel, Instant::now())
        {
            return Some(r);
        }
        let client = self.seed.source.client().ok()?;
        let timeout = self.seed.connect_timeout;
        let mut conn = client.get_connection_with_timeout(timeout).ok()?;
        conn.set_read_timeout(Some(timeout)).ok()?;
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(channel)
            .query(&mut conn)
            .ok()?;
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn).ok()?;
        let ranges: Vec<SlotRange> = ranges.iter().filter_map(slot_range).collect();
        let node = node_for_slot(slot, &ranges)?;
        self.routes.lock().unwrap_or_else(|p| p.into_inner()).learn(
            channel,
            node.clone(),
            Instant::now(),
        );
        Some(node)
    }
}

/// One `CLUSTER SLOTS` entry (`[lo, hi, [host, port, ..], ..]`), if well-formed.
fn slot_range(range: &redis::Value) -> Option<SlotRange> {
    let redis::Value::Array(items) = range else {
        return None;
    };
    let (
        Some(redis::Value::Int(lo)),
        Some(redis::Value::Int(hi)),
        Some(redis::Value::Array(master)),
    ) = (items.first(), items.get(1), items.get(2))
    else {
        return None;
    };
    let host = match master.first()? {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
        _ => return None,
    };
    let port = match master.get(1)? {
        redis::Value::Int(p) => u16::try_from(*p).ok()?,
        _ => return None,
    };
    Some(SlotRange {
        lo: *lo,
        hi: *hi,
        master: (host, port),
    })
}

impl Listener {
    /// `(connected, channels subscribed or lingering, last refusal)`.
    fn snapshot(&self) -> (bool, usize, Option<String>) {
        let connected = self.shared.writer().is_some();
        let state = self.shared.state();
        (connected, state.wake.channels(), state.refused.clone())
    }
}

impl Listeners {
    /// What the listener (or the shard listeners) is doing now.
    pub(crate) fn status(&self) -> ListenerStatus {
        let mut status = ListenerStatus::started();
        let mut add = |l: &Listener| {
            let (connected, channels, refused) = l.snapshot();
            status.connections += 1;
            status.connected += usize::from(connected);
            status.channels += channels;
            status.refused = status.refused.take().or(refused);
        };
        match self {
            Listeners::One(l) => add(l),
            Listeners::Shards(s) => s
                .nodes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .for_each(add),
        }
        status
    }
}

/// The pub/sub listener (or, on a cluster, the shard listeners) of a client.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ListenerStatus {
    /// Whether it was started (on the first wait that names a channel).
    pub started: bool,
    /// Whether this client can listen at all (plain TCP; otherwise waiters always poll).
    pub available: bool,
    /// Listener connections wanted (1, or one per cluster shard with waiters).
    pub connections: usize,
    /// Of those, connected now. Fewer than `connections`: waiters of the others poll.
    pub connected: usize,
    /// Channels subscribed (or lingering after their last waiter left).
    pub channels: usize,
    /// The server's last refusal of a subscription on the current connection (`NOPERM`: the
    /// Redis user lacks the channel right, see `docs/acl.md`); waiters of refused channels poll.
    pub refused: Option<String>,
}

impl ListenerStatus {
    pub(crate) fn started() -> Self {
        ListenerStatus {
            started: true,
            available: true,
            ..Self::default()
        }
    }
}

/// A client's listener slot: the listener if it runs, started on demand.
pub(crate) struct Listening<'a> {
    slot: &'a OnceLock<Option<Listeners>>,
    endpoint: Option<&'a Endpoint>,
    sharded: bool,
}

impl<'a> Listening<'a> {
    pub(crate) fn new(
        slot: &'a OnceLock<Option<Listeners>>,
        endpoint: Option<&'a Endpoint>,
        sharded: bool,
    ) -> Self {
        Listening {
            slot,
            endpoint,
            sharded,
        }
    }

    pub(crate) fn current(&self) -> Option<&Listeners> {
        self.slot.get()?.as_ref()
    }

    pub(crate) fn start(&self) -> Option<&Listeners> {
        self.slot
            .get_or_init(|| {
                self.endpoint
                    .map(|e| Listeners::start(e.clone(), self.sharded))
            })
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::Frames;
    use crate::wire::fuzz::{Rng, cuts, frames_of, inputs, seed};

    #[test]
    fn the_listener_endpoint_debug_hides_the_password() {
        let client = redis::Client::open("redis://127.0.0.1/").unwrap();
        let endpoint = super::Endpoint {
            source: std::sync::Arc::new(crate::transport::pool::Source::Direct(client)),
            username: Some("app".into()),
            password: Some("hunter2-secret".into()),
            connect_timeout: std::time::Duration::from_secs(1),
            tls: crate::wire::connect::TlsSettings::default(),
            client_name: None,
        };
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("\"***\""), "{shown}");
    }

    /// The listener's reader, fed every input split at every byte boundary (or at random ones,
    /// for long inputs) and one byte at a time: no panic, the frames of one whole parse in
    /// order, an error exactly where that parse fails, and never more memory held than twice
    /// the bytes received.
    #[test]
    fn the_listeners_reader_agrees_with_one_parse_however_the_bytes_arrive() {
        let seed = seed();
        let mut rng = Rng::new(seed ^ 2);
        let inputs = inputs(seed, 1500);
        let mut judged = 0usize;
        for input in &inputs {
            let (whole, fails) = frames_of(input);
            let mut splits: Vec<Vec<usize>> = cuts(&mut rng, input)
                .into_iter()
                .map(|c| vec![c, input.len()])
                .collect();
            if input.len() <= 4096 {
                splits.push((1..=input.len()).collect()); // one byte at a time
            }
            for ends in splits {
                let mut frames = Frames::default();
                let mut got = Vec::new();
                let mut from = 0;
                let mut failed = false;
                for end in ends {
                    let pushed = frames.push(&input[from..end], |f| got.push(f));
                    assert!(
                        frames.held() <= 2 * end.max(8),
                        "{} bytes held after {end} received",
                        frames.held()
                    );
                    from = end;
                    if pushed.is_err() {
                        failed = true;
                        break;
                    }
                }
                judged += 1;
                assert_eq!(got, whole, "{input:?}");
                assert_eq!(failed, fails, "{input:?}");
            }
        }
        println!("{} inputs, {judged} splits judged", inputs.len());
    }
}
