//! The queue's Lua scripts, with their SHA-1 (checked by a unit test).

use crate::script::Script;

/// `lua/push.lua`
pub static PUSH: Script = Script {
    name: "queue_push",
    source: include_str!("lua/push.lua"),
    sha1: "21964c14ab99af6ffbccf9c9e2f287ad13aa2d63",
};

/// `lua/dequeue.lua`
pub static DEQUEUE: Script = Script {
    name: "queue_dequeue",
    source: include_str!("lua/dequeue.lua"),
    sha1: "25b262cf772ce300096d712f01906d346428e798",
};

/// `lua/ack.lua`
pub static ACK: Script = Script {
    name: "queue_ack",
    source: include_str!("lua/ack.lua"),
    sha1: "da60000452e37c0ad384ac3262d523d63af2c868",
};

/// `lua/nack.lua`
pub static NACK: Script = Script {
    name: "queue_nack",
    source: include_str!("lua/nack.lua"),
    sha1: "79a99e71404543e382a21d381ec31d769a842309",
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
    sha1: "9ef7f51b1582efd6ef8c6c361af86681fd634a54",
};

/// `lua/requeue.lua`
pub static REQUEUE: Script = Script {
    name: "queue_requeue",
    source: include_str!("lua/requeue.lua"),
    sha1: "b13de13051a6c3b7effd700a9f76e3c8183a3ae5",
};

/// Every queue script.
pub static ALL: [&Script; 9] = [
    &PUSH,
    &DEQUEUE,
    &ACK,
    &NACK,
    &JOB_EXTEND,
    &JOB_INSPECT,
    &STATS,
    &DEAD,
    &REQUEUE,
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
