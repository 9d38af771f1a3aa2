//! The public API: [`Client`](crate::Client) and its builder, and the handles made from
//! it: locks (lease, reentrant, fair, read/write, run-once), legacy locks, RedLock, the
//! queue, the rate limiter, inspection of locks and clients, and the client's status. It
//! owns what an application holds and turns each call into a core machine, run through
//! the driver; it may use every layer below (the runtime, the driver, the transport and
//! the in-process server, the wire, observability). Nothing below names it.

pub(crate) mod client;
pub(crate) mod inspect;
pub(crate) mod legacy;
pub(crate) mod lock;
pub(crate) mod queue;
pub(crate) mod rate_limit;
pub(crate) mod redlock;
// After the primitives: rustdoc lists `Client`'s methods in module order.
pub(crate) mod machines;
pub(crate) mod status;
