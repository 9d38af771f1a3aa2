//! What a queue call was and how a job was settled: the words that the events and the
//! metrics both count by.

use redlease_core::Error;

/// A queue operation (its `messaging.operation.name` and `.type` in the metrics).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Push,
    Take,
    Ack,
    Nack,
}

/// How a job was settled, as the metrics count it.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    Acked,
    Retried,
    Dead,
    RateLimited,
    NotOwner,
    Error,
}

#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
impl Settled {
    /// How a settlement that failed with `e` counts.
    pub(crate) fn failed(e: &Error) -> Settled {
        match e {
            Error::NotOwner { .. } => Settled::NotOwner,
            _ => Settled::Error,
        }
    }
}
