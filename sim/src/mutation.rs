//! Known bugs the checker must catch, planted in the simulation (never in the library): a
//! script source or a command rewritten on its way into the in-process server, or a flag of
//! the sim's own driver.

use redlease_core::Command;
use redlease_core::lease::scripts::{ACQUIRE, EXTEND, RELEASE};
use redlease_core::queue::scripts::{ACK, ACK_TAKE, DEQUEUE, NACK, PUSH, PUSH_DEDUP};
use redlease_core::script::Script;

/// A planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// No bug.
    None,
    /// The lease release deletes the key whoever holds it (no owner check).
    ReleaseWithoutOwnerCheck,
    /// The lease acquire's fence is `counter + 1`, not floored by the server clock: it
    /// restarts when the counter is lost.
    FenceRestarts,
    /// The listener neither re-checks after subscribing nor after reconnecting: a waiter
    /// that missed the release message sleeps until its next retry.
    NoRecheckAfterMiss,
    /// A worker counts an ack whose reply was lost as done.
    AckTrustsLostReply,
    /// An unfenced lease lock's first attempt is sent as `SET key token PX ttl`, without
    /// `NX`: it takes the lock whoever holds it.
    SetWithoutNx,
    /// The ack accepts a token other than the current holder's (the stale delivery's ack
    /// succeeds and ends the holder's lease).
    AckWithoutOwnerCheck,
    /// The lease renewal answers success when the key is gone or another token's.
    ExtendSucceedsWhenGone,
    /// Issue 26 item 1: a retried take that finds the job already leased to its token
    /// returns it without renewing the lease (the first attempt's lease stands, while the
    /// worker counts its validity from the retry).
    TakeKeepsFirstLease,
    /// Issue 26 item 2: the ack of a delivery whose take had an unanswered attempt records
    /// no undone token, so that attempt, arriving late, takes another job for nobody.
    NoUndoneAfterRetry,
    /// Issue 26 item 3: a delayed push or a nack's backoff is due at the server's clock
    /// rounded down plus the delay (early by up to a millisecond).
    DueFloored,
    /// The group take counts a group full only past its limit (`>` for `>=`): one lease
    /// more than the concurrency limit.
    GroupOverLimit,
    /// Issue 29: the advance neither checks that the taken occurrence is the pending one
    /// nor that the next is after the server's time (the driver computes it from the taken
    /// occurrence's due time alone): a late redelivery re-creates an occurrence that
    /// already ran.
    NextFromDue,
    /// Issue 29: a push with a dedup id until done queues a new job even while the job
    /// holding the id lives.
    DedupIgnoresLiveJob,
    /// Issue 28 part 3: the take and the ack-and-take do not read the pause (a paused
    /// queue leases jobs).
    PauseIgnored,
    /// Issue 28: the group take skips the rate check (a group's and the whole queue's
    /// GCRA are updated but never deny).
    RateIgnored,
    /// Issue 28: the rate-limited answer (the group defer) does not move the job's base up,
    /// so the deferred delivery counts toward max deliveries.
    DeferCounts,
    /// Issue 29: a job pushed with a timeout is leased past its timeout + grace: the
    /// simulator's driver sets no hold limit (its watchdog renews on), and the take scripts
    /// keep no hold limit on the server (`hold_end` never gives one), so the handler's late
    /// ack still lands.
    TimeoutIgnored,
    /// Issue 30: an ack and take in one script counts the take alone (the ack is never
    /// counted when a job is handed over).
    AckTakeUncounted,
    /// Issue 30: a schedule's occurrence is pushed uncounted.
    OccurrenceUncounted,
    /// Issue 30: a rate-limited answer (the group defer) is not counted as deferred.
    DeferUncounted,
    /// A nack (retry or death) of a grouped job does not free its group slot
    /// (`group_freed` dropped from the nack script): the group stays full until the take
    /// checks the stale index entry against the in-flight set, after the lease would have
    /// run out.
    NackKeepsGroupSlot,
    /// The group take ignores the groups' concurrency (a full group is never set aside).
    GroupIgnoresConcurrency,
    /// The group ack does not free its job's group slot (`group_freed` dropped from the
    /// group ack script): the group stays full until a take checks the stale index entry.
    AckKeepsGroupSlot,
    /// A cancel of a grouped job in flight does not free its group slot (`group_freed`
    /// dropped from the cancel script).
    CancelKeepsGroupSlot,
    /// The sim's driver does not advance a schedule past an occurrence it cancelled (as the
    /// blocking driver's `cancel` does): the schedule is left with a pending occurrence that
    /// never runs.
    CancelSkipsAdvance,
    /// A cancel that forgets a job pushed with a dedup id does not make the keep-latest
    /// follow-up parked behind it ready (`dedup_release` dropped from the cancel script's
    /// remove path): the follow-up stays parked behind a job that is gone.
    CancelKeepsFollowUp,
    /// A death (to the dead list: a cancel, the last nack, a reclaim past max deliveries)
    /// does not make the keep-latest follow-up parked behind the dead job ready (`bury`'s
    /// `dedup_release` dropped, in every script that buries).
    DeathKeepsFollowUp,
}

impl Mutation {
    /// Every mutation (and `None`).
    pub const ALL: [Mutation; 28] = [
        Mutation::None,
        Mutation::ReleaseWithoutOwnerCheck,
        Mutation::FenceRestarts,
        Mutation::NoRecheckAfterMiss,
        Mutation::AckTrustsLostReply,
        Mutation::SetWithoutNx,
        Mutation::AckWithoutOwnerCheck,
        Mutation::ExtendSucceedsWhenGone,
        Mutation::TakeKeepsFirstLease,
        Mutation::NoUndoneAfterRetry,
        Mutation::DueFloored,
        Mutation::GroupOverLimit,
        Mutation::NextFromDue,
        Mutation::DedupIgnoresLiveJob,
        Mutation::PauseIgnored,
        Mutation::RateIgnored,
        Mutation::DeferCounts,
        Mutation::TimeoutIgnored,
        Mutation::AckTakeUncounted,
        Mutation::OccurrenceUncounted,
        Mutation::DeferUncounted,
        Mutation::NackKeepsGroupSlot,
        Mutation::GroupIgnoresConcurrency,
        Mutation::AckKeepsGroupSlot,
        Mutation::CancelKeepsGroupSlot,
        Mutation::CancelSkipsAdvance,
        Mutation::CancelKeepsFollowUp,
        Mutation::DeathKeepsFollowUp,
    ];

    /// The mutation named `name` (its variant's name, as `SIM_MUTATION` takes it).
    pub fn from_name(name: &str) -> Option<Mutation> {
        Self::ALL.into_iter().find(|m| format!("{m:?}") == name)
    }
}

/// A script and the source that replaces it.
struct Swap {
    script: &'static Script,
    from: &'static str,
    to: &'static str,
}

const RELEASE_SWAP: Swap = Swap {
    script: &RELEASE,
    from: "if holder == ARGV[1] then\n  redis.call('DEL', KEYS[1])",
    to: "if holder then\n  redis.call('DEL', KEYS[1])",
};

const FENCE_SWAP: Swap = Swap {
    script: &ACQUIRE,
    from: "if counter < us then",
    to: "if false then",
};

const ACK_SWAP: Swap = Swap {
    script: &ACK,
    from: "if holder ~= token then\n  local settled",
    to: "if not holder then\n  local settled",
};

const EXTEND_SWAP: Swap = Swap {
    script: &EXTEND,
    from: "if holder == false then\n  return 0\nend\nreturn -1",
    to: "return 1",
};

// Issue 26's three fixes, rewritten back into the defects they fixed.
const TAKE_REFRESH_SWAP: Swap = Swap {
    script: &DEQUEUE,
    from: "  if expiry < upto then\n    redis.call('ZADD', KEYS[6], upto, mine)",
    to: "  if false then\n    redis.call('ZADD', KEYS[6], upto, mine)",
};

const ACK_UNDONE_SWAP: Swap = Swap {
    script: &ACK,
    from: "if KEYS[15] then",
    to: "if false then",
};

const GROUP_LIMIT_SWAP: Swap = Swap {
    script: &redlease_core::queue::groups::GROUP_TAKE,
    from: "if live >= l.c then",
    to: "if live > l.c then",
};

const DUE_SWAPS: [Swap; 2] = [
    Swap {
        script: &PUSH,
        from: "redis.call('ZADD', KEYS[2], up + delay, id)",
        to: "redis.call('ZADD', KEYS[2], now + delay, id)",
    },
    Swap {
        script: &NACK,
        from: "redis.call('ZADD', KEYS[3], up + backoff, id)",
        to: "redis.call('ZADD', KEYS[3], now + backoff, id)",
    },
];

const NEXT_FROM_DUE_SWAP: Swap = Swap {
    script: &redlease_core::queue::schedule::ADVANCE,
    from: "if not h[1] or h[5] ~= ARGV[2] then\n  return {0, now, h[4], h[1], tonumber(h[5] or '-1')}\nend\nlocal due, from, next = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[6])\nlocal after = math.max(due, now)",
    to: "if not h[1] then\n  return {0, now, h[4], h[1], tonumber(h[5] or '-1')}\nend\nlocal due, from, next = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[6])\nlocal after = due",
};

const DEDUP_SWAP: Swap = Swap {
    script: &PUSH_DEDUP,
    from: "if j and not (mode == 'l' and state == 'dead') then",
    to: "if false then",
};
const PAUSE_SWAPS: [Swap; 2] = [
    Swap {
        script: &DEQUEUE,
        from: "if paused then\n  return {0, -2}\nend",
        to: "if false then\n  return {0, -2}\nend",
    },
    Swap {
        script: &ACK_TAKE,
        from: "if pause[1] then\n  if paired then",
        to: "if false then\n  if paired then",
    },
];

const RATE_SWAPS: [Swap; 2] = [
    Swap {
        script: &redlease_core::queue::groups::GROUP_TAKE,
        from: "      if allowed then\n        chosen_tat = tat\n",
        to: "      if true then\n        chosen_tat = tat\n",
    },
    Swap {
        script: &redlease_core::queue::groups::GROUP_TAKE,
        from: "if whole_wait > 0 then",
        to: "if false then",
    },
];

const HOLD_END_FROM: &str = "  local t = tonumber(timeout) or qt\n  if t and slack then";
const HOLD_END_TO: &str = "  local t = tonumber(timeout) or qt\n  if false then";
const TIMEOUT_SWAPS: [Swap; 2] = [
    Swap {
        script: &DEQUEUE,
        from: HOLD_END_FROM,
        to: HOLD_END_TO,
    },
    Swap {
        script: &ACK_TAKE,
        from: HOLD_END_FROM,
        to: HOLD_END_TO,
    },
];

const ACK_TAKE_COUNT_SWAP: Swap = Swap {
    script: &ACK_TAKE,
    from: "count('acked_taken', 1)",
    to: "count('taken', 1)",
};

const OCCURRENCE_COUNT_SWAPS: [Swap; 2] = [
    Swap {
        script: &redlease_core::queue::schedule::UPSERT,
        from: "count('pushed', 1)",
        to: "count('pushed', 0)",
    },
    Swap {
        script: &redlease_core::queue::schedule::ADVANCE,
        from: "count('pushed', 1)",
        to: "count('pushed', 0)",
    },
];

const DEFER_COUNT_SWAP: Swap = Swap {
    script: &redlease_core::queue::groups::GROUP_DEFER,
    from: "count('deferred', 1)",
    to: "count('deferred', 0)",
};

const NACK_SLOT_SWAP: Swap = Swap {
    script: &NACK,
    from: "local group_back = group_freed(KEYS[4], id)",
    to: "local group_back = false",
};

const GROUP_CONCURRENCY_SWAP: Swap = Swap {
    script: &redlease_core::queue::groups::GROUP_TAKE,
    from: "    if eligible and l.c > 0 then",
    to: "    if false then",
};

const GROUP_ACK_SLOT_SWAP: Swap = Swap {
    script: &redlease_core::queue::groups::GROUP_ACK,
    from: "local wake = group_freed(string.sub(KEYS[9], 1, -5) .. 'ready', id)",
    to: "local wake = false",
};

const CANCEL_SLOT_SWAP: Swap = Swap {
    script: &redlease_core::queue::scripts::CANCEL,
    from: "  wake = group_freed(KEYS[1], id)",
    to: "  wake = false",
};

const CANCEL_FOLLOW_UP_SWAP: Swap = Swap {
    script: &redlease_core::queue::scripts::CANCEL,
    from: "    if dedup_release(KEYS[14], KEYS[15], id, KEYS[3], KEYS[4], KEYS[1], p .. 'seq', now_ms()) then",
    to: "    if false then",
};

const BURY_FROM: &str = "      released = dedup_release(p .. 'dedup',";
const BURY_TO: &str = "      released = nil and dedup_release(p .. 'dedup',";
const DEATH_FOLLOW_UP_SWAPS: [Swap; 6] = [
    Swap {
        script: &redlease_core::queue::scripts::CANCEL,
        from: BURY_FROM,
        to: BURY_TO,
    },
    Swap {
        script: &NACK,
        from: BURY_FROM,
        to: BURY_TO,
    },
    Swap {
        script: &DEQUEUE,
        from: BURY_FROM,
        to: BURY_TO,
    },
    Swap {
        script: &ACK_TAKE,
        from: BURY_FROM,
        to: BURY_TO,
    },
    Swap {
        script: &redlease_core::queue::scripts::TAKE_BATCH,
        from: BURY_FROM,
        to: BURY_TO,
    },
    Swap {
        script: &redlease_core::queue::groups::GROUP_TAKE,
        from: BURY_FROM,
        to: BURY_TO,
    },
];

const DEFER_SWAP: Swap = Swap {
    script: &redlease_core::queue::groups::GROUP_DEFER,
    from: "redis.call('HINCRBY', KEYS[4], id, 1)",
    to: "redis.call('HLEN', KEYS[4])",
};

impl Mutation {
    fn swaps(self) -> &'static [Swap] {
        match self {
            Mutation::ReleaseWithoutOwnerCheck => std::slice::from_ref(&RELEASE_SWAP),
            Mutation::FenceRestarts => std::slice::from_ref(&FENCE_SWAP),
            Mutation::AckWithoutOwnerCheck => std::slice::from_ref(&ACK_SWAP),
            Mutation::ExtendSucceedsWhenGone => std::slice::from_ref(&EXTEND_SWAP),
            Mutation::TakeKeepsFirstLease => std::slice::from_ref(&TAKE_REFRESH_SWAP),
            Mutation::NoUndoneAfterRetry => std::slice::from_ref(&ACK_UNDONE_SWAP),
            Mutation::DueFloored => &DUE_SWAPS,
            Mutation::GroupOverLimit => std::slice::from_ref(&GROUP_LIMIT_SWAP),
            Mutation::NextFromDue => std::slice::from_ref(&NEXT_FROM_DUE_SWAP),
            Mutation::DedupIgnoresLiveJob => std::slice::from_ref(&DEDUP_SWAP),
            Mutation::PauseIgnored => &PAUSE_SWAPS,
            Mutation::RateIgnored => &RATE_SWAPS,
            Mutation::DeferCounts => std::slice::from_ref(&DEFER_SWAP),
            Mutation::TimeoutIgnored => &TIMEOUT_SWAPS,
            Mutation::AckTakeUncounted => std::slice::from_ref(&ACK_TAKE_COUNT_SWAP),
            Mutation::OccurrenceUncounted => &OCCURRENCE_COUNT_SWAPS,
            Mutation::DeferUncounted => std::slice::from_ref(&DEFER_COUNT_SWAP),
            Mutation::NackKeepsGroupSlot => std::slice::from_ref(&NACK_SLOT_SWAP),
            Mutation::GroupIgnoresConcurrency => std::slice::from_ref(&GROUP_CONCURRENCY_SWAP),
            Mutation::AckKeepsGroupSlot => std::slice::from_ref(&GROUP_ACK_SLOT_SWAP),
            Mutation::CancelKeepsGroupSlot => std::slice::from_ref(&CANCEL_SLOT_SWAP),
            Mutation::CancelKeepsFollowUp => std::slice::from_ref(&CANCEL_FOLLOW_UP_SWAP),
            Mutation::DeathKeepsFollowUp => &DEATH_FOLLOW_UP_SWAPS,
            _ => &[],
        }
    }

    /// Whether the planted bug is in place (the script text it rewrites is found), so that
    /// a change of the script cannot silently disarm a mutation test.
    pub fn armed(self) -> bool {
        self.swaps()
            .iter()
            .all(|s| s.script.source.contains(s.from))
    }

    /// The command the server runs instead of `command`: a call of the mutated script is
    /// sent as `EVAL` of the rewritten source, a `SET` loses its `NX` under
    /// [`Mutation::SetWithoutNx`]; anything else is unchanged.
    pub fn rewrite(self, command: &Command) -> Command {
        if self == Mutation::SetWithoutNx && command.is("SET") {
            let mut out = Command::new("SET").on(command.node());
            for a in command
                .args()
                .skip(1)
                .filter(|a| !a.eq_ignore_ascii_case(b"NX"))
            {
                out = out.arg(a);
            }
            return out;
        }
        let args = command.args();
        let name = command.name().to_ascii_uppercase();
        let hit = self.swaps().iter().find(|swap| match name.as_str() {
            "EVALSHA" => args
                .get(1)
                .is_some_and(|a| a == swap.script.sha1.as_bytes()),
            "EVAL" => args
                .get(1)
                .is_some_and(|a| a == swap.script.source.as_bytes()),
            _ => false,
        });
        let Some(swap) = hit else {
            return command.clone();
        };
        // Every rewrite of that script, in order.
        let source = self
            .swaps()
            .iter()
            .filter(|s| std::ptr::eq(s.script, swap.script))
            .fold(swap.script.source.to_owned(), |src, s| {
                src.replace(s.from, s.to)
            });
        let mut out = Command::new("EVAL").arg(source).on(command.node());
        for a in args.skip(2) {
            out = out.arg(a);
        }
        out
    }
}
