//! # redlease-tokio
//!
//! The async driver of redlease: the sans-IO machines of `redlease-core` run on tokio, over
//! the async `redis` crate (through `redlease-redis`).
//!
//! **Shape.** A [`Client`] is a cheap handle (clone it freely). Each client has one driver
//! task that owns the connection, the pub/sub subscription, every running machine and one
//! timer: it sleeps until the earliest deadline of any lease renewal or waiter. The
//! watchdog is a set of deadlines inside that task (the core's
//! [`Renewals`](redlease_core::renewal::Renewals)), not a task per lease. Time and task
//! spawning go through [`Runtime`]; [`Tokio`] is the one users get.
//!
//! **What it covers.** The fenced lease lock: [`Lock::try_acquire`], [`Lock::acquire`]
//! (woken by the release message, with the core's retry pause as the fallback), a
//! [`LockGuard`] renewed by the driver, with a loss signal and an owner-checked release.
//! Other primitives (the other locks, semaphores, rate limits, queues) are not in the
//! async driver yet.
//!
//! **What it never does.** It never blocks a thread, and a guard's `Drop` never needs a
//! runtime: it only queues a release for the driver.
//!
//! ```no_run
//! # async fn run() -> Result<(), redlease_tokio::Error> {
//! let client = redlease_tokio::Client::builder("redis://127.0.0.1/")
//!     .prefix("billing")
//!     .build()
//!     .await?;
//! let lock = client.lock("invoice-42")?;
//! let guard = lock.acquire(std::time::Duration::from_secs(5)).await?;
//! // Pass the fence to the storage you write to: it refuses a smaller one.
//! println!("holding invoice-42 with fence {}", guard.fence());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod client;
mod driver;
mod error;
mod lock;
mod runtime;

pub use client::{Client, ClientBuilder};
pub use error::Error;
pub use lock::{Lock, LockGuard};
pub use runtime::{Runtime, Tokio};

/// docs/async.md, its code compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/async.md")]
pub struct AsyncGuideDoctests;
