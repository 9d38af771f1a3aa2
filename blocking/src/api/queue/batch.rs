//! Taking and acking jobs in batches: [`Queue::take_batch`], [`Queue::ack_batch`] and the
//! batched worker pool, [`Queue::work_batched`].

use super::workers::WorkerCounters;
use super::*;
use redlease_core::queue::batch::{self, MAX_BATCH, TakeBatch, TakenBatch};

impl Queue {
    /// Takes up to `n` ready jobs (1 to 1,000; [`Error::InvalidArgument`] otherwise) in one
    /// round trip, each on its own lease, renewed by the watchdog while its [`Job`] lives,
    /// with its own delivery number and its own exactly-once ack: each is what
    /// [`take`](Self::take) would have returned. When none is ready it waits at most `wait`
    /// for one (as [`take`](Self::take) does: woken by a push, never polling), then takes up
    /// to `n - 1` more at once; an empty `Vec` when the wait ran out. A paused queue hands
    /// out nothing. Only jobs of the main ready set are taken: on the handle of a queue's
    /// [`groups`](Self::groups) it is refused with [`Error::InvalidArgument`] (a batch would
    /// pass the groups' limits by; take grouped jobs with [`take`](Self::take) or
    /// [`work`](Self::work)). A schedule's occurrence in the batch is admitted as by
    /// [`take`](Self::take): its next occurrence exists before it runs.
    ///
    /// A lost reply is retried with the same tokens, and the server hands each token the job
    /// already leased to it: a job is neither taken twice nor lost; when no attempt is
    /// answered, every job the call may have leased is given back at once.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let events = client.queue("events")?;
    /// let jobs = events.take_batch(50, Duration::from_secs(5))?;
    /// for job in &jobs {
    ///     println!("{}", String::from_utf8_lossy(job.payload()));
    /// }
    /// // One round trip acks them all; one outcome per job.
    /// for outcome in events.ack_batch(jobs) {
    ///     outcome?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn take_batch(&self, n: usize, wait: Duration) -> Result<Vec<Job>, Error> {
        let mut jobs = self.try_take_batch(n)?;
        if !jobs.is_empty() || wait.is_zero() {
            return Ok(jobs);
        }
        let Some(first) = self.take(wait)? else {
            return Ok(jobs);
        };
        jobs.push(first);
        // The first job is held: on an error here it is handed over alone rather than
        // failed.
        if n > 1
            && let Ok(more) = self.try_take_batch(n - 1)
        {
            jobs.extend(more);
        }
        Ok(jobs)
    }

    /// Takes up to `n` jobs ready now (1 to 1,000) in one round trip: [`take_batch`](Self::take_batch)
    /// without waiting.
    pub fn try_take_batch(&self, n: usize) -> Result<Vec<Job>, Error> {
        self.check()?;
        self.refuse_grouped("a batch take")?;
        self.reassert_schedules();
        if n == 0 || n > MAX_BATCH {
            return Err(redlease_core::InvalidArgument::Setting(format!(
                "a batch takes 1 to {MAX_BATCH} jobs, got {n}"
            ))
            .into());
        }
        let tokens = (0..n)
            .map(|_| random_token(&self.client))
            .collect::<Result<Vec<_>, _>>()?;
        let machine = TakeBatch::new(&self.keys, tokens, &self.lease_settings(), self.deadline())?;
        let TakenBatch { jobs, .. } = self.client.run(machine)?;
        // Each job is admitted as a take's is: a schedule's occurrence runs once its next
        // occurrence exists (one whose advance fails is given back, and the others run).
        Ok(jobs
            .into_iter()
            .filter_map(|job| Queue::admit(self.clone().into_job(job)).ok().flatten())
            .collect())
    }

    /// Acks `jobs` in one round trip: one outcome per job, in order, each what
    /// [`Job::ack`] would have said (`Ok`, [`Error::NotOwner`] if its lease had run out, the
    /// call's error for every job if Redis could not be reached: their leases then run out
    /// and they are delivered again). A retry after a lost reply finds each job's own
    /// settlement, so no job is acked twice. A job whose lease is known lost, or whose take
    /// had an unanswered attempt, is acked on its own.
    pub fn ack_batch(&self, jobs: Vec<Job>) -> Vec<Result<(), Error>> {
        let mut out: Vec<Option<Result<(), Error>>> = Vec::with_capacity(jobs.len());
        let mut together = Vec::new();
        for (i, job) in jobs.into_iter().enumerate() {
            // A grouped job's ack frees its group's slot (and wakes the group's takers): it
            // goes through the group's own ack.
            if job.is_lost() || job.guard.lease().unanswered || job.queue.keys.is_grouped() {
                out.push(Some(job.ack()));
            } else {
                out.push(None);
                together.push((i, job));
            }
        }
        for chunk in together.chunks_mut(MAX_BATCH) {
            let valid_until = chunk
                .iter()
                .map(|(_, j)| j.guard.valid_until())
                .min()
                .unwrap_or_else(|| self.client.shared().time.now());
            let pairs: Vec<(&str, &redlease_core::lease::Lease)> = chunk
                .iter()
                .map(|(_, j)| (j.id.as_str(), j.guard.lease()))
                .collect();
            // Renewals go on until the answer is in (a lease must not run out while the
            // ack is retried), then stop.
            let acked = batch::ack_many(&self.keys, &pairs, valid_until, self.deadline())
                .and_then(|op| self.client.run(op));
            for (k, (i, job)) in chunk.iter().enumerate() {
                let outcome = match &acked {
                    Ok(outcomes) => outcomes.get(k).cloned().unwrap_or(Err(Error::Finished)),
                    Err(e) => Err(e.clone()),
                };
                crate::observe::events::job(&self.keys.name, &job.id, "ack", None, &outcome);
                self.meter
                    .settled_by(&outcome, |_| crate::observe::outcome::Settled::Acked);
                out[*i] = Some(outcome);
            }
        }
        for (_, job) in together {
            job.guard.disarm();
        }
        out.into_iter()
            .map(|o| o.unwrap_or(Err(Error::Finished)))
            .collect()
    }

    /// A worker pool like [`work`](Self::work) whose threads take up to `batch` jobs at a
    /// time (1 to 1,000) in one round trip, run `handler` on each in turn, and ack the ones
    /// it accepted in one round trip; a job whose handler fails is nacked at once, as by
    /// [`work`](Self::work). The jobs waiting in a thread's batch are leased like any taken
    /// job: the watchdog renews each lease while it waits, and if the process dies they are
    /// delivered again when their leases run out (nothing is lost). Use it for many small
    /// jobs, where round trips dominate; a batch of 1 behaves like [`work`](Self::work).
    /// Stops as [`work`](Self::work) does (each thread finishes its batch first).
    pub fn work_batched<E, F>(
        &self,
        concurrency: usize,
        batch: usize,
        handler: F,
    ) -> Result<Workers, Error>
    where
        E: HandlerError,
        F: Fn(&Job) -> Result<(), E> + Send + Sync + 'static,
    {
        self.check()?;
        self.refuse_grouped("a batched worker pool")?;
        if batch == 0 || batch > MAX_BATCH {
            return Err(redlease_core::InvalidArgument::Setting(format!(
                "a batch takes 1 to {MAX_BATCH} jobs, got {batch}"
            ))
            .into());
        }
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
                    .spawn(move || batch_loop(&queue, batch, stop, &counters, &*handler))
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

fn batch_loop<E: HandlerError>(
    queue: &Queue,
    batch: usize,
    stop: Arc<AtomicBool>,
    counters: &WorkerCounters,
    handler: &dyn Fn(&Job) -> Result<(), E>,
) {
    let time = queue.client.shared().time.clone();
    let take_wait = super::workers::worker_start(queue, &stop);
    let mut pause = Duration::from_millis(10);
    while !stop.load(Ordering::SeqCst) {
        let jobs = match queue.take_batch(batch, take_wait) {
            Ok(jobs) => jobs,
            Err(_) if stop.load(Ordering::SeqCst) => break,
            Err(e) => {
                counters.error(&e);
                let _ = time.sleep_until(saturating_add(time.now(), pause));
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        pause = Duration::from_millis(10);
        let mut done = Vec::with_capacity(jobs.len());
        for job in jobs {
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&job)));
            let failed = match handled {
                Ok(Ok(())) => {
                    done.push(job);
                    continue;
                }
                Ok(Err(e)) => job.fail(&e.message(), e.retry()),
                Err(_) => {
                    counters.panicked.fetch_add(1, Ordering::Relaxed);
                    job.fail("the handler panicked", Retry::Backoff)
                }
            };
            count(counters, failed.map(|()| &counters.nacked));
        }
        if !done.is_empty() {
            for outcome in queue.ack_batch(done) {
                count(counters, outcome.map(|()| &counters.acked));
            }
        }
    }
}

fn count(counters: &WorkerCounters, outcome: Result<&AtomicU64, Error>) {
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
