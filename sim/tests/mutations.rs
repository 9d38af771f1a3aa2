//! The checker is tested by mutation: each planted bug (in the sim's copy of a script or in
//! the sim's driver, never in the library) must be caught within a stated number of seeds,
//! and the same seeds without the bug must pass.

use redlease_sim::check::Property;
use redlease_sim::faults::{Fault, FaultSet};
use redlease_sim::mutation::Mutation;
use redlease_sim::run::{report, run};
use redlease_sim::scenario::{Primitive, RunSpec};

/// Runs seeds `0..within` of `primitive` with `mutation` and only the faults `faults`;
/// returns the first seed whose violations include `property`. Checks that the library
/// without the bug passes that seed.
fn caught(
    primitive: Primitive,
    mutation: Mutation,
    faults: &[Fault],
    property: Property,
    within: u64,
) -> u64 {
    assert!(
        mutation.armed(),
        "{mutation:?}: the script text it rewrites has changed"
    );
    let allowed = FaultSet::of(faults);
    for seed in 0..within {
        let spec = RunSpec {
            primitive,
            seed,
            mutation,
            allowed,
        };
        let o = run(spec);
        if o.violations.iter().any(|v| v.property == property) {
            let clean = run(RunSpec {
                mutation: Mutation::None,
                ..spec
            });
            assert!(clean.violations.is_empty(), "{}", report(&clean));
            eprintln!(
                "mutation {mutation:?} caught by {} at seed {seed} (within {within})",
                property.name()
            );
            return seed;
        }
    }
    panic!(
        "mutation {mutation:?} not caught by {} within {within} seeds",
        property.name()
    );
}

#[test]
fn a_release_without_the_owner_check_breaks_exclusion() {
    // A holder without a watchdog that works past its lease deletes its successor's key.
    caught(
        Primitive::Lease,
        Mutation::ReleaseWithoutOwnerCheck,
        &[],
        Property::Exclusion,
        20,
    );
}

#[test]
fn a_fence_counter_that_restarts_breaks_fence_order() {
    caught(
        Primitive::Lease,
        Mutation::FenceRestarts,
        &[Fault::RestartEmpty],
        Property::FenceOrder,
        20,
    );
}

#[test]
fn a_waiter_that_does_not_check_again_after_a_missed_message_sleeps_while_the_lock_is_free() {
    caught(
        Primitive::Lease,
        Mutation::NoRecheckAfterMiss,
        &[Fault::PubSubLost],
        Property::WakeWhenFree,
        200,
    );
}

#[test]
fn an_ack_that_trusts_a_lost_reply_acks_twice() {
    caught(
        Primitive::Queue,
        Mutation::AckTrustsLostReply,
        &[Fault::RequestLost],
        Property::SingleAck,
        50,
    );
}

#[test]
fn an_unfenced_set_without_nx_breaks_exclusion() {
    // Unfenced holders are checked for exclusion like fenced ones.
    caught(
        Primitive::Lease,
        Mutation::SetWithoutNx,
        &[],
        Property::Exclusion,
        20,
    );
}

#[test]
fn an_ack_that_accepts_a_stale_token_is_not_settled_by_the_holder() {
    // A worker whose lease ran out acks after the job went to another worker: its ack must
    // fail, and must not end the other's lease.
    caught(
        Primitive::Queue,
        Mutation::AckWithoutOwnerCheck,
        &[],
        Property::SettledByHolder,
        50,
    );
}

#[test]
fn a_renewal_that_answers_success_on_a_gone_lease_is_not_on_the_server() {
    // A holder's renewal after its key was evicted finds it gone; answering success keeps
    // the holder believing it holds what the server no longer has.
    caught(
        Primitive::Lease,
        Mutation::ExtendSucceedsWhenGone,
        &[Fault::KeyEvicted],
        Property::RenewalOnServer,
        100,
    );
}

// Issue 26's items 1-3, each fix rewritten back into its defect in the sim's copy of the
// script: the checker must find each by itself.

#[test]
fn a_retried_take_that_keeps_the_first_lease_is_believed_past_the_server() {
    // The first take's reply is lost; the retry finds the job leased to its token and, with
    // the bug, returns it without renewing: the worker counts its validity from the retry.
    caught(
        Primitive::Queue,
        Mutation::TakeKeepsFirstLease,
        &[Fault::ReplyLost],
        Property::HeldOnServer,
        150,
    );
}

#[test]
fn an_ack_after_a_retried_take_without_an_undone_record_lets_the_late_take_take() {
    // The first take is held on the way past its retry, the worker acks the retry's job;
    // with the bug the late take then leases the next job to a token nobody holds.
    caught(
        Primitive::Queue,
        Mutation::NoUndoneAfterRetry,
        &[Fault::RequestDelayed],
        Property::LateAttempt,
        50,
    );
}

#[test]
fn a_due_time_rounded_down_delivers_early() {
    // The client rounds delays up to whole ms; the push and nack scripts, with the bug, add
    // them to the server clock rounded down: a job can be leased up to a ms early.
    caught(
        Primitive::Queue,
        Mutation::DueFloored,
        &[],
        Property::NotBeforeDue,
        150,
    );
}

#[test]
fn a_group_take_that_counts_full_past_the_limit_runs_one_too_many() {
    // Two groups, a concurrency of 1 each, three workers: with the bug a group gets a second
    // lease while its first runs.
    caught(
        Primitive::Groups,
        Mutation::GroupOverLimit,
        &[],
        Property::GroupConcurrency,
        50,
    );
}

#[test]
fn a_dedup_push_that_ignores_the_live_job_holding_its_id_breaks_dedup_one_live() {
    caught(
        Primitive::Queue,
        Mutation::DedupIgnoresLiveJob,
        &[],
        Property::DedupOneLive,
        20,
    );
}

#[test]
fn a_take_that_ignores_the_pause_leases_while_paused() {
    caught(
        Primitive::Queue,
        Mutation::PauseIgnored,
        &[],
        Property::NothingLeasedWhilePaused,
        60,
    );
}

#[test]
fn a_next_occurrence_computed_from_the_due_time_makes_a_second_job_for_an_occurrence() {
    // A worker that outlives its lease meets its occurrence again after the next one ran
    // and was acked: computed from the taken occurrence's due time, that next one is made
    // again.
    caught(
        Primitive::Queue,
        Mutation::NextFromDue,
        &[],
        Property::ScheduleOnce,
        20,
    );
}

#[test]
fn a_group_take_that_skips_the_rate_check_breaks_group_rate() {
    caught(
        Primitive::Groups,
        Mutation::RateIgnored,
        &[],
        Property::GroupRate,
        60,
    );
}

#[test]
fn a_rate_limited_answer_that_counts_the_delivery_breaks_rate_limited_keeps_delivery() {
    caught(
        Primitive::Groups,
        Mutation::DeferCounts,
        &[],
        Property::RateLimitedKeepsDelivery,
        30,
    );
}

#[test]
fn a_watchdog_that_renews_past_timeout_and_grace_breaks_no_ack_after_timeout() {
    caught(
        Primitive::Queue,
        Mutation::TimeoutIgnored,
        &[],
        Property::NoAckAfterTimeout,
        60,
    );
}

#[test]
fn an_ack_and_take_that_counts_only_the_take_breaks_counted() {
    caught(
        Primitive::Queue,
        Mutation::AckTakeUncounted,
        &[],
        Property::Counted,
        60,
    );
}

#[test]
fn a_schedule_occurrence_pushed_uncounted_breaks_counted() {
    caught(
        Primitive::Queue,
        Mutation::OccurrenceUncounted,
        &[],
        Property::Counted,
        60,
    );
}

#[test]
fn a_rate_limited_answer_left_uncounted_breaks_counted() {
    caught(
        Primitive::Groups,
        Mutation::DeferUncounted,
        &[],
        Property::Counted,
        60,
    );
}

// The mixed primitive (plain and grouped keys of one queue, group limits changed at run
// time): an end of a lease that keeps its group slot, and a take that ignores the limits.

#[test]
fn a_nack_that_keeps_its_group_slot_leaves_a_freed_slot_unusable() {
    caught(
        Primitive::Mixed,
        Mutation::NackKeepsGroupSlot,
        &[],
        Property::SlotUsable,
        20,
    );
}

#[test]
fn a_group_take_that_ignores_the_concurrency_breaks_group_limits() {
    caught(
        Primitive::Mixed,
        Mutation::GroupIgnoresConcurrency,
        &[],
        Property::GroupLimits,
        20,
    );
}

#[test]
fn an_ack_that_keeps_its_group_slot_leaves_a_freed_slot_unusable() {
    caught(
        Primitive::Mixed,
        Mutation::AckKeepsGroupSlot,
        &[],
        Property::SlotUsable,
        20,
    );
}

#[test]
fn a_cancel_that_keeps_its_group_slot_leaves_a_freed_slot_unusable() {
    caught(
        Primitive::Mixed,
        Mutation::CancelKeepsGroupSlot,
        &[],
        Property::SlotUsable,
        60,
    );
}

#[test]
fn a_cancelled_occurrence_not_skipped_leaves_its_schedule_without_an_occurrence() {
    caught(
        Primitive::Mixed,
        Mutation::CancelSkipsAdvance,
        &[],
        Property::ScheduleLiveness,
        100,
    );
}

#[test]
fn a_cancel_that_keeps_the_follow_up_parked_leaves_it_behind_a_job_gone() {
    caught(
        Primitive::Mixed,
        Mutation::CancelKeepsFollowUp,
        &[],
        Property::FollowUpRuns,
        150,
    );
}

#[test]
fn a_death_that_keeps_the_follow_up_parked_leaves_it_behind_a_dead_job() {
    caught(
        Primitive::Mixed,
        Mutation::DeathKeepsFollowUp,
        &[],
        Property::FollowUpRuns,
        150,
    );
}
