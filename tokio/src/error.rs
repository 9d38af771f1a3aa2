//! The crate's error type.

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the protocol: bad input (an empty name, a bad ttl or prefix), a lease that
    /// is not ours any more, a wait that timed out, Redis unreachable within the deadline.
    #[error(transparent)]
    Core(#[from] redlease_core::Error),
    /// The URL could not be parsed, or the first connection failed.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] redis::RedisError),
    /// The first connection did not come up within the io timeout.
    #[error("connecting to Redis took longer than the io timeout")]
    ConnectTimeout,
    /// [`ClientBuilder::build`](crate::ClientBuilder::build) was called outside a tokio
    /// runtime.
    #[error("no tokio runtime to run the client's driver task on")]
    NoRuntime,
    /// The client's driver task has ended (its runtime shut down).
    #[error("the client's driver task has ended (its runtime shut down)")]
    DriverGone,
    /// The operating system could not give random bytes for an owner token.
    #[error("no random bytes for an owner token: {0}")]
    Random(#[from] getrandom::Error),
}
