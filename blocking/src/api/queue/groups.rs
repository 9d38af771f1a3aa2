//! Job groups: push into a group, take fairly across groups under per-group and queue-wide
//! limits stored in Redis, and answer "rate limited for d" ([`Job::rate_limit_group`]).

use redlease_core::queue::groups;

use super::*;

impl PushOptions {
    /// Into group `id` (a tenant, a customer, a partner: 1 to 128 bytes, without the byte
    /// 0x1f, checked by the push): takes are fair across groups, each group under its limits
    /// ([`Queue::set_group_limits`]). Grouped jobs are taken through [`Queue::groups`], not
    /// by the queue's plain takes. A job's id is unique within its group.
    pub fn group(mut self, id: &str) -> Self {
        self.group = Some(id.into());
        self
    }
}

impl Queue {
    /// The keys of the queue's grouped jobs (made once per queue handle and its clones).
    pub(super) fn group_keys(&self) -> Result<Arc<QueueKeys>, Error> {
        if self.keys.is_grouped() {
            return Ok(self.keys.clone());
        }
        let keys = match self.group_keys.get() {
            Some(keys) => keys.clone(),
            None => {
                let keys = Arc::new(QueueKeys::grouped(
                    &self.client.shared().keyspace,
                    &self.keys.name,
                )?);
                self.group_keys.get_or_init(|| keys).clone()
            }
        };
        // Counted as this queue is (`counting`), whichever clone built the shared keys.
        let counting = self.keys.counts_on();
        if keys.counts_on() == counting {
            Ok(keys)
        } else {
            Ok(Arc::new((*keys).clone().with_counts(counting)))
        }
    }

    pub(super) fn push_grouped(
        &self,
        group: &str,
        jobs: &[NewJob],
        priority: u8,
        delay: Duration,
    ) -> Result<Vec<Pushed>, Error> {
        let keys = self.group_keys()?;
        self.client.run(groups::push(
            &keys,
            group,
            jobs,
            priority,
            delay,
            self.deadline(),
        )?)
    }

    /// The queue's grouped jobs ([`PushOptions::group`]), as a queue of their own with this
    /// queue's settings: its [`take`](Queue::take), [`try_take`](Queue::try_take) and
    /// [`work`](Queue::work) serve the groups in turn (round robin among the groups with
    /// ready jobs), each within its limits; an idle taker sleeps until a group may become
    /// eligible or an ack, push or limit change wakes it. Its pushes need a group. Its
    /// [`stats`](Queue::stats) count the grouped jobs in flight, delayed and dead (and as
    /// ready only those waiting to be sorted back into their group). Jobs without a group
    /// are taken by the queue itself: run a pool on each if a queue has both.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::{queue::GroupLimits, queue::JobError, queue::LimitsOf, queue::PushOptions, rate::RateLimit};
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let calls = client.queue("partner-calls")?;
    /// calls.push_with("sync 1", PushOptions::new().group("acme"))?;
    /// // Every group: 2 at a time and 50 a second; the whole queue: 16 at a time.
    /// let each = GroupLimits::new()
    ///     .concurrency(2)
    ///     .rate(RateLimit::new(50, Duration::from_secs(1), 1)?);
    /// calls.set_group_limits(LimitsOf::EveryGroup, Some(each))?;
    /// calls.set_group_limits(LimitsOf::Queue, Some(GroupLimits::new().concurrency(16)))?;
    /// let workers = calls.groups()?.work(8, |job| {
    ///     // The partner answered 429: the job goes back first in its group, uncounted,
    ///     // and the group waits.
    ///     Err(JobError::rate_limited(Duration::from_secs(1), "429"))
    /// })?;
    /// # drop(workers);
    /// # Ok(()) }
    /// ```
    pub fn groups(&self) -> Result<Queue, Error> {
        let keys = self.group_keys()?;
        let mut queue = self.clone();
        queue.group_keys = Arc::new(std::sync::OnceLock::from(keys.clone()));
        queue.keys = keys;
        Ok(queue)
    }

    /// Sets (or with `None` clears) the limits of `of`: the defaults of every group, one
    /// group's own (replacing the defaults for it), or the whole queue's (across every
    /// group). Stored in Redis, so every process obeys them; the next take uses them, and
    /// idle takers are woken.
    pub fn set_group_limits(
        &self,
        of: LimitsOf<'_>,
        limits: Option<GroupLimits>,
    ) -> Result<(), Error> {
        let keys = self.group_keys()?;
        self.client
            .run(groups::set_limits(&keys, of, limits, self.deadline())?)
    }

    /// One page of the queue's groups that have jobs waiting, with each one's figures
    /// (where it stands: in the ring, full, rate-blocked or paused; its jobs waiting; its
    /// leases running; whether it is paused): at most `count` (1 to
    /// [`MAX_GROUP_PAGE`](groups::MAX_GROUP_PAGE)) from `cursor`
    /// ([`GroupCursor::START`](groups::GroupCursor::START) for the first page, then each
    /// page's `next` until it is `None`). Each page is one read-only script bounded by the
    /// page, whatever the number of groups. A group whose every job is in flight is not
    /// listed (it waits for nothing); groups that move between sets while you page may be
    /// seen twice or missed. Through the queue or its [`groups`](Self::groups).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// let client = redlease::Client::open("redis://127.0.0.1:6379/")?;
    /// let queue = client.queue("partner-calls")?;
    /// let mut cursor = Some(redlease::queue::GroupCursor::START);
    /// while let Some(at) = cursor {
    ///     let page = queue.group_page(at, 100)?;
    ///     for g in &page.groups {
    ///         println!("{} {:?}: {} waiting, {} running", g.id, g.state, g.ready, g.in_flight);
    ///     }
    ///     cursor = page.next;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn group_page(
        &self,
        cursor: groups::GroupCursor,
        count: usize,
    ) -> Result<groups::GroupPage, Error> {
        let keys = self.group_keys()?;
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        self.client
            .run(groups::group_page(&keys, cursor, count, self.deadline())?)
    }
}

impl Job {
    /// The job's group (`None`: it was pushed without one).
    pub fn group(&self) -> Option<&str> {
        groups::split_id(&self.id).0
    }

    /// Rate limited ("429, try later"): a grouped job goes back to the head of its group
    /// without counting the delivery (its [`attempt`](Self::attempt) stays, so it never
    /// dies of it; its [`delivery`](Self::delivery) number still increases on the next
    /// take), and its group takes nothing for `wait` (the idle takers sleep until then).
    /// A job without a group is retried after `wait` ([`nack_after`](Self::nack_after),
    /// counted). [`Error::NotOwner`] if its lease had run out.
    pub fn rate_limit_group(self, wait: Duration) -> Result<(), Error> {
        if !self.queue.keys.is_grouped() {
            return self.nack_after(wait);
        }
        let call = groups::rate_limited_call(&self.queue.keys, &self.id, self.guard.lease(), wait)?;
        let out = self.guard.finish_with(call);
        crate::observe::events::job(&self.queue.keys.name, &self.id, "rate limited", None, &out);
        self.queue
            .meter
            .settled_by(&out, |_| crate::observe::outcome::Settled::RateLimited);
        out
    }
}
