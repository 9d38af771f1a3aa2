//! Every Lua script of the lock family, built from the shared
//! [prelude](crate::script::prelude) with its SHA-1 at compile time (see [`script!`](crate::script!)).
//!
//! Reply conventions shared by all kinds, so that one acquisition machine and one
//! owner-checked operation machine serve them all:
//! - acquire: `{1, fence}` held (`lua/acquire.lua` and `lua/permit_acquire.lua`: the bare
//!   fence, 0 for a permit, an integer reply being cheaper for the server than a table),
//!   `{0, pttl}` busy (`pttl` -2 when unknown);
//! - release and extend: `1` done, `0` gone (expired), `-1` another holder has it;
//! - inspect: `{1, ms left}` ours, `{0, -2}` gone, `{-1, ms left}` another's.

use crate::script;
use crate::script::Script;
use crate::script::prelude::*;

/// `lua/acquire.lua`
pub static ACQUIRE: Script = script!("lease_acquire", [], include_str!("lua/acquire.lua"));

/// `lua/release.lua`
pub static RELEASE: Script = script!(
    "lease_release",
    [NOW_MS, REMEMBER],
    include_str!("lua/release.lua")
);

/// `lua/extend.lua`
pub static EXTEND: Script = script!("lease_extend", [], include_str!("lua/extend.lua"));

/// `lua/inspect.lua`
pub static INSPECT: Script =
    script!("lease_inspect", [], include_str!("lua/inspect.lua")).read_only();

/// `lua/reentrant_acquire.lua`
pub static REENTRANT_ACQUIRE: Script = script!(
    "reentrant_acquire",
    [NOW_MS, NOW_US, FENCE, UNDONE],
    include_str!("lua/reentrant_acquire.lua")
);

/// `lua/reentrant_release.lua`
pub static REENTRANT_RELEASE: Script = script!(
    "reentrant_release",
    [NOTIFY],
    include_str!("lua/reentrant_release.lua")
);

/// `lua/reentrant_extend.lua`
pub static REENTRANT_EXTEND: Script = script!(
    "reentrant_extend",
    [],
    include_str!("lua/reentrant_extend.lua")
);

/// `lua/reentrant_inspect.lua`
pub static REENTRANT_INSPECT: Script = script!(
    "reentrant_inspect",
    [],
    include_str!("lua/reentrant_inspect.lua")
)
.read_only();

/// `lua/reentrant_undo.lua`
pub static REENTRANT_UNDO: Script = script!(
    "reentrant_undo",
    [NOW_MS, REMEMBER, NOTIFY],
    include_str!("lua/reentrant_undo.lua")
);

/// `lua/fair_acquire.lua`
pub static FAIR_ACQUIRE: Script = script!(
    "fair_acquire",
    [NOW_MS, NOW_US, FENCE, UNDONE],
    include_str!("lua/fair_acquire.lua")
);

/// `lua/fair_release.lua`
pub static FAIR_RELEASE: Script = script!(
    "fair_release",
    [NOW_MS, REMEMBER, NOTIFY],
    include_str!("lua/fair_release.lua")
);

/// `lua/fair_cancel.lua`
pub static FAIR_CANCEL: Script =
    script!("fair_cancel", [NOTIFY], include_str!("lua/fair_cancel.lua"));

/// `lua/read_acquire.lua`
pub static READ_ACQUIRE: Script = script!(
    "read_acquire",
    [NOW_MS, UNDONE],
    include_str!("lua/read_acquire.lua")
);

/// `lua/read_release.lua`
pub static READ_RELEASE: Script = script!(
    "read_release",
    [NOW_MS, REMEMBER, NOTIFY],
    include_str!("lua/read_release.lua")
);

/// `lua/read_extend.lua`
pub static READ_EXTEND: Script = script!("read_extend", [], include_str!("lua/read_extend.lua"));

/// `lua/read_inspect.lua`
pub static READ_INSPECT: Script = script!(
    "read_inspect",
    [NOW_MS],
    include_str!("lua/read_inspect.lua")
)
.read_only();

/// `lua/write_acquire.lua`
pub static WRITE_ACQUIRE: Script = script!(
    "write_acquire",
    [NOW_MS, NOW_US, FENCE, UNDONE],
    include_str!("lua/write_acquire.lua")
);

/// `lua/write_release.lua`
pub static WRITE_RELEASE: Script = script!(
    "write_release",
    [NOW_MS, REMEMBER, NOTIFY],
    include_str!("lua/write_release.lua")
);

/// `lua/write_cancel.lua`
pub static WRITE_CANCEL: Script = script!(
    "write_cancel",
    [NOTIFY],
    include_str!("lua/write_cancel.lua")
);

/// `lua/permit_acquire.lua`
pub static PERMIT_ACQUIRE: Script =
    script!("permit_acquire", [], include_str!("lua/permit_acquire.lua"));

/// `lua/permit_release.lua`
pub static PERMIT_RELEASE: Script = script!(
    "permit_release",
    [REMEMBER],
    include_str!("lua/permit_release.lua")
);

/// `lua/permit_cancel.lua`
pub static PERMIT_CANCEL: Script = script!(
    "permit_cancel",
    [NOTIFY],
    include_str!("lua/permit_cancel.lua")
);

/// `lua/semaphore_set.lua`
pub static SEMAPHORE_SET: Script = script!(
    "semaphore_set",
    [NOTIFY],
    include_str!("lua/semaphore_set.lua")
);

/// `lua/semaphore_state.lua`
pub static SEMAPHORE_STATE: Script = script!(
    "semaphore_state",
    [NOW_MS],
    include_str!("lua/semaphore_state.lua")
)
.read_only();

/// Every script (for tests and for tools that preload them; the driver loads none: a call
/// goes out as `EVALSHA` and is resent as `EVAL` on `NOSCRIPT`).
pub static ALL: [&Script; 24] = [
    &ACQUIRE,
    &RELEASE,
    &EXTEND,
    &INSPECT,
    &REENTRANT_ACQUIRE,
    &REENTRANT_RELEASE,
    &REENTRANT_EXTEND,
    &REENTRANT_INSPECT,
    &REENTRANT_UNDO,
    &FAIR_ACQUIRE,
    &FAIR_RELEASE,
    &FAIR_CANCEL,
    &READ_ACQUIRE,
    &READ_RELEASE,
    &READ_EXTEND,
    &READ_INSPECT,
    &WRITE_ACQUIRE,
    &WRITE_RELEASE,
    &WRITE_CANCEL,
    &PERMIT_ACQUIRE,
    &PERMIT_RELEASE,
    &PERMIT_CANCEL,
    &SEMAPHORE_SET,
    &SEMAPHORE_STATE,
];

#[cfg(test)]
mod tests {
    /// Digests match their sources; each script includes exactly the prelude it calls.
    #[test]
    fn scripts_match_their_digests_and_prelude() {
        crate::script::tests::check_scripts(&super::ALL);
    }
}
