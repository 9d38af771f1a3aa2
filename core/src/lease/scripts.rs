//! Every Lua script of the lock family, with its SHA-1 (checked by a unit test).
//!
//! Reply conventions shared by all kinds, so that one acquisition machine and one
//! owner-checked operation machine serve them all:
//! - acquire: `{1, fence}` held, `{0, pttl}` busy (`pttl` -2 when unknown);
//! - release and extend: `1` done, `0` gone (expired), `-1` another holder has it;
//! - inspect: `{1, ms left}` ours, `{0, -2}` gone, `{-1, ms left}` another's.

use crate::script::Script;

/// `lua/acquire.lua`
pub static ACQUIRE: Script = Script {
    name: "lease_acquire",
    source: include_str!("lua/acquire.lua"),
    sha1: "07e7dd6c2f4e8b7fb53a0876f2af5e1cd9706d3c",
};

/// `lua/release.lua`
pub static RELEASE: Script = Script {
    name: "lease_release",
    source: include_str!("lua/release.lua"),
    sha1: "66f55b3ff81012aee76c0f60b0ba89c73651b2db",
};

/// `lua/extend.lua`
pub static EXTEND: Script = Script {
    name: "lease_extend",
    source: include_str!("lua/extend.lua"),
    sha1: "8573b6279b1ed8fb8a9bf258c8d48ab06f8c8a5e",
};

/// `lua/inspect.lua`
pub static INSPECT: Script = Script {
    name: "lease_inspect",
    source: include_str!("lua/inspect.lua"),
    sha1: "376257f2611e8e27f2c99f007a474fecedf66d3e",
};

/// `lua/reentrant_acquire.lua`
pub static REENTRANT_ACQUIRE: Script = Script {
    name: "reentrant_acquire",
    source: include_str!("lua/reentrant_acquire.lua"),
    sha1: "260ec6b882e86d8a5b5d661a1202c352cc2c6c67",
};

/// `lua/reentrant_release.lua`
pub static REENTRANT_RELEASE: Script = Script {
    name: "reentrant_release",
    source: include_str!("lua/reentrant_release.lua"),
    sha1: "ad9b4cc1d909f35090a0e0be2c4d6a5254aa1f1c",
};

/// `lua/reentrant_extend.lua`
pub static REENTRANT_EXTEND: Script = Script {
    name: "reentrant_extend",
    source: include_str!("lua/reentrant_extend.lua"),
    sha1: "4bd7f2582e5f144168ea03b6326863a391471adf",
};

/// `lua/reentrant_inspect.lua`
pub static REENTRANT_INSPECT: Script = Script {
    name: "reentrant_inspect",
    source: include_str!("lua/reentrant_inspect.lua"),
    sha1: "d2f974a4efdd8ea3a59a37b516e9663f77845b15",
};

/// `lua/reentrant_undo.lua`
pub static REENTRANT_UNDO: Script = Script {
    name: "reentrant_undo",
    source: include_str!("lua/reentrant_undo.lua"),
    sha1: "db4bc98a5330d27691846e45b923e0509f4c937d",
};

/// `lua/fair_acquire.lua`
pub static FAIR_ACQUIRE: Script = Script {
    name: "fair_acquire",
    source: include_str!("lua/fair_acquire.lua"),
    sha1: "9eed879b4828774938fb6819f002562c36989ca2",
};

/// `lua/fair_release.lua`
pub static FAIR_RELEASE: Script = Script {
    name: "fair_release",
    source: include_str!("lua/fair_release.lua"),
    sha1: "04b357ea94edc997893eac4c60ad1e1601792a6e",
};

/// `lua/fair_cancel.lua`
pub static FAIR_CANCEL: Script = Script {
    name: "fair_cancel",
    source: include_str!("lua/fair_cancel.lua"),
    sha1: "555bce5cced135429a1bdfd32f7d7f69ea9fb3e2",
};

/// `lua/read_acquire.lua`
pub static READ_ACQUIRE: Script = Script {
    name: "read_acquire",
    source: include_str!("lua/read_acquire.lua"),
    sha1: "d5b8967c59c5293d2405eab1f47f1892f8203bf0",
};

/// `lua/read_release.lua`
pub static READ_RELEASE: Script = Script {
    name: "read_release",
    source: include_str!("lua/read_release.lua"),
    sha1: "fef803b451082f0999accd70201ae5bfd052ea36",
};

/// `lua/read_extend.lua`
pub static READ_EXTEND: Script = Script {
    name: "read_extend",
    source: include_str!("lua/read_extend.lua"),
    sha1: "6a51e123cd93262a10c32a21b52949c0a043c5c4",
};

/// `lua/read_inspect.lua`
pub static READ_INSPECT: Script = Script {
    name: "read_inspect",
    source: include_str!("lua/read_inspect.lua"),
    sha1: "ca786807ff4f3ab70a5e21800617046d72c16655",
};

/// `lua/write_acquire.lua`
pub static WRITE_ACQUIRE: Script = Script {
    name: "write_acquire",
    source: include_str!("lua/write_acquire.lua"),
    sha1: "8609dee82d969990f31e47ef12b2492411e9cbf5",
};

/// `lua/write_release.lua`
pub static WRITE_RELEASE: Script = Script {
    name: "write_release",
    source: include_str!("lua/write_release.lua"),
    sha1: "e45918d48dfaee339ea82f1d0311cf9b73ddfceb",
};

/// `lua/write_cancel.lua`
pub static WRITE_CANCEL: Script = Script {
    name: "write_cancel",
    source: include_str!("lua/write_cancel.lua"),
    sha1: "ca897752025950291d2794afc60a97d4dcb928fe",
};

/// `lua/permit_acquire.lua`
pub static PERMIT_ACQUIRE: Script = Script {
    name: "permit_acquire",
    source: include_str!("lua/permit_acquire.lua"),
    sha1: "071da3f6c45f7472e942d712d92a84101bcaac61",
};

/// `lua/permit_release.lua`
pub static PERMIT_RELEASE: Script = Script {
    name: "permit_release",
    source: include_str!("lua/permit_release.lua"),
    sha1: "677e3514eacac0e4452fbfbab1accf854ff9afaa",
};

/// `lua/permit_cancel.lua`
pub static PERMIT_CANCEL: Script = Script {
    name: "permit_cancel",
    source: include_str!("lua/permit_cancel.lua"),
    sha1: "f5c4bc356534b63ddbeae1b7b20c61427f86907f",
};

/// `lua/semaphore_set.lua`
pub static SEMAPHORE_SET: Script = Script {
    name: "semaphore_set",
    source: include_str!("lua/semaphore_set.lua"),
    sha1: "0898a0aa653aa2480a249b16737fe26602f68088",
};

/// `lua/semaphore_state.lua`
pub static SEMAPHORE_STATE: Script = Script {
    name: "semaphore_state",
    source: include_str!("lua/semaphore_state.lua"),
    sha1: "392e2e5bf3cfdf8d10c99d9e89456ce7d5acd139",
};

/// Every script, for `SCRIPT LOAD` at start-up and for tests.
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
    #[test]
    fn script_digests_match_their_sources() {
        for s in super::ALL {
            let digest = sha1_smol::Sha1::from(s.source).digest().to_string();
            assert_eq!(digest, s.sha1, "digest of {}", s.name);
        }
    }
}
