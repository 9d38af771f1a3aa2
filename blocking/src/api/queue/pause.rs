//! Pausing and resuming a queue, or one group of its jobs: [`Queue::pause`],
//! [`Queue::pause_and_wait`], [`Queue::resume`], [`Queue::pause_group`].

use super::*;
use redlease_core::queue::pause::{self, PauseScope};

impl Queue {
    /// Pauses the queue: once this returns, no job is leased by any taker of any process
    /// (the flag is read inside the take scripts, so a take sent before this call but run
    /// after it takes nothing, and a worker blocked in a wait takes nothing when it wakes).
    /// Jobs in flight finish: their acks, nacks and lease renewals work as usual. Delayed
    /// jobs still become due, and jobs whose lease ran out become ready again (or dead), but
    /// none of them is leased until [`resume`](Self::resume). An idle taker of a paused
    /// queue sleeps until the resume wakes it (or its [`idle_check`](Self::idle_check)); it
    /// does not spin. Pausing a paused queue changes nothing (the first pause's time is kept).
    ///
    /// A pause that fails with [`Error::Unavailable`] may still run later (its request was
    /// sent, and a delayed request can reach Redis after a [`resume`](Self::resume) that
    /// followed it): check [`is_paused`](Self::is_paused) once Redis answers again, and
    /// resume again if needed. The simulation runs this case (`docs/simulation.md`).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    ///
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let mail = client.queue("mail")?;
    /// // Deploying a new mail relay: stop taking, let the jobs in hand finish.
    /// let drained = mail.pause_and_wait(Duration::from_secs(30))?;
    /// assert!(drained, "jobs still running after 30 s");
    /// // ... switch the relay ...
    /// mail.resume()?; // every idle worker takes again at once
    /// # Ok(()) }
    /// ```
    pub fn pause(&self) -> Result<(), Error> {
        let _changed: bool = self.client.run(pause::pause(
            &self.keys,
            &PauseScope::Queue,
            self.deadline(),
        )?)?;
        Ok(())
    }

    /// Pauses the queue ([`pause`](Self::pause)) and waits at most `wait` until no job is in
    /// flight (no worker holds a live lease): `Ok(true)` then, `Ok(false)` when jobs were
    /// still in flight at the deadline. The queue stays paused either way. It does not poll:
    /// each ack or nack wakes it while it waits, and it counts again when the first lease
    /// would run out (a job whose worker died counts until its lease runs out). Any `wait`
    /// (`Duration::MAX`: as long as it takes).
    pub fn pause_and_wait(&self, wait: Duration) -> Result<bool, Error> {
        let shared = self.client.shared();
        let machine = pause::Drain::new(&self.keys, wait, shared.op_timeout, shared.time.now());
        self.client.run(machine)
    }

    /// Resumes the queue paused by [`pause`](Self::pause) and wakes every idle taker of
    /// every process at once (one message on the queue's wake channel). Resuming a queue
    /// that is not paused changes nothing. A group paused with
    /// [`pause_group`](Self::pause_group) stays paused.
    pub fn resume(&self) -> Result<(), Error> {
        let _changed: bool = self.client.run(pause::resume(
            &self.keys,
            &PauseScope::Queue,
            self.deadline(),
        )?)?;
        Ok(())
    }

    /// Whether the queue is paused (by any process).
    pub fn is_paused(&self) -> Result<bool, Error> {
        let at = self.client.run(pause::paused_at(
            &self.keys,
            &PauseScope::Queue,
            self.deadline(),
        )?)?;
        Ok(at.is_some())
    }

    /// Pauses group `id` (1 to 512 bytes; [`Error::InvalidArgument`] otherwise): none of
    /// the group's jobs is leased until [`resume_group`](Self::resume_group), while jobs
    /// without a group and other groups' jobs are. It takes effect for jobs pushed into a
    /// group (the group take reads it inside its script, as the plain take reads the queue's
    /// pause); pausing a group that has no jobs yet is allowed and holds for the jobs pushed
    /// into it later.
    pub fn pause_group(&self, id: &str) -> Result<(), Error> {
        let scope = PauseScope::Group(id.to_owned());
        let _changed: bool = self
            .client
            .run(pause::pause(&self.keys, &scope, self.deadline())?)?;
        Ok(())
    }

    /// Resumes group `id` and wakes every idle taker of the queue at once.
    pub fn resume_group(&self, id: &str) -> Result<(), Error> {
        let scope = PauseScope::Group(id.to_owned());
        let _changed: bool =
            self.client
                .run(pause::resume(&self.keys, &scope, self.deadline())?)?;
        Ok(())
    }

    /// Whether group `id` is paused.
    pub fn is_group_paused(&self, id: &str) -> Result<bool, Error> {
        let scope = PauseScope::Group(id.to_owned());
        let at = self
            .client
            .run(pause::paused_at(&self.keys, &scope, self.deadline())?)?;
        Ok(at.is_some())
    }
}
