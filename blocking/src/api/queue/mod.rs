//! Reliable queues: push (one or many in one round trip, with priority or delay), take
//! with a lease that the watchdog renews while the job's handle lives, ack / nack, dead
//! letters, stats, and a worker pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redlease_core::backoff::saturating_add;
use redlease_core::lease::{AcquireOptions, Token};
use redlease_core::limits;
use redlease_core::queue::dead::{self, DeadAction, DeadFilter, DeadRetention};
use redlease_core::queue::groups::GROUP_RESERVE;
use redlease_core::queue::groups::JobRef;
use redlease_core::queue::{
    self, AckedAndTaken, DeadJob, Nacked, NewJob, Pushed, QueueKeys, QueueSettings, QueueStats,
    Take, TakeJob, TakenJob,
};
use redlease_core::renewal::RenewalPolicy;
use redlease_core::{Error, LossReason};

use crate::api::client::Client;
use crate::api::lock::LockGuard;

mod batch;
mod cancel;
mod dedup;
mod groups;
mod inspect;
mod job;
mod metered;
mod pause;
mod schedule;
mod workers;

pub use cancel::{CancelReason, Cancelled, CancelledJobs, DEFAULT_GRACE, OnTimeout};
pub use job::{AckedAndNext, Job, Retry};
pub use redlease_core::queue::groups::{GroupLimits, LimitsOf};
pub use workers::{HandlerError, JobError, WorkerReport, Workers};

/// A queue named `name`; made by [`Client::queue`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Queue {
    client: Client,
    keys: Arc<QueueKeys>,
    settings: QueueSettings,
    retry_base: Duration,
    retry_max: Duration,
    idle_check: Duration,
    /// The keys of the queue's grouped jobs, made by the first use of a group.
    group_keys: Arc<std::sync::OnceLock<Arc<QueueKeys>>>,
    /// The schedules whose occurrences this queue advanced: name -> (version, spec), so
    /// that an occurrence taken on time advances in one call (schedule.rs).
    schedules: Arc<std::sync::Mutex<schedule::Known>>,
    /// The schedules this queue upserted, upserted again when the queue's data was lost.
    asserted: Arc<std::sync::Mutex<schedule::Asserted>>,
    schedule_check: Duration,
    lifetime: cancel::Lifetime,
    /// The queue's metrics (nothing without the `metrics` feature).
    meter: crate::observe::events::QueueMeter,
}

impl Client {
    /// The reliable queue `name` (keys `<prefix>:{<name>}:q:*`). Fails on a bad name.
    pub fn queue(&self, name: &str) -> Result<Queue, Error> {
        Ok(Queue {
            client: self.clone(),
            keys: Arc::new(QueueKeys::new(&self.shared().keyspace, name)?),
            settings: QueueSettings::default(),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(600),
            idle_check: Duration::from_secs(2),
            group_keys: Arc::default(),
            schedules: Arc::default(),
            asserted: Arc::default(),
            schedule_check: schedule::SCHEDULE_CHECK,
            lifetime: cancel::Lifetime::default(),
            meter: crate::observe::events::QueueMeter::new(name),
        })
    }
}

/// How a job is pushed ([`Queue::push_with`], [`Queue::push_batch`]): its priority and its
/// delay, each optional. One value rather than positional arguments, so that settings to
/// come (groups, deduplication modes, timeouts) can join without breaking a call.
///
/// ```
/// use std::time::Duration;
/// use redlease::queue::PushOptions;
///
/// let urgent = PushOptions::new().priority(9);
/// let later = PushOptions::new().delay(Duration::from_secs(60));
/// assert_eq!(PushOptions::new(), PushOptions::default());
/// assert_ne!(urgent, later);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use = "push options do nothing until given to a push"]
pub struct PushOptions {
    priority: u8,
    delay: Duration,
    /// The job's group ([`PushOptions::group`]).
    group: Option<Arc<str>>,
    timeout: Option<Duration>,
}

impl PushOptions {
    /// No priority (0, the lowest), no delay: ready at once, FIFO.
    pub fn new() -> Self {
        Self::default()
    }

    /// Served before lower priorities: 0 (the default, the lowest) to
    /// [`MAX_PRIORITY`](redlease_core::queue::MAX_PRIORITY) (255); FIFO within a priority.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Ready after `delay` from the push (zero, the default: at once); at most
    /// [`MAX_DURATION`](limits::MAX_DURATION), checked by the push before anything is sent.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The job's own timeout, kept with it: whoever takes it applies this one instead of
    /// its queue's [`Queue::timeout`] (see there). 1 ms to
    /// [`MAX_DURATION`](limits::MAX_DURATION), checked by the push.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// A grouped job's composed id, `<group>\u{1f}<id>` (the group checked).
fn compose(group: &str, id: &str) -> Result<String, Error> {
    redlease_core::queue::groups::check_group(group)?;
    Ok(format!(
        "{group}{}{id}",
        redlease_core::queue::groups::SEPARATOR
    ))
}

/// A fresh owner token for a take, and a seed for its retry jitter.
fn fresh_token(client: &Client) -> Result<(Token, u64), Error> {
    let random: [u8; 24] = client.shared().entropy.bytes()?;
    let mut token = [0u8; 16];
    token.copy_from_slice(&random[..16]);
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&random[16..]);
    Ok((Token::from_random(token), u64::from_le_bytes(seed)))
}

/// A fresh random token (16 random bytes in lowercase hex, [`Token::from_random`]): the
/// owner token of a take that needs no retry jitter, or a job's generated id (its text).
fn random_token(client: &Client) -> Result<Token, Error> {
    Ok(Token::from_random(client.shared().entropy.bytes::<16>()?))
}

impl Queue {
    /// How long a taken job stays invisible to other workers; renewed by the watchdog while
    /// its [`Job`] handle lives, so it only matters when the worker dies or hangs without its
    /// process. [`MIN_TTL`](limits::MIN_TTL) (10 ms) to [`MAX_DURATION`](limits::MAX_DURATION)
    /// (100 years), checked when a job is taken and when a worker pool is started. Defaults
    /// to 30 s.
    pub fn visibility(mut self, d: Duration) -> Self {
        self.settings.visibility = d;
        self
    }

    /// Counts what happens to this queue's jobs, per minute of the server's clock: pushed,
    /// taken, acked, failed, retried, dead, expired, read back with [`Queue::counts`] (and
    /// shown by the `redlease` operator tool). Off by default: on, the scripts that move jobs
    /// add one `INCR` per event, about 9 % more server instructions on a plain job's push,
    /// take and ack (`scripts/cpu.sh`). Set it on every process that pushes or takes: a
    /// process without it moves jobs uncounted.
    pub fn counting(mut self, on: bool) -> Self {
        self.keys = Arc::new((*self.keys).clone().with_counts(on));
        self
    }

    /// After this many deliveries a failing job goes to the dead list; at least 1 (checked
    /// when a job is taken and when a worker pool is started, [`work`](Self::work)).
    /// Defaults to 5.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.settings.max_deliveries = n;
        self
    }

    /// The backoff of [`Job::nack`]: `base * 2^(attempt - 1)` ([`Job::attempt`]), at most `max`; each 0 to
    /// [`MAX_DURATION`](limits::MAX_DURATION) (checked when a job is taken). Defaults to 1 s
    /// and 10 min.
    pub fn retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base = base;
        self.retry_max = max;
        self
    }

    /// An idle taker re-checks the queue at least this often even without a push
    /// notification (it wakes at once on a push, and exactly when a delayed job is due).
    /// [`MIN_PAUSE`](limits::MIN_PAUSE) (1 ms; each idle taker then runs up to 1,000 scripts
    /// a second) to [`MAX_DURATION`](limits::MAX_DURATION), checked when a job is taken.
    /// Defaults to 2 s.
    pub fn idle_check(mut self, d: Duration) -> Self {
        self.idle_check = d;
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The settings checked when a job is taken, before anything is sent (the visibility
    /// timeout and max deliveries are checked by the core's `take` too).
    fn check(&self) -> Result<(), Error> {
        self.settings.check()?;
        limits::duration(
            "idle check",
            self.idle_check,
            limits::MIN_PAUSE,
            limits::MAX_DURATION,
        )?;
        limits::span("retry backoff base", self.retry_base)?;
        limits::span("retry backoff maximum", self.retry_max)?;
        self.lifetime.check()
    }

    /// Refuses `what` on the handle of a queue's [`groups`](Self::groups), where it cannot
    /// keep every group's limits or a job's group: a typed error, never a silent gap.
    pub(crate) fn refuse_grouped(&self, what: &str) -> Result<(), Error> {
        if self.keys.is_grouped() {
            return Err(redlease_core::error::InvalidArgument::Setting(format!(
                "{what} is not available on a queue's groups (Queue::groups): use the queue itself"
            ))
            .into());
        }
        Ok(())
    }

    fn deadline(&self) -> Instant {
        let shared = self.client.shared();
        saturating_add(shared.time.now(), shared.op_timeout)
    }

    /// Pushes jobs in one round trip, with `options` (a priority, a delay: see
    /// [`PushOptions`]; `PushOptions::new()` for none). Ids deduplicate. The delay is at most
    /// [`MAX_DURATION`](limits::MAX_DURATION) (refused otherwise, before anything is sent).
    pub fn push_batch(&self, jobs: &[NewJob], options: PushOptions) -> Result<Vec<Pushed>, Error> {
        self.pushing(jobs.len(), || self.push_batch_unmetered(jobs, options))
    }

    fn push_batch_unmetered(
        &self,
        jobs: &[NewJob],
        options: PushOptions,
    ) -> Result<Vec<Pushed>, Error> {
        let PushOptions {
            priority,
            delay,
            group,
            timeout,
        } = options;
        limits::span("delay", delay)?;
        if let Some(group) = group {
            if timeout.is_some() {
                return Err(redlease_core::error::InvalidArgument::Setting(
                    "a grouped job takes no timeout of its own yet (set Queue::timeout)".into(),
                )
                .into());
            }
            return self.push_grouped(&group, jobs, priority, delay);
        }
        if self.keys.is_grouped() {
            return Err(redlease_core::error::InvalidArgument::Setting(
                "a job pushed through a queue's groups needs a group (PushOptions::group)".into(),
            )
            .into());
        }
        if let Some(timeout) = timeout {
            let op = queue::push_with_timeout(
                &self.keys,
                jobs,
                priority,
                delay,
                timeout,
                self.deadline(),
            )?;
            return self.client.run(op);
        }
        self.client.run(queue::push(
            &self.keys,
            jobs,
            priority,
            delay,
            self.deadline(),
        )?)
    }

    /// Pushes one job; returns its (generated) id.
    pub fn push(&self, payload: impl Into<Vec<u8>>) -> Result<String, Error> {
        self.push_with(payload, PushOptions::new())
    }

    /// Pushes one job with `options` (a priority, a delay: see [`PushOptions`]); returns its
    /// generated id.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::queue::PushOptions;
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let mail = client.queue("mail")?;
    /// mail.push_with("reminder", PushOptions::new().delay(Duration::from_secs(60)))?;
    /// mail.push_with("password reset", PushOptions::new().priority(9))?;
    /// # Ok(()) }
    /// ```
    pub fn push_with(
        &self,
        payload: impl Into<Vec<u8>>,
        options: PushOptions,
    ) -> Result<String, Error> {
        let id = random_token(&self.client)?;
        if options == PushOptions::new() && !self.keys.is_grouped() {
            // A fresh random id is never a duplicate: the outcome says nothing more.
            let _queued: bool = self.pushing(1, || {
                self.client.run(queue::push_new(
                    &self.keys,
                    &id,
                    payload.into(),
                    self.deadline(),
                ))
            })?;
            return Ok(id.as_str().to_owned());
        }
        let job = NewJob {
            id: id.as_str().to_owned(),
            payload: payload.into(),
        };
        self.push_batch(&[job], options)?;
        Ok(id.as_str().to_owned())
    }

    /// Pushes a job under a caller-given id: [`Pushed::Duplicate`] (and nothing written) if a
    /// job with that id is queued, delayed, running or dead.
    pub fn push_unique(&self, id: &str, payload: impl Into<Vec<u8>>) -> Result<Pushed, Error> {
        let job = NewJob {
            id: id.to_owned(),
            payload: payload.into(),
        };
        let mut out = self.push_batch(&[job], PushOptions::new())?;
        out.pop().ok_or(Error::UnexpectedReply {
            context: "queue push",
            reply: "no outcome".into(),
        })
    }

    /// Pushes many payloads in one round trip; returns their generated ids.
    pub fn push_many<P: Into<Vec<u8>>>(
        &self,
        payloads: impl IntoIterator<Item = P>,
    ) -> Result<Vec<String>, Error> {
        let jobs = payloads
            .into_iter()
            .map(|p| {
                Ok(NewJob {
                    id: random_token(&self.client)?.as_str().to_owned(),
                    payload: p.into(),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let ids = jobs.iter().map(|j| j.id.clone()).collect();
        self.push_batch(&jobs, PushOptions::new())?;
        Ok(ids)
    }

    /// Takes the next job if one is ready now.
    pub fn try_take(&self) -> Result<Option<Job>, Error> {
        self.take_inner(None)
    }

    /// Takes the next job, waiting at most `wait` (`Ok(None)` then). Any `wait`: one past
    /// [`MAX_DURATION`](limits::MAX_DURATION) (100 years), such as `Duration::MAX` for "as
    /// long as it takes", counts as that, never refused. An idle taker sleeps until a push
    /// wakes it or a delayed job is due; it does not poll.
    pub fn take(&self, wait: Duration) -> Result<Option<Job>, Error> {
        match self.take_inner(Some(wait)) {
            Err(Error::Timeout { .. }) => Ok(None),
            other => other,
        }
    }

    fn take_inner(&self, wait: Option<Duration>) -> Result<Option<Job>, Error> {
        let time = &self.client.shared().time;
        let until = wait.map(|w| saturating_add(time.now(), w));
        loop {
            let left = until.map(|u| u.saturating_duration_since(time.now()));
            // A handle that upserted schedules waits in slices of its schedule check, so
            // that a loss of the queue's data is noticed while it waits (schedule.rs).
            let slice = match left {
                Some(l) if self.asserts_schedules() => {
                    Some(l.min(self.schedule_check.max(Duration::from_millis(10))))
                }
                other => other,
            };
            let sliced = slice != left;
            match self.take_once(slice) {
                // A schedule's occurrence runs once its next occurrence exists
                // (schedule.rs); `None`: a missed one skipped, so take again.
                Ok(Some(job)) => match Queue::admit(job)? {
                    Some(job) => return Ok(Some(job)),
                    None => continue,
                },
                Ok(None) | Err(Error::Timeout { .. }) if sliced => continue,
                Ok(None) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    fn take_once(&self, wait: Option<Duration>) -> Result<Option<Job>, Error> {
        self.check()?;
        self.reassert_schedules();
        let (token, seed) = fresh_token(&self.client)?;
        let options = AcquireOptions {
            wait,
            retry_initial: Duration::from_millis(50).min(self.idle_check),
            retry_max: self.idle_check,
            reply_timeout: self.client.shared().io_timeout,
            min_replicas: None,
        };
        let now = self.client.shared().time.now();
        let machine = TakeJob::new(
            &self.keys,
            token,
            &self.lease_settings(),
            &options,
            seed,
            now,
        )?;
        let span = crate::observe::events::acquire_span(
            &self.keys.name,
            redlease_core::lease::LeaseKind::Job,
        );
        let taken = span.in_scope(|| self.client.run(machine));
        let waited = self
            .client
            .shared()
            .time
            .now()
            .saturating_duration_since(now);
        crate::observe::events::ended(&span, waited, &taken, |t| match t {
            Take::Taken(job) => Some((job.lease.attempts, Some(job.delivery))),
            _ => None,
        });
        self.meter
            .operation(crate::observe::outcome::Op::Take, waited, &taken);
        match taken? {
            Take::Taken(job) => Ok(Some(self.clone().into_job(*job))),
            // `Take` may grow outcomes; none of them is a job.
            _ => Ok(None),
        }
    }

    /// The handle of a job just taken: its lease is renewed by the watchdog from now on.
    fn into_job(self, taken: TakenJob) -> Job {
        let TakenJob {
            id,
            payload,
            lease,
            attempt,
            timeout,
            hold_left,
            enqueued_at,
            waited,
            start_in,
            ..
        } = taken;
        let timeout = timeout.or(self.lifetime.timeout);
        let signal = self.signal_for(&lease, timeout, hold_left);
        let policy = self.renewal_policy(timeout, hold_left);
        // The server leased the job no longer than its hold limit, and the lease's validity
        // says so already (see `TakenJob::hold_left`).
        let guard = LockGuard::from_lease(&self.client, lease, Some(policy));
        if let Some(wait) = start_in {
            // The group's rate slot this take booked: counted from the reply, the job starts
            // no earlier (the server says at most GROUP_RESERVE; never longer here).
            let time = &self.client.shared().time;
            let _ = time.sleep_until(saturating_add(time.now(), wait.min(GROUP_RESERVE)));
        }
        crate::observe::events::job(&self.keys.name, &id, "take", None, &Ok(()));
        self.meter.consumed();
        Job {
            signal,
            guard,
            queue: self,
            id,
            payload,
            attempt,
            enqueued: (enqueued_at, waited),
        }
    }

    /// The counts of ready, delayed, in-flight and dead jobs.
    pub fn stats(&self) -> Result<QueueStats, Error> {
        self.client.run(queue::stats(&self.keys, self.deadline()))
    }

    /// The oldest `limit` jobs on the dead list (none for 0; a limit beyond what a Redis
    /// list can hold, 2^32 - 1, means all of them).
    pub fn dead_jobs(&self, limit: usize) -> Result<Vec<DeadJob>, Error> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = limit.min(u32::MAX as usize);
        self.client
            .run(queue::dead_jobs(&self.keys, limit, self.deadline()))
    }

    /// Moves a dead job back to ready, as if pushed anew for its retries: it gets
    /// [`max_deliveries`](Self::max_deliveries) attempts again, its [`Job::attempt`] starts
    /// again at 1 and the retry backoff restarts from `base` (the reason it died is
    /// forgotten). What is kept: its id, payload and priority, and its delivery number
    /// ([`Job::delivery`]), which keeps increasing (it is the job's fence, so it never
    /// repeats). `false` if it was not on the dead list.
    ///
    /// A grouped job is named by [`requeue_dead_grouped`](Self::requeue_dead_grouped), or
    /// here by its composed id (`<group>\u{1f}<id>`), through either handle.
    pub fn requeue_dead(&self, id: &str) -> Result<bool, Error> {
        let keys = self.keys_of(id)?;
        self.client.run(queue::requeue(&keys, id, self.deadline()))
    }

    /// Requeues dead job `id` of group `group` (a [`DeadJob`]'s `group` and `id`), as
    /// [`requeue_dead`](Self::requeue_dead) does; through the queue or its
    /// [`groups`](Self::groups). A group id no group can have is refused with
    /// [`Error::InvalidArgument`].
    pub fn requeue_dead_grouped(&self, group: &str, id: &str) -> Result<bool, Error> {
        self.requeue_dead(&compose(group, id)?)
    }

    /// Deletes dead job `id` of group `group` for good, as [`delete_dead`](Self::delete_dead)
    /// does; through the queue or its [`groups`](Self::groups).
    pub fn delete_dead_grouped(&self, group: &str, id: &str) -> Result<bool, Error> {
        self.delete_dead(&compose(group, id)?)
    }

    /// The keys job `id` lives under: a composed id (`<group>\u{1f}<id>`) the grouped
    /// keys, any other this handle's.
    pub(crate) fn keys_of(&self, id: &str) -> Result<Arc<QueueKeys>, Error> {
        if id.contains(redlease_core::queue::groups::SEPARATOR) {
            self.group_keys()
        } else {
            Ok(self.keys.clone())
        }
    }

    /// Deletes dead job `id` for good (its payload too, so the id may be pushed again);
    /// `false` if it was not on the dead list. An empty id is refused with
    /// [`Error::InvalidArgument`] (to delete every dead job, use [`purge_dead`](Self::purge_dead)).
    pub fn delete_dead(&self, id: &str) -> Result<bool, Error> {
        let keys = self.keys_of(id)?;
        let n = self
            .client
            .run(queue::delete_dead(&keys, id, self.deadline())?)?;
        Ok(n > 0)
    }

    /// Deletes every dead job for good; returns how many were deleted. It goes in pages of
    /// up to [`MAX_ACT`](dead::MAX_ACT) (50; each one short script, each with its own [deadline](crate::ClientBuilder::op_timeout)),
    /// and deletes at most as many as the list held when it began (jobs that die meanwhile
    /// are left). A page whose reply was lost is sent again and answered from its record:
    /// none is deleted twice, and the count is exact. An error after some pages leaves
    /// those deleted; calling again deletes the rest.
    pub fn purge_dead(&self) -> Result<u64, Error> {
        let call = random_token(&self.client)?;
        let call = call.as_str();
        let (mut deleted, mut at_start) = (0u64, None);
        for page in 0u64.. {
            let op = dead::purge_page(&self.keys, &format!("{call}:{page}"), self.deadline())?;
            let done = self.client.run(op)?;
            deleted += done.deleted;
            let target = *at_start.get_or_insert(done.before);
            if done.deleted < dead::MAX_ACT || deleted >= target {
                break;
            }
        }
        Ok(deleted)
    }

    /// Requeues (as [`requeue_dead`](Self::requeue_dead) does) up to `limit` dead jobs
    /// that `filter` picks, oldest first, a page per round trip (up to 1,000 entries
    /// looked at, 50 requeued); returns their addresses (a grouped job by its group and
    /// id, as [`DeadJob`] shows it). Each page is one short script whose cost is bounded by the page:
    /// a job is requeued once, and jobs that die meanwhile join the list's end (a later
    /// page may pick them). A page whose reply was lost is sent again and answered from
    /// its record (kept a minute), so the ids reported are exactly those requeued. An
    /// error after some pages leaves those requeued (they are off the dead list): called
    /// again, the call picks among the jobs still dead; give it
    /// [`DeadFilter::died_before`] a time before the first call, and a job requeued then
    /// that died again is not picked twice.
    pub fn requeue_dead_where(
        &self,
        filter: &DeadFilter,
        limit: usize,
    ) -> Result<Vec<JobRef>, Error> {
        self.act_on_dead(DeadAction::Requeue, filter, limit)
    }

    /// Deletes for good (as [`delete_dead`](Self::delete_dead) does) up to `limit` dead
    /// jobs that `filter` picks, oldest first, a page per round trip (up to 1,000 entries
    /// looked at, 50 deleted); returns their addresses.
    pub fn delete_dead_where(
        &self,
        filter: &DeadFilter,
        limit: usize,
    ) -> Result<Vec<JobRef>, Error> {
        self.act_on_dead(DeadAction::Delete, filter, limit)
    }

    fn act_on_dead(
        &self,
        action: DeadAction,
        filter: &DeadFilter,
        limit: usize,
    ) -> Result<Vec<JobRef>, Error> {
        let mut done = Vec::new();
        let mut from = 0;
        let call = random_token(&self.client)?;
        let call = call.as_str();
        for page in 0u64.. {
            if done.len() >= limit {
                break;
            }
            let left = (limit - done.len()) as u64;
            let op = dead::act(
                &self.keys,
                action,
                filter,
                from,
                dead::MAX_SCAN,
                left,
                &format!("{call}:{page}"),
                self.deadline(),
            )?;
            let page = self.client.run(op)?;
            done.extend(page.ids);
            match page.next {
                Some(next) => from = next,
                None => break,
            }
        }
        Ok(done)
    }

    /// The dead list's retention: how many dead jobs it keeps, for how long
    /// ([`DeadRetention::DEFAULT`] until [set](Self::set_dead_retention)).
    pub fn dead_retention(&self) -> Result<DeadRetention, Error> {
        let op = dead::retention(&self.keys, None, self.deadline())?;
        Ok(self.client.run(op)?.retention)
    }

    /// Sets the dead list's retention for every process (it is kept in Redis) and applies
    /// it now; from then on each script that adds a job to the dead list applies it. Returns
    /// how many dead jobs it deleted now. A count or age of 0 is refused
    /// ([`Error::InvalidArgument`]); `None` means no limit ([`DeadRetention::UNLIMITED`]).
    pub fn set_dead_retention(&self, retention: DeadRetention) -> Result<u64, Error> {
        let mut deleted = 0;
        loop {
            let op = dead::retention(&self.keys, Some(retention), self.deadline())?;
            let n = self.client.run(op)?.deleted;
            deleted += n;
            if n < dead::RETAIN_STEP {
                return Ok(deleted);
            }
        }
    }
}
