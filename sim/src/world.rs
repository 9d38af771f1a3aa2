//! The simulated world: server nodes, clients (each with its own clock, tasks, watchdog and
//! pub/sub listener) and the network between them, on one seeded virtual timeline.
//!
//! Every step is an event on a queue ordered by (time, a seeded tie-break, insertion order):
//! the seed decides network delays and the order of simultaneous deliveries, so one seed
//! is one schedule, replayed exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use redlease::memory::{MemoryClock, MemoryServer, Snapshot, Subscriber};
use redlease_core::backoff::SplitMix64;
use redlease_core::lease::{
    Acquire, AcquireOptions, Acquisition, Lease, LeaseKind, LockKind, LockSpec, ScriptOp,
};
use redlease_core::queue::schedule::{self, Advanced, Schedule, Upserted};
use redlease_core::queue::{self, NewJob, QueueKeys, QueueSettings};
use redlease_core::redlock::{QuorumAction, QuorumOp, RedLease, RedLockAcquire, RedLockOptions};
use redlease_core::renewal::{RenewalEvent, RenewalPolicy, Renewals, WatchId};
use redlease_core::semaphore::SemaphoreKeys;
use redlease_core::{
    Error, FailureKind, Reply, Request, RequestId, Response, Step, TransportFailure, WakeOn,
};

use crate::clock::LocalClock;
use crate::faults::{Inject, Plan};
use crate::history::{
    Acq, AcqResult, Defer, History, Hold, HoldKind, Pushed, RunnerInfo, Settled, Write,
};
use crate::machine::{Drive, Outcome, Wrap};
use crate::mutation::Mutation;
use crate::record::{Observer, Watched};

/// A run that takes more events than this is stopped and reported (a livelock).
pub const MAX_STEPS: u64 = 1_000_000;

/// How long a client waits for a reply before it counts as lost (µs).
pub const IO_TIMEOUT: u64 = 50_000;

/// A nacked job's backoff: not a whole number of milliseconds, so that a due time rounded
/// down anywhere shows.
pub const NACK_BACKOFF: Duration = Duration::from_micros(20_700);

/// How long a grouped job's handler says its group is rate limited ("try later"), when it
/// answers so instead of a nack (every other nack of a grouped job, by its hold's index).
pub const DEFER_WAIT: Duration = Duration::from_micros(12_300);

/// What a task does next.
#[derive(Debug, Clone)]
pub enum Action {
    /// Sleep this long on the task's clock (µs).
    Sleep(u64),
    /// Acquire a lock (keeping it renewed by the client's watchdog if `watch`).
    Acquire {
        /// The lock.
        spec: LockSpec,
        /// Wait or try once, timeouts, `min_replicas`.
        options: AcquireOptions,
        /// Renew it while held.
        watch: bool,
    },
    /// Acquire a RedLock.
    RedAcquire {
        /// The lock (a lease lock's spec).
        spec: LockSpec,
        /// Nodes, wait, timeouts.
        options: RedLockOptions,
    },
    /// Write to the fenced resource, if the held lease is valid by the task's clock.
    Write,
    /// Release what the task holds.
    Release,
    /// Set a semaphore's permit count.
    SetPermits {
        /// The semaphore.
        keys: SemaphoreKeys,
        /// The new count.
        permits: u64,
    },
    /// Push jobs.
    Push {
        /// The queue.
        keys: QueueKeys,
        /// The jobs.
        jobs: Vec<NewJob>,
        /// Their delay.
        delay: Duration,
        /// Their timeout (`push_with_timeout`), if any.
        timeout: Option<Duration>,
    },
    /// Push one job under a dedup id, until done (a dead job blocks it).
    PushDedup {
        /// The queue.
        keys: QueueKeys,
        /// The dedup id.
        dedup_id: String,
        /// The job id's token (the job id is `~` and its text).
        token: String,
        /// Keep latest (a push while the job holding the id is in flight parks a follow-up
        /// behind it), rather than until done.
        keep_latest: bool,
    },
    /// Cancel the job holding a dedup id (read from the server's dedup map, as an operator
    /// who looked it up would), if any.
    CancelDedup {
        /// The queue.
        keys: QueueKeys,
        /// The dedup id.
        dedup_id: String,
        /// Forget it rather than send it to the dead list.
        remove: bool,
    },
    /// Take a job, work on it, ack or nack it; again until global time `until`.
    Work {
        /// The queue.
        keys: QueueKeys,
        /// Visibility and max deliveries.
        settings: QueueSettings,
        /// Longest work time per job (µs).
        work: u64,
        /// Stop taking jobs at this global time.
        until: u64,
        /// Renew the job's lease while working.
        watch: bool,
    },
    /// Pause (true) or resume the queue.
    Pause {
        /// The queue.
        keys: QueueKeys,
        /// Pause, or resume.
        pause: bool,
    },
    /// Upsert a schedule (sent again with the occurrence computed from the server's time
    /// the script answers, `from`).
    Schedule {
        /// The queue.
        keys: QueueKeys,
        /// The schedule's name.
        name: String,
        /// Its spec.
        schedule: Box<Schedule>,
        /// `(from, first occurrence after it)`, once the server's time is known.
        from: Option<(u64, Option<u64>)>,
        /// Calls sent so far.
        sent: u8,
    },
    /// Advance the schedule of the job held, if it is an occurrence (before its work), as
    /// the blocking driver does: sent again with the occurrence computed from the spec and
    /// the server's time the script answers.
    Advance {
        /// The queue.
        keys: QueueKeys,
        /// `(version, from, first occurrence after it)`, once known.
        computed: Option<(String, u64, Option<u64>)>,
        /// Calls sent so far.
        sent: u8,
        /// The occurrence to advance past instead of the job held: one this task cancelled
        /// (as the blocking driver's `cancel` skips a cancelled occurrence).
        past: Option<String>,
    },
    /// Cancel the pending occurrence of schedule `name` (read from the server's schedules
    /// hash, as `schedule::list` shows it), then advance the schedule past it.
    CancelOccurrence {
        /// The queue.
        keys: QueueKeys,
        /// The schedule.
        name: String,
        /// Forget it rather than send it to the dead list.
        remove: bool,
    },
    /// Set a queue's group limits (`group`: one group's own, else every group's defaults) to
    /// a concurrency (`None`: that group's own limits cleared).
    SetLimits {
        /// The grouped keys.
        keys: QueueKeys,
        /// Whose limits.
        group: Option<String>,
        /// The concurrency.
        concurrency: Option<u32>,
    },
    /// Cancel a job (to the dead list, or forgotten if `remove`).
    Cancel {
        /// The queue (plain or grouped keys, as the job's).
        keys: QueueKeys,
        /// The job's id in those keys.
        id: String,
        /// Forget it rather than send it to the dead list.
        remove: bool,
    },
    /// Requeue a dead job.
    Requeue {
        /// The queue.
        keys: QueueKeys,
        /// The job's id.
        id: String,
    },
    /// Drain the queue (pause it and wait until nothing is in flight), waiting at most this
    /// long (µs).
    Drain {
        /// The queue.
        keys: QueueKeys,
        /// The wait.
        wait: u64,
    },
    /// Ack (true) or nack the job held.
    Settle {
        /// The queue.
        keys: QueueKeys,
        /// Ack or nack.
        ack: bool,
        /// Max deliveries (for the nack).
        max: u32,
    },
}

enum Ev {
    Arrive {
        runner: usize,
        client: usize,
        node: u16,
        epoch: u64,
        req: Request,
    },
    Reply {
        runner: usize,
        client: usize,
        node: u16,
        epoch: u64,
        id: RequestId,
        result: Result<Reply, TransportFailure>,
        ran: Option<u64>,
    },
    Timeout {
        runner: usize,
        batch: u64,
    },
    Timer {
        runner: usize,
        generation: u64,
    },
    Wake {
        runner: usize,
        generation: u64,
    },
    TaskNext {
        task: usize,
    },
    ResourceWrite {
        client: usize,
        hold: usize,
    },
    Watchdog {
        client: usize,
        generation: u64,
    },
    Message {
        client: usize,
        sub_epoch: u64,
        channel: String,
        payload: String,
    },
    Subscribed {
        client: usize,
        sub_epoch: u64,
        channel: String,
    },
    Reconnect {
        client: usize,
    },
    Inject(usize),
    ServerResume {
        node: u16,
    },
    Persist,
}

impl Ev {
    fn client(&self) -> Option<usize> {
        match self {
            Ev::Reply { client, .. }
            | Ev::ResourceWrite { client, .. }
            | Ev::Watchdog { client, .. }
            | Ev::Message { client, .. }
            | Ev::Subscribed { client, .. }
            | Ev::Reconnect { client } => Some(*client),
            Ev::Timeout { .. } | Ev::Timer { .. } | Ev::TaskNext { .. } => None,
            _ => None,
        }
    }
}

struct Queued {
    key: (u64, u64, u64),
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

struct Node {
    server: MemoryServer,
    down_until: u64,
    paused_until: u64,
    held_back: Vec<Ev>,
    persisted: Snapshot,
    replica: Snapshot,
    replica_stalled: bool,
}

struct Client {
    clock: LocalClock,
    pauses: Vec<(u64, u64)>,
    epochs: Vec<u64>,
    renewals: Renewals,
    watches: HashMap<WatchId, usize>,
    next_watch: WatchId,
    watchdog_gen: u64,
    watchdog_at: Option<u64>,
    sub: Option<Subscriber>,
    sub_epoch: u64,
    /// Channels listened to: when the subscription was confirmed (listener epoch, `None`:
    /// not yet, or the connection dropped) and the epoch of the last message on it.
    channels: BTreeMap<String, (Option<u64>, u64)>,
    /// Bumped by every confirmation and every message (the blocking listener's epoch).
    epoch: u64,
    waiters: Vec<(usize, WakeOn)>,
}

enum Owner {
    Task(usize),
    Watch(WatchId),
}

struct Runner {
    client: usize,
    owner: Owner,
    machine: Box<dyn Drive>,
    /// Requests awaiting an outcome: id, node, batch, when they time out (global µs).
    outstanding: Vec<(RequestId, u16, u64, u64)>,
    batch: u64,
    timer: u64,
    ran: Vec<u64>,
    last_ran: Option<u64>,
    acq: Option<usize>,
    /// The client's listener epoch when the last batch was sent.
    sent_epoch: u64,
}

struct Held {
    hold: usize,
    lease: Option<Lease>,
    red: Option<RedLease>,
    watch: Option<WatchId>,
    /// The job's queue and id, for a job.
    job: Option<String>,
}

struct Task {
    client: usize,
    actions: VecDeque<Action>,
    held: Option<Held>,
    /// The options of the acquisition running.
    pending: Option<(bool, bool)>,
}

/// One run's world.
pub struct World {
    /// The grace a job pushed with a timeout has past it: its watchdog stops renewing it at
    /// timeout + grace from its take (as the blocking driver's, with `max_hold`).
    pub job_grace: Duration,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<Queued>>,
    rng: SplitMix64,
    clock: MemoryClock,
    base: Instant,
    nodes: Vec<Node>,
    clients: Vec<Client>,
    tasks: Vec<Task>,
    runners: Vec<Option<Runner>>,
    plan: Plan,
    mutation: Mutation,
    resource: HashMap<String, u64>,
    /// The history being recorded.
    pub history: History,
    /// How many injections struck.
    pub injected: u64,
    /// Stop here (global µs) whatever is left.
    pub hard_end: u64,
    persist_every: u64,
    steps: u64,
    logging: bool,
    /// Runner -> (hold, is an ack) for releases, acks and nacks.
    releases: HashMap<usize, (usize, bool)>,
    /// Runner -> (job ids, delay µs) for pushes.
    pushes: HashMap<usize, (Vec<String>, u64)>,
    /// Runner -> dedup id for pushes with one.
    dedup_pushes: HashMap<usize, (String, bool)>,
    /// Runner -> permit count for `set_permits`.
    permit_sets: HashMap<usize, u64>,
    /// Runners of a pause (true) or resume of the queue.
    pause_ops: HashMap<usize, bool>,
    /// Whether the queue is paused, by the last pause or resume that ran.
    paused: bool,
    /// Schedule upserts running: the action to send again on a retry.
    upserts: HashMap<usize, Action>,
    /// Advances running: the queue, schedule name, due time and calls sent.
    advances: HashMap<usize, (QueueKeys, u64, u8)>,
    /// Runner -> (job id, backoff µs) for nacks with a backoff.
    nack_backoffs: HashMap<usize, (String, u64)>,
    /// Runner -> (acquisition, its acquire script) for acquisitions, kept after the machine
    /// finished (a late copy of an attempt is still recognised).
    acquirers: HashMap<usize, (usize, &'static redlease_core::script::Script)>,
    /// Reads the server's record of holds after every command.
    observer: Observer,
    /// Runners of ack-and-take calls.
    ack_takes: std::collections::HashSet<usize>,
    /// Runner -> (group, concurrency) for changes of group limits.
    limit_sets: HashMap<usize, (Option<String>, Option<u32>)>,
    /// Runner -> (job id, remove) for cancels.
    cancels: HashMap<usize, (String, bool)>,
    /// Runner -> job id for requeues.
    requeues: HashMap<usize, String>,
    /// Runners of drains.
    drains: HashSet<usize>,
    /// The groups whose ready jobs a group take that found nothing is judged against
    /// (`slot-usable`); none: not judged.
    pub idle_groups: Vec<String>,
    /// The stem (`<prefix>:{q}:q:`) of the plain queue keys whose schedules are observed
    /// after every command (`schedule-liveness`); none: not observed.
    pub schedule_stem: Option<String>,
    /// Advances past a cancelled occurrence running: runner -> the occurrence.
    skips: HashMap<usize, String>,
    /// Occurrences being cancelled and skipped: id -> when the cancel was started.
    skipping: HashMap<String, u64>,
    /// Occurrences being cancelled and skipped: id -> cancels sent again (unanswered).
    cancel_tries: HashMap<String, u8>,
}

/// How many calls the advance past a cancelled occurrence makes before it gives up.
const SKIP_SENDS: u8 = 12;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl World {
    /// A world with `nodes` servers and `clients` clients, faults from `plan`.
    pub fn new(seed: u64, nodes: u16, clients: usize, plan: Plan, mutation: Mutation) -> World {
        let clock = MemoryClock::new();
        let nodes = (0..nodes)
            .map(|_| {
                let server = MemoryServer::with_clock(clock.clone());
                let snap = server.snapshot();
                Node {
                    server,
                    down_until: 0,
                    paused_until: 0,
                    held_back: Vec::new(),
                    persisted: snap.clone(),
                    replica: snap,
                    replica_stalled: false,
                }
            })
            .collect::<Vec<_>>();
        let clients = (0..clients)
            .map(|c| {
                let clock = plan
                    .clocks
                    .iter()
                    .find(|p| p.client == c)
                    .map(|p| p.clock)
                    .unwrap_or_default();
                Client {
                    clock,
                    pauses: Vec::new(),
                    epochs: vec![0; nodes.len()],
                    renewals: Renewals::new(),
                    watches: HashMap::new(),
                    next_watch: 0,
                    watchdog_gen: 0,
                    watchdog_at: None,
                    sub: Some(nodes[0].server.subscriber()),
                    sub_epoch: 0,
                    channels: BTreeMap::new(),
                    epoch: 0,
                    waiters: Vec::new(),
                }
            })
            .collect();
        let mut w = World {
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            rng: SplitMix64::new(seed ^ 0x005e_ed0f_517e),
            clock,
            base: Instant::now(),
            nodes,
            clients,
            tasks: Vec::new(),
            runners: Vec::new(),
            plan,
            mutation,
            resource: HashMap::new(),
            history: History::default(),
            injected: 0,
            hard_end: 120_000_000,
            persist_every: 0,
            steps: 0,
            logging: false,
            releases: HashMap::new(),
            pushes: HashMap::new(),
            dedup_pushes: HashMap::new(),
            permit_sets: HashMap::new(),
            pause_ops: HashMap::new(),
            paused: false,
            upserts: HashMap::new(),
            advances: HashMap::new(),
            nack_backoffs: HashMap::new(),
            job_grace: Duration::ZERO,
            acquirers: HashMap::new(),
            observer: Observer::default(),
            ack_takes: std::collections::HashSet::new(),
            limit_sets: HashMap::new(),
            cancels: HashMap::new(),
            requeues: HashMap::new(),
            drains: HashSet::new(),
            idle_groups: Vec::new(),
            schedule_stem: None,
            skips: HashMap::new(),
            skipping: HashMap::new(),
            cancel_tries: HashMap::new(),
        };
        w.observer.start_us = u64::try_from(w.clock.unix_micros()).unwrap_or(0);
        w.history.nodes = u16::try_from(w.nodes.len()).unwrap_or(1);
        w.persist_every = 20_000 + w.rand(200_000);
        for i in 0..w.plan.injections.len() {
            let at = w.plan.injections[i].at;
            w.history.faults_end = w.history.faults_end.max(at);
            w.push(at, Ev::Inject(i));
        }
        let first = w.persist_every;
        w.push(first, Ev::Persist);
        w
    }

    /// Records a readable log of the run in [`History::log`] (slower).
    pub fn log(&mut self, on: bool) {
        self.logging = on;
    }

    /// Adds a task for `client`; it starts at global time `at`.
    pub fn add_task(&mut self, client: usize, at: u64, actions: Vec<Action>) {
        let task = self.tasks.len();
        self.tasks.push(Task {
            client,
            actions: actions.into(),
            held: None,
            pending: None,
        });
        self.push(at, Ev::TaskNext { task });
    }

    /// Records the server's holds of these keys after every command (the server's record
    /// the checker judges clients' beliefs against).
    pub fn watch(&mut self, watched: Vec<Watched>) {
        self.history.recorded = !watched.is_empty();
        self.observer.watched = watched;
    }

    /// The pending occurrence of schedule `name` on node 0 (`sched:<name>:<due>`), if any.
    fn pending_occurrence(&self, name: &str) -> Option<String> {
        let stem = self.schedule_stem.as_ref()?;
        let server = &self.nodes.first()?.server;
        let field = format!("n:{name}");
        match server.call(&["HGET", &format!("{stem}schedules"), &field]) {
            Ok(Reply::Bulk(due)) if due != b"-1" => {
                Some(format!("sched:{name}:{}", String::from_utf8_lossy(&due)))
            }
            _ => None,
        }
    }

    /// The task's occurrence, whose advance failed, is given back instead of worked on (the
    /// work and the ack or nack after the advance dropped).
    fn give_back_occurrence(&mut self, task: usize) {
        let t = &mut self.tasks[task];
        if matches!(t.actions.front(), Some(Action::Sleep(_))) {
            t.actions.pop_front();
        }
        if matches!(t.actions.front(), Some(Action::Settle { .. })) {
            t.actions.pop_front();
        }
        t.actions.push_front(Action::Release);
    }

    /// The advance past cancelled occurrence `id` is over (done, given up, or never sent).
    fn skipped(&mut self, id: &str) {
        if let Some(from) = self.skipping.remove(id) {
            self.history
                .skip_windows
                .push((id.to_owned(), from, self.now));
        }
    }

    /// `schedule-liveness`: after a command ran on node `n`, each schedule's pending
    /// occurrence (field `n:<name>` of the schedules hash) must be delayed, ready or in
    /// flight, and no other occurrence of it never delivered may wait.
    fn observe_schedules(&mut self, n: usize) {
        let Some(stem) = self.schedule_stem.as_deref() else {
            return;
        };
        let server = &self.nodes[n].server;
        let Ok(Reply::Array(items)) = server.call(&["HGETALL", &format!("{stem}schedules")]) else {
            return;
        };
        let text = |r: Option<&Reply>| match r {
            Some(Reply::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        };
        let has = |key: &str, id: &str| {
            matches!(
                server.call(&["ZSCORE", &format!("{stem}{key}"), id]),
                Ok(Reply::Bulk(_))
            )
        };
        let mut gaps = Vec::new();
        let mut checks = 0;
        for pair in items.chunks(2) {
            let (Some(field), Some(due)) = (text(pair.first()), text(pair.get(1))) else {
                continue;
            };
            let Some(name) = field.strip_prefix("n:") else {
                continue;
            };
            checks += 1;
            if due == "-1" {
                continue;
            }
            let id = format!("sched:{name}:{due}");
            let runnable = has("delayed", &id) || has("ready", &id) || has("inflight", &id);
            let prefix = format!("sched:{name}:");
            let mut others = Vec::new();
            for set in ["delayed", "ready"] {
                if let Ok(Reply::Array(ids)) =
                    server.call(&["ZRANGE", &format!("{stem}{set}"), "0", "-1"])
                {
                    for other in ids.iter().filter_map(|r| text(Some(r))) {
                        if !other.starts_with(&prefix) || other == id {
                            continue;
                        }
                        let delivered = matches!(
                            server.call(&["HGET", &format!("{stem}deliveries"), &other]),
                            Ok(Reply::Bulk(_))
                        );
                        if !delivered {
                            others.push(other);
                        }
                    }
                }
            }
            if !runnable || !others.is_empty() {
                gaps.push(crate::history::ScheduleGap {
                    at: self.now,
                    pending: id,
                    runnable,
                    others,
                });
            }
        }
        self.history.schedule_checks += checks;
        self.history.schedule_gaps.extend(gaps);
    }

    /// Observes node `n` after a command of `runner` (or a fault).
    fn observe(&mut self, n: usize, runner: Option<usize>, set: bool) {
        let node = u16::try_from(n).unwrap_or(0);
        self.observer.observe(
            &self.nodes[n].server,
            node,
            self.now,
            runner,
            set,
            &mut self.history.spans,
        );
    }

    /// Runs `command` on every node before the run (a queue's group limits: as if set before
    /// the workers started), kept by its persisted copy and replica.
    pub fn seed(&mut self, command: &redlease_core::Command) {
        for node in &mut self.nodes {
            let _ = node.server.execute(command);
            let snap = node.server.snapshot();
            node.persisted = snap.clone();
            node.replica = snap;
        }
    }

    /// Sets the permit count the checker starts from.
    pub fn initial_permits(&mut self, permits: u64) {
        self.history.permits.push((0, permits));
    }

    /// A random number below `n` from the run's generator.
    pub fn rand(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.rng.next_u64() % n }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        let tie = self.rng.next_u64();
        self.push_tied(at, tie, ev);
    }

    fn push_tied(&mut self, at: u64, tie: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse(Queued {
            key: (at.max(self.now), tie, self.seq),
            ev,
        }));
    }

    fn net_delay(&mut self) -> u64 {
        50 + self.rand(1_500)
    }

    /// Logs a line, when logging is on (a failing seed is run again with it).
    fn note(&mut self, text: impl FnOnce() -> String) {
        if self.logging && self.history.log.len() < 50_000 {
            let line = text();
            self.history.log.push((self.now, line));
        }
    }

    fn local_now(&self, c: usize) -> u64 {
        self.clients[c].clock.local(self.now)
    }

    fn instant(&self, c: usize) -> Instant {
        self.base + Duration::from_micros(self.local_now(c))
    }

    fn to_global(&self, c: usize, at: Instant) -> u64 {
        // Rounded up: the timer must not fire before the instant the machine named.
        let local = u64::try_from(
            at.saturating_duration_since(self.base)
                .as_nanos()
                .div_ceil(1_000),
        )
        .unwrap_or(u64::MAX);
        self.clients[c].clock.global_at(local).min(u64::MAX / 4)
    }

    fn paused_until(&self, c: usize) -> Option<u64> {
        self.clients[c]
            .pauses
            .iter()
            .find(|(s, e)| *s <= self.now && self.now < *e)
            .map(|(_, e)| *e)
    }

    fn window(&mut self, pick: impl Fn(&Inject) -> Option<(u64, u64)>) -> Option<u64> {
        let now = self.now;
        self.plan.injections.iter().find_map(|i| {
            let (until, extra) = pick(&i.what)?;
            (i.at <= now && now < until).then_some(extra)
        })
    }

    /// Runs until nothing is left to do or the hard end; returns the history, the number
    /// of injections and node 0's server (to read its final state).
    pub fn run_keep(mut self) -> (History, u64, MemoryServer) {
        while let Some(Reverse(q)) = self.events.pop() {
            let at = q.key.0;
            if at > self.hard_end {
                break;
            }
            if at > self.now {
                self.clock.advance(Duration::from_micros(at - self.now));
                self.now = at;
            }
            self.steps += 1;
            if self.steps > MAX_STEPS {
                self.history.runaway = true;
                break;
            }
            // A paused client does nothing until it resumes: its events wait.
            if let Some(c) = q.ev.client().or_else(|| self.owner_client(&q.ev))
                && let Some(until) = self.paused_until(c)
            {
                self.push_tied(until, q.key.1, q.ev);
                continue;
            }
            self.dispatch(q.ev);
        }
        self.history.end = self.now;
        let server = self.nodes[0].server.clone();
        (self.history, self.injected, server)
    }

    fn owner_client(&self, ev: &Ev) -> Option<usize> {
        match ev {
            Ev::Timeout { runner, .. } | Ev::Timer { runner, .. } | Ev::Wake { runner, .. } => {
                self.runners.get(*runner)?.as_ref().map(|r| r.client)
            }
            Ev::TaskNext { task } => Some(self.tasks[*task].client),
            _ => None,
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive {
                runner,
                client,
                node,
                epoch,
                req,
            } => self.arrive(runner, client, node, epoch, req),
            Ev::Reply {
                runner,
                client,
                node,
                epoch,
                id,
                result,
                ran,
            } => {
                if self.clients[client].epochs[usize::from(node)] != epoch {
                    return;
                }
                self.feed(runner, id, result, ran);
            }
            Ev::Timeout { runner, batch } => self.timeout(runner, batch),
            Ev::Timer { runner, generation } => {
                let Some(r) = self.runners.get(runner).and_then(|r| r.as_ref()) else {
                    return;
                };
                if r.timer == generation {
                    self.poll(runner);
                }
            }
            Ev::Wake { runner, generation } => {
                let Some(r) = self.runners.get(runner).and_then(|r| r.as_ref()) else {
                    return;
                };
                if r.timer == generation {
                    self.wake(runner);
                }
            }
            Ev::TaskNext { task } => self.task_next(task),
            Ev::ResourceWrite { hold, .. } => self.resource_write(hold),
            Ev::Watchdog { client, generation } => {
                if self.clients[client].watchdog_gen == generation {
                    self.clients[client].watchdog_at = None;
                    self.watchdog(client);
                }
            }
            Ev::Message {
                client,
                sub_epoch,
                channel,
                payload,
            } => {
                if self.clients[client].sub_epoch == sub_epoch {
                    self.route(client, &channel, &payload);
                }
            }
            Ev::Subscribed {
                client,
                sub_epoch,
                channel,
            } => {
                let c = &self.clients[client];
                if c.sub_epoch != sub_epoch {
                    return;
                }
                let Some(sub) = &c.sub else { return };
                if !sub.subscribe(&[channel.as_str()]) {
                    return;
                }
                let c = &mut self.clients[client];
                c.epoch += 1;
                let epoch = c.epoch;
                if let Some(state) = c.channels.get_mut(&channel) {
                    state.0 = Some(epoch);
                }
                if self.mutation != Mutation::NoRecheckAfterMiss {
                    // Re-check after the subscription took effect: a release published
                    // before it was missed.
                    self.wake_all(client, &channel);
                }
            }
            Ev::Reconnect { client } => self.reconnect(client),
            Ev::Inject(i) => self.inject(i),
            Ev::ServerResume { node } => {
                let n = &mut self.nodes[usize::from(node)];
                if n.paused_until > self.now {
                    return;
                }
                let held = std::mem::take(&mut n.held_back);
                for ev in held {
                    self.dispatch(ev);
                }
            }
            Ev::Persist => {
                for n in &mut self.nodes {
                    n.persisted = n.server.snapshot();
                    if !n.replica_stalled {
                        n.replica = n.persisted.clone();
                    }
                }
                if self.now < self.history.faults_end {
                    let at = self.now + self.persist_every;
                    self.push(at, Ev::Persist);
                }
            }
        }
    }

    // ---- network and servers ----

    fn send(&mut self, runner: usize, requests: Vec<Request>) {
        let client = self.runners[runner].as_ref().map_or(0, |r| r.client);
        let mut delay = self.net_delay();
        if let Some(by) = self.window(|w| match w {
            Inject::Delay { until, percent, by } => Some((*until, percent * 1_000_000 + by)),
            _ => None,
        }) {
            let (percent, by) = (by / 1_000_000, by % 1_000_000);
            if self.rand(100) < percent {
                delay += self.rand(by);
            }
        }
        let tie = self.rng.next_u64();
        for req in requests {
            let node = req.command.node().0;
            let lost = self.window(|w| match w {
                Inject::LoseRequests { until, percent } => Some((*until, *percent)),
                _ => None,
            });
            if let Some(p) = lost
                && self.rand(100) < p
            {
                self.note(|| format!("c{client} request {:?} lost", req.command));
                continue;
            }
            let epoch = self.clients[client].epochs[usize::from(node)];
            let mut at = self.now + delay;
            if let Some((percent, from, to)) = self.holding()
                && self.rand(100) < percent
            {
                // Held on the way: it runs long after its retry was answered.
                at += from + self.rand(to - from);
                self.note(|| format!("c{client} request {:?} held until {at}", req.command));
            }
            if let Some((percent, by)) = self.duplicating()
                && self.rand(100) < percent
            {
                let copy = self.now + delay + self.rand(by);
                self.note(|| format!("c{client} request {:?} duplicated at {copy}", req.command));
                self.push(
                    copy,
                    Ev::Arrive {
                        runner,
                        client,
                        node,
                        epoch,
                        req: req.clone(),
                    },
                );
            }
            self.push_tied(
                at,
                tie,
                Ev::Arrive {
                    runner,
                    client,
                    node,
                    epoch,
                    req,
                },
            );
        }
    }

    /// The request-holding window in force: (percent, from, to).
    fn holding(&self) -> Option<(u64, u64, u64)> {
        let now = self.now;
        self.plan.injections.iter().find_map(|i| match i.what {
            Inject::HoldRequests {
                until,
                percent,
                from,
                to,
            } if i.at <= now && now < until => Some((percent, from, to.max(from + 1))),
            _ => None,
        })
    }

    /// The request-duplicating window in force: (percent, by).
    fn duplicating(&self) -> Option<(u64, u64)> {
        let now = self.now;
        self.plan.injections.iter().find_map(|i| match i.what {
            Inject::DuplicateRequests { until, percent, by } if i.at <= now && now < until => {
                Some((percent, by.max(1)))
            }
            _ => None,
        })
    }

    fn arrive(&mut self, runner: usize, client: usize, node: u16, epoch: u64, req: Request) {
        let n = usize::from(node);
        if self.nodes[n].down_until > self.now {
            let at = self.now + self.net_delay();
            self.push(
                at,
                Ev::Reply {
                    runner,
                    client,
                    node,
                    epoch,
                    id: req.id,
                    result: Err(TransportFailure::not_sent("connection refused")),
                    ran: None,
                },
            );
            return;
        }
        if self.nodes[n].paused_until > self.now {
            self.nodes[n].held_back.push(Ev::Arrive {
                runner,
                client,
                node,
                epoch,
                req,
            });
            return;
        }
        let cut = self.clients[client].epochs[n] != epoch;
        if cut && self.rand(2) == 0 {
            // Cut before the server read it.
            return;
        }
        let command = self.mutation.rewrite(&req.command);
        // A rate-limited answer (the group defer): the job's count toward max deliveries on
        // the server, before and after it runs.
        let defer = defer_of(&req.command).map(|d| {
            let before = attempts_on(&self.nodes[n].server, &d);
            (d, before)
        });
        // A schedule's upsert or advance: the occurrences waiting before it runs (the jobs
        // it adds are pushed, and counted so by the script).
        let occurrences = occurrences_of(&req.command).map(|payloads| {
            let before = occurrence_ids(&self.nodes[n].server, &payloads);
            (payloads, before)
        });
        // A keep-latest push: the follow-up parked for its dedup id before it runs (a push
        // that finds the job holding the id waiting again supersedes it).
        let parked_before = match self.dedup_pushes.get(&runner) {
            Some((dedup_id, true)) => parked_follow_up(&self.nodes[n].server, dedup_id),
            _ => None,
        };
        let reply = if command.name().eq_ignore_ascii_case("WAIT") {
            self.wait_for_replica(n)
        } else {
            self.nodes[n].server.execute(&command).unwrap_or_else(|f| {
                Reply::Error(redlease_core::ErrorReply::new("ERR", &f.to_string()))
            })
        };
        self.note(|| {
            format!(
                "n{node} ran c{client}/r{runner} {:?} -> {}",
                req.command,
                reply.describe()
            )
        });
        if let Some((d, (holder, before))) = defer
            && holder.as_deref() == Some(d.token.as_str())
            && reply.as_int() == Some(1)
        {
            let (_, after) = attempts_on(&self.nodes[n].server, &d);
            self.history.defers.push(Defer {
                at: self.now,
                id: d.id,
                before,
                after,
            });
        }
        if let Some((payloads, before)) = occurrences {
            let after = occurrence_ids(&self.nodes[n].server, &payloads);
            self.history.pushed_ran += after.difference(&before).count() as u64;
        }
        self.history.commands += 1;
        // A NOSCRIPT answer ran nothing: not a run, not an attempt.
        let noscript = matches!(&reply, Reply::Error(e) if e.is("NOSCRIPT"));
        // An unfenced lease lock's first attempt: its bare `SET NX PX`.
        let acquirer = self.acquirers.get(&runner).copied();
        let set_nx =
            acquirer.is_some_and(|(a, _)| !self.history.acqs[a].fenced) && req.command.is("SET");
        let is_attempt =
            !noscript && (set_nx || acquirer.is_some_and(|(_, s)| runs(&req.command, s)));
        if !noscript {
            self.observe(n, Some(runner), set_nx);
            self.observe_schedules(n);
            let info = &mut self.history.runners[runner];
            // An ack-and-take's untake, after an unanswered call, carries only the next
            // token and settles nothing of the acked hold: it does not count as a run.
            let carries = |t: &str| req.command.args().any(|a| a == t.as_bytes());
            let untake = info.next_token.as_deref().is_some_and(carries)
                && !info.token.as_deref().is_some_and(carries);
            if !untake {
                info.first_ran = info.first_ran.or(Some(self.now));
            }
        }
        let alive = self.runners.get(runner).is_some_and(|r| r.is_some());
        if is_attempt && !alive {
            // A copy of an attempt that ran after its acquisition had finished.
            self.history.late_attempts.push((runner, self.now, set_nx));
        }
        if self.paused
            && !noscript
            && (self.ack_takes.contains(&runner)
                || (is_attempt
                    && acquirer.is_some_and(|(a, _)| self.history.acqs[a].kind == HoldKind::Job)))
        {
            self.history.takes_while_paused += 1;
        }
        if let Some(r) = self.runners.get_mut(runner).and_then(|r| r.as_mut()) {
            if !noscript {
                r.ran.push(self.now);
            }
            if is_attempt && let Some(acq) = r.acq {
                self.history.acqs[acq].attempts.push(self.now);
                // A grant is `{1, fence}`, or the bare fence (the lease lock's and the
                // permit's acquire scripts), or `OK` to an unfenced lock's `SET NX PX`.
                let fence = match &reply {
                    Reply::Status(ok) if set_nx && ok == "OK" => Some(0),
                    _ if set_nx => None,
                    Reply::Int(f) => Some(*f),
                    _ => reply
                        .as_array()
                        .filter(|a| a.first().and_then(Reply::as_int) == Some(1))
                        .map(|a| a.get(1).and_then(Reply::as_int).unwrap_or(0)),
                };
                if let Some(fence) = fence {
                    // Every grant of an unfenced acquisition is one hold of one token: fence
                    // 0 for all (the lease reports 0 whoever granted it).
                    let fence = if self.history.acqs[acq].fenced {
                        u64::try_from(fence).unwrap_or(0)
                    } else {
                        0
                    };
                    self.history.acqs[acq].grants.push((self.now, fence));
                }
            }
        }
        // Record what a call did when it runs, not when its caller hears of it: a delayed
        // copy may run after the caller gave up.
        if let Some(&permits) = self.permit_sets.get(&runner)
            && matches!(reply, Reply::Int(_) | Reply::Nil)
        {
            self.history.permits.push((self.now, permits));
        }
        // A pause or resume that ran (it answers 1 or 0): the checker's paused windows.
        if let Some(&pause) = self.pause_ops.get(&runner)
            && matches!(reply, Reply::Int(0 | 1))
        {
            self.history
                .pauses
                .push((self.history.spans.len(), self.now, pause));
            self.paused = pause;
        }
        // A drain's count that ran paused the queue (as a pause does); one that answered
        // 0 said nothing of the queue was in flight at this instant.
        if self.drains.contains(&runner)
            && let Some([Reply::Int(count), Reply::Int(_)]) = reply.as_array()
        {
            self.history
                .pauses
                .push((self.history.spans.len(), self.now, true));
            self.paused = true;
            if *count == 0 {
                let spans = self.history.spans.len();
                self.history.drained_at.push((spans, self.now));
            }
        }
        // A group take that found nothing while the queue is not paused: what its groups
        // held just after it.
        if !self.idle_groups.is_empty()
            && runs(&req.command, &queue::groups::GROUP_TAKE)
            && let Some([Reply::Int(0), Reply::Int(wait)]) = reply.as_array()
            && *wait != -2
            && let Some(ring) = req.command.args().nth(15)
        {
            let ring = String::from_utf8_lossy(ring).into_owned();
            let stem = ring.strip_suffix("ring").unwrap_or(&ring).to_owned();
            let server = &self.nodes[n].server;
            let now_ms = self.clock.unix_micros() / 1_000;
            let paused = stem
                .strip_suffix("g:")
                .map(|q| format!("{q}paused"))
                .unwrap_or_default();
            let groups = self
                .idle_groups
                .iter()
                .map(|g| {
                    let ready = server
                        .call(&["ZCARD", &format!("{stem}r:{g}")])
                        .ok()
                        .and_then(|r| r.as_int())
                        .unwrap_or(0);
                    let until = server
                        .call(&["ZSCORE", &format!("{stem}blocked"), g])
                        .ok()
                        .and_then(|r| match r {
                            Reply::Bulk(b) => String::from_utf8_lossy(&b).parse::<f64>().ok(),
                            _ => None,
                        });
                    let blocked = until.is_some_and(|u| u as i128 >= now_ms as i128);
                    let paused = server
                        .call(&["HEXISTS", &paused, &format!("g:{g}")])
                        .ok()
                        .and_then(|r| r.as_int())
                        == Some(1);
                    (
                        g.clone(),
                        u64::try_from(ready).unwrap_or(0),
                        blocked || paused,
                    )
                })
                .collect();
            self.history
                .idle_takes
                .push((self.history.spans.len(), self.now, groups));
            self.history.idle_seq.push(self.history.commands);
        }
        // A change of group limits that ran (it answers 1): in force from the next take.
        if let Some((group, concurrency)) = self.limit_sets.get(&runner)
            && reply == Reply::Int(1)
        {
            self.history.group_limits.push(crate::history::LimitSet {
                spans: self.history.spans.len(),
                at: self.now,
                seq: self.history.commands,
                group: group.clone(),
                concurrency: *concurrency,
            });
        }
        // A cancel that found its job (1: waiting, 2: in flight).
        if let Some((id, remove)) = self.cancels.get(&runner)
            && let Reply::Int(found @ (1 | 2)) = reply
        {
            self.history
                .cancels_ran
                .push((id.clone(), self.now, *remove, found));
        }
        // A requeue that found its job dead.
        if let Some(id) = self.requeues.get(&runner)
            && reply == Reply::Int(1)
        {
            self.history.requeued.push((id.clone(), self.now));
        }
        // The push script answers one string, a character per job ('1' pushed, '0' a
        // duplicate, already recorded by the run that pushed it).
        if let Some((ids, delay)) = self.pushes.get(&runner)
            && matches!(reply, Reply::Bulk(_) | Reply::Status(_) | Reply::Array(_))
        {
            if let Reply::Bulk(flags) = &reply {
                self.history.pushed_ran += flags.iter().filter(|&&f| f == b'1').count() as u64;
            }
            for id in ids {
                if !self.history.pushed.iter().any(|p| &p.id == id) {
                    self.history.pushed.push(Pushed {
                        id: id.clone(),
                        ran: self.now,
                        delay: *delay,
                    });
                }
            }
        }
        // A keep-latest push that found the job holding its id waiting again ({2, job,
        // 'ready' or 'delayed'}) drops the follow-up parked behind it (documented: the job
        // carries the latest payload).
        if let Some(f) = parked_before
            && let Some([Reply::Int(2), Reply::Bulk(_), Reply::Bulk(state)]) = reply.as_array()
            && (state == b"ready" || state == b"delayed")
            && parked_follow_up(&self.nodes[n].server, &self.dedup_pushes[&runner].0).is_none()
        {
            self.history.superseded.push((f, self.now));
        }
        // A push with a dedup id that queued a job ({1, id}): the job lives from now.
        if let Some((dedup_id, keep_latest)) = self.dedup_pushes.get(&runner).cloned()
            && let Some([Reply::Int(1), Reply::Bulk(job)]) = reply.as_array()
        {
            let job = String::from_utf8_lossy(job).into_owned();
            // Counted as pushed by the script (a job queued, or a new follow-up parked),
            // except a keep-latest push run again while its own job lives: answered as its
            // first run was, nothing written or counted (push_dedup.lua).
            let again = keep_latest
                && self.history.pushed.iter().any(|p| p.id == job)
                && !self.history.acks_ran_at.iter().any(|(j, _)| *j == job)
                && !self.history.cancels_ran.iter().any(|c| c.0 == job)
                && !on_dead_list(&self.nodes[n].server, &job);
            if !again {
                self.history.pushed_ran += 1;
            }
            // A keep-latest push answered Queued with a job already queued (its own, by an
            // earlier run of this push: a retry or a copy) while that job is in flight: it
            // parked the job behind itself (a library defect, see docs/simulation.md).
            if keep_latest
                && self.history.pushed.iter().any(|p| p.id == job)
                && parked_follow_up(&self.nodes[n].server, &dedup_id).as_deref()
                    == Some(job.as_str())
            {
                self.history.self_follow_ups.push((job.clone(), self.now));
            }
            if !self.history.pushed.iter().any(|p| p.id == job) {
                self.history.pushed.push(Pushed {
                    id: job.clone(),
                    ran: self.now,
                    delay: 0,
                });
                if keep_latest {
                    // Parked: in none of the queue's sets (behind the job in flight).
                    let server = &self.nodes[n].server;
                    let stem = redlease_core::keys::Keyspace::default()
                        .stem("q")
                        .unwrap_or_default();
                    let parked = ["ready", "delayed", "inflight"].iter().all(|set| {
                        !matches!(
                            server.call(&["ZSCORE", &format!("{stem}:q:{set}"), &job]),
                            Ok(Reply::Bulk(_))
                        )
                    });
                    self.history.follow_ups.push((job, self.now, parked));
                } else {
                    self.history.dedup_queued.push((dedup_id, job, self.now));
                }
            }
        }
        // The untake script (a take given back after an unanswered call) answers 1 for a
        // take given back, not for an ack.
        let untake_script = runs(&req.command, &queue::scripts::UNTAKE);
        if untake_script && reply == Reply::Int(1) {
            self.history.given_back += 1;
        }
        let acked = !untake_script
            && (reply == Reply::Int(1)
                || (self.ack_takes.contains(&runner)
                    && reply.as_array().and_then(|a| a.first()) == Some(&Reply::Int(1))));
        if let Some(&(hold, true)) = self.releases.get(&runner)
            && acked
        {
            // The ack ran and removed the job, whether or not its reply reaches the worker.
            self.history.acks_ran.push(hold);
            if let Some(job) = self.history.holds[hold].job.clone() {
                self.history.acks_ran_at.push((job, self.now));
            }
        }
        if let Some((id, backoff)) = self.nack_backoffs.get(&runner)
            && reply == Reply::Int(1)
        {
            // Requeued with its backoff: not due again before now + backoff.
            self.history.nacked.push(Pushed {
                id: id.clone(),
                ran: self.now,
                delay: *backoff,
            });
        }
        if n == 0 {
            self.drain_messages();
        }
        if cut {
            return;
        }
        let lost = self.window(|w| match w {
            Inject::LoseReplies { until, percent } => Some((*until, *percent)),
            _ => None,
        });
        if let Some(p) = lost
            && self.rand(100) < p
        {
            self.note(|| format!("c{client}/r{runner} reply lost"));
            return;
        }
        let mut delay = self.net_delay();
        if let Some(by) = self.window(|w| match w {
            Inject::Delay { until, percent, by } => Some((*until, percent * 1_000_000 + by)),
            _ => None,
        }) {
            let (percent, by) = (by / 1_000_000, by % 1_000_000);
            if self.rand(100) < percent {
                delay += self.rand(by);
            }
        }
        self.push(
            self.now + delay,
            Ev::Reply {
                runner,
                client,
                node,
                epoch,
                id: req.id,
                result: Ok(reply),
                ran: Some(self.now),
            },
        );
    }

    /// `WAIT 1`: a replica that keeps up has everything up to now; a stalled one nothing new.
    fn wait_for_replica(&mut self, n: usize) -> Reply {
        let node = &mut self.nodes[n];
        if node.replica_stalled {
            Reply::Int(0)
        } else {
            node.replica = node.server.snapshot();
            Reply::Int(1)
        }
    }

    fn drain_messages(&mut self) {
        for c in 0..self.clients.len() {
            let mut got = Vec::new();
            if let Some(sub) = &self.clients[c].sub {
                while let Some(m) = sub.try_recv() {
                    got.push(m);
                }
            }
            for m in got {
                let at = self.now + self.net_delay();
                let sub_epoch = self.clients[c].sub_epoch;
                self.push(
                    at,
                    Ev::Message {
                        client: c,
                        sub_epoch,
                        channel: String::from_utf8_lossy(&m.channel).into_owned(),
                        payload: String::from_utf8_lossy(&m.payload).into_owned(),
                    },
                );
            }
        }
    }

    fn cut(&mut self, client: usize, node: usize) {
        self.clients[client].epochs[node] += 1;
        let mine: Vec<usize> = (0..self.runners.len())
            .filter(|r| {
                self.runners[*r].as_ref().is_some_and(|x| {
                    x.client == client && x.outstanding.iter().any(|o| usize::from(o.1) == node)
                })
            })
            .collect();
        for r in mine {
            let ids: Vec<RequestId> = self.runners[r]
                .as_ref()
                .map(|x| {
                    x.outstanding
                        .iter()
                        .filter(|o| usize::from(o.1) == node)
                        .map(|o| o.0)
                        .collect()
                })
                .unwrap_or_default();
            for id in ids {
                self.feed(
                    r,
                    id,
                    Err(TransportFailure::no_reply("connection reset")),
                    None,
                );
            }
        }
    }

    fn inject(&mut self, i: usize) {
        let what = self.plan.injections[i].what.clone();
        self.injected += 1;
        self.note(|| format!("FAULT {what:?}"));
        match what {
            Inject::LoseRequests { .. }
            | Inject::LoseReplies { .. }
            | Inject::Delay { .. }
            | Inject::HoldRequests { .. }
            | Inject::DuplicateRequests { .. } => {}
            Inject::Cut { client } => {
                for n in 0..self.nodes.len() {
                    self.cut(client, n);
                }
            }
            Inject::PauseServer { node, dur } => {
                let n = &mut self.nodes[usize::from(node)];
                n.paused_until = n.paused_until.max(self.now + dur);
                let at = n.paused_until;
                self.push(at, Ev::ServerResume { node });
            }
            Inject::RestartEmpty { node, down } => {
                self.restart(node, down, None);
                self.observe(usize::from(node), None, false);
            }
            Inject::RestartSnapshot { node, down } => {
                self.history.restored.push(self.now);
                let snap = self.nodes[usize::from(node)].persisted.clone();
                self.restart(node, down, Some(snap));
                self.observe(usize::from(node), None, false);
            }
            Inject::ReplicaStalls { node } => {
                self.nodes[usize::from(node)].replica_stalled = true;
            }
            Inject::Failover { node, down } => {
                self.history.restored.push(self.now);
                let snap = self.nodes[usize::from(node)].replica.clone();
                self.restart(node, down, Some(snap));
                self.nodes[usize::from(node)].replica_stalled = false;
                self.observe(usize::from(node), None, false);
            }
            Inject::PauseClient { client, dur } => {
                self.clients[client].pauses.push((self.now, self.now + dur));
            }
            Inject::CutPubSub { client, dur } => {
                let c = &mut self.clients[client];
                c.sub = None;
                c.sub_epoch += 1;
                for state in c.channels.values_mut() {
                    state.0 = None;
                }
                self.push(self.now + dur, Ev::Reconnect { client });
            }
            Inject::Evict { node, pick } => {
                let server = &self.nodes[usize::from(node)].server;
                let keys = server.keys();
                if !keys.is_empty() {
                    let key = keys[(pick % keys.len() as u64) as usize].clone();
                    server.evict(&key);
                    self.note(|| format!("evicted {}", String::from_utf8_lossy(&key)));
                    self.observe(usize::from(node), None, false);
                }
            }
        }
    }

    fn restart(&mut self, node: u16, down: u64, snap: Option<Snapshot>) {
        let n = usize::from(node);
        for c in 0..self.clients.len() {
            self.cut(c, n);
        }
        let nd = &mut self.nodes[n];
        match &snap {
            Some(s) => nd.server.restart_from(s),
            None => nd.server.restart_empty(),
        }
        nd.held_back.clear();
        nd.paused_until = 0;
        nd.down_until = self.now + down;
        if n == 0 {
            for c in 0..self.clients.len() {
                if self.clients[c].sub.take().is_some() {
                    self.clients[c].sub_epoch += 1;
                    for state in self.clients[c].channels.values_mut() {
                        state.0 = None;
                    }
                    let at = self.now + down + 1_000 + self.rand(20_000);
                    self.push(at, Ev::Reconnect { client: c });
                }
            }
        }
    }

    fn reconnect(&mut self, client: usize) {
        if self.clients[client].sub.is_some() {
            return;
        }
        if self.nodes[0].down_until > self.now {
            let at = self.nodes[0].down_until + 1_000;
            self.push(at, Ev::Reconnect { client });
            return;
        }
        let sub = self.nodes[0].server.subscriber();
        let channels: Vec<String> = self.clients[client].channels.keys().cloned().collect();
        sub.subscribe(&channels);
        let c = &mut self.clients[client];
        c.sub = Some(sub);
        c.sub_epoch += 1;
        c.epoch += 1;
        let epoch = c.epoch;
        for state in c.channels.values_mut() {
            state.0 = Some(epoch);
        }
        self.note(|| format!("c{client} listener reconnected"));
        if self.mutation != Mutation::NoRecheckAfterMiss {
            // Messages published while disconnected are lost: every waiter checks again.
            for ch in channels {
                self.wake_all(client, &ch);
            }
        }
    }

    // ---- runners (one machine each) ----

    fn spawn(&mut self, client: usize, owner: Owner, machine: Box<dyn Drive>) -> usize {
        let id = self.runners.len();
        self.history.runners.push(RunnerInfo::default());
        self.runners.push(Some(Runner {
            client,
            owner,
            machine,
            outstanding: Vec::new(),
            batch: 0,
            timer: 0,
            ran: Vec::new(),
            last_ran: None,
            acq: None,
            sent_epoch: 0,
        }));
        id
    }

    fn start(&mut self, runner: usize) {
        self.poll(runner);
    }

    fn feed(
        &mut self,
        runner: usize,
        id: RequestId,
        result: Result<Reply, TransportFailure>,
        ran: Option<u64>,
    ) {
        let now_i;
        {
            let Some(r) = self.runners.get(runner).and_then(|r| r.as_ref()) else {
                return;
            };
            now_i = self.instant(r.client);
        }
        let Some(r) = self.runners.get_mut(runner).and_then(|r| r.as_mut()) else {
            return;
        };
        let Some(pos) = r.outstanding.iter().position(|o| o.0 == id) else {
            // A late reply to a request the machine gave up on: it must ignore it.
            r.machine.handle(Response { id, result }, now_i);
            return;
        };
        r.outstanding.remove(pos);
        if ran.is_some() {
            r.last_ran = ran;
        }
        r.machine.handle(Response { id, result }, now_i);
        self.poll(runner);
    }

    fn timeout(&mut self, runner: usize, batch: u64) {
        let Some(r) = self.runners.get(runner).and_then(|r| r.as_ref()) else {
            return;
        };
        let ids: Vec<RequestId> = r
            .outstanding
            .iter()
            .filter(|o| o.2 == batch)
            .map(|o| o.0)
            .collect();
        for id in ids {
            self.feed(
                runner,
                id,
                Err(TransportFailure::no_reply("timed out")),
                None,
            );
        }
    }

    fn poll(&mut self, runner: usize) {
        let Some(client) = self
            .runners
            .get(runner)
            .and_then(|r| r.as_ref())
            .map(|r| r.client)
        else {
            return;
        };
        self.clients[client].waiters.retain(|w| w.0 != runner);
        let now_i = self.instant(client);
        // Requests past their batch's deadline are answered (timed out) before the machine
        // is polled: the contract owes it an outcome for each.
        if let Some(r) = self.runners[runner].as_mut() {
            let now = self.now;
            let expired: Vec<RequestId> = r
                .outstanding
                .iter()
                .filter(|o| o.3 <= now)
                .map(|o| o.0)
                .collect();
            r.outstanding.retain(|o| o.3 > now);
            for id in expired {
                r.machine.handle(
                    Response {
                        id,
                        result: Err(TransportFailure::no_reply("timed out")),
                    },
                    now_i,
                );
            }
        }
        let step = match self.runners[runner].as_mut() {
            Some(r) => {
                r.timer += 1;
                r.machine.poll(now_i)
            }
            None => return,
        };
        match step {
            Step::Send(batch) => {
                let limit = batch
                    .deadline
                    .min(now_i + Duration::from_micros(IO_TIMEOUT) + batch.server_wait);
                let at = self.to_global(client, limit).max(self.now);
                let epoch = self.clients[client].epoch;
                let generation = {
                    let r = self.runners[runner]
                        .as_mut()
                        .unwrap_or_else(|| unreachable!());
                    r.sent_epoch = epoch;
                    r.batch += 1;
                    for req in &batch.requests {
                        r.outstanding
                            .push((req.id, req.command.node().0, r.batch, at));
                    }
                    r.batch
                };
                self.send(runner, batch.requests);
                self.push(
                    at,
                    Ev::Timeout {
                        runner,
                        batch: generation,
                    },
                );
            }
            Step::Wait(w) => {
                let at = self.to_global(client, w.until).max(self.now);
                let generation = self.runners[runner].as_ref().map_or(0, |r| r.timer);
                self.push(at, Ev::Timer { runner, generation });
                if let Some(on) = w.wake_on {
                    self.listen(client, runner, on);
                }
            }
            Step::Done(outcome) => {
                let r = self.runners[runner]
                    .take()
                    .unwrap_or_else(|| unreachable!());
                self.history.runners[runner].done = Some(self.now);
                match outcome {
                    Ok(o) => {
                        if let Some(e) = o.contract_broken() {
                            self.history.broken.push((self.now, e));
                        }
                        self.finished(runner, r, o)
                    }
                    Err(e) => {
                        self.history.broken.push((self.now, e.to_string()));
                        self.note(|| format!("r{runner} ended: {e}"));
                    }
                }
            }
        }
    }

    // ---- pub/sub listener ----

    fn listen(&mut self, client: usize, runner: usize, on: WakeOn) {
        let sent = self.runners[runner].as_ref().map_or(0, |r| r.sent_epoch);
        let generation = self.runners[runner].as_ref().map_or(0, |r| r.timer);
        let recheck = self.mutation != Mutation::NoRecheckAfterMiss;
        let c = &mut self.clients[client];
        let channel = on.channel.clone();
        c.waiters.push((runner, on));
        // The blocking listener's "no gap" rule: a waiter whose channel was confirmed after
        // its attempt was sent, or had a message since, may have missed a release: it tries
        // again at once. One not yet confirmed is woken by the confirmation.
        if let Some(&(Some(confirmed), last)) = c.channels.get(&channel) {
            if recheck && (confirmed > sent || last > sent) {
                self.push(self.now, Ev::Wake { runner, generation });
            }
            return;
        }
        let fresh = !c.channels.contains_key(&channel);
        c.channels.entry(channel.clone()).or_insert((None, 0));
        if fresh && c.sub.is_some() {
            let sub_epoch = c.sub_epoch;
            let at = self.now + self.net_delay();
            self.push(
                at,
                Ev::Subscribed {
                    client,
                    sub_epoch,
                    channel,
                },
            );
        }
    }

    fn wake_all(&mut self, client: usize, channel: &str) {
        let woken: Vec<usize> = self.clients[client]
            .waiters
            .iter()
            .filter(|w| w.1.channel == channel)
            .map(|w| w.0)
            .collect();
        for r in woken {
            self.wake(r);
        }
    }

    fn wake(&mut self, runner: usize) {
        let Some(client) = self
            .runners
            .get(runner)
            .and_then(|r| r.as_ref())
            .map(|r| r.client)
        else {
            return;
        };
        let now_i = self.instant(client);
        if let Some(r) = self.runners[runner].as_mut() {
            r.machine.wake(now_i);
        }
        self.poll(runner);
    }

    fn route(&mut self, client: usize, channel: &str, payload: &str) {
        let c = &mut self.clients[client];
        c.epoch += 1;
        let epoch = c.epoch;
        if let Some(state) = c.channels.get_mut(channel) {
            state.1 = epoch;
        }
        let waiters: Vec<(usize, Option<String>)> = self.clients[client]
            .waiters
            .iter()
            .filter(|w| w.1.channel == channel)
            .map(|w| (w.0, w.1.tag.clone()))
            .collect();
        if payload == WakeOn::ALL {
            for (r, _) in waiters {
                self.wake(r);
            }
            return;
        }
        if let Some((r, _)) = waiters.iter().find(|w| w.1.as_deref() == Some(payload)) {
            self.wake(*r);
            return;
        }
        // Any other payload wakes the longest-waiting untagged waiter.
        if let Some((r, _)) = waiters.iter().find(|w| w.1.is_none()) {
            self.wake(*r);
        }
    }

    // ---- watchdog ----

    fn arm_watchdog(&mut self, client: usize) {
        let Some(next) = self.clients[client].renewals.next_wakeup() else {
            return;
        };
        let at = self.to_global(client, next).max(self.now);
        let c = &mut self.clients[client];
        if c.watchdog_at.is_some_and(|a| a <= at) {
            return;
        }
        c.watchdog_gen += 1;
        c.watchdog_at = Some(at);
        let generation = c.watchdog_gen;
        self.push(at, Ev::Watchdog { client, generation });
    }

    fn watchdog(&mut self, client: usize) {
        let now_i = self.instant(client);
        let deadline = now_i + Duration::from_micros(IO_TIMEOUT);
        let due = self.clients[client].renewals.due(now_i, deadline, 64);
        for (wid, reason, _) in due.lost {
            self.lost(client, wid, &format!("{reason:?}"));
        }
        for (wid, op) in due.renew {
            let mut token = None;
            if let Some(task) = self.clients[client].watches.get(&wid).copied()
                && let Some(h) = self.tasks[task].held.as_ref()
            {
                self.history.holds[h.hold].renewals_sent.push(self.now);
                token = Some(self.history.holds[h.hold].token.clone());
            }
            let r = self.spawn(
                client,
                Owner::Watch(wid),
                Wrap::boxed(op, Outcome::Extended),
            );
            self.history.runners[r].token = token;
            self.start(r);
        }
        self.arm_watchdog(client);
    }

    fn lost(&mut self, client: usize, wid: WatchId, why: &str) {
        if let Some(task) = self.clients[client].watches.remove(&wid)
            && let Some(h) = self.tasks[task].held.as_mut()
        {
            h.watch = None;
            let hold = h.hold;
            let hd = &mut self.history.holds[hold];
            if hd.lost.is_none() {
                hd.lost = Some((self.now, why.to_owned()));
            }
            self.note(|| format!("c{client} t{task} told its lease is lost: {why}"));
        }
    }

    // ---- tasks ----

    fn task_next(&mut self, task: usize) {
        let Some(action) = self.tasks[task].actions.pop_front() else {
            return;
        };
        let client = self.tasks[task].client;
        let now_i = self.instant(client);
        match action {
            Action::Sleep(us) => {
                let at = self.clients[client]
                    .clock
                    .global_at(self.local_now(client) + us);
                self.push(at, Ev::TaskNext { task });
            }
            Action::Acquire {
                spec,
                options,
                watch,
            } => {
                let seed = self.rng.next_u64();
                let kind = spec.kind;
                let name = spec.target.name.to_string();
                let script = spec.acquire.script();
                let waiter_timeout = match kind {
                    LeaseKind::Lock(LockKind::Fair | LockKind::Write) | LeaseKind::Permit => {
                        Some(300_000)
                    }
                    _ => None,
                };
                let min_replicas = options.min_replicas.is_some();
                let ttl = spec.ttl;
                let fenced = spec.fenced;
                let token = spec.token.as_str().to_owned();
                match Acquire::new(spec, &options, seed, now_i) {
                    Ok(m) => {
                        let acq = self.history.acqs.len();
                        self.history.acqs.push(Acq {
                            client,
                            task,
                            name,
                            kind: HoldKind::from(kind),
                            started: self.now,
                            started_local: self.local_now(client),
                            wait: options.wait.map(micros),
                            reply_timeout: micros(options.reply_timeout),
                            waiter_timeout,
                            ttl: micros(ttl),
                            attempts: Vec::new(),
                            grants: Vec::new(),
                            ended: None,
                            result: AcqResult::Running,
                            fenced,
                        });
                        self.tasks[task].pending = Some((watch, min_replicas));
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(m, Outcome::Acquired),
                        );
                        if let Some(x) = self.runners[r].as_mut() {
                            x.acq = Some(acq);
                        }
                        self.acquirers.insert(r, (acq, script));
                        self.history.runners[r].acq = Some(acq);
                        self.history.runners[r].token = Some(token);
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad acquisition: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::RedAcquire { spec, options } => {
                let seed = self.rng.next_u64();
                let name = spec.target.name.to_string();
                let wait = options.wait.map(micros);
                let reply = micros(options.node_timeout);
                let token = spec.token.as_str().to_owned();
                match RedLockAcquire::new(spec, options, seed, now_i) {
                    Ok(m) => {
                        let acq = self.history.acqs.len();
                        self.history.acqs.push(Acq {
                            client,
                            task,
                            name,
                            kind: HoldKind::Red,
                            started: self.now,
                            started_local: self.local_now(client),
                            wait,
                            reply_timeout: reply,
                            waiter_timeout: None,
                            ttl: 0,
                            attempts: Vec::new(),
                            grants: Vec::new(),
                            ended: None,
                            result: AcqResult::Running,
                            fenced: false,
                        });
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(m, |r| Outcome::Red(r.map(Box::new))),
                        );
                        if let Some(x) = self.runners[r].as_mut() {
                            x.acq = Some(acq);
                        }
                        self.history.runners[r].acq = Some(acq);
                        self.history.runners[r].token = Some(token);
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad RedLock: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::Write => {
                let valid = self.tasks[task].held.as_ref().and_then(|h| {
                    let until = h
                        .lease
                        .as_ref()
                        .map(|l| l.valid_until)
                        .or(h.red.as_ref().map(|r| r.lease.valid_until))?;
                    let lost = self.history.holds[h.hold].lost.is_some();
                    (!lost && now_i < until).then_some(h.hold)
                });
                if let Some(hold) = valid {
                    // The write travels; a pause of this process before it leaves delays it.
                    let at = self.now + self.rand(3_000);
                    self.push(at, Ev::ResourceWrite { client, hold });
                }
                self.push(self.now, Ev::TaskNext { task });
            }
            Action::Release => self.release(task, None),
            Action::Settle { keys, ack, max } => self.release(task, Some((keys, ack, max))),
            Action::SetPermits { keys, permits } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                match redlease_core::semaphore::set_permits(&keys, permits, deadline) {
                    Ok(op) => {
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(op, Outcome::Permits),
                        );
                        self.permit_sets.insert(r, permits);
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad set_permits: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::Pause { keys, pause } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let scope = queue::pause::PauseScope::Queue;
                let op = if pause {
                    queue::pause::pause(&keys, &scope, deadline)
                } else {
                    queue::pause::resume(&keys, &scope, deadline)
                };
                match op {
                    Ok(op) => {
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(op, Outcome::Toggled),
                        );
                        self.pause_ops.insert(r, pause);
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad pause: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::SetLimits {
                keys,
                group,
                concurrency,
            } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let of = match &group {
                    Some(g) => queue::groups::LimitsOf::Group(g),
                    None => queue::groups::LimitsOf::EveryGroup,
                };
                let limits = concurrency.map(|c| queue::groups::GroupLimits::new().concurrency(c));
                match queue::groups::set_limits(&keys, of, limits, deadline) {
                    Ok(op) => {
                        let r =
                            self.spawn(client, Owner::Task(task), Wrap::boxed(op, Outcome::Limits));
                        self.limit_sets.insert(r, (group, concurrency));
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad set_limits: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::Cancel { keys, id, remove } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let jobs = if remove {
                    queue::cancel::CancelledJobs::Remove
                } else {
                    queue::cancel::CancelledJobs::Dead
                };
                match queue::cancel::cancel(&keys, &id, "sim", jobs, deadline) {
                    Ok(op) => {
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(op, Outcome::Cancelled),
                        );
                        self.history.cancel_runners.insert(r);
                        self.cancels.insert(r, (id, remove));
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad cancel: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::CancelDedup {
                keys,
                dedup_id,
                remove,
            } => {
                let stem = redlease_core::keys::Keyspace::default()
                    .stem("q")
                    .unwrap_or_default();
                let holder = match self.nodes[0].server.call(&[
                    "HGET",
                    &format!("{stem}:q:dedup"),
                    &dedup_id,
                ]) {
                    Ok(Reply::Bulk(job)) => Some(String::from_utf8_lossy(&job).into_owned()),
                    _ => None,
                };
                match holder {
                    Some(id) => {
                        self.note(|| format!("t{task} cancels {id}, holding {dedup_id}"));
                        self.tasks[task]
                            .actions
                            .push_front(Action::Cancel { keys, id, remove });
                    }
                    None => self.note(|| format!("t{task} no job holds {dedup_id}")),
                }
                self.push(self.now, Ev::TaskNext { task });
            }
            Action::CancelOccurrence { keys, name, remove } => {
                let pending = self.pending_occurrence(&name);
                match pending {
                    Some(id) => {
                        self.note(|| format!("t{task} cancels occurrence {id}"));
                        self.skipping.insert(id.clone(), self.now);
                        let t = &mut self.tasks[task];
                        t.actions.push_front(Action::Advance {
                            keys: keys.clone(),
                            computed: None,
                            sent: 0,
                            past: Some(id.clone()),
                        });
                        t.actions.push_front(Action::Cancel { keys, id, remove });
                    }
                    None => self.note(|| format!("t{task} no pending occurrence of {name}")),
                }
                self.push(self.now, Ev::TaskNext { task });
            }
            Action::Requeue { keys, id } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let op = queue::requeue(&keys, &id, deadline);
                let r = self.spawn(
                    client,
                    Owner::Task(task),
                    Wrap::boxed(op, Outcome::Requeued),
                );
                self.requeues.insert(r, id);
                self.start(r);
            }
            Action::Drain { keys, wait } => {
                let op = queue::pause::Drain::new(
                    &keys,
                    Duration::from_micros(wait),
                    Duration::from_micros(3 * IO_TIMEOUT),
                    now_i,
                );
                let r = self.spawn(client, Owner::Task(task), Wrap::boxed(op, Outcome::Drained));
                self.drains.insert(r);
                self.start(r);
            }
            Action::Push {
                keys,
                jobs,
                delay,
                timeout,
            } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                // A grouped job's id in the queue is '<group>\u{1f}<id>' (the group: the
                // first letter of the batch's first id).
                let group = jobs.first().and_then(|j| j.id.get(..1)).unwrap_or("");
                let ids: Vec<String> = jobs
                    .iter()
                    .map(|j| match keys.is_grouped() {
                        true => format!("{group}\u{1f}{}", j.id),
                        false => j.id.clone(),
                    })
                    .collect();
                // Grouped keys: the batch goes into the group its first id starts with.
                let pushed = match jobs.first().and_then(|j| j.id.get(..1)) {
                    Some(group) if keys.is_grouped() => {
                        queue::groups::push(&keys, group, &jobs, 0, delay, deadline)
                    }
                    _ => match timeout {
                        Some(t) => queue::push_with_timeout(&keys, &jobs, 0, delay, t, deadline),
                        None => queue::push(&keys, &jobs, 0, delay, deadline),
                    },
                };
                match pushed {
                    Ok(op) => {
                        let r =
                            self.spawn(client, Owner::Task(task), Wrap::boxed(op, Outcome::Pushed));
                        // The delay as asked, to the µs: a job is due no earlier than the
                        // push's run plus it (never rounded down).
                        self.pushes.insert(r, (ids, micros(delay)));
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad push: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::PushDedup {
                keys,
                dedup_id,
                token,
                keep_latest,
            } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let token =
                    redlease_core::lease::Token::new(token).unwrap_or_else(|e| panic!("{e}"));
                let mode = if keep_latest {
                    queue::Dedup::KeepLatest
                } else {
                    queue::Dedup::UntilDone { dead_blocks: true }
                };
                let op = queue::push_dedup(
                    &keys,
                    &dedup_id,
                    &token,
                    vec![b'x'],
                    mode,
                    0,
                    Duration::ZERO,
                    deadline,
                );
                match op {
                    Ok(op) => {
                        let wrap = Wrap::boxed(op, Outcome::DedupPushed);
                        let r = self.spawn(client, Owner::Task(task), wrap);
                        self.dedup_pushes.insert(r, (dedup_id, keep_latest));
                        self.start(r);
                    }
                    Err(e) => {
                        self.note(|| format!("t{task} bad dedup push: {e}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::Schedule {
                keys,
                name,
                schedule,
                from,
                sent,
            } => {
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let upsert = schedule::upsert(&keys, &name, &schedule, from, deadline);
                if keys.is_grouped() {
                    // Refused by the core, with a typed error (no group take would ever
                    // lease an occurrence).
                    let refused = matches!(upsert, Err(redlease_core::Error::InvalidArgument(_)));
                    self.history.grouped_schedules.push((self.now, refused));
                }
                match upsert {
                    Ok(op) if sent < 4 => {
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(op, Outcome::Upserted),
                        );
                        self.upserts.insert(
                            r,
                            Action::Schedule {
                                keys,
                                name,
                                schedule,
                                from,
                                sent: sent + 1,
                            },
                        );
                        self.start(r);
                    }
                    other => {
                        let e = other.err().map(|e| e.to_string());
                        self.note(|| format!("t{task} upsert given up: {e:?}"));
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::Advance {
                keys,
                computed,
                sent,
                past,
            } => {
                if let Some(id) = &past
                    && (self.mutation == Mutation::CancelSkipsAdvance || sent >= SKIP_SENDS)
                {
                    // Under `CancelSkipsAdvance` the driver never advances past a cancelled
                    // occurrence; else it gave up (the caller would call again).
                    self.skipped(id);
                    self.push(self.now, Ev::TaskNext { task });
                    return;
                }
                let job = match &past {
                    Some(id) => Some(id.clone()),
                    None => self.tasks[task].held.as_ref().and_then(|h| h.job.clone()),
                };
                let occurrence = job.as_deref().and_then(schedule::occurrence);
                let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
                let op = occurrence.map(|(name, due)| {
                    let hint = computed.as_ref().map(|(v, f, n)| (v.as_str(), *f, *n));
                    (due, schedule::advance(&keys, name, due, hint, deadline))
                });
                match op {
                    Some((due, Ok(op))) if sent < 4 || past.is_some() => {
                        let r = self.spawn(
                            client,
                            Owner::Task(task),
                            Wrap::boxed(op, Outcome::Advanced),
                        );
                        self.advances.insert(r, (keys, due, sent + 1));
                        if let Some(id) = past {
                            self.skips.insert(r, id);
                        }
                        self.start(r);
                    }
                    _ => {
                        if let Some(id) = &past {
                            self.skipped(id);
                        } else if occurrence.is_some() {
                            // Its advance gave up: given back, as the blocking driver does.
                            self.give_back_occurrence(task);
                        }
                        self.push(self.now, Ev::TaskNext { task });
                    }
                }
            }
            Action::Work {
                keys,
                settings,
                work,
                until,
                watch,
            } => {
                if self.now >= until {
                    self.push(self.now, Ev::TaskNext { task });
                    return;
                }
                let token = self.token();
                let wait = Duration::from_micros((until - self.now).clamp(10_000, 1_000_000));
                let ack = self.rand(4) != 0;
                let spent = self.rand(work);
                let keys_for_advance = keys.clone();
                match queue::take(&keys, token, &settings) {
                    Ok(spec) => {
                        let options = AcquireOptions {
                            wait: Some(wait),
                            reply_timeout: Duration::from_micros(IO_TIMEOUT),
                            ..AcquireOptions::default()
                        };
                        let t = &mut self.tasks[task];
                        t.actions.push_front(Action::Work {
                            keys: keys.clone(),
                            settings,
                            work,
                            until,
                            watch,
                        });
                        t.actions.push_front(Action::Settle {
                            keys,
                            ack,
                            max: settings.max_deliveries,
                        });
                        t.actions.push_front(Action::Sleep(spent));
                        t.actions.push_front(Action::Advance {
                            keys: keys_for_advance,
                            computed: None,
                            sent: 0,
                            past: None,
                        });
                        t.actions.push_front(Action::Acquire {
                            spec,
                            options,
                            watch,
                        });
                    }
                    Err(e) => self.note(|| format!("t{task} bad take: {e}")),
                }
                self.push(self.now, Ev::TaskNext { task });
            }
        }
    }

    /// When the hold an acquisition ended with began: the first of the granted attempts at
    /// the end of its attempts (a retry that finds its own grant renews it, it does not
    /// start it).
    fn first_of_last_grants(&self, acq: usize) -> Option<u64> {
        let a = &self.history.acqs[acq];
        let grant = |t: u64| a.grants.iter().find(|g| g.0 == t).map(|g| g.1);
        let mut attempts = a.attempts.iter().rev().copied();
        let mut first = attempts.next()?;
        if a.kind == HoldKind::Job {
            // Each grant of a take may be another job: never one hold.
            return Some(first);
        }
        let fence = grant(first)?;
        // Earlier grants of the same hold: the same fence, each renewed before it expired.
        for t in attempts {
            match grant(t) {
                Some(f) if f == fence && first - t < a.ttl => first = t,
                _ => break,
            }
        }
        Some(first)
    }

    /// The watchdog's policy for `lease` (hold `hold`): a job pushed with a timeout is
    /// renewed until its timeout plus [`World::job_grace`] from its take, no longer (as the
    /// blocking driver's `max_hold`), unless [`Mutation::TimeoutIgnored`]; the limit is
    /// recorded for the checker (`no-ack-after-timeout`).
    fn job_policy(&mut self, hold: usize, lease: &Lease) -> RenewalPolicy {
        let field = |i: usize| {
            (lease.kind == LeaseKind::Job)
                .then(|| lease.data.get(i))
                .flatten()
                .and_then(|t| std::str::from_utf8(t).ok()?.parse::<u64>().ok())
        };
        self.timed_job_policy(hold, lease.ttl, field(3), field(4))
    }

    /// [`job_policy`](Self::job_policy) of a job taken with its own timeout of `timeout`
    /// ms and, from the server, `hold_left` ms to its hold limit (as the blocking driver
    /// takes it: `TakenJob::hold_left`).
    fn timed_job_policy(
        &mut self,
        hold: usize,
        ttl: Duration,
        timeout: Option<u64>,
        hold_left: Option<u64>,
    ) -> RenewalPolicy {
        let mut policy = RenewalPolicy::for_ttl(ttl);
        if let Some(ms) = timeout {
            let limit = Duration::from_millis(ms) + self.job_grace;
            self.history.job_limits.push((hold, micros(limit)));
            if self.mutation != Mutation::TimeoutIgnored {
                policy.max_hold = Some(hold_left.map_or(limit, Duration::from_millis));
            }
        }
        policy
    }

    /// A fresh owner token from the run's generator.
    pub fn token(&mut self) -> redlease_core::lease::Token {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        b[8..].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        redlease_core::lease::Token::from_random(b)
    }

    fn release(&mut self, task: usize, settle: Option<(QueueKeys, bool, u32)>) {
        let client = self.tasks[task].client;
        let now_i = self.instant(client);
        let Some(held) = self.tasks[task].held.take() else {
            self.push(self.now, Ev::TaskNext { task });
            return;
        };
        if let Some(w) = held.watch {
            self.clients[client].renewals.remove(w);
            self.clients[client].watches.remove(&w);
        }
        let hd = &mut self.history.holds[held.hold];
        if hd.release_sent.is_none() {
            hd.release_sent = Some(self.now);
        }
        let deadline = now_i + Duration::from_micros(3 * IO_TIMEOUT);
        // A busy worker acks and is handed the next job in one call (one ack in three,
        // when it goes on taking).
        let next = match (&settle, &held.job, self.tasks[task].actions.front()) {
            (
                Some((_, true, _)),
                Some(_),
                Some(Action::Work {
                    settings, until, ..
                }),
            ) if self.now < *until => Some(*settings),
            _ => None,
        };
        // A grouped queue's takes are fair across groups: an ack, then a take.
        let grouped = matches!(&settle, Some((keys, _, _)) if keys.is_grouped());
        let ack_take = next.is_some() && !grouped && self.rand(3) == 0;
        let mut next_token = None;
        let machine: Box<dyn Drive> = if let Some(red) = &held.red {
            match QuorumOp::new(
                red,
                QuorumAction::Release,
                Duration::from_micros(IO_TIMEOUT),
            ) {
                Ok(op) => Wrap::boxed(op, Outcome::Quorum),
                Err(e) => {
                    self.note(|| format!("t{task} bad release: {e}"));
                    self.push(self.now, Ev::TaskNext { task });
                    return;
                }
            }
        } else if let Some(lease) = &held.lease {
            match (&settle, &held.job) {
                (Some((keys, true, _)), Some(id)) if ack_take => {
                    let token = self.token();
                    next_token = Some(token.as_str().to_owned());
                    let settings = next.unwrap_or_else(|| unreachable!());
                    match queue::ack_and_take(keys, id, lease, token, &settings, deadline) {
                        Ok(op) => Wrap::boxed(op, Outcome::AckTake),
                        Err(e) => {
                            self.note(|| format!("t{task} bad ack_and_take: {e}"));
                            self.push(self.now, Ev::TaskNext { task });
                            return;
                        }
                    }
                }
                (Some((keys, true, _)), Some(id)) => Wrap::boxed(
                    ScriptOp::release_with(
                        lease,
                        // A job whose take had an unanswered attempt: the ack records
                        // its token as undone too (the late attempt then takes nothing).
                        keys.settling(queue::ack_call(keys, id, lease.token.as_str()), lease),
                        deadline,
                    ),
                    Outcome::Unit,
                ),
                // A grouped job's handler answers "rate limited" in one nack of two.
                (Some((keys, false, _)), Some(id)) if keys.is_grouped() && held.hold % 2 == 0 => {
                    match redlease_core::queue::groups::rate_limited_call(
                        keys, id, lease, DEFER_WAIT,
                    ) {
                        Ok(call) => Wrap::boxed(
                            ScriptOp::release_with(lease, call, deadline),
                            Outcome::Unit,
                        ),
                        Err(e) => {
                            self.note(|| format!("t{task} bad rate_limited: {e}"));
                            self.push(self.now, Ev::TaskNext { task });
                            return;
                        }
                    }
                }
                (Some((keys, false, max)), Some(id)) => Wrap::boxed(
                    queue::nack_op(
                        lease,
                        keys.settling(
                            queue::nack(keys, id, lease.token.as_str(), NACK_BACKOFF, *max),
                            lease,
                        ),
                        deadline,
                    ),
                    Outcome::Nacked,
                ),
                _ => Wrap::boxed(ScriptOp::release(lease, deadline), Outcome::Unit),
            }
        } else {
            self.push(self.now, Ev::TaskNext { task });
            return;
        };
        let ack = matches!(settle, Some((_, true, _)));
        self.releases.insert(self.runners.len(), (held.hold, ack));
        let deferred =
            matches!(&settle, Some((k, false, _)) if k.is_grouped() && held.hold % 2 == 0);
        if let (Some((_, false, _)), Some(id), false) = (&settle, &held.job, deferred) {
            self.nack_backoffs
                .insert(self.runners.len(), (id.clone(), micros(NACK_BACKOFF)));
        }
        let r = self.spawn(client, Owner::Task(task), machine);
        if ack_take {
            self.ack_takes.insert(r);
        }
        self.history.runners[r].next_token = next_token;
        self.history.runners[r].settles = Some(held.hold);
        self.history.runners[r].token = Some(self.history.holds[held.hold].token.clone());
        self.start(r);
    }

    /// The next job an ack-and-take handed over: a hold (and an acquisition, so that a late
    /// copy of the call is judged like a take's), worked on and settled like a taken one.
    fn handed_over(
        &mut self,
        task: usize,
        runner: usize,
        r: &Runner,
        acked: usize,
        job: redlease_core::queue::TakenJob,
    ) {
        let client = r.client;
        let now_i = self.instant(client);
        let Some(Action::Work {
            keys,
            settings,
            work,
            until,
            watch,
        }) = self.tasks[task].actions.pop_front()
        else {
            return;
        };
        // The job's own timeout and what is left of its hold limit, for its watchdog.
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (timeout, hold_left) = (job.timeout.map(ms), job.hold_left.map(ms));
        let lease = job.lease;
        let name = self.history.holds[acked].name.clone();
        let ran = r.last_ran.unwrap_or(self.now);
        let acq = self.history.acqs.len();
        let hold = self.history.holds.len();
        self.history.acqs.push(Acq {
            client,
            task,
            name: name.clone(),
            kind: HoldKind::Job,
            started: self.now,
            started_local: self.local_now(client),
            wait: None,
            reply_timeout: IO_TIMEOUT,
            waiter_timeout: None,
            ttl: micros(lease.ttl),
            attempts: r.ran.clone(),
            grants: vec![(ran, lease.fence)],
            ended: Some((self.now, self.local_now(client))),
            result: AcqResult::Acquired(hold),
            fenced: true,
        });
        self.acquirers
            .insert(runner, (acq, &redlease_core::queue::scripts::ACK_TAKE));
        self.history.runners[runner].acq = Some(acq);
        let valid = self.to_global(client, lease.valid_until);
        self.history.holds.push(Hold {
            client,
            task,
            name,
            kind: HoldKind::Job,
            fence: lease.fence,
            fenced: true,
            granted: ran,
            received: self.now,
            valid_until: valid,
            replicated: false,
            watched: watch,
            release_sent: None,
            lost: None,
            renewals_sent: Vec::new(),
            job: Some(job.id.clone()),
            token: lease.token.as_str().to_owned(),
        });
        self.note(|| {
            format!(
                "c{client} t{task} handed {} delivery {}",
                job.id, lease.fence
            )
        });
        let watch_id = if watch {
            let c = &mut self.clients[client];
            c.next_watch += 1;
            let wid = c.next_watch;
            let policy = self.timed_job_policy(hold, lease.ttl, timeout, hold_left);
            let c = &mut self.clients[client];
            c.renewals.insert(wid, lease.clone(), policy, now_i);
            c.watches.insert(wid, task);
            Some(wid)
        } else {
            None
        };
        self.tasks[task].held = Some(Held {
            hold,
            lease: Some(lease),
            red: None,
            watch: watch_id,
            job: Some(job.id),
        });
        self.arm_watchdog(client);
        let ack = self.rand(4) != 0;
        let spent = self.rand(work);
        let t = &mut self.tasks[task];
        t.actions.push_front(Action::Work {
            keys: keys.clone(),
            settings,
            work,
            until,
            watch,
        });
        t.actions.push_front(Action::Settle {
            keys: keys.clone(),
            ack,
            max: settings.max_deliveries,
        });
        t.actions.push_front(Action::Sleep(spent));
        t.actions.push_front(Action::Advance {
            keys,
            computed: None,
            sent: 0,
            past: None,
        });
    }

    fn resource_write(&mut self, hold: usize) {
        let h = &self.history.holds[hold];
        let (name, fence) = (h.name.clone(), h.fence);
        let top = self.resource.entry(name).or_insert(0);
        let accepted = fence >= *top;
        if accepted {
            *top = fence;
        }
        self.history.writes.push(Write {
            at: self.now,
            hold,
            fence,
            accepted,
        });
        self.note(|| format!("resource: write fence {fence} from hold {hold} accepted={accepted}"));
    }

    fn finished(&mut self, id: usize, r: Runner, outcome: Outcome) {
        let client = r.client;
        match r.owner {
            Owner::Watch(wid) => {
                let Outcome::Extended(result) = outcome else {
                    return;
                };
                let now_i = self.instant(client);
                let ev = self.clients[client].renewals.renewed(wid, result, now_i);
                match ev {
                    RenewalEvent::Renewed { valid_until } => {
                        let g = self.to_global(client, valid_until);
                        if let Some(task) = self.clients[client].watches.get(&wid).copied()
                            && let Some(h) = self.tasks[task].held.as_mut()
                        {
                            if let Some(l) = h.lease.as_mut() {
                                l.valid_until = valid_until;
                            }
                            let hold = h.hold;
                            self.history.holds[hold].valid_until = g;
                            if let Some(ran) = r.last_ran {
                                self.history.renewed.push((hold, ran));
                            }
                        }
                    }
                    RenewalEvent::Lost(reason) => self.lost(client, wid, &format!("{reason:?}")),
                    RenewalEvent::Pending => {}
                }
                self.arm_watchdog(client);
            }
            Owner::Task(task) => {
                self.task_done(task, id, &r, outcome);
                self.push(self.now, Ev::TaskNext { task });
            }
        }
    }

    fn task_done(&mut self, task: usize, id: usize, r: &Runner, outcome: Outcome) {
        let client = r.client;
        let now_i = self.instant(client);
        let ended = (self.now, self.local_now(client));
        match outcome {
            Outcome::Acquired(result) => {
                let (watch, min_replicas) = self.tasks[task].pending.take().unwrap_or_default();
                let Some(acq) = r.acq else { return };
                self.history.acqs[acq].ended = Some(ended);
                match result {
                    Ok(Acquisition::Acquired(lease)) => {
                        let hold = self.history.holds.len();
                        let valid = self.to_global(client, lease.valid_until);
                        let job = (lease.kind == LeaseKind::Job)
                            .then(|| String::from_utf8_lossy(&lease.data[0]).into_owned());
                        self.history.holds.push(Hold {
                            client,
                            task,
                            name: self.history.acqs[acq].name.clone(),
                            kind: HoldKind::from(lease.kind),
                            fence: lease.fence,
                            fenced: self.history.acqs[acq].fenced,
                            granted: self
                                .first_of_last_grants(acq)
                                .or(r.last_ran)
                                .unwrap_or(self.now),
                            received: self.now,
                            valid_until: valid,
                            replicated: min_replicas,
                            watched: watch,
                            release_sent: None,
                            lost: None,
                            renewals_sent: Vec::new(),
                            job: job.clone(),
                            token: lease.token.as_str().to_owned(),
                        });
                        self.history.acqs[acq].result = AcqResult::Acquired(hold);
                        self.note(|| {
                            format!(
                                "c{client} t{task} acquired {:?} fence {} valid until {valid}",
                                lease.kind, lease.fence
                            )
                        });
                        let watch_id = if watch {
                            let c = &mut self.clients[client];
                            c.next_watch += 1;
                            let wid = c.next_watch;
                            let policy = self.job_policy(hold, &lease);
                            let c = &mut self.clients[client];
                            c.renewals.insert(wid, (*lease).clone(), policy, now_i);
                            c.watches.insert(wid, task);
                            Some(wid)
                        } else {
                            None
                        };
                        self.tasks[task].held = Some(Held {
                            hold,
                            lease: Some(*lease),
                            red: None,
                            watch: watch_id,
                            job,
                        });
                        self.arm_watchdog(client);
                    }
                    Ok(Acquisition::Busy { .. }) => {
                        self.history.acqs[acq].result = AcqResult::Failed("busy".into());
                    }
                    Err(e) => {
                        self.note(|| format!("c{client} t{task} acquisition failed: {e}"));
                        self.history.acqs[acq].result = AcqResult::Failed(e.to_string());
                    }
                }
            }
            Outcome::Red(result) => {
                let Some(acq) = r.acq else { return };
                self.history.acqs[acq].ended = Some(ended);
                match result {
                    Ok(red) => {
                        let hold = self.history.holds.len();
                        let valid = self.to_global(client, red.lease.valid_until);
                        self.history.holds.push(Hold {
                            client,
                            task,
                            name: self.history.acqs[acq].name.clone(),
                            kind: HoldKind::Red,
                            fence: 0,
                            fenced: false,
                            granted: self.now,
                            received: self.now,
                            valid_until: valid,
                            replicated: false,
                            watched: false,
                            release_sent: None,
                            lost: None,
                            renewals_sent: Vec::new(),
                            job: None,
                            token: red.lease.token.as_str().to_owned(),
                        });
                        self.history.acqs[acq].result = AcqResult::Acquired(hold);
                        self.note(|| {
                            format!("c{client} t{task} RedLock acquired, valid until {valid}")
                        });
                        self.tasks[task].held = Some(Held {
                            hold,
                            lease: None,
                            red: Some(*red),
                            watch: None,
                            job: None,
                        });
                    }
                    Err(e) => {
                        self.note(|| format!("c{client} t{task} RedLock failed: {e}"));
                        self.history.acqs[acq].result = AcqResult::Failed(e.to_string());
                    }
                }
            }
            Outcome::Unit(result) => {
                // Kept: a copy of the call may still run later (a paused server, a delay).
                let Some((hold, ack)) = self.releases.get(&id).copied() else {
                    return;
                };
                let trusted = ack
                    && self.mutation == Mutation::AckTrustsLostReply
                    && matches!(&result, Err(Error::Unavailable { last, .. }) if last.kind == FailureKind::NoReply);
                self.note(|| {
                    format!(
                        "c{client} t{task} {} hold {hold}: {result:?}",
                        if ack { "ack" } else { "release" }
                    )
                });
                if result.is_ok() {
                    self.history.settle_ok.push((id, hold));
                }
                if ack && (result.is_ok() || trusted) {
                    self.history.settled.push(Settled {
                        hold,
                        at: self.now,
                        ack: true,
                    });
                }
                let h = &self.history.holds[hold];
                if !ack && result.is_ok() && matches!(h.kind, HoldKind::Lease | HoldKind::Reentrant)
                {
                    let at = r.ran.first().copied().unwrap_or(self.now);
                    self.history.freed.push((h.name.clone(), at));
                }
            }
            Outcome::Nacked(result) => {
                let Some((hold, _)) = self.releases.get(&id).copied() else {
                    return;
                };
                self.note(|| format!("c{client} t{task} nack hold {hold}: {result:?}"));
                if result.is_ok() {
                    self.history.settle_ok.push((id, hold));
                    self.history.settled.push(Settled {
                        hold,
                        at: self.now,
                        ack: false,
                    });
                }
            }
            Outcome::Pushed(result) => {
                let Some((ids, delay)) = self.pushes.get(&id).cloned() else {
                    return;
                };
                self.note(|| format!("c{client} t{task} push {ids:?}: {result:?}"));
                // What counts is whether the push ran: recorded when it ran.
                let _ = delay;
            }
            Outcome::Toggled(result) => {
                let pause = self.pause_ops.get(&id).copied();
                self.note(|| format!("c{client} t{task} pause {pause:?}: {result:?}"));
                // Recorded when it ran.
            }
            Outcome::Limits(result) => {
                let set = self.limit_sets.get(&id).cloned();
                self.note(|| format!("c{client} t{task} set_limits {set:?}: {result:?}"));
            }
            Outcome::Cancelled(result) => {
                let job = self.cancels.get(&id).cloned();
                self.note(|| format!("c{client} t{task} cancel {job:?}: {result:?}"));
                // The cancel of an occurrence to skip: the blocking driver advances past it
                // only once the cancel answered; its caller calls again until it does.
                let t = &mut self.tasks[task];
                if let (Err(_), Some((job, remove))) = (&result, job)
                    && let Some(Action::Advance {
                        keys,
                        past: Some(past),
                        ..
                    }) = t.actions.front()
                    && *past == job
                {
                    let tries = self.cancel_tries.entry(job.clone()).or_insert(0);
                    *tries += 1;
                    if *tries < SKIP_SENDS {
                        let keys = keys.clone();
                        t.actions.push_front(Action::Cancel {
                            keys,
                            id: job,
                            remove,
                        });
                        t.actions.push_front(Action::Sleep(IO_TIMEOUT));
                    } else {
                        t.actions.pop_front();
                        self.skipped(&job);
                    }
                }
            }
            Outcome::Requeued(result) => {
                let job = self.requeues.get(&id).cloned();
                self.note(|| format!("c{client} t{task} requeue {job:?}: {result:?}"));
            }
            Outcome::Drained(result) => {
                self.note(|| format!("c{client} t{task} drain: {result:?}"));
            }
            Outcome::Permits(result) => {
                let Some(permits) = self.permit_sets.get(&id).copied() else {
                    return;
                };
                self.note(|| format!("c{client} t{task} set_permits({permits}): {result:?}"));
                // Recorded when it ran.
            }
            Outcome::Quorum(result) => {
                self.releases.remove(&id);
                let summary = result
                    .as_ref()
                    .map(|o| (o.result.is_ok(), o.holding, o.lost));
                self.note(|| {
                    format!("c{client} t{task} RedLock release (ok, holding, lost): {summary:?}")
                });
            }
            Outcome::AckTake(result) => {
                let Some((hold, _)) = self.releases.get(&id).copied() else {
                    return;
                };
                self.note(|| {
                    let next = match &result {
                        Ok(d) => match &d.next {
                            redlease_core::queue::Take::Taken(j) => {
                                format!("ack {:?}, next {} delivery {}", d.ack, j.id, j.delivery)
                            }
                            other => format!("ack {:?}, next {other:?}", d.ack),
                        },
                        Err(e) => format!("{e}"),
                    };
                    format!("c{client} t{task} ack_and_take hold {hold}: {next}")
                });
                let Ok(done) = result else { return };
                if done.ack.is_ok() {
                    self.history.settle_ok.push((id, hold));
                    self.history.settled.push(Settled {
                        hold,
                        at: self.now,
                        ack: true,
                    });
                }
                if let redlease_core::queue::Take::Taken(job) = done.next {
                    self.handed_over(task, id, r, hold, *job);
                }
            }
            Outcome::DedupPushed(result) => {
                let Some((dedup_id, _)) = self.dedup_pushes.get(&id).cloned() else {
                    return;
                };
                // What counts is whether the push ran: recorded when it ran.
                self.note(|| format!("c{client} t{task} push dedup {dedup_id}: {result:?}"));
            }
            Outcome::Upserted(result) => {
                let Some(Action::Schedule {
                    keys,
                    name,
                    schedule: spec,
                    sent,
                    ..
                }) = self.upserts.remove(&id)
                else {
                    return;
                };
                self.note(|| format!("c{client} t{task} upsert {name}: {result:?}"));
                if let Ok(Upserted::Retry { from_ms }) = result {
                    let from = Some(schedule::upsert_from(&spec, from_ms));
                    self.tasks[task].actions.push_front(Action::Schedule {
                        keys,
                        name,
                        schedule: spec,
                        from,
                        sent,
                    });
                }
            }
            Outcome::Advanced(result) => {
                let Some((keys, due, sent)) = self.advances.remove(&id) else {
                    return;
                };
                self.note(|| format!("c{client} t{task} advance past {due}: {result:?}"));
                let skip = self.skips.remove(&id);
                if let Some(past) = &skip {
                    match &result {
                        // Computed again below.
                        Ok(Advanced::Compute { .. }) => {}
                        // Not answered: called again (the blocking driver returns the error,
                        // and a repeated cancel finishes the advance).
                        Err(_) => {
                            let t = &mut self.tasks[task];
                            t.actions.push_front(Action::Advance {
                                keys: keys.clone(),
                                computed: None,
                                sent,
                                past: skip.clone(),
                            });
                            t.actions.push_front(Action::Sleep(IO_TIMEOUT));
                        }
                        Ok(_) => self.skipped(past),
                    }
                } else if result.is_err() {
                    // The advance of the occurrence taken failed: the job is given back, not
                    // run (the blocking driver's `admit`: nothing runs before the next
                    // occurrence exists).
                    self.give_back_occurrence(task);
                }
                if let Ok(Advanced::Compute {
                    now_ms,
                    version,
                    schedule: spec,
                }) = result
                {
                    // Under `NextFromDue`, computed from the taken occurrence alone.
                    let now_ms = if self.mutation == Mutation::NextFromDue {
                        due
                    } else {
                        now_ms
                    };
                    let (from, next) = schedule::advance_from(&spec, due, now_ms);
                    self.tasks[task].actions.push_front(Action::Advance {
                        keys,
                        computed: Some((version, from, next)),
                        sent,
                        past: skip,
                    });
                }
            }
            Outcome::Extended(_) => {}
        }
        let _ = now_i;
    }
}

/// Whether `job` is on queue `q`'s dead list (node `server`'s keys).
fn on_dead_list(server: &MemoryServer, job: &str) -> bool {
    let stem = redlease_core::keys::Keyspace::default()
        .stem("q")
        .unwrap_or_default();
    match server.call(&["LRANGE", &format!("{stem}:q:dead"), "0", "-1"]) {
        Ok(Reply::Array(ids)) => ids
            .iter()
            .any(|r| matches!(r, Reply::Bulk(b) if b.as_slice() == job.as_bytes())),
        _ => false,
    }
}

/// The keep-latest follow-up parked on `server` for dedup id `dedup_id` of queue `q`'s plain
/// keys (field `>` + dedup id of `dedup_of`: `<priority>|<id length>|<id><payload>`).
pub fn parked_follow_up(server: &MemoryServer, dedup_id: &str) -> Option<String> {
    let stem = redlease_core::keys::Keyspace::default()
        .stem("q")
        .unwrap_or_default();
    let field = format!(">{dedup_id}");
    let Ok(Reply::Bulk(value)) = server.call(&["HGET", &format!("{stem}:q:dedup_of"), &field])
    else {
        return None;
    };
    let value = String::from_utf8_lossy(&value).into_owned();
    let mut parts = value.splitn(3, '|');
    let (_, len, rest) = (parts.next()?, parts.next()?, parts.next()?);
    rest.get(..len.parse::<usize>().ok()?).map(str::to_owned)
}

/// A group defer call's job: its id, the token it carries, and the keys of its deliveries,
/// bases and leases.
struct DeferCall {
    id: String,
    token: String,
    leases: String,
    deliveries: String,
    bases: String,
}

/// The job a call of the group defer script (`EVALSHA` or `EVAL`, as sent) answers for.
fn defer_of(command: &redlease_core::Command) -> Option<DeferCall> {
    if !runs(command, &redlease_core::queue::groups::GROUP_DEFER) {
        return None;
    }
    let args: Vec<&[u8]> = command.args().collect();
    let text = |i: usize| args.get(i).map(|a| String::from_utf8_lossy(a).into_owned());
    let keys: usize = text(2)?.parse().ok()?;
    let leases = text(4)?;
    let deliveries = format!("{}deliveries", leases.strip_suffix("leases")?);
    Some(DeferCall {
        id: text(3 + keys)?,
        token: text(4 + keys)?,
        deliveries,
        bases: text(6)?,
        leases,
    })
}

/// The payloads key of a call of a schedule's upsert or advance script (`EVALSHA` or `EVAL`,
/// as sent): the scripts that push occurrences.
fn occurrences_of(command: &redlease_core::Command) -> Option<String> {
    use redlease_core::queue::schedule;
    if !runs(command, &schedule::UPSERT) && !runs(command, &schedule::ADVANCE) {
        return None;
    }
    // KEYS[4] is the payloads (lua/schedule_part.lua).
    let payloads = command.args().nth(6)?;
    Some(String::from_utf8_lossy(payloads).into_owned())
}

/// Whether `command` runs `script`: `EVALSHA` of its sha or `EVAL` of its source, as sent.
fn runs(command: &redlease_core::Command, script: &redlease_core::script::Script) -> bool {
    command
        .args()
        .nth(1)
        .is_some_and(|a| a == script.sha1.as_bytes() || a == script.source.as_bytes())
}

/// The occurrences' job ids in the payloads hash `payloads`.
fn occurrence_ids(server: &MemoryServer, payloads: &str) -> HashSet<String> {
    let prefix = redlease_core::queue::schedule::OCCURRENCE_PREFIX;
    // (The in-process server has no HKEYS: the fields are HGETALL's even items.)
    match server.call(&["HGETALL", payloads]) {
        Ok(Reply::Array(items)) => items
            .into_iter()
            .step_by(2)
            .filter_map(|f| match f {
                // Not the enqueue times beside them (`<id>\xff`).
                Reply::Bulk(b) if b.starts_with(prefix.as_bytes()) && b.last() != Some(&255) => {
                    Some(String::from_utf8_lossy(&b).into_owned())
                }
                _ => None,
            })
            .collect(),
        _ => HashSet::new(),
    }
}

/// Who holds the job on the server, and its deliveries counted toward max deliveries there
/// (its deliveries less its base).
fn attempts_on(server: &MemoryServer, d: &DeferCall) -> (Option<String>, i64) {
    let get = |key: &str| {
        let c = redlease_core::Command::new("HGET").arg(key).arg(&d.id);
        match server.execute(&c) {
            Ok(Reply::Bulk(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        }
    };
    let int = |v: Option<String>| {
        v.and_then(|v| v.split(':').next().and_then(|n| n.parse::<i64>().ok()))
            .unwrap_or(0)
    };
    let holder = get(&d.leases);
    let n = int(get(&d.deliveries));
    let base = int(get(&d.bases));
    (holder, n - base)
}
