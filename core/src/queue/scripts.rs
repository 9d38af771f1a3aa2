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
    sha1: "6cac11ff7c0216a92a31e452f878fed24bc6e972",
};

/// `lua/ack.lua`
pub static ACK: Script = Script {
    name: "queue_ack",
    source: include_str!("lua/ack.lua"),
    sha1: "2d114ef9767d21416a01427fae4892fea4b2a2f6",
};

/// `lua/nack.lua`
pub static NACK: Script = Script {
    name: "queue_nack",
    source: include_str!("lua/nack.lua"),
    sha1: "ae63c468e2baeb75a90fc5beda2775f212cb6a0b",
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
    sha1: "3cc94f2813e4810b1d8d2fed08b8e0be2e24a67f",
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
    sha1: "3794514bc178251c29ff2ca8842dc9aae313b7bc",
};

/// `lua/forget.lua`
pub static FORGET: Script = Script {
    name: "queue_forget",
    source: include_str!("lua/forget.lua"),
    sha1: "f67cefa05717571ae9a44c391a92159f6071e4ff",
};

/// `lua/ack_take.lua`
pub static ACK_TAKE: Script = Script {
    name: "queue_ack_take",
    source: include_str!("lua/ack_take.lua"),
    sha1: "c1588ababa93a2953172b5bedb503b067912e87c",
};

/// Every queue script.
pub static ALL: [&Script; 12] = [
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
    &ACK_TAKE,
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
