//! The runtime: the threads a client runs beside the calls of the application. It owns
//! the watchdog (one scheduling thread, one renewal thread per node) that renews watched
//! leases and reports their loss, and the client's entry in the registry of live clients,
//! whose heartbeat the watchdog sends. It runs its renewals through the driver and may
//! use the layers below it (driver, transport, the in-process server, wire, observe),
//! never the public API.

pub(crate) mod registry;
pub(crate) mod watchdog;
