//! The driver: the one loop that runs core machines ([`drive`](backend::drive),
//! [`drive_set`](backend::drive_set)). It owns the nodes a batch goes to (Redis or the
//! in-process server), the clock, the client's entropy (tokens, jitter) and the count of
//! waiting threads; it polls machines, sends their batches, feeds back the replies and
//! waits (woken by the pub/sub listener when a wait names a channel). It may use the
//! transport, the in-process server, the wire and observe; the API and the runtime call
//! it, it calls neither.

pub(crate) mod backend;
