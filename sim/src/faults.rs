//! The faults the simulator injects, and the schedule of them a seed chooses.

use std::fmt;

use redlease_core::backoff::SplitMix64;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// A request is lost on the way: the command does not run; the client times out.
    RequestLost,
    /// The command runs; its reply is lost; the client times out.
    ReplyLost,
    /// A request or its reply is delayed past the client's io timeout (the command may run
    /// after the client gave up, even after its undo).
    ReplyDelayed,
    /// A client's connections are cut: in-flight requests may or may not run, no reply comes.
    ConnectionCut,
    /// The server stops (SIGSTOP) for a while: requests queue and run when it resumes.
    ServerPaused,
    /// The server restarts without persistence: every key is gone.
    RestartEmpty,
    /// The server restarts from an older snapshot.
    RestartSnapshot,
    /// Failover to a replica that missed the last writes; acquisitions do not wait for
    /// replicas.
    Failover,
    /// Failover to a replica that missed the last writes; acquisitions use `min_replicas`
    /// (`WAIT 1`), so every acquisition returned to a holder is on the replica.
    FailoverMinReplicas,
    /// A client process stops (a GC pause) for longer than its leases' ttl.
    ClientPaused,
    /// A client's clock jumps forward.
    ClockJump,
    /// A client's clock drifts within the assumed bound (at most 0.5 %, under the 1 %
    /// allowance).
    ClockDrift,
    /// A client's clock runs slow by 5 %, beyond the drift allowance.
    ClockDriftExcess,
    /// A client's pub/sub connection drops (messages published meanwhile are lost) and the
    /// listener reconnects.
    PubSubLost,
    /// A key is evicted (a `maxmemory` policy other than `noeviction`).
    KeyEvicted,
    /// A request is held on the way far past its io timeout (one to six ttls): it runs
    /// after its retry was answered, usually after the caller released, acked or nacked
    /// what the retry got.
    RequestDelayed,
    /// A request is handed to the server twice, the copy up to two io timeouts later (a
    /// network TCP is not; it tests that every call is idempotent).
    RequestDuplicated,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 17] = [
        Fault::RequestLost,
        Fault::ReplyLost,
        Fault::ReplyDelayed,
        Fault::ConnectionCut,
        Fault::ServerPaused,
        Fault::RestartEmpty,
        Fault::RestartSnapshot,
        Fault::Failover,
        Fault::FailoverMinReplicas,
        Fault::ClientPaused,
        Fault::ClockJump,
        Fault::ClockDrift,
        Fault::ClockDriftExcess,
        Fault::PubSubLost,
        Fault::KeyEvicted,
        Fault::RequestDelayed,
        Fault::RequestDuplicated,
    ];

    /// The kinds that hand a request over late or twice (drawn after the others, from a
    /// generator of their own).
    pub const LATE: [Fault; 2] = [Fault::RequestDelayed, Fault::RequestDuplicated];

    /// A short name, as in docs/simulation.md.
    pub fn name(self) -> &'static str {
        match self {
            Fault::RequestLost => "request-lost",
            Fault::ReplyLost => "reply-lost",
            Fault::ReplyDelayed => "reply-delayed",
            Fault::ConnectionCut => "connection-cut",
            Fault::ServerPaused => "server-paused",
            Fault::RestartEmpty => "restart-empty",
            Fault::RestartSnapshot => "restart-snapshot",
            Fault::Failover => "failover",
            Fault::FailoverMinReplicas => "failover-min-replicas",
            Fault::ClientPaused => "client-paused",
            Fault::ClockJump => "clock-jump",
            Fault::ClockDrift => "clock-drift",
            Fault::ClockDriftExcess => "clock-drift-excess",
            Fault::PubSubLost => "pubsub-lost",
            Fault::KeyEvicted => "key-evicted",
            Fault::RequestDelayed => "request-delayed",
            Fault::RequestDuplicated => "request-duplicated",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of faults.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FaultSet(u32);

impl FaultSet {
    /// No fault.
    pub const NONE: FaultSet = FaultSet(0);

    /// The set of `faults`.
    pub fn of(faults: &[Fault]) -> Self {
        FaultSet(faults.iter().fold(0, |s, f| s | f.bit()))
    }

    /// Every fault.
    pub fn all() -> Self {
        Self::of(&Fault::ALL)
    }

    /// Whether `f` is in the set.
    pub fn has(self, f: Fault) -> bool {
        self.0 & f.bit() != 0
    }

    /// Adds `f`.
    pub fn insert(&mut self, f: Fault) {
        self.0 |= f.bit();
    }

    /// Whether the two sets share a fault.
    pub fn intersects(self, other: FaultSet) -> bool {
        self.0 & other.0 != 0
    }

    /// The faults, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Fault> {
        Fault::ALL.into_iter().filter(move |f| self.has(*f))
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.iter().map(Fault::name).collect();
        write!(f, "{{{}}}", names.join(", "))
    }
}

/// One scheduled injection (times and durations in µs of global time; each variant's doc
/// names its fields).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Inject {
    /// Requests of every client sent in `[at, until)` are lost with probability `percent`.
    LoseRequests { until: u64, percent: u64 },
    /// Replies of commands run in `[at, until)` are lost with probability `percent`.
    LoseReplies { until: u64, percent: u64 },
    /// Requests or replies sent in `[at, until)` are delayed by up to `by` µs with
    /// probability `percent`.
    Delay { until: u64, percent: u64, by: u64 },
    /// Cut every connection of `client`.
    Cut { client: usize },
    /// Pause server `node` for `dur` µs.
    PauseServer { node: u16, dur: u64 },
    /// Restart `node` empty; it refuses connections for `down` µs.
    RestartEmpty { node: u16, down: u64 },
    /// Restart `node` from its last persisted snapshot.
    RestartSnapshot { node: u16, down: u64 },
    /// Replication to `node`'s replica stops (it misses what follows).
    ReplicaStalls { node: u16 },
    /// Fail over `node` to its replica.
    Failover { node: u16, down: u64 },
    /// Pause `client` for `dur` µs.
    PauseClient { client: usize, dur: u64 },
    /// Drop `client`'s pub/sub connection; it reconnects after `dur` µs.
    CutPubSub { client: usize, dur: u64 },
    /// Evict the `pick`-th live key (modulo the number of keys) of `node`.
    Evict { node: u16, pick: u64 },
    /// Requests sent in `[at, until)` are held back by `from` to `to` µs with probability
    /// `percent`.
    HoldRequests {
        until: u64,
        percent: u64,
        from: u64,
        to: u64,
    },
    /// Requests sent in `[at, until)` are handed over twice with probability `percent`, the
    /// copy up to `by` µs after the original.
    DuplicateRequests { until: u64, percent: u64, by: u64 },
}

/// An injection at a global time (µs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// When.
    pub at: u64,
    /// What.
    pub what: Inject,
}

/// A client's clock settings chosen by the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockPlan {
    /// Which client.
    pub client: usize,
    /// Its clock.
    pub clock: crate::clock::LocalClock,
}

/// The faults a seed chose: the kinds (for the checker's excuses) and the schedule.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The kinds of fault in this run.
    pub faults: FaultSet,
    /// The scheduled injections, by time.
    pub injections: Vec<Injection>,
    /// Clients whose clocks are off.
    pub clocks: Vec<ClockPlan>,
}

/// Where faults may strike.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// How many clients.
    pub clients: usize,
    /// How many server nodes.
    pub nodes: u16,
    /// Faults strike in `[0, window)` (µs).
    pub window: u64,
    /// The longest lease ttl in the run (µs): client pauses outlast it.
    pub ttl: u64,
}

fn pick(rng: &mut SplitMix64, n: u64) -> u64 {
    if n == 0 { 0 } else { rng.next_u64() % n }
}

fn between(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    lo + pick(rng, hi.saturating_sub(lo).max(1))
}

impl Plan {
    /// A plan drawing from `allowed`: no fault one run in five, else one to three kinds;
    /// then, in three runs of ten (eight when only those are allowed), one of the
    /// late-request kinds ([`Fault::LATE`]) as well.
    /// The late kinds draw from a generator of their own, so that the plans of the other
    /// kinds (and the regression seeds found with them) are the same as before they existed.
    pub fn choose(rng: &mut SplitMix64, allowed: FaultSet, shape: Shape) -> Plan {
        let mut extra = SplitMix64::new(rng.clone().next_u64() ^ 0x001a_7e5e_ed0f_fa17);
        let mut plan = Self::choose_early(rng, allowed, shape);
        let late: Vec<Fault> = Fault::LATE
            .into_iter()
            .filter(|f| allowed.has(*f))
            .collect();
        // Only late kinds allowed (a mutation test's choice): in eight runs of ten.
        let only_late = allowed.iter().all(|f| Fault::LATE.contains(&f));
        let tenths = if only_late { 8 } else { 3 };
        if !late.is_empty() && pick(&mut extra, 10) < tenths {
            let f = late[pick(&mut extra, late.len() as u64) as usize];
            plan.faults.insert(f);
            plan.add(&mut extra, f, shape);
            plan.injections.sort_by_key(|i| i.at);
        }
        plan
    }

    fn choose_early(rng: &mut SplitMix64, allowed: FaultSet, shape: Shape) -> Plan {
        let mut plan = Plan::default();
        let kinds: Vec<Fault> = allowed
            .iter()
            .filter(|f| !Fault::LATE.contains(f))
            .collect();
        if kinds.is_empty() || pick(rng, 5) == 0 {
            return plan;
        }
        let n = 1 + pick(rng, 3);
        for _ in 0..n {
            let f = kinds[pick(rng, kinds.len() as u64) as usize];
            // Two failover flavours would contradict each other; keep the first.
            if (f == Fault::Failover && plan.faults.has(Fault::FailoverMinReplicas))
                || (f == Fault::FailoverMinReplicas && plan.faults.has(Fault::Failover))
            {
                continue;
            }
            plan.faults.insert(f);
            plan.add(rng, f, shape);
        }
        plan.injections.sort_by_key(|i| i.at);
        plan
    }

    /// Schedules `count` injections of fault `f` (more than once for some kinds).
    pub fn add(&mut self, rng: &mut SplitMix64, f: Fault, shape: Shape) {
        let w = shape.window.max(1);
        let at = pick(rng, w);
        let client = pick(rng, shape.clients as u64) as usize;
        let node = pick(rng, u64::from(shape.nodes)) as u16;
        let what = match f {
            Fault::RequestLost => Inject::LoseRequests {
                until: at + between(rng, w / 10, w / 2),
                percent: between(rng, 10, 60),
            },
            Fault::ReplyLost => Inject::LoseReplies {
                until: at + between(rng, w / 10, w / 2),
                percent: between(rng, 10, 60),
            },
            Fault::ReplyDelayed => Inject::Delay {
                until: at + between(rng, w / 10, w / 2),
                percent: between(rng, 10, 60),
                by: between(rng, 20_000, 400_000),
            },
            Fault::ConnectionCut => Inject::Cut { client },
            Fault::ServerPaused => Inject::PauseServer {
                node,
                dur: between(rng, 10_000, shape.ttl * 2),
            },
            Fault::RestartEmpty => Inject::RestartEmpty {
                node,
                down: between(rng, 1_000, 100_000),
            },
            Fault::RestartSnapshot => Inject::RestartSnapshot {
                node,
                down: between(rng, 1_000, 100_000),
            },
            Fault::Failover | Fault::FailoverMinReplicas => {
                let stall = at.saturating_sub(between(rng, 0, shape.ttl));
                self.injections.push(Injection {
                    at: stall,
                    what: Inject::ReplicaStalls { node },
                });
                Inject::Failover {
                    node,
                    down: between(rng, 1_000, 50_000),
                }
            }
            Fault::ClientPaused => Inject::PauseClient {
                client,
                dur: between(rng, shape.ttl, shape.ttl * 3),
            },
            Fault::PubSubLost => Inject::CutPubSub {
                client,
                dur: between(rng, 1_000, shape.ttl),
            },
            Fault::KeyEvicted => Inject::Evict {
                node,
                pick: rng.next_u64(),
            },
            Fault::RequestDelayed => Inject::HoldRequests {
                until: at + between(rng, w / 10, w / 2),
                percent: between(rng, 10, 60),
                from: shape.ttl,
                to: shape.ttl * 6,
            },
            Fault::RequestDuplicated => Inject::DuplicateRequests {
                until: at + between(rng, w / 10, w / 2),
                percent: between(rng, 10, 60),
                by: 2 * crate::world::IO_TIMEOUT,
            },
            Fault::ClockJump => {
                self.set_clock(client, |c| {
                    c.jump_at = at;
                    c.jump_by = between(rng, 1_000, shape.ttl);
                });
                return;
            }
            Fault::ClockDrift => {
                let ppm = between(rng, 0, 10_001) as i64 - 5_000;
                self.set_clock(client, |c| c.rate_ppm = ppm);
                return;
            }
            Fault::ClockDriftExcess => {
                self.set_clock(client, |c| c.rate_ppm = -50_000);
                return;
            }
        };
        self.injections.push(Injection { at, what });
    }

    fn set_clock(&mut self, client: usize, f: impl FnOnce(&mut crate::clock::LocalClock)) {
        match self.clocks.iter_mut().find(|c| c.client == client) {
            Some(c) => f(&mut c.clock),
            None => {
                let mut clock = crate::clock::LocalClock::default();
                f(&mut clock);
                self.clocks.push(ClockPlan { client, clock });
            }
        }
    }
}
