//! The queue's metrics around its calls (cargo feature `metrics`; see [`crate::metrics`]):
//! without the feature every call here runs its closure and nothing else.

use redlease_core::Error;

use super::Queue;
use crate::observe::events::Started;
use crate::observe::outcome::Op;

impl Queue {
    /// Runs a push of `n` jobs, counted as sent messages and timed.
    pub(super) fn pushing<T>(
        &self,
        n: usize,
        push: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, Error> {
        let started = Started::now();
        let out = push();
        self.meter.operation(Op::Push, started.elapsed(), &out);
        self.meter.sent(n, &out);
        out
    }
}
