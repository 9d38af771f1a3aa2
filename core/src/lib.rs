//! # redlease-core
//!
//! The protocols of redlease (the lock family with fencing tokens, RedLock, the legacy lock,
//! the fair counting semaphore, the reliable queue and lease renewal, all on Redis) as pure
//! state machines, in the sans-IO style.
//!
//! **What it does.** Each protocol is a value implementing [`Protocol`]: it says what it
//! wants next ([`Step::Send`] a batch of commands, [`Step::Wait`] until an instant or a
//! pub/sub message, [`Step::Done`] with a typed result) and is fed the outcome of each
//! command it sent: a [`Reply`] or a [`TransportFailure`]. Lua scripts are constants with
//! their SHA-1, sent as `EVALSHA` and resent as `EVAL` on `NOSCRIPT`.
//!
//! **What it never does.** It opens no socket, reads no clock, spawns no thread, sleeps
//! never and draws no random numbers: the caller passes the time (`now`), the owner token
//! and a seed for retry jitter. That is what makes every protocol testable with scripted
//! replies on virtual time, and embeddable in any runtime. The blocking driver is the crate
//! `redlease`.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Response, Protocol, Reply, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LockSpec, Token};
//!
//! let token = Token::from_random([7; 16]);
//! let ttl = Duration::from_secs(30);
//! let spec = LockSpec::lease(&Keyspace::default(), "reports", token, ttl).unwrap();
//! let start = Instant::now();
//! let mut acquire = Acquire::new(spec, &AcquireOptions::default(), 42, start).unwrap();
//!
//! // The machine asks for one EVALSHA ...
//! let Step::Send(batch) = acquire.poll(start) else { unreachable!() };
//! assert_eq!(batch.requests[0].command.name(), "EVALSHA");
//! // ... and we answer as Redis would: acquired, fencing token 1 (the script answers a
//! // grant with the bare fence, a refusal with `{0, pttl of the holder}`).
//! let reply = Reply::Int(1);
//! acquire.handle(Response::reply(batch.requests[0].id, reply), start);
//! let Step::Done(Ok(Acquisition::Acquired(lease))) = acquire.poll(start) else { unreachable!() };
//! assert_eq!(lease.fence, 1);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod backoff;
pub mod command;
pub mod error;
pub mod inspect;
pub mod keys;
pub mod lease;
pub mod legacy;
pub mod limits;
pub mod protocol;
pub mod queue;
pub mod rate;
pub mod redlock;
pub mod renewal;
pub mod reply;
pub mod script;
pub mod semaphore;
pub mod wake;

#[cfg(test)]
pub(crate) mod testing;

pub use command::{Command, NodeId, Request, RequestId};
pub use error::{Error, InvalidArgument, LossReason};
pub use protocol::{Batch, Protocol, Step, Wait, WakeOn};
pub use reply::{ErrorReply, FailureKind, Reply, Response, TransportFailure};
