//! Pushes with a dedup id and a mode ([`Dedup`]): until done, throttle, debounce, keep
//! latest. The push script decides on the server's clock; the entry lives in the queue's
//! keys and goes with its job (see [`redlease_core::queue::dedup`]).

use redlease_core::Error;
use redlease_core::queue::{self, Dedup, DedupOutcome};

use super::{PushOptions, Queue, random_token};

impl Queue {
    /// Pushes one job under dedup id `dedup_id` (separate from the job id) in `mode`; says
    /// what happened: [`DedupOutcome::Queued`] (a new job, whose id starts with `~`),
    /// [`DedupOutcome::Duplicate`] (job X in state S holds the id: nothing written),
    /// [`DedupOutcome::Replaced`] (keep latest: the waiting job, or the follow-up parked
    /// behind the running one until its ack, carries this payload now),
    /// [`DedupOutcome::Coalesced`] (debounce: the delayed job carries this payload and is due
    /// `delay` from now, never later than `max_wait` after its first push).
    ///
    /// A bad dedup id (empty, over 512 bytes) or mode setting (a zero ttl or delay, a
    /// maximum wait below the delay) is refused before anything is sent.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::{queue::dedup::Dedup, queue::dedup::DedupOutcome};
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let reindex = client.queue("reindex")?;
    /// let mode = Dedup::Debounce {
    ///     delay: Duration::from_millis(200),
    ///     max_wait: Duration::from_secs(1),
    /// };
    /// match reindex.push_dedup("user-42", "v7", mode)? {
    ///     DedupOutcome::Queued(id) => println!("queued {id}"),
    ///     DedupOutcome::Coalesced { job_id } => println!("{job_id} runs later, with v7"),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn push_dedup(
        &self,
        dedup_id: &str,
        payload: impl Into<Vec<u8>>,
        mode: Dedup,
    ) -> Result<DedupOutcome, Error> {
        self.push_dedup_with(dedup_id, payload, mode, PushOptions::new())
    }

    /// [`push_dedup`](Self::push_dedup) with a priority and a delay ([`PushOptions`]; a
    /// [`Dedup::Debounce`] has its own delay and ignores the option's).
    pub fn push_dedup_with(
        &self,
        dedup_id: &str,
        payload: impl Into<Vec<u8>>,
        mode: Dedup,
        options: PushOptions,
    ) -> Result<DedupOutcome, Error> {
        let PushOptions {
            priority,
            delay,
            group,
            ..
        } = options;
        if group.is_some() || self.keys.is_grouped() {
            return Err(redlease_core::error::InvalidArgument::Setting(
                "a push with a dedup id takes no group (groups and dedup ids do not combine yet)"
                    .into(),
            )
            .into());
        }
        let job = random_token(&self.client)?;
        let op = queue::push_dedup(
            &self.keys,
            dedup_id,
            &job,
            payload.into(),
            mode,
            priority,
            delay,
            self.deadline(),
        )?;
        self.pushing(1, || self.client.run(op))
    }
}
