//! The scenarios, by area. A scenario is a `fn(&Ctx) -> Measurement` listed in `SCENARIOS`
//! (benches/redis.rs).

pub mod bounded;
pub mod contended;
pub mod flash_sale;
pub mod lock;
pub mod memory;
pub mod queue;
pub mod rate;
pub mod watchdog;
