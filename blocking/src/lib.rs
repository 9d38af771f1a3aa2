//! # redlease
//!
//! Distributed coordination on Redis for blocking Rust code: leases (locks) with fencing
//! tokens, renewed by one watchdog per client (a scheduling thread, and one renewal thread
//! per Redis node) and reported lost no later than their validity.
//!
//! - Locks: [`Client::lock`] (lease), [`Client::reentrant_lock`], [`Client::fair_lock`],
//!   [`Client::read_lock`] / [`Client::write_lock`], [`Client::run_once`] for fleet-wide cron
//!   jobs, [`RedLock`](lock::RedLock) over independent masters, and [`Client::legacy_lock`] for servers
//!   without `SET NX PX` or scripting (see its docs for what that algorithm cannot
//!   guarantee; prefer the lease lock where the server allows it).
//! - [`Client::semaphore`]: a fair counting semaphore on the server's clock.
//! - [`Client::queue`]: a reliable queue with priorities, delays, leases and dead letters.
//! - [`Client::rate_limiter`]: a GCRA rate limiter on the server's clock, shared by a fleet.
//! - Deployments: one server ([`Client::open`]), Sentinel ([`Client::sentinel`]), Redis
//!   Cluster ([`Client::cluster`]); `min_replicas` on locks and semaphores for failovers.
//!   TLS (`rediss://`, cargo feature `tls-rustls`, on by default, with
//!   [`ClientBuilder::tls_root_ca`] and [`ClientBuilder::tls_client_cert`]) and Unix sockets
//!   (`unix://`) everywhere; see [`ConnectionTarget`] for what a client can be opened with.
//!
//! This crate is a thin driver: it runs the protocol machines of
//! [`redlease_core`] over an `r2d2` pool of connections (its own RESP connections to a
//! single server, with its own rustls for TLS; the `redis` crate's for Redis Cluster, whose
//! TLS is the `redis` crate's: cargo feature `redis-tls`). Everything a protocol
//! decides (what to send, how to read a reply, when to retry) lives in the core and is
//! unit-tested there with scripted replies; this crate only moves bytes, reads the clock,
//! sleeps and draws random tokens. To drive the core from another runtime (async, an event
//! loop) over the `redis` crate, the crate `redlease-redis` (re-exported here as [`adapter`])
//! has the conversions this driver uses, and `docs/embedding.md` the driver contract.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), redlease::Error> {
//! let client = redlease::Client::builder("redis://127.0.0.1/")
//!     .key_prefix("myapp")
//!     .build()?;
//!
//! // Wait up to 5 s for the lock; the lease lasts 10 s unless extended.
//! let guard = client
//!     .lock("invoice-42")
//!     .ttl(Duration::from_secs(10))
//!     .wait(Duration::from_secs(5))
//!     .acquire()?;
//! // Hand the fencing token to the resource so it can refuse a stale holder.
//! println!("writing with fence {}", guard.fence());
//! guard.release()?; // Err(NotOwner) if the lease had expired meanwhile
//!
//! // Or the closure form, releasing on the way out:
//! let total = client.lock("invoice-42").with_lock(|g| g.fence() * 2)?;
//! # let _ = total;
//! # Ok(()) }
//! ```
//!
//! **Testing without Redis** (cargo feature `memory`, for dev-dependencies):
//! `memory::MemoryServer::client` runs this whole API on an in-process server that
//! executes the same Lua scripts, every timer on a clock the test moves; see
//! `docs/testing.md`.
//!
//! **Watching it**: spans and events through `tracing` (acquisitions, releases, renewal
//! failures, lost leases, the listener, the pool, queue jobs), and [`Client::status`] for a
//! snapshot; see `docs/observability.md`. With the cargo feature `metrics`, counters and
//! histograms through the `metrics` crate's facade (`metrics` lists their names).
//! Least-privilege ACLs: `docs/acl.md`.
//!
//! **Every blocking call has a deadline**: acquisition waits at most its `wait` (plus one
//! reply timeout for an attempt in flight), release, extension and inspection at most the
//! client's op timeout, a pooled connection at most the connect timeout.
//!
//! # How the crate is laid out
//!
//! The modules are layers, read top to bottom; a layer uses only the layers below it
//! (`tests/layers.rs` at the workspace root checks every `crate::` path):
//!
//! 1. `api`: the public handles: [`Client`] and [`ClientBuilder`], the locks, legacy
//!    locks, [`RedLock`](lock::RedLock), the queue, the rate limiter, inspection and [`Client::status`].
//! 2. `runtime`: the client's threads: the watchdog that renews leases and beats the
//!    registry of live clients.
//! 3. `driver`: the one driver loop that runs core machines over nodes, on a clock, with
//!    the client's entropy.
//! 4. `transport` and `memory`, side by side (neither uses the other): where a batch goes.
//!    `transport` is Redis: the connection pool, Sentinel, Cluster routing and shards, and
//!    the pub/sub listener that wakes waits; `memory` (feature `memory`) the in-process
//!    server.
//! 5. `wire`: bytes to and from one server: RESP, connection set-up and TLS, the
//!    redaction of secrets in what is shown.
//! 6. `observe`: what the driver reports (`tracing` events and spans, metrics); every
//!    layer may use it, it uses none.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

// The layers (see "How the crate is laid out" above).
mod api;
mod driver;
#[cfg(feature = "memory")]
pub mod memory;
mod observe;
mod runtime;
mod transport;
mod wire;

#[cfg(feature = "metrics")]
pub use observe::metrics;

pub use api::client::{Client, ClientBuilder};
pub use redlease_core::{Error, FailureKind, InvalidArgument, LossReason, TransportFailure};
pub use wire::connect::ConnectionTarget;

/// Locks: the lease lock and its family ([`Client::lock`], [`Client::reentrant_lock`],
/// [`Client::fair_lock`], [`Client::read_lock`] / [`Client::write_lock`],
/// [`Client::semaphore`]), the legacy lock ([`Client::legacy_lock`]) and RedLock over
/// independent masters.
pub mod lock {
    pub use crate::api::legacy::{LegacyAlgorithm, LegacyGuard, LegacyLockBuilder};
    pub use crate::api::lock::{LockBuilder, LockGuard, WithLockError};
    pub use crate::api::redlock::{QuorumLockBuilder, RedLock, RedLockBuilder, RedLockGuard};
    pub use redlease_core::lease::{LeaseKind, LeaseState, LockKind};
    pub use redlease_core::semaphore::SemaphoreState;
}

/// Queues ([`Client::queue`]): push, take, workers, groups, batches, pause, timeouts and
/// cancellation; deduplication, the dead list and durable schedules in their own modules.
pub mod queue {
    pub use crate::api::queue::{
        AckedAndNext, CancelReason, Cancelled, CancelledJobs, DEFAULT_GRACE, GroupLimits,
        HandlerError, Job, JobError, LimitsOf, OnTimeout, PushOptions, Queue, Retry, WorkerReport,
        Workers,
    };
    pub use redlease_core::queue::groups::{GroupCursor, GroupInfo, GroupPage, GroupState, JobRef};
    pub use redlease_core::queue::{NewJob, Pushed, QueueStats};

    /// Deduplication modes of a push ([`Queue::push_dedup`]).
    pub mod dedup {
        pub use redlease_core::queue::{Dedup, DedupOutcome, JobState};
    }

    /// The dead list: its jobs, filters for bulk actions, retention.
    pub mod dead {
        pub use redlease_core::queue::DeadJob;
        pub use redlease_core::queue::dead::{DeadAction, DeadFilter, DeadRetention, DeathCause};
    }

    /// Durable schedules ([`Queue::schedule`]).
    pub mod schedule {
        pub use redlease_core::queue::schedule::{Missed, Schedule, ScheduleInfo, Upserted};
    }
}

/// A GCRA rate limiter on the server's clock, shared by a fleet ([`Client::rate_limiter`]).
pub mod rate {
    pub use crate::api::rate_limit::{Decision, RateLimit, RateLimiter, RateLimiterBuilder};
}

/// Reading what is held and queued: who holds a lock, the clients registered, a queue's
/// jobs and counts, and this client's own status ([`Client::status`]).
pub mod inspect {
    pub use crate::api::inspect::LockListing;
    pub use crate::api::status::{ClientStatus, PoolStatus};
    pub use crate::transport::listener::ListenerStatus;
    pub use redlease_core::inspect::registry::{ClientInfo, ClientRecord};
    pub use redlease_core::inspect::{FoundLock, Holder, KindInfo, LockInfo, Primitive};
    pub use redlease_core::queue::inspect::{JobCursor, JobInfo, JobPage, JobStatus, MinuteCounts};
}

// The root paths of the types above, before they moved into modules: kept hidden for one
// release so that code written against them still builds (CHANGELOG: old to new paths).

/// The channel crate of [`LockGuard::lost`](lock::LockGuard::lost) and [`Job::lost`](queue::Job::lost), re-exported so that your
/// `select!` uses the same version as this crate.
pub use crossbeam_channel;
/// The receiver of [`LockGuard::lost`](lock::LockGuard::lost) and [`Job::lost`](queue::Job::lost).
pub use crossbeam_channel::Receiver;
/// The accepted range of every setting (durations, permits, pool sizes) and why.
pub use redlease_core::limits;

/// The sans-IO core this crate drives, for running its machines yourself.
pub use redlease_core as core;

/// The conversions between the `redis` crate and the core that this driver uses itself:
/// the crate [`redlease_redis`], re-exported. A driver of your own (async, an event loop)
/// can depend on `redlease-redis` alone, without this crate's pool, threads and RESP client.
pub use redlease_redis as adapter;

/// The README's examples, compiled as doctests so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
