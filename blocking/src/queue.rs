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
use redlease_core::queue::{
    self, AckedAndTaken, DeadJob, Nacked, NewJob, Pushed, QueueKeys, QueueSettings, QueueStats,
    Take, TakeJob, TakenJob,
};
use redlease_core::renewal::RenewalPolicy;
use redlease_core::{Error, LossReason};

use crate::client::Client;
use crate::lock::LockGuard;

/// A queue named `name`; made by [`Client::queue`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Queue {
    client: Client,
    keys: Arc<QueueKeys>,
    settings: QueueSettings,
    retry_base: Duration,
    retry_max: Duration,
    idle_check: Duration,
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
        })
    }
}

/// How a job is pushed ([`Queue::push_with`], [`Queue::push_batch`]): its priority and its
/// delay, each optional. One value rather than positional arguments, so that settings to
/// come (groups, deduplication modes, timeouts) can join without breaking a call.
///
/// ```
/// use std::time::Duration;
/// use redlease::PushOptions;
///
/// let urgent = PushOptions::new().priority(9);
/// let later = PushOptions::new().delay(Duration::from_secs(60));
/// assert_eq!(PushOptions::new(), PushOptions::default());
/// assert_ne!(urgent, later);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use = "push options do nothing until given to a push"]
pub struct PushOptions {
    priority: u8,
    delay: Duration,
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
        let PushOptions { priority, delay } = options;
        limits::span("delay", delay)?;
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
    /// use redlease::PushOptions;
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
        if options == PushOptions::new() {
            // A fresh random id is never a duplicate: the outcome says nothing more.
            let _queued: bool = self.client.run(queue::push_new(
                &self.keys,
                &id,
                payload.into(),
                self.deadline(),
            ))?;
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
        self.check()?;
        let (token, seed) = fresh_token(&self.client)?;
        let options = AcquireOptions {
            wait,
            retry_initial: Duration::from_millis(50).min(self.idle_check),
            retry_max: self.idle_check,
            reply_timeout: self.client.shared().io_timeout,
            min_replicas: None,
        };
        let now = self.client.shared().time.now();
        let machine = TakeJob::new(&self.keys, token, &self.settings, &options, seed, now)?;
        let span =
            crate::observe::acquire_span(&self.keys.name, redlease_core::lease::LeaseKind::Job);
        let taken = span.in_scope(|| self.client.run(machine));
        let waited = self
            .client
            .shared()
            .time
            .now()
            .saturating_duration_since(now);
        crate::observe::ended(&span, waited, &taken, |t| match t {
            Take::Taken(job) => Some((job.lease.attempts, Some(job.delivery))),
            _ => None,
        });
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
            ..
        } = taken;
        let policy = RenewalPolicy::for_ttl(self.settings.visibility);
        let guard = LockGuard::from_lease(&self.client, lease, Some(policy));
        crate::observe::job(&self.keys.name, &id, "take", None, &Ok(()));
        Job {
            guard,
            queue: self,
            id,
            payload,
            attempt,
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
    pub fn requeue_dead(&self, id: &str) -> Result<bool, Error> {
        self.client
            .run(queue::requeue(&self.keys, id, self.deadline()))
    }

    /// Deletes dead job `id` for good (its payload too, so the id may be pushed again);
    /// `false` if it was not on the dead list. An empty id is refused with
    /// [`Error::InvalidArgument`] (to delete every dead job, use [`purge_dead`](Self::purge_dead)).
    pub fn delete_dead(&self, id: &str) -> Result<bool, Error> {
        let n = self
            .client
            .run(queue::delete_dead(&self.keys, Some(id), self.deadline())?)?;
        Ok(n > 0)
    }

    /// Deletes every dead job for good; returns how many there were.
    pub fn purge_dead(&self) -> Result<u64, Error> {
        self.client
            .run(queue::delete_dead(&self.keys, None, self.deadline())?)
    }

    /// Runs `handler` on `concurrency` threads, each taking jobs one at a time: `Ok` acks the
    /// job, `Err` nacks it with the error's message, which a job that goes to the dead list
    /// keeps ([`DeadJob::reason`]). Any error that implements `Display` is retried with
    /// backoff (dead after max deliveries); return a [`JobError`] to choose:
    /// [`JobError::no_retry`] (dead now) or [`JobError::retry_after`]. Stops when the
    /// returned [`Workers`] is stopped or dropped: each thread finishes the job it has, then
    /// returns (an idle thread notices within `poll`; 500 ms here).
    ///
    /// `concurrency` is clamped to 1 to [`MAX_WORKERS`](limits::MAX_WORKERS) (1024), and no
    /// further thread is started once the system refuses one. The queue's settings are
    /// checked first: a bad one ([`max_deliveries`](Self::max_deliveries) 0, a visibility
    /// timeout, retry backoff or idle check out of range) fails here with
    /// [`Error::InvalidArgument`] saying which, and no thread is started (so a pool never
    /// spins on settings every take would refuse). Errors met while running (Redis
    /// unreachable) are counted in the [`WorkerReport`], with the last one's text.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::JobError;
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let workers = client.queue("mail")?.work(4, |job| {
    ///     let Ok(text) = std::str::from_utf8(job.payload()) else {
    ///         return Err(JobError::no_retry("the payload is not UTF-8"));
    ///     };
    ///     if text.is_empty() {
    ///         return Err(JobError::retry_after(Duration::from_secs(30), "nothing to send yet"));
    ///     }
    ///     Ok(())
    /// })?;
    /// # drop(workers);
    /// # Ok(()) }
    /// ```
    pub fn work<E, F>(&self, concurrency: usize, handler: F) -> Result<Workers, Error>
    where
        E: HandlerError,
        F: Fn(&Job) -> Result<(), E> + Send + Sync + 'static,
    {
        self.check()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(WorkerCounters::default());
        let handler = Arc::new(handler);
        let threads = (0..concurrency.clamp(1, limits::MAX_WORKERS))
            .map_while(|i| {
                let (queue, stop, counters, handler) = (
                    self.clone(),
                    stop.clone(),
                    counters.clone(),
                    handler.clone(),
                );
                std::thread::Builder::new()
                    .name(format!("redlease-worker-{i}"))
                    .spawn(move || work_loop(&queue, stop, &counters, &*handler))
                    .ok()
            })
            .collect();
        Ok(Workers {
            stop,
            counters,
            threads,
            time: self.client.shared().time.clone(),
        })
    }
}

#[derive(Debug, Default)]
struct WorkerCounters {
    acked: AtomicU64,
    nacked: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    panicked: AtomicU64,
    /// The text of the last error counted in `errors`.
    last_error: std::sync::Mutex<Option<String>>,
}

impl WorkerCounters {
    /// Counts a failed take, ack or nack, keeping its text.
    fn error(&self, e: &Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        // A poisoned lock only means another worker panicked while writing a string.
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
    }
}

fn work_loop<E: HandlerError>(
    queue: &Queue,
    stop: Arc<AtomicBool>,
    counters: &WorkerCounters,
    handler: &dyn Fn(&Job) -> Result<(), E>,
) {
    let time = queue.client.shared().time.clone();
    // On a test clock, a worker waits for the test to move time (it never moves it itself),
    // and stopping the pool ends its wait.
    // On Redis a take waits half a second at a time, to look at the stop signal.
    #[cfg_attr(not(feature = "memory"), allow(unused_mut))]
    let mut take_wait = Duration::from_millis(500);
    #[cfg(feature = "memory")]
    if time.memory().is_some() {
        crate::memory::MemoryClock::set_passive_thread();
        crate::backend::cancel_waits_on(stop.clone());
        // The stop signal ends a wait on the test clock: a take waits until a job comes
        // (a day at a time), so a quiet pool costs no take per half second of test time.
        take_wait = Duration::from_secs(24 * 3600);
    }
    let mut pause = Duration::from_millis(10);
    // The job handed over with the last ack, if any: finished even after a stop signal.
    let mut next: Option<Job> = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None if stop.load(Ordering::SeqCst) => break,
            None => match queue.take(take_wait) {
                Ok(Some(job)) => job,
                Ok(None) => continue,
                Err(_) if stop.load(Ordering::SeqCst) => break,
                Err(e) => {
                    // Redis unreachable: back off, but keep noticing the stop signal.
                    counters.error(&e);
                    let _ = time.sleep_until(saturating_add(time.now(), pause));
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
        };
        pause = Duration::from_millis(10);
        // A panicking handler is a failed job (nacked with backoff), not a dead worker.
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&job)));
        let outcome = match handled {
            // While jobs are waiting, one round trip acks this one and hands over the next.
            Ok(Ok(())) if !stop.load(Ordering::Relaxed) => {
                let AckedAndNext { ack, next: handed } = job.ack_and_take();
                next = handed;
                ack.map(|()| &counters.acked)
            }
            Ok(Ok(())) => job.ack().map(|()| &counters.acked),
            Ok(Err(e)) => job.fail(&e.message(), e.retry()).map(|()| &counters.nacked),
            Err(_) => {
                counters.panicked.fetch_add(1, Ordering::Relaxed);
                job.fail("the handler panicked", Retry::Backoff)
                    .map(|()| &counters.nacked)
            }
        };
        match outcome {
            Ok(counter) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::NotOwner { .. }) => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => counters.error(&e),
        }
    }
}

/// A running worker pool; [`stop`](Self::stop) (or drop) ends it.
///
/// Keep it: `queue.work(4, handler)?;` as a statement would stop the pool at once, so that
/// is a `must_use` warning (an error under `deny(unused_must_use)`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn start(queue: &redlease::Queue) -> Result<(), redlease::Error> {
///     queue.work(4, |_job: &redlease::Job| -> Result<(), String> { Ok(()) })?;
///     Ok(())
/// }
/// ```
///
/// ```no_run
/// #![deny(unused_must_use)]
/// fn start(queue: &redlease::Queue) -> Result<redlease::Workers, redlease::Error> {
///     queue.work(4, |_job: &redlease::Job| -> Result<(), String> { Ok(()) })
/// }
/// ```
#[derive(Debug)]
#[must_use = "dropping Workers stops the pool at once: keep it while the workers should run, and call .stop() to end them"]
pub struct Workers {
    stop: Arc<AtomicBool>,
    counters: Arc<WorkerCounters>,
    threads: Vec<JoinHandle<()>>,
    /// The client's clock (a test clock's waits are woken to see the stop).
    #[cfg_attr(not(feature = "memory"), allow(dead_code))]
    time: crate::backend::Time,
}

/// What a worker pool did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Jobs handled successfully and acked.
    pub acked: u64,
    /// Jobs whose handler failed, nacked.
    pub nacked: u64,
    /// Acks or nacks refused because the job's lease had run out (it was redelivered).
    pub refused: u64,
    /// Take, ack or nack attempts that failed otherwise (Redis unreachable).
    pub errors: u64,
    /// Handler calls that panicked (their jobs were nacked, and counted in `nacked` too).
    pub panicked: u64,
    /// The text of the last error counted in [`errors`](Self::errors) (`None`: none yet),
    /// e.g. `redis unavailable after 3 attempt(s): ...`.
    pub last_error: Option<String>,
}

impl Workers {
    /// What the pool has done so far.
    pub fn report(&self) -> WorkerReport {
        let c = &self.counters;
        WorkerReport {
            acked: c.acked.load(Ordering::Relaxed),
            nacked: c.nacked.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            panicked: c.panicked.load(Ordering::Relaxed),
            last_error: c
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Signals the threads to stop, waits for them to finish their current job, and returns
    /// the final report.
    pub fn stop(mut self) -> WorkerReport {
        self.shutdown();
        self.report()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        #[cfg(feature = "memory")]
        if let Some(clock) = self.time.memory() {
            clock.kick();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A job taken from a queue, on a lease renewed by the watchdog while this handle lives.
/// [`ack`](Self::ack) when done, [`nack`](Self::nack) to retry later; dropping it without
/// either returns the job to the queue at once.
#[must_use = "a job dropped without ack goes back to the queue"]
#[derive(Debug)]
pub struct Job {
    guard: LockGuard,
    queue: Queue,
    id: String,
    payload: Vec<u8>,
    attempt: u64,
}

impl Job {
    /// The job id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The payload, as pushed (any bytes).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Which delivery this is (1 the first time): strictly increasing per job while Redis
    /// keeps its data, so it can fence off a stale worker's writes. After Redis loses data
    /// (a restart from an older snapshot, a failover to a lagging replica) it can repeat:
    /// see `docs/guarantees.md`.
    pub fn delivery(&self) -> u64 {
        self.guard.fence()
    }

    /// Which attempt this is since the job was pushed, or last requeued from the dead list
    /// ([`Queue::requeue_dead`]): 1 the first time. It is what
    /// [`max_deliveries`](Queue::max_deliveries) counts and what the retry backoff grows
    /// with. Equal to [`delivery`](Self::delivery) until the job is requeued; after that it
    /// starts again at 1, while the delivery number keeps increasing.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// Whether the lease is known lost (the job will be, or was, redelivered).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Fires once the lease is lost.
    pub fn lost(&self) -> &crossbeam_channel::Receiver<LossReason> {
        self.guard.lost()
    }

    /// Done: the job is forgotten. [`Error::NotOwner`] if its lease had run out (it is
    /// redelivered to another worker, so this worker's ack must not count). An ack retried
    /// after a lost reply is `Ok` only if this delivery's own ack removed the job (the server
    /// remembers settled deliveries for [`SETTLED_KEEP`](redlease_core::queue::SETTLED_KEEP)),
    /// never a second success for the same job; the same holds for the nacks.
    pub fn ack(self) -> Result<(), Error> {
        let (keys, lease) = (&self.queue.keys, self.guard.lease());
        let call = keys.settling(queue::ack_lease_call(keys, &self.id, &lease.token), lease);
        let out = self.guard.finish_with(call);
        crate::observe::job(&self.queue.keys.name, &self.id, "ack", None, &out);
        out
    }

    /// Done, and the next job if one is ready, in one round trip: [`ack`](Self::ack) then
    /// [`Queue::try_take`] with the same promises. The ack's outcome is
    /// [`AckedAndNext::ack`] (as [`ack`](Self::ack) would say); the next job, leased from
    /// the moment it is handed over, is [`AckedAndNext::next`] (`None`: nothing ready now, or
    /// the call failed: see `ack`). A lost reply is retried: the server recognises both the
    /// settled ack and the job handed to this call, so nothing happens twice; when no attempt
    /// is answered, whatever job it may have been handed is given back at once (its delivery
    /// not counted).
    pub fn ack_and_take(self) -> AckedAndNext {
        let queue = self.queue.clone();
        let (keys, settings) = (&queue.keys, &queue.settings);
        let machine = queue
            .check()
            .and_then(|()| random_token(&queue.client))
            .and_then(|token| {
                let lease = self.guard.lease();
                queue::ack_and_take(keys, &self.id, lease, token, settings, queue.deadline())
            });
        let machine = match machine {
            Ok(machine) => machine,
            // No token (the OS refused randomness): the plain ack still settles this job.
            Err(_) => {
                return AckedAndNext {
                    ack: self.ack(),
                    next: None,
                };
            }
        };
        let id = self.id;
        let out = self
            .guard
            .finish_op(|_, valid_until, _| machine.with_valid_until(valid_until));
        let (ack, next) = match out {
            Ok(AckedAndTaken { ack, next, .. }) => (ack, next),
            Err(e) => (Err(e), Take::Empty { next_due_in: None }),
        };
        crate::observe::job(&keys.name, &id, "ack", None, &ack);
        let next = match next {
            Take::Taken(job) => Some(queue.into_job(*job)),
            _ => None,
        };
        AckedAndNext { ack, next }
    }

    /// Failed: retry after the queue's backoff for this delivery (or go to the dead list
    /// after max deliveries).
    pub fn nack(self) -> Result<(), Error> {
        self.fail("", Retry::Backoff)
    }

    /// Failed: retry after `backoff` (zero: at once; beyond
    /// [`MAX_DURATION`](limits::MAX_DURATION), 100 years, it counts as that), or go to the
    /// dead list after max deliveries.
    pub fn nack_after(self, backoff: Duration) -> Result<(), Error> {
        self.fail("", Retry::After(backoff.min(limits::MAX_DURATION)))
    }

    /// Failed because of `reason` (the handler's error): retried as `retry` says, or on the
    /// dead list after max deliveries ([`Retry::Never`]: at once), where it keeps `reason`
    /// ([`DeadJob::reason`]; empty: none).
    pub fn fail(self, reason: &str, retry: Retry) -> Result<(), Error> {
        let max = self.queue.settings.max_deliveries;
        let (backoff, max) = match retry {
            Retry::Backoff => (self.backoff(), max),
            Retry::After(backoff) => (backoff, max),
            Retry::Never => (Duration::ZERO, 0),
        };
        let token = self.guard.lease().token.as_str().to_owned();
        let call = queue::nack_because(&self.queue.keys, &self.id, &token, backoff, max, reason);
        let call = self.queue.keys.settling(call, self.guard.lease());
        let out = self.guard.finish_op(|lease, valid_until, deadline| {
            queue::nack_op(lease, call, deadline).with_valid_until(valid_until)
        });
        let (name, id) = (&self.queue.keys.name, &self.id);
        let why = Some(reason).filter(|r| !r.is_empty());
        crate::observe::job(name, id, "nack", why, &out);
        if let Ok(Nacked::Dead) = out {
            crate::observe::dead(name, id, why);
        }
        out.map(|_| ())
    }

    /// The queue's backoff for this attempt: `base * 2^(attempt - 1)`, at most the maximum.
    fn backoff(&self) -> Duration {
        let shift = self.attempt.saturating_sub(1).min(30) as u32;
        self.queue
            .retry_base
            .saturating_mul(1 << shift)
            .min(self.queue.retry_max)
    }

    /// Abandons the handle without acking: the lease is no longer renewed, and the job is
    /// redelivered once it runs out (what happens when a worker dies).
    pub fn abandon(self) {
        self.guard.disarm();
    }
}

/// What [`Job::ack_and_take`] did.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "the next job goes back to the queue if dropped"]
pub struct AckedAndNext {
    /// The ack: `Ok`, or [`Error::NotOwner`] if the job's lease had run out (it is
    /// redelivered to another worker, so this worker's ack must not count), or another
    /// error when Redis could not be reached (the job is then redelivered once its lease
    /// runs out, as after a failed [`Job::ack`]).
    pub ack: Result<(), Error>,
    /// The next job, already leased to this worker (`None`: none was ready).
    pub next: Option<Job>,
}

/// What to do with a job whose handler failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retry {
    /// Retry after the queue's backoff for this delivery ([`Queue::retry_backoff`]); dead
    /// after max deliveries.
    Backoff,
    /// Retry after this long (zero: at once); dead after max deliveries.
    After(Duration),
    /// No retry: the job goes to the dead list now.
    Never,
}

/// A handler's error that says how to retry: return it from a [`Queue::work`] handler.
///
/// It deliberately does not implement `Display`, so that every error type that does can be a
/// handler's error too (see [`HandlerError`]); read it with [`message`](Self::message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    message: String,
    retry: Retry,
}

impl JobError {
    /// Failed for `message`: retry with the queue's backoff.
    pub fn new(message: impl std::fmt::Display) -> Self {
        JobError {
            message: message.to_string(),
            retry: Retry::Backoff,
        }
    }

    /// Failed for good: the job goes to the dead list now, keeping `message`.
    pub fn no_retry(message: impl std::fmt::Display) -> Self {
        JobError {
            message: message.to_string(),
            retry: Retry::Never,
        }
    }

    /// Failed for now: retry after `delay` (dead after max deliveries).
    pub fn retry_after(delay: Duration, message: impl std::fmt::Display) -> Self {
        JobError {
            message: message.to_string(),
            retry: Retry::After(delay),
        }
    }

    /// Why the job failed.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What to do with the job.
    pub fn retry(&self) -> Retry {
        self.retry
    }
}

/// The error of a [`Queue::work`] handler: its message is kept with a job that dies, and it
/// may say how to retry. Every `Display` type is one (retried with backoff), and so is
/// [`JobError`].
pub trait HandlerError {
    /// The message recorded with the job (and logged with the nack).
    fn message(&self) -> String;

    /// What to do with the job. Defaults to [`Retry::Backoff`].
    fn retry(&self) -> Retry {
        Retry::Backoff
    }
}

impl<E: std::fmt::Display> HandlerError for E {
    fn message(&self) -> String {
        self.to_string()
    }
}

impl HandlerError for JobError {
    fn message(&self) -> String {
        self.message.clone()
    }

    fn retry(&self) -> Retry {
        self.retry
    }
}
