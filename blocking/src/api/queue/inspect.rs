//! Looking into a queue without changing it: jobs by state a page at a time, one job by
//! id, and the per-minute counts of what happened to it (see
//! [`redlease_core::queue::inspect`]).

use std::time::SystemTime;

use redlease_core::Error;
use redlease_core::queue::inspect::{self, JobCursor, JobInfo, JobPage, JobStatus, MinuteCounts};

use super::Queue;

impl Queue {
    /// A page of the jobs in `state`: at most `limit` (1 to
    /// [`MAX_PAGE`](inspect::MAX_PAGE), more is capped), starting after `cursor` (`None`:
    /// from the start). Give [`JobPage::next`] back for the next page; `None` there means
    /// this was the last. Ready jobs come in the order they will be taken, delayed ones by
    /// due time, jobs in flight by lease expiry, dead ones oldest first. Paging a state
    /// that does not change meanwhile lists each job exactly once; a job that moves while
    /// it is paged may be missed or listed twice. One read-only script per page.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use redlease::inspect::JobStatus;
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let mail = client.queue("mail")?;
    /// let mut cursor = None;
    /// loop {
    ///     let page = mail.jobs(JobStatus::Dead, cursor.as_ref(), 100)?;
    ///     for job in &page.jobs {
    ///         println!("{} {} deliveries, {} bytes", job.id, job.deliveries, job.payload_size);
    ///     }
    ///     match page.next {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn jobs(
        &self,
        state: JobStatus,
        cursor: Option<&JobCursor>,
        limit: usize,
    ) -> Result<JobPage, Error> {
        self.client.run(inspect::list_jobs(
            &self.keys,
            state,
            cursor,
            limit,
            self.deadline(),
        )?)
    }

    /// Job `id` wherever it is: its state, priority, enqueue and due time, deliveries,
    /// lease left, payload size and first bytes (`None`: no job has this id).
    pub fn job(&self, id: &str) -> Result<Option<JobInfo>, Error> {
        self.client
            .run(inspect::job_info(&self.keys, id, self.deadline()))
    }

    /// What happened to the queue, minute by minute on the server's clock, from `from` to
    /// `to` (the minutes that contain them included): jobs pushed, taken, acked, failed,
    /// retried, dead, leases expired ([`inspect::event`]). Only minutes that counted
    /// something are listed, oldest first. Counts are kept for
    /// [`COUNTS_KEPT`](inspect::COUNTS_KEPT) (48 h); an earlier `from` is moved up.
    pub fn counts(&self, from: SystemTime, to: SystemTime) -> Result<Vec<MinuteCounts>, Error> {
        self.client
            .run(inspect::counts(&self.keys, from, to, self.deadline())?)
    }
}
