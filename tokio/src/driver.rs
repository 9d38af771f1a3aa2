//! The driver task: one per client. It owns the connection, the pub/sub subscription,
//! every running machine and one timer.
//!
//! ```text
//!            commands (acquire, cancel, release) ──┐
//!   replies of batches in flight ─────────────────┤
//!   pub/sub messages and confirmations ───────────┼──► handle ──► poll ready machines ──► re-arm timer
//!   the timer (earliest waiter or renewal) ───────┘
//! ```
//!
//! A machine is *ready* (poll it), *sending* (its batch is in flight) or *waiting* (until an
//! instant, or a wake by the registry). The timer is reset only when the earliest deadline
//! of the waiters, the renewals and the pub/sub reconnect changes.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::Either;
use futures_util::stream::FuturesUnordered;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream,
};
use redlease_core::lease::{Acquire, Acquisition, Lease, Release, ScriptOp, Undo};
use redlease_core::renewal::{Extension, RenewalEvent, RenewalPolicy, Renewals, WatchId};
use redlease_core::wake::{Registry, WaiterId};
use redlease_core::{Batch, LossReason, NodeId, Protocol, Response, Step, TransportFailure};
use redlease_redis as adapter;
use tokio::sync::{mpsc, oneshot, watch};

use crate::Error;
use crate::lock::LockGuard;
use crate::runtime::{BoxFuture, Runtime};

/// How many renewals the driver takes from the schedule per timer tick.
const RENEWALS_PER_TICK: usize = 1024;
/// The pause before connecting the pub/sub connection again after it failed.
const PUBSUB_RETRY: Duration = Duration::from_secs(1);
/// The timer's instant while nothing is due (re-armed as soon as something is).
const IDLE: Duration = Duration::from_secs(3600);

/// Identifies one acquisition, so that its future can cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct OpId(u64);

impl OpId {
    pub(crate) fn next() -> OpId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        OpId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// What an acquisition's future waits for.
pub(crate) type AcquireReply = oneshot::Sender<Result<Option<LockGuard>, Error>>;

/// What the handles ask of the driver.
pub(crate) enum Command {
    /// Run an acquisition; answer on `reply`.
    Acquire {
        op: OpId,
        machine: Box<Acquire>,
        reply: AcquireReply,
    },
    /// The acquisition's future was dropped: finish it, then give back what it took.
    Cancel(OpId),
    /// Release a held lease (`reply`: the caller waits for the outcome; `None`: a drop).
    Release {
        id: WatchId,
        reply: Option<oneshot::Sender<Result<(), Error>>>,
    },
}

/// What a guard is made of.
pub(crate) struct Granted {
    pub(crate) id: WatchId,
    pub(crate) name: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) lost: watch::Receiver<Option<LossReason>>,
}

/// A machine the driver runs, with what its outcome is for.
enum Work {
    Acquire {
        op: OpId,
        machine: Box<Acquire>,
        reply: Option<AcquireReply>,
        cancelled: bool,
    },
    Extend(WatchId, Box<Extension>),
    Release(
        Box<ScriptOp<Release>>,
        Option<oneshot::Sender<Result<(), Error>>>,
    ),
    Undo(Box<Undo>),
}

/// A machine's outcome.
enum Outcome {
    Acquired(Result<Acquisition, redlease_core::Error>),
    Extended(Result<Instant, redlease_core::Error>),
    Released(Result<(), redlease_core::Error>),
}

/// A machine's step, its outcome wrapped whatever the machine.
enum Next {
    Send(Batch),
    Wait(redlease_core::Wait),
    Done(Outcome),
}

/// `step` with its outcome wrapped by `wrap`.
fn wrapped<T>(step: Step<T>, wrap: fn(Result<T, redlease_core::Error>) -> Outcome) -> Next {
    match step {
        Step::Send(batch) => Next::Send(batch),
        Step::Wait(wait) => Next::Wait(wait),
        Step::Done(result) => Next::Done(wrap(result)),
    }
}

impl Work {
    fn poll(&mut self, now: Instant) -> Next {
        match self {
            Work::Acquire { machine, .. } => wrapped(machine.poll(now), Outcome::Acquired),
            Work::Extend(_, m) => wrapped(m.poll(now), Outcome::Extended),
            Work::Release(m, _) => wrapped(m.poll(now), Outcome::Released),
            Work::Undo(m) => wrapped(m.poll(now), Outcome::Released),
        }
    }

    fn handle(&mut self, response: Response, now: Instant) {
        match self {
            Work::Acquire { machine, .. } => machine.handle(response, now),
            Work::Extend(_, m) => m.handle(response, now),
            Work::Release(m, _) => m.handle(response, now),
            Work::Undo(m) => m.handle(response, now),
        }
    }

    fn wake(&mut self, now: Instant) {
        if let Work::Acquire { machine, .. } = self {
            machine.wake(now);
        }
    }
}

/// Where a running machine is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Ready,
    Sending,
    Waiting {
        until: Instant,
        waiter: Option<(String, WaiterId)>,
    },
}

struct Job {
    work: Work,
    phase: Phase,
    /// The pub/sub epoch when its last batch was sent (see [`Registry::register`]).
    sent_epoch: u64,
}

/// A lease held by a guard.
struct Held {
    lease: Arc<Lease>,
    /// Its validity as last renewed.
    valid_until: Instant,
    lost: watch::Sender<Option<LossReason>>,
}

/// What completes in the background.
enum Event {
    Replied(u64, Vec<Response>),
    Subscribed(String, bool),
    PubSub(Option<redis::RedisResult<redis::aio::PubSub>>),
}

/// What woke the driver.
enum Input {
    Command(Option<Command>),
    Event(Event),
    Message(Option<redis::Msg>),
    Timer,
}

/// The pub/sub connection.
enum PubSub {
    Down { retry_at: Option<Instant> },
    Connecting,
    Up(PubSubSink),
}

pub(crate) struct Driver {
    runtime: Arc<dyn Runtime>,
    redis: redis::Client,
    conn: ConnectionManager,
    io_timeout: Duration,
    commands: mpsc::UnboundedReceiver<Command>,
    open: bool,
    /// For guards: a weak sender, so that the driver alone does not keep the channel open.
    guards: mpsc::WeakUnboundedSender<Command>,
    jobs: HashMap<u64, Job>,
    next_job: u64,
    ready: VecDeque<u64>,
    ops: HashMap<OpId, u64>,
    waiting: BTreeSet<(Instant, u64)>,
    waiters: HashMap<WaiterId, u64>,
    registry: Registry,
    epoch: u64,
    renewals: Renewals,
    held: HashMap<WatchId, Held>,
    next_watch: WatchId,
    io: FuturesUnordered<BoxFuture<Event>>,
    pubsub: PubSub,
    messages: Option<PubSubStream>,
    timer: BoxFuture<()>,
    armed: Instant,
}

/// `f`, given up at `at`.
async fn within<F: Future>(runtime: &dyn Runtime, at: Instant, f: F) -> Option<F::Output> {
    let f = std::pin::pin!(f);
    match futures_util::future::select(f, runtime.sleep_until(at)).await {
        Either::Left((out, _)) => Some(out),
        Either::Right(_) => None,
    }
}

impl Driver {
    /// Connects (within `io_timeout`): the connection reconnects by itself later.
    pub(crate) async fn connect(
        redis: redis::Client,
        runtime: Arc<dyn Runtime>,
        io_timeout: Duration,
        commands: mpsc::UnboundedReceiver<Command>,
        guards: mpsc::WeakUnboundedSender<Command>,
    ) -> Result<Driver, Error> {
        // No response timeout of the connection's own (redis's default is 500 ms): every
        // batch is bounded by its machine's deadline instead.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(io_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let now = runtime.now();
        let conn = within(
            &*runtime,
            now + io_timeout,
            ConnectionManager::new_with_config(redis.clone(), config),
        )
        .await
        .ok_or(Error::ConnectTimeout)?
        .map_err(Error::Connect)?;
        let armed = now + IDLE;
        let timer = runtime.sleep_until(armed);
        Ok(Driver {
            runtime,
            redis,
            conn,
            io_timeout,
            commands,
            open: true,
            guards,
            jobs: HashMap::new(),
            next_job: 0,
            ready: VecDeque::new(),
            ops: HashMap::new(),
            waiting: BTreeSet::new(),
            waiters: HashMap::new(),
            registry: Registry::new(),
            epoch: 0,
            renewals: Renewals::new(),
            held: HashMap::new(),
            next_watch: 0,
            io: FuturesUnordered::new(),
            pubsub: PubSub::Down { retry_at: None },
            messages: None,
            timer,
            armed,
        })
    }

    /// The driver loop, until every handle is gone and nothing is left to finish.
    pub(crate) async fn run(mut self) {
        loop {
            self.poll_ready();
            if !self.open && self.jobs.is_empty() && self.io.is_empty() {
                return;
            }
            self.arm();
            let input = tokio::select! {
                biased;
                command = self.commands.recv(), if self.open => Input::Command(command),
                Some(event) = self.io.next(), if !self.io.is_empty() => Input::Event(event),
                message = async {
                    match self.messages.as_mut() {
                        Some(stream) => stream.next().await,
                        None => std::future::pending().await,
                    }
                } => Input::Message(message),
                () = &mut self.timer => Input::Timer,
            };
            let now = self.runtime.now();
            match input {
                Input::Command(Some(command)) => self.command(command, now),
                Input::Command(None) => self.open = false,
                Input::Event(event) => self.event(event, now),
                Input::Message(Some(msg)) => self.message(&msg, now),
                Input::Message(None) => self.pubsub_lost(now),
                Input::Timer => self.tick(now),
            }
        }
    }

    /// Resets the timer when the earliest deadline changed.
    fn arm(&mut self) {
        let now = self.runtime.now();
        let retry = match self.pubsub {
            PubSub::Down { retry_at } => retry_at,
            _ => None,
        };
        let earliest = [
            self.waiting.first().map(|(at, _)| *at),
            self.renewals.next_wakeup(),
            retry,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + IDLE);
        if earliest != self.armed {
            self.armed = earliest;
            self.timer = self.runtime.sleep_until(earliest);
        }
    }

    fn spawn_job(&mut self, work: Work) -> u64 {
        self.next_job += 1;
        let id = self.next_job;
        self.jobs.insert(
            id,
            Job {
                work,
                phase: Phase::Ready,
                sent_epoch: self.epoch,
            },
        );
        self.ready.push_back(id);
        id
    }

    fn command(&mut self, command: Command, now: Instant) {
        match command {
            Command::Acquire { op, machine, reply } => {
                let job = self.spawn_job(Work::Acquire {
                    op,
                    machine,
                    reply: Some(reply),
                    cancelled: false,
                });
                self.ops.insert(op, job);
            }
            Command::Cancel(op) => {
                if let Some(job) = self.ops.remove(&op) {
                    self.cancel(job, now);
                }
            }
            Command::Release { id, reply } => self.release(id, reply, now),
        }
    }

    /// An acquisition nobody waits for: with a batch in flight, it finishes first (its
    /// outcome is then given back); otherwise it is undone at once.
    fn cancel(&mut self, job: u64, now: Instant) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if j.phase == Phase::Sending {
            if let Work::Acquire { cancelled, .. } = &mut j.work {
                *cancelled = true;
            }
            return;
        }
        let Some(j) = self.jobs.remove(&job) else {
            return;
        };
        self.leave(job, &j.phase, now);
        if let Work::Acquire { machine, .. } = j.work {
            let undo = Undo::new(machine.spec(), now + self.io_timeout);
            self.spawn_job(Work::Undo(Box::new(undo)));
        }
    }

    /// Takes a job out of the waiting set and the registry.
    fn leave(&mut self, job: u64, phase: &Phase, now: Instant) {
        if let Phase::Waiting { until, waiter } = phase {
            self.waiting.remove(&(*until, job));
            if let Some((channel, id)) = waiter {
                self.waiters.remove(id);
                if let Some(next) = self.registry.unregister(channel, *id, now) {
                    self.wake(next, now);
                }
            }
        }
    }

    fn release(
        &mut self,
        id: WatchId,
        reply: Option<oneshot::Sender<Result<(), Error>>>,
        now: Instant,
    ) {
        let Some(held) = self.held.remove(&id) else {
            return;
        };
        self.renewals.remove(id);
        if let Some(reason) = *held.lost.borrow() {
            if let Some(reply) = reply {
                let lost = redlease_core::Error::NotOwner {
                    name: held.lease.name().to_owned(),
                    reason,
                };
                let _ = reply.send(Err(lost.into()));
            }
            return;
        }
        let op = ScriptOp::release(&held.lease, now + self.io_timeout)
            .with_valid_until(held.valid_until);
        self.spawn_job(Work::Release(Box::new(op), reply));
    }

    /// Polls every ready machine until each sends, waits or is done.
    fn poll_ready(&mut self) {
        while let Some(id) = self.ready.pop_front() {
            let now = self.runtime.now();
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            match job.work.poll(now) {
                Next::Send(batch) => {
                    job.phase = Phase::Sending;
                    job.sent_epoch = self.epoch;
                    let runtime = Arc::clone(&self.runtime);
                    self.io.push(send(self.conn.clone(), runtime, id, batch));
                }
                Next::Wait(wait) => {
                    let sent_epoch = job.sent_epoch;
                    self.wait(id, wait, sent_epoch, now);
                }
                Next::Done(outcome) => {
                    if let Some(job) = self.jobs.remove(&id) {
                        self.done(job.work, outcome, now);
                    }
                }
            }
        }
    }

    /// A machine waits: until its instant, or a wake by the registry.
    fn wait(&mut self, id: u64, wait: redlease_core::Wait, sent_epoch: u64, now: Instant) {
        let mut waiter = None;
        if let Some(on) = &wait.wake_on {
            let registered = self.registry.register(on, Some(sent_epoch));
            if let Some(channel) = registered.subscribe {
                self.subscribe(channel, now);
            }
            if registered.wake_now {
                // A release may have been missed: look again at once.
                self.registry.take(&on.channel, registered.id);
                let _ = self.registry.unregister(&on.channel, registered.id, now);
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.work.wake(now);
                }
                self.ready.push_back(id);
                return;
            }
            self.waiters.insert(registered.id, id);
            waiter = Some((on.channel.clone(), registered.id));
        }
        if let Some(job) = self.jobs.get_mut(&id) {
            job.phase = Phase::Waiting {
                until: wait.until,
                waiter,
            };
            self.waiting.insert((wait.until, id));
        }
    }

    fn done(&mut self, work: Work, outcome: Outcome, now: Instant) {
        match (work, outcome) {
            (
                Work::Acquire {
                    op,
                    machine,
                    reply,
                    cancelled,
                },
                Outcome::Acquired(result),
            ) => {
                self.ops.remove(&op);
                let reply = reply.filter(|_| !cancelled);
                match (result, reply) {
                    (Ok(Acquisition::Acquired(lease)), Some(reply)) => {
                        self.grant(*lease, reply, now)
                    }
                    (Ok(Acquisition::Acquired(lease)), None) => {
                        // Granted after its future was dropped: give it back.
                        let op = ScriptOp::release(&lease, now + self.io_timeout);
                        self.spawn_job(Work::Release(Box::new(op), None));
                    }
                    (Ok(Acquisition::Busy { .. }), Some(reply)) => {
                        let _ = reply.send(Ok(None));
                    }
                    (Err(e), Some(reply)) => {
                        let _ = reply.send(Err(e.into()));
                    }
                    (_, None) => {
                        // Ended by itself without the lock: it cleaned up after itself.
                        let _ = machine;
                    }
                }
            }
            (Work::Extend(id, _), Outcome::Extended(result)) => {
                match self.renewals.renewed(id, result, now) {
                    RenewalEvent::Renewed { valid_until } => {
                        if let Some(held) = self.held.get_mut(&id) {
                            held.valid_until = valid_until;
                        }
                    }
                    RenewalEvent::Lost(reason) => self.lost(id, reason),
                    RenewalEvent::Pending => {}
                }
            }
            (Work::Release(_, Some(reply)), Outcome::Released(result)) => {
                let _ = reply.send(result.map_err(Error::from));
            }
            // A release from a drop or an undo: nobody waits for it. What failed ends with
            // its ttl (a place in a line with its waiter timeout).
            _ => {}
        }
    }

    /// Hands a granted lease to its guard, and starts renewing it.
    fn grant(&mut self, lease: Lease, reply: AcquireReply, now: Instant) {
        let Some(tx) = self.guards.upgrade() else {
            let op = ScriptOp::release(&lease, now + self.io_timeout);
            self.spawn_job(Work::Release(Box::new(op), None));
            return;
        };
        self.next_watch += 1;
        let id = self.next_watch;
        let lease = Arc::new(lease);
        let (lost_tx, lost_rx) = watch::channel(None);
        self.renewals.insert(
            id,
            Arc::clone(&lease),
            RenewalPolicy::for_ttl(lease.ttl),
            now,
        );
        let granted = Granted {
            id,
            name: Arc::from(lease.name()),
            fence: lease.fence,
            lost: lost_rx,
        };
        self.held.insert(
            id,
            Held {
                valid_until: lease.valid_until,
                lease,
                lost: lost_tx,
            },
        );
        // Refused (the future was dropped meanwhile): the guard's drop queues its release.
        let _ = reply.send(Ok(Some(LockGuard::new(tx, granted))));
    }

    fn lost(&mut self, id: WatchId, reason: LossReason) {
        if let Some(held) = self.held.get(&id) {
            held.lost.send_replace(Some(reason));
        }
    }

    fn event(&mut self, event: Event, now: Instant) {
        match event {
            Event::Replied(id, responses) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    for response in responses {
                        job.work.handle(response, now);
                    }
                    job.phase = Phase::Ready;
                    self.ready.push_back(id);
                }
            }
            Event::Subscribed(channel, true) => {
                self.epoch += 1;
                for (waiter, _) in self.registry.confirmed(&channel, self.epoch) {
                    self.wake(waiter, now);
                }
            }
            Event::Subscribed(_, false) => self.pubsub_lost(now),
            Event::PubSub(Some(Ok(pubsub))) => {
                let (sink, stream) = pubsub.split();
                self.pubsub = PubSub::Up(sink);
                self.messages = Some(stream);
                for channel in self.registry.connected() {
                    self.subscribe(channel, now);
                }
            }
            Event::PubSub(_) => {
                self.pubsub = PubSub::Down {
                    retry_at: Some(now + PUBSUB_RETRY),
                };
            }
        }
    }

    /// Subscribes to `channel`, connecting first if needed.
    fn subscribe(&mut self, channel: String, now: Instant) {
        match &self.pubsub {
            PubSub::Up(sink) => {
                let mut sink = sink.clone();
                let (runtime, deadline) = (Arc::clone(&self.runtime), now + self.io_timeout);
                self.io.push(Box::pin(async move {
                    let ok = within(&*runtime, deadline, sink.subscribe(channel.as_str()))
                        .await
                        .is_some_and(|r| r.is_ok());
                    Event::Subscribed(channel, ok)
                }));
            }
            PubSub::Connecting => {}
            // The channel is subscribed with every other once the connection is up.
            PubSub::Down { .. } => self.connect_pubsub(now),
        }
    }

    fn connect_pubsub(&mut self, now: Instant) {
        self.pubsub = PubSub::Connecting;
        let (runtime, redis, deadline) = (
            Arc::clone(&self.runtime),
            self.redis.clone(),
            now + self.io_timeout,
        );
        self.io.push(Box::pin(async move {
            Event::PubSub(within(&*runtime, deadline, redis.get_async_pubsub()).await)
        }));
    }

    /// The pub/sub connection is gone: waiters fall back on their retry pause until it is
    /// back, and its confirmations wake them all.
    fn pubsub_lost(&mut self, now: Instant) {
        self.registry.disconnected();
        self.messages = None;
        self.pubsub = PubSub::Down {
            retry_at: Some(now + PUBSUB_RETRY),
        };
    }

    fn message(&mut self, msg: &redis::Msg, now: Instant) {
        self.epoch += 1;
        let woken = self.registry.message(
            msg.get_channel_name(),
            Some(msg.get_payload_bytes()),
            self.epoch,
        );
        for waiter in woken {
            self.wake(waiter, now);
        }
    }

    /// Wakes a registered waiter: its machine polls at once.
    fn wake(&mut self, waiter: WaiterId, now: Instant) {
        let Some(id) = self.waiters.get(&waiter).copied() else {
            return;
        };
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let phase = std::mem::replace(&mut job.phase, Phase::Ready);
        if let Phase::Waiting {
            waiter: Some((channel, _)),
            ..
        } = &phase
        {
            self.registry.take(channel, waiter);
        }
        job.work.wake(now);
        self.leave(id, &phase, now);
        self.ready.push_back(id);
    }

    /// The timer fired: expired waits, due renewals, the pub/sub reconnect.
    fn tick(&mut self, now: Instant) {
        while let Some(&(until, id)) = self.waiting.first() {
            if until > now {
                break;
            }
            let Some(job) = self.jobs.get_mut(&id) else {
                self.waiting.remove(&(until, id));
                continue;
            };
            let phase = std::mem::replace(&mut job.phase, Phase::Ready);
            self.leave(id, &phase, now);
            self.ready.push_back(id);
        }
        let due = self
            .renewals
            .due(now, now + self.io_timeout, RENEWALS_PER_TICK);
        for (id, reason, _) in due.lost {
            self.lost(id, reason);
        }
        for (id, extension) in due.renew {
            self.spawn_job(Work::Extend(id, Box::new(extension)));
        }
        if let PubSub::Down { retry_at: Some(at) } = self.pubsub
            && at <= now
        {
            self.connect_pubsub(now);
        }
    }
}

// TODO(core): sending a batch request by request, each bounded by the batch deadline and
// answered "no reply" past it, is the same rule in examples/tokio_embed.rs and in the
// blocking crate's wire: it belongs in redlease-redis (an async `send_batch` over any
// `redis::aio::ConnectionLike`, behind an `aio` feature).
/// Sends one batch on the (multiplexed, reconnecting) connection, each request bounded by
/// the batch's deadline: past it the request is answered "no reply" (it may have run).
fn send(
    mut conn: ConnectionManager,
    runtime: Arc<dyn Runtime>,
    job: u64,
    batch: Batch,
) -> BoxFuture<Event> {
    Box::pin(async move {
        let mut responses = Vec::with_capacity(batch.requests.len());
        for request in batch.requests {
            let id = request.id;
            let response = if request.command.node() == NodeId::PRIMARY {
                let cmd = adapter::command(&request.command);
                within(&*runtime, batch.deadline, conn.req_packed_command(&cmd))
                    .await
                    .map_or_else(
                        || {
                            Response::failed(
                                id,
                                TransportFailure::no_reply("past the batch deadline"),
                            )
                        },
                        |outcome| adapter::response(id, outcome),
                    )
            } else {
                Response::failed(id, TransportFailure::not_sent("one node only"))
            };
            responses.push(response);
        }
        Event::Replied(job, responses)
    })
}
