//! The queue's Lua scripts, with their SHA-1 (checked by a unit test).

use crate::script::Script;

/// `lua/push.lua`
pub static PUSH: Script = Script {
    name: "queue_push",
    source: include_str!("lua/push.lua"),
    sha1: "7521af6261467005f554b5c142569357d783a3b3",
};

/// `lua/dequeue.lua`
pub static DEQUEUE: Script = Script {
    name: "queue_dequeue",
    source: include_str!("lua/dequeue.lua"),
    sha1: "355a948eaa371cd9ee43293ee8954a6e8a1e98d6",
};

/// `lua/ack.lua`
pub static ACK: Script = Script {
    name: "queue_ack",
    source: include_str!("lua/ack.lua"),
    sha1: "7479cf0c6f5c6bddbabf203daf2ad8aef2559bd7",
};

/// `lua/nack.lua`
pub static NACK: Script = Script {
    name: "queue_nack",
    source: include_str!("lua/nack.lua"),
    sha1: "c821a1a57f8afeb9ebadb9f1703fa02ad4d218b2",
};

/// `lua/job_extend.lua`
pub static JOB_EXTEND: Script = Script {
    name: "queue_job_extend",
    source: include_str!("lua/job_extend.lua"),
    sha1: "857474e160947870b13e449bc87d1217138bc1da",
};

/// `lua/job_inspect.lua`
pub static JOB_INSPECT: Script = Script {
    name: "queue_job_inspect",
    source: include_str!("lua/job_inspect.lua"),
    sha1: "3b183888f85cc85bdad4f53128a276d91eeb345a",
};

/// `lua/stats.lua`
pub static STATS: Script = Script {
    name: "queue_stats",
    source: include_str!("lua/stats.lua"),
    sha1: "451fa0ea08660def687b574a1ccd5b30976c46e2",
};

/// `lua/dead.lua`
pub static DEAD: Script = Script {
    name: "queue_dead",
    source: include_str!("lua/dead.lua"),
    sha1: "95051ad62a5ca537950c2a9b150b0b16b893326f",
};

/// `lua/requeue.lua`
pub static REQUEUE: Script = Script {
    name: "queue_requeue",
    source: include_str!("lua/requeue.lua"),
    sha1: "57ff8c3ffd73d7c32b1bb6e26093f1f5f8dfbb16",
};

/// `lua/untake.lua`
pub static UNTAKE: Script = Script {
    name: "queue_untake",
    source: include_str!("lua/untake.lua"),
    sha1: "45571334c4010dd7873f72982102c63df5a3c00e",
};

/// `lua/forget.lua`
pub static FORGET: Script = Script {
    name: "queue_forget",
    source: include_str!("lua/forget.lua"),
    sha1: "b8e275f346c3dc0ca54404173445b1d01879b857",
};

/// Every queue script.
pub static ALL: [&Script; 11] = [
    &PUSH,
    &DEQUEUE,
    &ACK,
    &NACK,
    &JOB_EXTEND,
    &JOB_INSPECT,
    &STATS,
    &DEAD,
    &REQUEUE,
    &UNTAKE,
    &FORGET,
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
