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
}

/// The concurrency limit of each group in [`Primitive::Groups`] runs.
pub const GROUP_CONCURRENCY: usize = 1;

impl Primitive {
    /// Every primitive.
    pub const ALL: [Primitive; 8] = [
        Primitive::Lease,
        Primitive::Reentrant,
        Primitive::Fair,
        Primitive::ReadWrite,
        Primitive::Semaphore,
        Primitive::Queue,
        Primitive::RedLock,
        Primitive::Groups,
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
            P::Exclusion => !matches!(self, Semaphore | Queue | Groups),
            P::FenceOrder | P::FencedResource => {
                matches!(self, Lease | Reentrant | Fair | ReadWrite)
            }
            P::Permits => self == Semaphore,
            P::Fifo => matches!(self, Semaphore | Fair),
            P::JobSettled | P::SingleAck | P::DeliveryUnique | P::NotBeforeDue => {
                matches!(self, Queue | Groups)
            }
            P::ScheduleOnce
            | P::DedupOneLive
            | P::NothingLeasedWhilePaused
            | P::NoAckAfterTimeout => self == Queue,
            P::Counted => matches!(self, Queue | Groups),
            P::GroupConcurrency | P::GroupRate | P::RateLimitedKeepsDelivery => self == Groups,
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
