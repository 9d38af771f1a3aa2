//! # redlease-sim
//!
//! A deterministic simulation of redlease, in the manner of FoundationDB's simulator and
//! TigerBeetle's VOPR: many clients (each with its own clock, lease holders, waiters, queue
//! workers, watchdog and pub/sub listener) and one or more in-process servers
//! ([`redlease::memory::MemoryServer`], running the very Lua scripts Redis runs) on one
//! virtual timeline. A seed chooses the workload, the network delays, the order of
//! simultaneous deliveries and the faults ([`faults::Fault`]); the run is recorded as a
//! [`history::History`], and [`check::check`] verifies the documented properties over it,
//! skipping those the injected faults are documented to break (docs/simulation.md).
//!
//! The simulator drives the core's machines ([`redlease_core::Protocol`]) with its own
//! small driver ([`world`]), as an embedder would; it does not use the blocking driver. It
//! models what that driver does: the watchdog's renewal schedule
//! ([`redlease_core::renewal::Renewals`]), waiters woken by pub/sub with a re-check after
//! every (re)subscription, queue workers that take, renew, ack and nack.
//!
//! It reads no real clock (an `Instant` taken once is only the origin of the virtual
//! clocks) and draws randomness only from the seed: a seed replays exactly.
#![forbid(unsafe_code)]

pub mod check;
pub mod clock;
pub mod faults;
pub mod history;
pub mod machine;
pub mod mutation;
pub mod record;
pub mod run;
pub mod scenario;
pub mod world;
