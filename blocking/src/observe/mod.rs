//! Observability: what the driver reports. It owns the `tracing` spans and events
//! (`events`), the `metrics` facade's names and recording (`metrics`, feature `metrics`)
//! and the words both count by (`outcome`). It is the lowest layer: every other layer may
//! report through it, and it uses none of them.

pub(crate) mod events;
#[cfg(feature = "metrics")]
pub mod metrics;
pub(crate) mod outcome;
