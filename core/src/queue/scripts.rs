//! The queue's Lua scripts, built from the shared
//! [prelude](crate::script::prelude) with their SHA-1 at compile time (see [`script!`](crate::script!)).

use crate::script;
use crate::script::Script;
use crate::script::prelude::*;

/// `lua/reclaim.lua`: the take scripts' shared part (after [`READY`], whose functions it
/// calls): `overdue`, `reclaim`, `lease_next` and `next_wait`, on the take scripts' keys.
pub const RECLAIM: &str = include_str!("lua/reclaim.lua");

/// `lua/dead_list.lua`: the dead list's retention and deletion (`dead_keep`, `trim_dead`,
/// `erase_dead`), naming a queue's keys after its dead list. After [`DEDUP`] (a deleted
/// job's dedup entry goes with it).
pub const DEAD_LIST: &str = include_str!("lua/dead_list.lua");

/// `lua/bury.lua`: `bury`, a job's death (recorded, counted, the retention applied); after
/// [`COUNT`] and [`DEAD_LIST`].
pub const BURY: &str = include_str!("lua/bury.lua");

/// `lua/revive.lua`: `revive`, a dead job back to ready; after [`READY`] and [`NOTIFY`].
pub const REVIVE: &str = include_str!("lua/revive.lua");

/// `lua/count.lua`: `counting(key, now)` and `count(event, n)`, the per-minute counts of
/// what happened to a queue, called by the scripts that move its jobs (before
/// [`RECLAIM`], which counts too).
pub const COUNT: &str = include_str!("lua/count.lua");

/// `lua/group_free.lua`: `group_freed(ready_key, id)`, a grouped job's end of lease (its
/// group's slot freed, the group back from the set of full groups), called by the scripts
/// that end a lease other than the group's own ack.
pub const GROUP_FREE: &str = include_str!("lua/group_free.lua");

/// `lua/inspect.lua`: the inspection scripts' shared part, `job_fields`.
pub const INSPECT: &str = include_str!("lua/inspect.lua");

/// `lua/push.lua`
pub static PUSH: Script = script!(
    "queue_push",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS_UP,
        READY,
        NOTIFY,
        COUNT
    ],
    include_str!("lua/push.lua")
);

/// `lua/dequeue.lua`
pub static DEQUEUE: Script = script!(
    "queue_dequeue",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        READY,
        COUNT,
        DEDUP,
        DEAD_LIST,
        DEDUP_RELEASE,
        BURY,
        GROUP_FREE,
        RECLAIM
    ],
    include_str!("lua/dequeue.lua")
);

/// `lua/ack.lua`
pub static ACK: Script = script!(
    "queue_ack",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        REMEMBER,
        NOTIFY,
        READY,
        DEDUP_RELEASE,
        COUNT
    ],
    include_str!("lua/ack.lua")
);

/// `lua/nack.lua`
pub static NACK: Script = script!(
    "queue_nack",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS_UP,
        REMEMBER,
        READY,
        NOTIFY,
        COUNT,
        DEDUP,
        DEAD_LIST,
        DEDUP_RELEASE,
        BURY,
        GROUP_FREE
    ],
    include_str!("lua/nack.lua")
);

/// `lua/job_extend.lua`
pub static JOB_EXTEND: Script = script!(
    "queue_job_extend",
    [NOW_MS],
    include_str!("lua/job_extend.lua")
);

/// `lua/job_inspect.lua`
pub static JOB_INSPECT: Script = script!(
    "queue_job_inspect",
    [NOW_MS],
    include_str!("lua/job_inspect.lua")
)
.read_only();

/// `lua/stats.lua`
pub static STATS: Script =
    script!("queue_stats", [NOW_MS], include_str!("lua/stats.lua")).read_only();

/// `lua/dead.lua`
pub static DEAD: Script = script!("queue_dead", [], include_str!("lua/dead.lua")).read_only();

/// `lua/dead_act.lua`: requeue or delete the dead jobs a filter picks, a page at a time.
pub static DEAD_ACT: Script = script!(
    "queue_dead_act",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        READY,
        NOTIFY,
        DEDUP,
        DEAD_LIST,
        REVIVE
    ],
    include_str!("lua/dead_act.lua")
);

/// `lua/dead_keep.lua`: set the dead list's retention and apply it.
pub static DEAD_KEEP: Script = script!(
    "queue_dead_keep",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        DEDUP,
        DEAD_LIST
    ],
    include_str!("lua/dead_keep.lua")
);

/// `lua/requeue.lua`
pub static REQUEUE: Script = script!(
    "queue_requeue",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        READY,
        NOTIFY,
        REVIVE
    ],
    include_str!("lua/requeue.lua")
);

/// `lua/untake.lua`
pub static UNTAKE: Script = script!(
    "queue_untake",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        REMEMBER,
        READY,
        NOTIFY,
        COUNT,
        GROUP_FREE
    ],
    include_str!("lua/untake.lua")
);

/// `lua/forget.lua`
pub static FORGET: Script = script!(
    "queue_forget",
    [crate::script::prelude::UNDECLARED_KEYS, DEDUP, DEAD_LIST],
    include_str!("lua/forget.lua")
);

/// `lua/ack_take.lua`
pub static ACK_TAKE: Script = script!(
    "queue_ack_take",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        READY,
        NOTIFY,
        COUNT,
        DEDUP,
        DEAD_LIST,
        DEDUP_RELEASE,
        BURY,
        GROUP_FREE,
        RECLAIM
    ],
    include_str!("lua/ack_take.lua")
);

/// `lua/inspect_list.lua`: a page of the jobs in one state (read only).
pub static INSPECT_LIST: Script = script!(
    "queue_inspect_list",
    [NOW_MS, INSPECT],
    include_str!("lua/inspect_list.lua")
)
.read_only();

/// `lua/inspect_job.lua`: one job by id (read only).
pub static INSPECT_JOB: Script = script!(
    "queue_inspect_job",
    [NOW_MS, INSPECT],
    include_str!("lua/inspect_job.lua")
)
.read_only();

/// `lua/counts.lua`: the per-minute counts over a range of minutes (read only).
pub static COUNTS: Script = script!(
    "queue_counts",
    [crate::script::prelude::UNDECLARED_KEYS],
    include_str!("lua/counts.lua")
)
.read_only();

/// `lua/pause.lua`
pub static PAUSE: Script = script!(
    "queue_pause",
    [NOW_MS, NOTIFY],
    include_str!("lua/pause.lua")
);

/// `lua/pause_state.lua`: when a queue or one of its groups was paused (read only).
pub static PAUSE_STATE: Script =
    script!("queue_pause_state", [], include_str!("lua/pause_state.lua")).read_only();

/// `lua/take_batch.lua`
pub static TAKE_BATCH: Script = script!(
    "queue_take_batch",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        READY,
        COUNT,
        DEDUP,
        DEAD_LIST,
        DEDUP_RELEASE,
        BURY,
        GROUP_FREE,
        RECLAIM
    ],
    include_str!("lua/take_batch.lua")
);

/// `lua/ack_many.lua`
pub static ACK_MANY: Script = script!(
    "queue_ack_many",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        NOTIFY,
        READY,
        DEDUP_RELEASE,
        COUNT
    ],
    include_str!("lua/ack_many.lua")
);

/// `lua/cancel.lua`
pub static CANCEL: Script = script!(
    "queue_cancel",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS,
        REMEMBER,
        NOTIFY,
        READY,
        DEDUP,
        COUNT,
        DEAD_LIST,
        DEDUP_RELEASE,
        BURY,
        GROUP_FREE
    ],
    include_str!("lua/cancel.lua")
);

/// `lua/cancel_message.lua`
pub static CANCEL_MESSAGE: Script = script!(
    "queue_cancel_message",
    [NOW_MS],
    include_str!("lua/cancel_message.lua")
);

/// `lua/push_dedup.lua`
pub static PUSH_DEDUP: Script = script!(
    "queue_push_dedup",
    [
        crate::script::prelude::UNDECLARED_KEYS,
        NOW_MS_UP,
        READY,
        NOTIFY,
        COUNT
    ],
    include_str!("lua/push_dedup.lua")
);

/// Every queue script.
pub static ALL: [&Script; 24] = [
    &PUSH,
    &DEQUEUE,
    &ACK,
    &NACK,
    &JOB_EXTEND,
    &JOB_INSPECT,
    &STATS,
    &DEAD,
    &DEAD_ACT,
    &DEAD_KEEP,
    &REQUEUE,
    &UNTAKE,
    &FORGET,
    &ACK_TAKE,
    &CANCEL,
    &CANCEL_MESSAGE,
    &INSPECT_LIST,
    &INSPECT_JOB,
    &COUNTS,
    &PUSH_DEDUP,
    &PAUSE,
    &PAUSE_STATE,
    &TAKE_BATCH,
    &ACK_MANY,
];

#[cfg(test)]
mod tests {
    /// Digests match their sources; each script includes exactly the prelude it calls.
    #[test]
    fn scripts_match_their_digests_and_prelude() {
        crate::script::tests::check_scripts(&super::ALL);
    }
}
