//! The rate limiter's Lua scripts, built from the shared [prelude](crate::script::prelude)
//! (its GCRA engine, [`GCRA`]) with their SHA-1 at compile time.

use crate::script;
use crate::script::Script;
use crate::script::prelude::GCRA;

/// `lua/throttle.lua`: one decision (take or peek) on the server clock. Replies
/// `{allowed, remaining, retry_after µs, reset_after µs, server time µs}`.
pub static THROTTLE: Script = script!("rate_throttle", [GCRA], include_str!("lua/throttle.lua"));

/// `lua/reset.lua`: forgets the limiter's state (full again). Replies 1 if there was some.
pub static RESET: Script = script!("rate_reset", [], include_str!("lua/reset.lua"));

/// Every script of the rate limiter.
pub static ALL: [&Script; 2] = [&THROTTLE, &RESET];

#[cfg(test)]
mod tests {
    /// Digests match their sources; each script includes exactly the prelude it calls.
    #[test]
    fn scripts_match_their_digests_and_prelude() {
        crate::script::tests::check_scripts(&super::ALL);
    }
}
