//! The worker pool: [`Queue::work`] runs a handler on threads that take, ack and nack.

use super::*;

impl Queue {
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
    /// use redlease::queue::JobError;
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
pub(super) struct WorkerCounters {
    pub(super) acked: AtomicU64,
    pub(super) nacked: AtomicU64,
    pub(super) deferred: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) panicked: AtomicU64,
    /// The text of the last error counted in `errors`.
    last_error: std::sync::Mutex<Option<String>>,
}

impl WorkerCounters {
    /// Counts a failed take, ack or nack, keeping its text.
    pub(super) fn error(&self, e: &Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        // A poisoned lock only means another worker panicked while writing a string.
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
    }
}

/// Sets up a worker thread of `queue`'s pools (one job at a time, or batches) stopped by
/// `stop`; returns how long each of its takes waits.
/// On a test clock, a worker waits for the test to move time (it never moves it itself),
/// and stopping the pool ends its wait.
/// On Redis a take waits half a second at a time, to look at the stop signal.
pub(super) fn worker_start(queue: &Queue, stop: &Arc<AtomicBool>) -> Duration {
    #[cfg(feature = "memory")]
    if queue.client.shared().time.memory().is_some() {
        crate::memory::MemoryClock::set_passive_thread();
        crate::driver::backend::cancel_waits_on(stop.clone());
        // The stop signal ends a wait on the test clock: a take waits until a job comes
        // (a day at a time), so a quiet pool costs no take per half second of test time.
        return Duration::from_secs(24 * 3600);
    }
    #[cfg(not(feature = "memory"))]
    let _ = (queue, stop);
    Duration::from_millis(500)
}

fn work_loop<E: HandlerError>(
    queue: &Queue,
    stop: Arc<AtomicBool>,
    counters: &WorkerCounters,
    handler: &dyn Fn(&Job) -> Result<(), E>,
) {
    let time = queue.client.shared().time.clone();
    let take_wait = worker_start(queue, &stop);
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
        let started = crate::observe::events::Started::now();
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            super::cancel::run_handler(&job, || handler(&job))
        }));
        job.queue.meter.processed(started, &handled);
        let outcome = match handled {
            // While jobs are waiting, one round trip acks this one and hands over the next.
            Ok(Ok(())) if !stop.load(Ordering::Relaxed) => {
                let AckedAndNext { ack, next: handed } = job.ack_and_take();
                next = handed;
                ack.map(|()| &counters.acked)
            }
            Ok(Ok(())) => job.ack().map(|()| &counters.acked),
            // Past its timeout: settled as the queue's `on_timeout` says (see cancel.rs).
            Ok(Err(e)) if job.deadline().is_some_and(|d| time.now() >= d) => job
                .timed_out_because(&e.message())
                .map(|()| &counters.nacked),
            Ok(Err(e)) => {
                // A rate-limited answer on a queue's groups is a deferral, not an attempt.
                let counter = match e.retry() {
                    Retry::RateLimited(_) if job.queue.keys.is_grouped() => &counters.deferred,
                    _ => &counters.nacked,
                };
                job.fail(&e.message(), e.retry()).map(|()| counter)
            }
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
/// fn start(queue: &redlease::queue::Queue) -> Result<(), redlease::Error> {
///     queue.work(4, |_job: &redlease::queue::Job| -> Result<(), String> { Ok(()) })?;
///     Ok(())
/// }
/// ```
///
/// ```no_run
/// #![deny(unused_must_use)]
/// fn start(queue: &redlease::queue::Queue) -> Result<redlease::queue::Workers, redlease::Error> {
///     queue.work(4, |_job: &redlease::queue::Job| -> Result<(), String> { Ok(()) })
/// }
/// ```
#[derive(Debug)]
#[must_use = "dropping Workers stops the pool at once: keep it while the workers should run, and call .stop() to end them"]
pub struct Workers {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) counters: Arc<WorkerCounters>,
    pub(super) threads: Vec<JoinHandle<()>>,
    /// The client's clock (a test clock's waits are woken to see the stop).
    #[cfg_attr(not(feature = "memory"), allow(dead_code))]
    pub(super) time: crate::driver::backend::Time,
}

/// What a worker pool did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Jobs handled successfully and acked.
    pub acked: u64,
    /// Jobs whose handler failed, nacked (to be retried, or dead).
    pub nacked: u64,
    /// Grouped jobs whose handler answered rate limited ([`JobError::rate_limited`]): given
    /// back to the head of their group without counting as an attempt (not in `nacked`).
    pub deferred: u64,
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
            deferred: c.deferred.load(Ordering::Relaxed),
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

    /// Rate limited ("429, try later"): a grouped job goes back to the head of its group
    /// without counting a delivery (so it never dies of it), and its group waits `wait`
    /// ([`Retry::RateLimited`]).
    pub fn rate_limited(wait: Duration, message: impl std::fmt::Display) -> Self {
        JobError {
            message: message.to_string(),
            retry: Retry::RateLimited(wait),
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
