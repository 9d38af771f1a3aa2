//! What one seed runs: the workload of one primitive (clients, tasks, settings) and the
//! faults, chosen from the seed.

use std::time::Duration;

use redlease_core::backoff::SplitMix64;
use redlease_core::keys::Keyspace;
use redlease_core::lease::{AcquireOptions, LockSpec};
use redlease_core::queue::schedule::{Missed, Schedule};
use redlease_core::queue::{NewJob, QueueKeys, QueueSettings};
use redlease_core::redlock::RedLockOptions;
use redlease_core::semaphore::SemaphoreKeys;

use crate::check::Property;
use crate::faults::{Fault, FaultSet, Plan, Shape};
use crate::mutation::Mutation;
use crate::record::Watched;
use crate::world::{Action, IO_TIMEOUT, World};

/// The primitives the simulation covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// The exclusive lease lock.
    Lease,
    /// The reentrant lock.
    Reentrant,
    /// The fair lock.
    Fair,
    /// The read-write lock (readers and writers).
    ReadWrite,
    /// The fair counting semaphore.
    Semaphore,
    /// The reliable queue.
    Queue,
    /// RedLock over three or five masters.
    RedLock,
    /// The reliable queue's job groups: two groups, each with a concurrency limit of
    /// [`GROUP_CONCURRENCY`], three workers.
    Groups,
    /// Many queue features at once on one queue, on its plain and its grouped keys: plain
    /// and grouped workers, the producer, the dedup producer, a schedule, pauses and drains,
    /// group limits changed at run time, cancels and requeues of dead jobs.
    Mixed,
}

/// The concurrency limit of each group in [`Primitive::Groups`] runs.
pub const GROUP_CONCURRENCY: usize = 1;

impl Primitive {
    /// Every primitive.
    pub const ALL: [Primitive; 9] = [
        Primitive::Lease,
        Primitive::Reentrant,
        Primitive::Fair,
        Primitive::ReadWrite,
        Primitive::Semaphore,
        Primitive::Queue,
        Primitive::RedLock,
        Primitive::Groups,
        Primitive::Mixed,
    ];

    /// Its name in reports and in `SIM_PRIMITIVE`.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Lease => "lease",
            Primitive::Reentrant => "reentrant",
            Primitive::Fair => "fair",
            Primitive::ReadWrite => "rwlock",
            Primitive::Semaphore => "semaphore",
            Primitive::Queue => "queue",
            Primitive::RedLock => "redlock",
            Primitive::Groups => "groups",
            Primitive::Mixed => "mixed",
        }
    }

    /// The primitive named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether its runs produce events `property` judges: a sweep of this primitive in which
    /// such a property judged nothing fails (it would pass vacuously).
    pub fn expects(self, property: Property) -> bool {
        use Primitive::*;
        use Property as P;
        match property {
            P::Exclusion => !matches!(self, Semaphore | Queue | Groups | Mixed),
            P::FenceOrder | P::FencedResource => {
                matches!(self, Lease | Reentrant | Fair | ReadWrite)
            }
            P::Permits => self == Semaphore,
            P::Fifo => matches!(self, Semaphore | Fair),
            P::JobSettled | P::SingleAck | P::DeliveryUnique | P::NotBeforeDue => {
                matches!(self, Queue | Groups | Mixed)
            }
            P::ScheduleOnce
            | P::DedupOneLive
            | P::NothingLeasedWhilePaused
            | P::NoAckAfterTimeout => matches!(self, Queue | Mixed),
            P::Counted => matches!(self, Queue | Groups | Mixed),
            P::GroupConcurrency | P::GroupRate => self == Groups,
            P::RateLimitedKeepsDelivery => matches!(self, Groups | Mixed),
            P::Conservation => matches!(self, Queue | Groups | Mixed),
            P::GroupLimits | P::DrainTruth | P::SlotUsable => self == Mixed,
            P::ScheduleLiveness => matches!(self, Queue | Groups | Mixed),
            P::FollowUpRuns => self == Mixed,
            P::WakeWhenFree => matches!(self, Lease | Reentrant),
            P::NoRenewalAfterRelease | P::LossInTime | P::RenewalOnServer => self != RedLock,
            P::WaiterDeadline | P::Progress | P::HeldOnServer | P::SettledByHolder => true,
            // RedLock retries with a new token per attempt (`<token>.<n>`): not judged.
            P::LateAttempt => self != RedLock,
        }
    }

    /// The faults a run of this primitive may draw.
    pub fn faults(self) -> FaultSet {
        let mut all = FaultSet::all();
        if self == Primitive::RedLock {
            // Independent masters: no replicas to fail over to.
            all = FaultSet::of(
                &Fault::ALL
                    .into_iter()
                    .filter(|f| !matches!(f, Fault::Failover | Fault::FailoverMinReplicas))
                    .collect::<Vec<_>>(),
            );
        }
        all
    }
}

/// One run's settings.
#[derive(Debug, Clone, Copy)]
pub struct RunSpec {
    /// Which primitive.
    pub primitive: Primitive,
    /// The seed.
    pub seed: u64,
    /// A planted bug, if any.
    pub mutation: Mutation,
    /// The faults the plan may draw from.
    pub allowed: FaultSet,
}

fn between(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    lo + rng.next_u64() % hi.saturating_sub(lo).max(1)
}

fn chance(rng: &mut SplitMix64, percent: u64) -> bool {
    rng.next_u64() % 100 < percent
}

/// How long a fair-lock, write-lock or semaphore waiter keeps its place without asking.
pub const WAITER_TIMEOUT: Duration = Duration::from_millis(300);

/// Builds the world of `spec` and its fault plan.
pub fn build(spec: &RunSpec) -> (World, Plan) {
    let salt = Primitive::ALL
        .iter()
        .position(|p| *p == spec.primitive)
        .unwrap_or(0) as u64;
    let mut rng =
        SplitMix64::new(spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (salt << 56) ^ 0xd1b5);
    let p = spec.primitive;
    let ttl = between(&mut rng, 100_000, 400_000);
    let clients = between(&mut rng, 2, 4) as usize;
    let nodes: u16 = match p {
        Primitive::RedLock => {
            if chance(&mut rng, 50) {
                3
            } else {
                5
            }
        }
        _ => 1,
    };
    let window = between(&mut rng, 300_000, 1_500_000);
    let shape = Shape {
        clients,
        nodes,
        window,
        ttl,
    };
    let plan = Plan::choose(&mut rng, spec.allowed, shape);
    let mut world = World::new(spec.seed, nodes, clients, plan.clone(), spec.mutation);
    let ks = Keyspace::default();
    let ttl_d = Duration::from_micros(ttl);
    // The server's record of holds: the keys each primitive keeps its holders in.
    world.watch(match p {
        Primitive::Queue => Watched::queue("q"),
        Primitive::Groups => Watched::grouped("q"),
        Primitive::Mixed => {
            let mut w = Watched::grouped("q");
            w.extend(Watched::queue("q"));
            w
        }
        Primitive::Semaphore => Watched::lock("semaphore", "s"),
        Primitive::RedLock => Watched::lock("lease", "red"),
        Primitive::Reentrant => Watched::lock("reentrant", "l"),
        Primitive::Fair => Watched::lock("fair", "l"),
        Primitive::ReadWrite => Watched::lock("rw", "l"),
        Primitive::Lease => Watched::lock("lease", "l"),
    });
    let min_replicas = plan
        .faults
        .has(Fault::FailoverMinReplicas)
        .then_some((1, Duration::from_millis(20)));
    match p {
        Primitive::Queue => queue(&mut world, &mut rng, clients, window, ttl_d, false),
        Primitive::Groups => queue(&mut world, &mut rng, clients, window, ttl_d, true),
        Primitive::Mixed => mixed(&mut world, &mut rng, clients, window, ttl_d),
        Primitive::Semaphore => {
            let permits = between(&mut rng, 1, 4);
            world.initial_permits(permits);
            let keys = SemaphoreKeys::new(&ks, "s").unwrap_or_else(|e| panic!("{e}"));
            if chance(&mut rng, 50) {
                let at = between(&mut rng, 0, window);
                let to = between(&mut rng, 1, 5);
                world.add_task(
                    0,
                    at,
                    vec![Action::SetPermits {
                        keys: keys.clone(),
                        permits: to,
                    }],
                );
            }
            lock_tasks(
                &mut world,
                &mut rng,
                clients,
                window,
                ttl_d,
                min_replicas,
                |w, _, _| {
                    keys.permit(w.token(), ttl_d, permits, WAITER_TIMEOUT)
                        .unwrap_or_else(|e| panic!("{e}"))
                },
            );
        }
        Primitive::RedLock => {
            let tasks = clients * 2;
            for t in 0..tasks {
                let c = t % clients;
                let start = between(&mut rng, 0, window);
                let mut actions = Vec::new();
                for _ in 0..between(&mut rng, 1, 3) {
                    let spec = LockSpec::lease(&ks, "red", world.token(), ttl_d)
                        .unwrap_or_else(|e| panic!("{e}"));
                    let mut options = RedLockOptions::new(nodes);
                    options.node_timeout = Duration::from_millis(10);
                    options.retry_max = Duration::from_millis(50);
                    if chance(&mut rng, 70) {
                        options.wait =
                            Some(Duration::from_micros(between(&mut rng, 100_000, 800_000)));
                    }
                    actions.push(Action::RedAcquire { spec, options });
                    actions.push(Action::Sleep(between(&mut rng, 0, ttl / 2)));
                    actions.push(Action::Write);
                    actions.push(Action::Sleep(between(&mut rng, 0, ttl)));
                    actions.push(Action::Write);
                    actions.push(Action::Release);
                    actions.push(Action::Sleep(between(&mut rng, 0, 50_000)));
                }
                world.add_task(c, start, actions);
            }
        }
        _ => {
            lock_tasks(
                &mut world,
                &mut rng,
                clients,
                window,
                ttl_d,
                min_replicas,
                |w, rng, task| {
                    let token = w.token();
                    match p {
                        // Every third task unfenced (its first attempt a bare `SET NX
                        // PX`): checked for exclusion with the fenced holders, not for
                        // fence order. Chosen by task, so the seed's draws are unchanged.
                        Primitive::Lease => LockSpec::lease(&ks, "l", token, ttl_d)
                            .and_then(|s| s.fenced(task % 3 != 2)),
                        Primitive::Reentrant => {
                            LockSpec::reentrant(&ks, "l", &format!("owner-{task}"), token, ttl_d)
                        }
                        Primitive::Fair => LockSpec::fair(&ks, "l", token, ttl_d, WAITER_TIMEOUT),
                        _ => {
                            if chance(rng, 50) {
                                LockSpec::read(&ks, "l", token, ttl_d)
                            } else {
                                LockSpec::write(&ks, "l", token, ttl_d, WAITER_TIMEOUT)
                            }
                        }
                    }
                    .unwrap_or_else(|e| panic!("{e}"))
                },
            );
        }
    }
    (world, plan)
}

#[allow(clippy::too_many_arguments)]
fn lock_tasks(
    world: &mut World,
    rng: &mut SplitMix64,
    clients: usize,
    window: u64,
    ttl: Duration,
    min_replicas: Option<(u32, Duration)>,
    mut spec: impl FnMut(&mut World, &mut SplitMix64, usize) -> LockSpec,
) {
    let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
    let tasks = clients + between(rng, 1, clients as u64 + 1) as usize;
    for t in 0..tasks {
        let c = t % clients;
        let start = between(rng, 0, window / 2);
        let mut actions = Vec::new();
        for _ in 0..between(rng, 1, 3) {
            let watch = chance(rng, 70);
            let options = AcquireOptions {
                wait: chance(rng, 80)
                    .then(|| Duration::from_micros(between(rng, 200_000, 1_500_000))),
                retry_max: Duration::from_secs(2),
                reply_timeout: Duration::from_micros(IO_TIMEOUT),
                min_replicas,
                ..AcquireOptions::default()
            };
            // A holder without a watchdog sometimes works past its lease (and must find its
            // write refused, its release answered "expired").
            let hold = if watch {
                between(rng, 0, ttl_us * 2)
            } else {
                between(rng, 0, ttl_us * 3 / 2)
            };
            actions.push(Action::Acquire {
                spec: spec(world, rng, t),
                options,
                watch,
            });
            actions.push(Action::Write);
            actions.push(Action::Sleep(hold));
            actions.push(Action::Write);
            actions.push(Action::Release);
            actions.push(Action::Sleep(between(rng, 0, 100_000)));
        }
        world.add_task(c, start, actions);
    }
}

fn queue(
    world: &mut World,
    rng: &mut SplitMix64,
    clients: usize,
    window: u64,
    ttl: Duration,
    grouped: bool,
) {
    let keys = if grouped {
        // Counting: the grouped scripts' counters run under every fault too.
        let keys = QueueKeys::grouped(&Keyspace::default(), "q")
            .unwrap_or_else(|e| panic!("{e}"))
            .with_counts(true);
        // Every group: GROUP_CONCURRENCY at a time (set before the workers start); in three
        // runs of five a rate per group as well, and in one of three a rate of the whole
        // queue's takes (drawn from a copy of the generator: the other draws stay those of
        // the seeds before rates existed).
        let mut r = rng.clone();
        let per_group =
            chance(&mut r, 60).then(|| (between(&mut r, 5_000, 40_000), between(&mut r, 1, 3)));
        let whole =
            chance(&mut r, 33).then(|| (between(&mut r, 3_000, 20_000), between(&mut r, 1, 4)));
        let rate = |(interval, burst): (u64, u64)| {
            redlease_core::rate::RateLimit::new(1, Duration::from_micros(interval), burst)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut limit =
            redlease_core::queue::groups::GroupLimits::new().concurrency(GROUP_CONCURRENCY as u32);
        if let Some(g) = per_group {
            limit = limit.rate(rate(g));
            world.history.group_rates.push((None, g.0, g.1));
        }
        let set = redlease_core::queue::groups::limits_call(
            &keys,
            redlease_core::queue::groups::LimitsOf::EveryGroup,
            Some(limit),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        world.seed(&set.eval());
        if let Some(q) = whole {
            let set = redlease_core::queue::groups::limits_call(
                &keys,
                redlease_core::queue::groups::LimitsOf::Queue,
                Some(redlease_core::queue::groups::GroupLimits::new().rate(rate(q))),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            world.seed(&set.eval());
            world.history.group_rates.push((Some("!".into()), q.0, q.1));
        }
        keys
    } else {
        // Counting: the scripts' per-minute counters run under every fault too.
        QueueKeys::new(&Keyspace::default(), "q")
            .unwrap_or_else(|e| panic!("{e}"))
            .with_counts(true)
    };
    let settings = QueueSettings {
        visibility: ttl,
        max_deliveries: 3,
        timeout: None,
        // As the world's job grace below: the server keeps each timed delivery's hold limit.
        timeout_grace: ttl / 2,
    };
    // Half the plain queue runs push their jobs with a timeout of half the visibility to
    // twice it, with a grace of half the visibility (drawn from a copy of the generator: the
    // other draws stay those of the seeds before timeouts existed).
    let mut tr = rng.clone();
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let timeout = (!grouped && chance(&mut tr, 50))
        .then(|| Duration::from_millis(between(&mut tr, ttl_ms / 2, ttl_ms * 2).max(1)));
    world.job_grace = ttl / 2;
    let mut actions = Vec::new();
    let mut n = 0;
    for batch in 0..between(rng, 1, 4) {
        let jobs: Vec<NewJob> = (0..between(rng, 1, 4))
            .map(|_| {
                n += 1;
                NewJob {
                    // Grouped: the first letter is the group.
                    id: if grouped {
                        format!("{}{n}", if batch % 2 == 0 { 'a' } else { 'b' })
                    } else {
                        format!("j{n}")
                    },
                    payload: vec![b'x'],
                }
            })
            .collect();
        let delay = if chance(rng, 40) {
            Duration::from_micros(between(rng, 1_000, 300_000))
        } else {
            Duration::ZERO
        };
        actions.push(Action::Push {
            keys: keys.clone(),
            jobs,
            delay,
            timeout,
        });
        actions.push(Action::Sleep(between(rng, 0, window / 3)));
    }
    world.add_task(0, 0, actions);
    // Pushes with dedup ids (until done), from another client, on a copy of the generator
    // (the draws above and below stay those of the seeds before dedup existed).
    let mut d = rng.clone();
    let mut dedup = Vec::new();
    // (Not on a queue's groups: a dedup push has no group.)
    let dedup_count = if grouped { 0 } else { between(&mut d, 2, 8) };
    for i in 0..dedup_count {
        dedup.push(Action::PushDedup {
            keys: keys.clone(),
            dedup_id: format!("u{}", between(&mut d, 0, 3)),
            token: format!("dj{i}"),
            keep_latest: false,
        });
        dedup.push(Action::Sleep(between(&mut d, 0, window / 3)));
    }
    let dedup_pushes = dedup.len() as u64 / 2;
    world.add_task(1 % clients, between(&mut d, 0, window / 2), dedup);
    // Half the runs: a schedule every 30 to 90 ms (shorter than the visibility, so a worker
    // that outlives its lease meets its occurrence again after the next one ran), upserted
    // by two clients at random times (issue 29).
    if chance(rng, 50) {
        let every = Duration::from_millis(between(rng, 30, 90));
        let spec = Schedule::every(every)
            .unwrap_or_else(|e| panic!("{e}"))
            .missed(Missed::CatchUp)
            .payload("tick");
        for c in 0..2 {
            world.add_task(
                c % clients,
                between(rng, 0, window / 2),
                vec![Action::Schedule {
                    keys: keys.clone(),
                    name: "tick".into(),
                    schedule: Box::new(spec.clone()),
                    from: None,
                    sent: 0,
                }],
            );
        }
        // Its liveness is observed after every command (a schedule on grouped keys is
        // refused: nothing to observe).
        if !grouped {
            world.schedule_stem = Some(schedule_stem());
        }
    }
    let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
    // Now and then the queue is paused for a while, by another client; resumed again after
    // the last delayed request can have run (one sent by the end of the faults, 1.5 windows,
    // held up to 6 ttl): a pause whose call failed may still run after the resume that
    // followed it (documented on `pause`), and must not leave the queue paused for the rest
    // of the run.
    let mut after_pause = 0;
    if chance(rng, 60) {
        after_pause = window + 6 * ttl_us;
        let pause = |pause: bool| Action::Pause {
            keys: keys.clone(),
            pause,
        };
        world.add_task(
            clients - 1,
            between(rng, 0, window / 2),
            vec![
                pause(true),
                Action::Sleep(between(rng, 10_000, window / 2)),
                pause(false),
                Action::Sleep(window * 2 + 6 * ttl_us),
                pause(false),
            ],
        );
    }
    // Workers go on well past the faults: every job is then acked or dead (each job the
    // dedup pushes may add: three deliveries of up to twice the visibility timeout).
    let until = window * 2 + 10 * ttl_us + 2_000_000 + dedup_pushes * 6 * ttl_us + after_pause;
    let workers = if grouped {
        3
    } else {
        between(rng, 1, 3) as usize
    };
    for w in 0..workers {
        let watch = chance(rng, 60);
        world.add_task(
            (w + 1) % clients,
            between(rng, 0, 50_000),
            vec![Action::Work {
                keys: keys.clone(),
                settings,
                work: if watch { ttl_us * 2 } else { ttl_us * 3 / 2 },
                until,
                watch,
            }],
        );
    }
}

/// The stem of queue `q`'s plain keys (`<prefix>:{q}:q:`), whose schedules hash is
/// `<stem>schedules`.
fn schedule_stem() -> String {
    format!("{}:q:", Keyspace::default().stem("q").unwrap_or_default())
}

/// The limits of every group a mixed run starts with, and the concurrencies its changes
/// draw from (1 to this).
pub const MIXED_MAX_CONCURRENCY: u64 = 3;

/// [`Primitive::Mixed`]: one queue, its plain and its grouped keys at once, under every
/// feature the world drives (see docs/simulation.md).
fn mixed(world: &mut World, rng: &mut SplitMix64, clients: usize, window: u64, ttl: Duration) {
    let ks = Keyspace::default();
    let plain = QueueKeys::new(&ks, "q")
        .unwrap_or_else(|e| panic!("{e}"))
        .with_counts(true);
    let grouped = QueueKeys::grouped(&ks, "q")
        .unwrap_or_else(|e| panic!("{e}"))
        .with_counts(true);
    let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
    let ttl_ms = ttl_us / 1_000;
    // Every group: 1 or 2 at a time, set before the workers start.
    let first = between(rng, 1, 3) as u32;
    let set = redlease_core::queue::groups::limits_call(
        &grouped,
        redlease_core::queue::groups::LimitsOf::EveryGroup,
        Some(redlease_core::queue::groups::GroupLimits::new().concurrency(first)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    world.seed(&set.eval());
    world.history.group_limits.push(crate::history::LimitSet {
        spans: 0,
        at: 0,
        seq: 0,
        group: None,
        concurrency: Some(first),
    });
    world.job_grace = ttl / 2;
    world.idle_groups = vec!["a".into(), "b".into()];
    let settings = QueueSettings {
        visibility: ttl,
        max_deliveries: 3,
        timeout: None,
        timeout_grace: ttl / 2,
    };
    // Plain jobs pushed with a timeout in half the runs.
    let timeout =
        chance(rng, 50).then(|| Duration::from_millis(between(rng, ttl_ms / 2, ttl_ms * 2).max(1)));
    // The producer: batches into the plain keys and into groups a and b, in turn.
    let mut actions = Vec::new();
    let mut ids: Vec<(QueueKeys, String)> = Vec::new();
    let mut n = 0;
    for batch in 0..between(rng, 2, 6) {
        let (keys, prefix) = match batch % 3 {
            0 => (&plain, 'j'),
            1 => (&grouped, 'a'),
            _ => (&grouped, 'b'),
        };
        let jobs: Vec<NewJob> = (0..between(rng, 1, 4))
            .map(|_| {
                n += 1;
                NewJob {
                    id: format!("{prefix}{n}"),
                    payload: vec![b'x'],
                }
            })
            .collect();
        for j in &jobs {
            let id = if keys.is_grouped() {
                format!("{prefix}\u{1f}{}", j.id)
            } else {
                j.id.clone()
            };
            ids.push((keys.clone(), id));
        }
        let delay = if chance(rng, 40) {
            Duration::from_micros(between(rng, 1_000, 300_000))
        } else {
            Duration::ZERO
        };
        actions.push(Action::Push {
            keys: keys.clone(),
            jobs,
            delay,
            timeout: timeout.filter(|_| !keys.is_grouped()),
        });
        actions.push(Action::Sleep(between(rng, 0, window / 3)));
    }
    world.add_task(0, 0, actions);
    // The dedup producer, on the plain keys.
    let mut dedup = Vec::new();
    let dedup_count = between(rng, 1, 5);
    for i in 0..dedup_count {
        dedup.push(Action::PushDedup {
            keys: plain.clone(),
            dedup_id: format!("u{}", between(rng, 0, 2)),
            token: format!("dj{i}"),
            keep_latest: false,
        });
        dedup.push(Action::Sleep(between(rng, 0, window / 3)));
    }
    world.add_task(1 % clients, between(rng, 0, window / 2), dedup);
    // Keep-latest pushes on the plain keys (a push while the job holding the id is in flight
    // parks a follow-up behind it), and one or two cancels of the job holding such an id,
    // drawn from a generator of their own (the other draws stay those of the seeds before).
    let mut k = SplitMix64::new(rng.clone().next_u64() ^ 0x6ee9_1a7e);
    let keep_count = between(&mut k, 2, 7);
    let mut keep = Vec::new();
    for i in 0..keep_count {
        keep.push(Action::PushDedup {
            keys: plain.clone(),
            dedup_id: format!("k{}", between(&mut k, 0, 2)),
            token: format!("kj{i}"),
            keep_latest: true,
        });
        keep.push(Action::Sleep(between(&mut k, 0, window / 4)));
    }
    world.add_task(
        k.next_u64() as usize % clients,
        between(&mut k, 0, window / 2),
        keep,
    );
    let mut keep_cancels = Vec::new();
    for _ in 0..between(&mut k, 1, 3) {
        keep_cancels.push(Action::Sleep(between(&mut k, 0, window)));
        keep_cancels.push(Action::CancelDedup {
            keys: plain.clone(),
            dedup_id: format!("k{}", between(&mut k, 0, 2)),
            remove: chance(&mut k, 50),
        });
    }
    world.add_task(k.next_u64() as usize % clients, 0, keep_cancels);
    // A schedule on the plain keys in half the runs, upserted by two clients.
    if chance(rng, 50) {
        let every = Duration::from_millis(between(rng, 30, 90));
        let spec = Schedule::every(every)
            .unwrap_or_else(|e| panic!("{e}"))
            .missed(Missed::CatchUp)
            .payload("tick");
        for c in 0..2 {
            world.add_task(
                c % clients,
                between(rng, 0, window / 2),
                vec![Action::Schedule {
                    keys: plain.clone(),
                    name: "tick".into(),
                    schedule: Box::new(spec.clone()),
                    from: None,
                    sent: 0,
                }],
            );
        }
        world.schedule_stem = Some(schedule_stem());
        // One to three cancels of its pending occurrence (each then skipped: the schedule
        // advanced past it), drawn from a generator of their own (the other draws stay
        // those of the seeds before).
        let mut o = SplitMix64::new(rng.clone().next_u64() ^ 0x0cc0_5ced);
        let mut skips = Vec::new();
        for _ in 0..between(&mut o, 1, 4) {
            skips.push(Action::Sleep(between(&mut o, 0, window / 2)));
            skips.push(Action::CancelOccurrence {
                keys: plain.clone(),
                name: "tick".into(),
                remove: chance(&mut o, 30),
            });
        }
        world.add_task(
            (clients - 1) % clients,
            between(&mut o, 0, window / 2),
            skips,
        );
    }
    // Pauses (a pause, then a resume) and drains (a drain, then a resume), each resumed
    // again after the last delayed request can have run.
    let mut after_pause = 0;
    let resume = |keys: &QueueKeys| Action::Pause {
        keys: keys.clone(),
        pause: false,
    };
    if chance(rng, 50) {
        after_pause = window + 6 * ttl_us;
        world.add_task(
            clients - 1,
            between(rng, 0, window / 2),
            vec![
                Action::Pause {
                    keys: plain.clone(),
                    pause: true,
                },
                Action::Sleep(between(rng, 10_000, window / 2)),
                resume(&plain),
                Action::Sleep(window * 2 + 6 * ttl_us),
                resume(&plain),
            ],
        );
    }
    if chance(rng, 60) {
        after_pause = window + 6 * ttl_us + 2 * ttl_us;
        world.add_task(
            clients - 1,
            between(rng, 0, window / 2),
            vec![
                Action::Drain {
                    keys: plain.clone(),
                    wait: between(rng, ttl_us / 2, ttl_us * 2),
                },
                Action::Sleep(between(rng, 0, 30_000)),
                resume(&plain),
                Action::Sleep(window * 2 + 6 * ttl_us),
                resume(&plain),
            ],
        );
    }
    // Group limits changed at run time: every group's defaults, or a group's own (set or
    // cleared).
    let mut limits = Vec::new();
    for _ in 0..between(rng, 1, 4) {
        limits.push(Action::Sleep(between(rng, 0, window / 2)));
        let (group, concurrency) = match rng.next_u64() % 3 {
            0 => (
                None,
                Some(between(rng, 1, MIXED_MAX_CONCURRENCY + 1) as u32),
            ),
            1 => (
                Some(if chance(rng, 50) { "a" } else { "b" }.to_owned()),
                Some(between(rng, 1, 3) as u32),
            ),
            _ => (
                Some(if chance(rng, 50) { "a" } else { "b" }.to_owned()),
                None,
            ),
        };
        limits.push(Action::SetLimits {
            keys: grouped.clone(),
            group,
            concurrency,
        });
    }
    world.add_task(2 % clients, 0, limits);
    // Cancels of pushed jobs (waiting or in flight), each to the dead list or forgotten;
    // a job cancelled to the dead list is requeued in one run of two.
    let mut cancels = Vec::new();
    for _ in 0..between(rng, 1, 4) {
        if ids.is_empty() {
            break;
        }
        let (keys, id) = ids[(rng.next_u64() % ids.len() as u64) as usize].clone();
        let remove = chance(rng, 30);
        cancels.push(Action::Sleep(between(rng, 0, window / 2)));
        cancels.push(Action::Cancel {
            keys: keys.clone(),
            id: id.clone(),
            remove,
        });
        if !remove && chance(rng, 50) {
            cancels.push(Action::Sleep(between(rng, 0, ttl_us)));
            cancels.push(Action::Requeue { keys, id });
        }
    }
    world.add_task(clients - 1, 0, cancels);
    // Workers go on well past the faults (as in the queue runs), on each keys.
    let until = window * 2
        + 10 * ttl_us
        + 2_000_000
        + dedup_count * 6 * ttl_us
        + keep_count * 3 * ttl_us
        + after_pause;
    let plain_workers = between(rng, 1, 3) as usize;
    let grouped_workers = between(rng, 2, 4) as usize;
    for w in 0..plain_workers + grouped_workers {
        let watch = chance(rng, 60);
        let keys = if w < plain_workers { &plain } else { &grouped };
        world.add_task(
            (w + 1) % clients,
            between(rng, 0, 50_000),
            vec![Action::Work {
                keys: keys.clone(),
                settings,
                work: if watch { ttl_us * 2 } else { ttl_us * 3 / 2 },
                until,
                watch,
            }],
        );
    }
}
