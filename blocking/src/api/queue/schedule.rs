//! Durable schedules on a queue ([`Queue::schedule`]): each occurrence of a named
//! [`Schedule`] is a job `sched:<name>:<due ms>`, so any number of processes upserting the
//! same schedule make one job per occurrence. A taken occurrence pushes the next one before
//! it is handed to the caller ([`Queue::take`], the worker pool); a worker that dies in
//! between leaves the occurrence to be redelivered, and that delivery pushes the next.

use redlease_core::queue::schedule::{self, Advanced, Missed, Schedule, ScheduleInfo, Upserted};

use super::*;

/// How often a queue that upserted schedules checks, at a take, whether the queue's data
/// was lost (the schedules' epoch changed) and upserts them again:
/// [`Queue::schedule_check`].
pub const SCHEDULE_CHECK: Duration = Duration::from_secs(10);

/// The schedules a queue handle (and its clones) upserted, and the epoch it saw.
#[derive(Debug, Default)]
pub(super) struct Asserted {
    epoch: Option<u64>,
    schedules: std::collections::BTreeMap<String, Schedule>,
    checked: Option<Instant>,
}

/// The specs of the schedules a queue advanced, by name, with their stored version.
pub(super) type Known = std::collections::HashMap<String, (String, Schedule)>;

/// How many times a schedule call is sent again with a time the server reported (once
/// is the rule; more only when an occurrence fell due during the round trip).
const ATTEMPTS: usize = 4;

fn no_fit(context: &'static str) -> Error {
    Error::UnexpectedReply {
        context,
        reply: "the occurrence computed from the server's time did not fit it".into(),
    }
}

impl Queue {
    /// Creates schedule `name` on this queue, or changes it: its pending occurrence (a job
    /// `sched:<name>:<due ms>`, delayed until its due time on the server's clock) is
    /// replaced when the spec or the template changed, and kept when they did not, so every
    /// process may upsert the same schedule at start-up. The first occurrence is the first
    /// after the server's time now (and the start). Fails on an empty or too long name, and
    /// on the handle of a queue's [`groups`](Queue::groups) (an occurrence has no group).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::{queue::schedule::Schedule, queue::schedule::Upserted};
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let reports = client.queue("reports")?;
    /// reports.schedule("every-minute", &Schedule::every(Duration::from_secs(60))?.payload("sum"))?;
    /// # Ok(()) }
    /// ```
    ///
    /// A schedule lives in Redis: if the queue's data is lost (a restart without
    /// persistence, a failover to a replica that had not received it), so is the schedule.
    /// This handle (and its clones: the worker pool's) remembers what it upserted and, at a
    /// take at most every [`schedule_check`](Self::schedule_check), reads the schedules'
    /// epoch (one read-only script); when it changed, it upserts them again.
    pub fn schedule(&self, name: &str, schedule: &Schedule) -> Result<Upserted, Error> {
        self.refuse_grouped("a schedule")?;
        let done = self.upsert(name, schedule)?;
        let epoch = self
            .client
            .run(schedule::epoch(&self.keys, self.deadline()))?;
        let mut asserted = self.asserted();
        asserted.schedules.insert(name.to_owned(), schedule.clone());
        asserted.epoch = epoch;
        Ok(done)
    }

    fn upsert(&self, name: &str, schedule: &Schedule) -> Result<Upserted, Error> {
        let mut from = None;
        for _ in 0..ATTEMPTS {
            let op = schedule::upsert(&self.keys, name, schedule, from, self.deadline())?;
            match self.client.run(op)? {
                Upserted::Retry { from_ms } => {
                    from = Some(schedule::upsert_from(schedule, from_ms))
                }
                done => return Ok(done),
            }
        }
        Err(no_fit("queue schedule upsert"))
    }

    /// How often, at most, a take checks whether the queue's data was lost and upserts the
    /// schedules this handle upserted again ([`schedule`](Self::schedule));
    /// 10 s by default. Only a handle that upserted schedules checks.
    pub fn schedule_check(mut self, every: Duration) -> Self {
        self.schedule_check = every;
        self
    }

    /// Whether this handle upserted schedules it would upsert again after a data loss.
    pub(super) fn asserts_schedules(&self) -> bool {
        !self.asserted().schedules.is_empty()
    }

    fn asserted(&self) -> std::sync::MutexGuard<'_, Asserted> {
        // Each update is a few assignments: a panic elsewhere leaves a usable record.
        self.asserted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// At most every `schedule_check`: when this handle upserted schedules and the queue's
    /// data was lost since (the epoch changed), upserts them again. Best effort: an error
    /// leaves it for the next take.
    pub(super) fn reassert_schedules(&self) {
        let now = self.client.shared().time.now();
        let (known, schedules) = {
            let mut a = self.asserted();
            if a.schedules.is_empty()
                || a.checked
                    .is_some_and(|t| now.saturating_duration_since(t) < self.schedule_check)
            {
                return;
            }
            a.checked = Some(now);
            (a.epoch, a.schedules.clone())
        };
        let Ok(epoch) = self
            .client
            .run(schedule::epoch(&self.keys, self.deadline()))
        else {
            self.asserted().checked = None;
            return;
        };
        if epoch.is_some() && epoch == known {
            return;
        }
        for (name, schedule) in &schedules {
            if self.upsert(name, schedule).is_err() {
                self.asserted().checked = None;
                return;
            }
        }
        if let Ok(epoch) = self
            .client
            .run(schedule::epoch(&self.keys, self.deadline()))
        {
            self.asserted().epoch = epoch;
        }
    }

    /// Removes schedule `name` and its waiting occurrence; an occurrence already taken runs
    /// to its end. `false` if there was no such schedule. This handle no longer upserts it
    /// again after a loss of the queue's data (another handle that upserted it still does).
    pub fn remove_schedule(&self, name: &str) -> Result<bool, Error> {
        self.asserted().schedules.remove(name);
        self.client
            .run(schedule::remove(&self.keys, name, self.deadline())?)
    }

    /// The schedules of this queue, sorted by name, each with its pending occurrence.
    pub fn schedules(&self) -> Result<Vec<ScheduleInfo>, Error> {
        self.client.run(schedule::list(&self.keys, self.deadline()))
    }

    /// A job just taken, made ready to run: a plain job as it is; a schedule's occurrence
    /// after its schedule has advanced past it (`None`: a missed occurrence of a schedule
    /// that skips them, acked here). If the advance fails, the job is given back (its
    /// handle dropped) and the error returned: nothing runs before the next occurrence
    /// exists.
    pub(super) fn admit(job: Job) -> Result<Option<Job>, Error> {
        let Some((name, due)) = schedule::occurrence(&job.id) else {
            return Ok(Some(job));
        };
        let name = name.to_owned();
        let this = job.queue.clone();
        this.advance(job, &name, due)
    }

    fn advance(&self, job: Job, name: &str, due: u64) -> Result<Option<Job>, Error> {
        match self.advance_past(name, due)? {
            Some((schedule, now_ms)) => self.run_or_skip(job, &schedule, due, now_ms),
            // The schedule was removed, or an outcome to come: the job runs as any.
            None => Ok(Some(job)),
        }
    }

    /// Advances schedule `name` past its occurrence due at `due` (idempotent: only the
    /// pending occurrence advances, once). The schedule and the server's time when it
    /// exists; `None` when it was removed.
    fn advance_past(&self, name: &str, due: u64) -> Result<Option<(Box<Schedule>, u64)>, Error> {
        // A spec seen before: the next occurrence for a take on time (after `due`, before
        // the one after it), checked by the script against the stored version and clock.
        let known = self.known().get(name).map(|(version, schedule)| {
            let (from, next) = schedule::advance_from(schedule, due, due);
            (version.clone(), from, next)
        });
        let mut computed: Option<(String, u64, Option<u64>)> = known;
        for _ in 0..ATTEMPTS {
            let hint = computed.as_ref().map(|(v, f, n)| (v.as_str(), *f, *n));
            let op = schedule::advance(&self.keys, name, due, hint, self.deadline())?;
            match self.client.run(op)? {
                Advanced::Done {
                    now_ms,
                    version,
                    schedule,
                    ..
                } => {
                    self.known()
                        .insert(name.to_owned(), (version, (*schedule).clone()));
                    return Ok(Some((schedule, now_ms)));
                }
                Advanced::NotPending {
                    now_ms,
                    schedule: Some(schedule),
                } => return Ok(Some((schedule, now_ms))),
                Advanced::Compute {
                    now_ms,
                    version,
                    schedule,
                } => {
                    let (from, next) = schedule::advance_from(&schedule, due, now_ms);
                    computed = Some((version.clone(), from, next));
                    self.known().insert(name.to_owned(), (version, *schedule));
                }
                _ => return Ok(None),
            }
        }
        Err(no_fit("queue schedule advance"))
    }

    /// After job `id` was cancelled: when it is a schedule's occurrence, the schedule
    /// advances past it, so a cancel skips one occurrence and the schedule goes on (an
    /// occurrence cancelled in flight was advanced past at its take: nothing to do then).
    pub(super) fn skip_cancelled(&self, id: &str) -> Result<(), Error> {
        if let Some((name, due)) = schedule::occurrence(id) {
            self.advance_past(name, due)?;
        }
        Ok(())
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // Each update is one insert: a panic elsewhere leaves a usable map.
        self.schedules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run_or_skip(
        &self,
        job: Job,
        schedule: &Schedule,
        due: u64,
        now_ms: u64,
    ) -> Result<Option<Job>, Error> {
        if schedule.missed_policy() == Missed::Skip && schedule::missed(schedule, due, now_ms) {
            crate::observe::events::job(&self.keys.name, &job.id, "skip", None, &Ok(()));
            job.ack()?;
            return Ok(None);
        }
        Ok(Some(job))
    }
}
