//! The wake rules on virtual time: instants are built from one base, never read.

use std::time::Duration;

use super::*;
use crate::testing::origin;

fn on(channel: &str, tag: Option<&str>) -> WakeOn {
    WakeOn {
        channel: channel.to_owned(),
        tag: tag.map(str::to_owned),
    }
}

const CH: &str = "rl:{a}:released";

/// A registry whose channel `CH` is subscribed and confirmed at epoch 1.
fn subscribed() -> Registry {
    let mut r = Registry::new();
    let first = r.register(&on(CH, None), None);
    assert_eq!(first.subscribe.as_deref(), Some(CH));
    assert_eq!(r.confirmed(CH, 1), vec![(first.id, Wake::Subscribed)]);
    assert_eq!(r.take(CH, first.id), Some(Wake::Subscribed));
    r.unregister(CH, first.id, origin());
    r
}

#[test]
fn first_waiter_subscribes_and_confirmation_wakes_it() {
    let mut r = Registry::new();
    let a = r.register(&on(CH, None), Some(0));
    assert!(!a.wake_now, "not subscribed yet: the confirmation wakes it");
    assert_eq!(a.subscribe.as_deref(), Some(CH));
    let b = r.register(&on(CH, None), Some(0));
    assert_eq!(
        b.subscribe, None,
        "one SUBSCRIBE per channel and connection"
    );
    let woken = r.confirmed(CH, 1);
    assert_eq!(
        woken,
        vec![(a.id, Wake::Subscribed), (b.id, Wake::Subscribed)]
    );
}

#[test]
fn register_after_attempt_sent_after_confirmation_sleeps() {
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1));
    assert!(
        !w.wake_now,
        "subscribed before the attempt, no message since"
    );
    assert_eq!(w.subscribe, None);
    assert_eq!(r.take(CH, w.id), None);
}

#[test]
fn register_after_attempt_racing_a_message_rechecks_at_once() {
    let mut r = subscribed();
    // The attempt was sent at epoch 1; a release message arrives (epoch 2) before the
    // waiter registers: nobody to wake then, so the waiter must re-check.
    assert!(r.message(CH, None, 2).is_empty());
    let w = r.register(&on(CH, None), Some(1));
    assert!(w.wake_now);
    assert_eq!(r.take(CH, w.id), Some(Wake::Message));
}

#[test]
fn register_with_unknown_epoch_rechecks_when_subscribed() {
    let mut r = subscribed();
    assert!(r.register(&on(CH, None), None).wake_now);
}

#[test]
fn attempt_sent_before_confirmation_rechecks() {
    let mut r = subscribed();
    // Attempt at epoch 0, confirmation at 1: a release between them may have been missed.
    assert!(r.register(&on(CH, None), Some(0)).wake_now);
}

#[test]
fn plain_release_wakes_one_untagged_waiter_longest_first() {
    let mut r = subscribed();
    let a = r.register(&on(CH, None), Some(1)).id;
    let b = r.register(&on(CH, None), Some(1)).id;
    let t = r.register(&on(CH, Some("tok-1")), Some(1)).id;
    assert_eq!(r.message(CH, Some(b"unrelated"), 2), vec![a]);
    // `a` has not taken its wake yet: the next message goes to `b`, never to the tagged.
    assert_eq!(r.message(CH, None, 3), vec![b]);
    assert!(r.message(CH, None, 4).is_empty());
    assert_eq!(r.take(CH, t), None);
    assert_eq!(r.take(CH, a), Some(Wake::Message));
    assert_eq!(r.message(CH, None, 5), vec![a]);
}

#[test]
fn fair_wake_by_token_wakes_exactly_that_waiter() {
    let mut r = subscribed();
    let plain = r.register(&on(CH, None), Some(1)).id;
    let t1 = r.register(&on(CH, Some("tok-1")), Some(1)).id;
    let t2 = r.register(&on(CH, Some("tok-2")), Some(1)).id;
    assert_eq!(r.message(CH, Some(b"tok-2"), 2), vec![t2]);
    assert_eq!(r.take(CH, t1), None);
    assert_eq!(r.take(CH, plain), None);
    assert_eq!(r.take(CH, t2), Some(Wake::Message));
}

#[test]
fn broadcast_wakes_everyone() {
    let mut r = subscribed();
    let ids: Vec<WaiterId> = [None, Some("tok-1"), Some("tok-2"), None]
        .into_iter()
        .map(|t| r.register(&on(CH, t), Some(1)).id)
        .collect();
    assert_eq!(r.message(CH, Some(WakeOn::ALL.as_bytes()), 2), ids);
}

#[test]
fn messages_on_other_channels_wake_nobody() {
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1)).id;
    assert!(r.message("rl:{b}:released", None, 2).is_empty());
    assert_eq!(r.take(CH, w), None);
}

#[test]
fn reconnect_resubscribes_and_wakes_waiters_of_the_old_epoch() {
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1));
    assert!(!w.wake_now);
    r.disconnected();
    // While down, a new waiter finds its channel unsubscribed: it waits for the confirmation.
    let late = r.register(&on(CH, None), Some(1));
    assert!(!late.wake_now);
    assert_eq!(
        late.subscribe.as_deref(),
        Some(CH),
        "nothing requested since the drop"
    );
    assert_eq!(r.connected(), vec![CH.to_owned()]);
    // The new confirmation (a newer epoch) wakes everyone: messages may have been missed.
    assert_eq!(
        r.confirmed(CH, 7),
        vec![(w.id, Wake::Subscribed), (late.id, Wake::Subscribed)]
    );
    // An attempt sent in the old epoch re-checks; one sent after the confirmation sleeps.
    assert!(r.register(&on(CH, None), Some(3)).wake_now);
    assert!(!r.register(&on(CH, None), Some(7)).wake_now);
}

#[test]
fn connected_requests_every_channel_so_registering_sends_nothing_more() {
    let mut r = subscribed();
    r.disconnected();
    r.connected();
    assert_eq!(r.register(&on(CH, None), Some(1)).subscribe, None);
}

#[test]
fn unsubscribe_confirmation_forgets_the_subscription() {
    let mut r = subscribed();
    r.unsubscribed(CH);
    assert!(!r.register(&on(CH, None), Some(5)).wake_now);
}

#[test]
fn unregister_on_timeout_passes_an_untaken_wake_on() {
    let mut r = subscribed();
    let now = origin();
    let a = r.register(&on(CH, None), Some(1)).id;
    let b = r.register(&on(CH, None), Some(1)).id;
    assert_eq!(r.message(CH, None, 2), vec![a]);
    // `a` times out before taking its wake: `b` gets it.
    assert_eq!(r.unregister(CH, a, now), Some(b));
    assert_eq!(r.take(CH, b), Some(Wake::Message));
    // A taken wake is not passed on.
    assert_eq!(r.unregister(CH, b, now), None);
}

#[test]
fn tagged_and_subscribed_wakes_are_not_passed_on() {
    let mut r = Registry::new();
    let now = origin();
    let a = r.register(&on(CH, None), None).id;
    let b = r.register(&on(CH, None), None).id;
    r.confirmed(CH, 1);
    assert_eq!(r.take(CH, b), Some(Wake::Subscribed));
    assert_eq!(
        r.unregister(CH, a, now),
        None,
        "a Subscribed wake is not a release"
    );
    let t = r.register(&on(CH, Some("tok")), Some(1)).id;
    assert_eq!(r.message(CH, Some(b"tok"), 2), vec![t]);
    assert_eq!(
        r.unregister(CH, t, now),
        None,
        "a tagged wake was meant for that waiter"
    );
    assert_eq!(r.take(CH, b), None);
}

#[test]
fn no_wake_for_a_dead_waiter() {
    let mut r = subscribed();
    let now = origin();
    let a = r.register(&on(CH, None), Some(1)).id;
    let t = r.register(&on(CH, Some("tok")), Some(1)).id;
    r.unregister(CH, a, now);
    r.unregister(CH, t, now);
    assert!(r.message(CH, None, 2).is_empty());
    assert!(r.message(CH, Some(b"tok"), 3).is_empty());
    assert!(r.message(CH, Some(b"*"), 4).is_empty());
    assert!(r.confirmed(CH, 5).is_empty());
    assert_eq!(r.take(CH, a), None);
    assert_eq!(
        r.unregister(CH, a, now),
        None,
        "unregistering twice is harmless"
    );
}

#[test]
fn idle_channels_linger_then_unsubscribe() {
    let linger = Duration::from_secs(10);
    let t0 = origin();
    let mut r = Registry::new();
    let w = r.register(&on(CH, None), None).id;
    assert!(
        r.idle(t0 + linger * 5, linger).is_empty(),
        "a waiter keeps it"
    );
    r.unregister(CH, w, t0);
    assert!(r.idle(t0 + linger, linger).is_empty(), "still lingering");
    assert_eq!(r.channels(), 1);
    // A waiter coming back within the linger keeps the subscription (no churn).
    let again = r.register(&on(CH, None), None);
    assert_eq!(again.subscribe, None);
    r.unregister(CH, again.id, t0 + linger);
    assert!(r.idle(t0 + linger * 2, linger).is_empty());
    assert_eq!(
        r.idle(t0 + linger * 2 + Duration::from_millis(1), linger),
        vec![CH]
    );
    assert_eq!(r.channels(), 0);
    // Gone: the next waiter subscribes again.
    assert_eq!(
        r.register(&on(CH, None), None).subscribe.as_deref(),
        Some(CH)
    );
}

#[test]
fn subscription_commands_one_per_shard_channel() {
    let chans = vec!["a".to_owned(), "b".to_owned()];
    assert_eq!(
        subscription_commands(false, true, &chans),
        vec![vec!["SUBSCRIBE", "a", "b"]]
    );
    assert_eq!(
        subscription_commands(true, true, &chans),
        vec![vec!["SSUBSCRIBE", "a"], vec!["SSUBSCRIBE", "b"]]
    );
    assert_eq!(
        subscription_commands(true, false, &chans),
        vec![vec!["SUNSUBSCRIBE", "a"], vec!["SUNSUBSCRIBE", "b"]]
    );
    assert_eq!(
        subscription_commands(false, false, &chans),
        vec![vec!["UNSUBSCRIBE", "a", "b"]]
    );
    assert!(subscription_commands(true, true, &[]).is_empty());
}

#[test]
fn shard_routing_picks_the_master_of_the_slot() {
    let ranges = vec![
        SlotRange {
            lo: 0,
            hi: 5460,
            master: ("10.0.0.1".into(), 7000),
        },
        SlotRange {
            lo: 5461,
            hi: 10922,
            master: ("10.0.0.2".into(), 7001),
        },
        SlotRange {
            lo: 10923,
            hi: 16383,
            master: ("10.0.0.3".into(), 7002),
        },
    ];
    assert_eq!(node_for_slot(0, &ranges), Some(("10.0.0.1".into(), 7000)));
    assert_eq!(
        node_for_slot(5461, &ranges),
        Some(("10.0.0.2".into(), 7001))
    );
    assert_eq!(
        node_for_slot(16383, &ranges),
        Some(("10.0.0.3".into(), 7002))
    );
    assert_eq!(node_for_slot(16384, &ranges), None);
    assert_eq!(node_for_slot(5, &[]), None);
}

#[test]
fn routes_expire_after_their_ttl() {
    let ttl = Duration::from_secs(5);
    let t0 = origin();
    let mut cache = RouteCache::new(ttl);
    assert_eq!(cache.get(CH, t0), None);
    cache.learn(CH, ("n1".into(), 7000), t0);
    assert_eq!(
        cache.get(CH, t0 + ttl - Duration::from_millis(1)),
        Some(("n1".into(), 7000))
    );
    assert_eq!(
        cache.get(CH, t0 + ttl),
        None,
        "a resharded slot is looked up again"
    );
    cache.learn(CH, ("n2".into(), 7001), t0 + ttl);
    assert_eq!(cache.get(CH, t0 + ttl), Some(("n2".into(), 7001)));
    assert_eq!(cache.get("other", t0), None);
}

#[test]
fn a_release_while_the_lock_is_held_here_wakes_nobody() {
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1));
    r.hold(CH, 1, origin());
    assert!(r.held(CH));
    assert_eq!(
        r.message(CH, None, 2),
        Vec::<WaiterId>::new(),
        "our holder took that release: a waiter's attempt would find the lock held"
    );
    assert_eq!(r.take(CH, w.id), None);
    // The release we hold back is owed: unhold (sent before our own release) wakes one, in
    // case our lease ran out and our release announces nothing.
    assert_eq!(r.unhold(CH, 1, origin()), Some(w.id));
    assert!(!r.held(CH));
    // Our release's own message: the waiter has its wake pending already (no second ring).
    assert_eq!(r.message(CH, None, 3), Vec::<WaiterId>::new());
    assert_eq!(r.take(CH, w.id), Some(Wake::Message));
}

#[test]
fn a_hold_without_a_held_back_message_wakes_nobody_and_its_release_wakes_one() {
    let mut r = subscribed();
    let a = r.register(&on(CH, None), Some(1));
    let b = r.register(&on(CH, None), Some(1));
    r.hold(CH, 1, origin());
    r.hold(CH, 1, origin());
    assert_eq!(r.unhold(CH, 1, origin()), None, "another hold is left");
    assert!(r.held(CH));
    assert_eq!(
        r.unhold(CH, 1, origin()),
        None,
        "nothing held back: nothing owed"
    );
    assert_eq!(
        r.unhold(CH, 1, origin()),
        None,
        "an unhold without a hold does nothing"
    );
    assert_eq!(r.message(CH, None, 2), vec![a.id], "one release, one wake");
    assert_eq!(r.take(CH, b.id), None);
}

#[test]
fn tagged_and_broadcast_messages_pass_a_hold() {
    let mut r = subscribed();
    let tagged = r.register(&on(CH, Some("t1")), Some(1));
    let plain = r.register(&on(CH, None), Some(1));
    r.hold(CH, 1, origin());
    assert_eq!(r.message(CH, Some(b"t1"), 2), vec![tagged.id]);
    assert_eq!(
        r.message(CH, Some(WakeOn::ALL.as_bytes()), 3),
        vec![plain.id]
    );
}

#[test]
fn a_returning_holder_gets_a_grace_and_another_holder_does_not() {
    let t0 = origin();
    let us = Duration::from_micros;
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1));
    // Thread 7 holds, releases, and takes the lock back 100 µs later: it is returning.
    r.hold(CH, 7, t0);
    assert_eq!(
        r.grace(CH, t0),
        None,
        "held: no grace, the waiter sleeps on"
    );
    r.unhold(CH, 7, t0 + us(10));
    assert_eq!(r.grace(CH, t0 + us(10)), None, "not known to return yet");
    r.hold(CH, 7, t0 + us(110));
    r.unhold(CH, 7, t0 + us(200));
    assert_eq!(r.message(CH, None, 2), vec![w.id], "one release, one wake");
    // Its release woke the waiter: it leaves the lock to thread 7 for twice 100 µs.
    assert_eq!(r.grace(CH, t0 + us(210)), Some(t0 + us(400)));
    assert_eq!(
        r.grace(CH, t0 + us(400)),
        None,
        "the grace is over: attempt"
    );
    // Another thread takes it: not returning, no grace after its release.
    r.hold(CH, 8, t0 + us(300));
    r.unhold(CH, 8, t0 + us(400));
    assert_eq!(r.grace(CH, t0 + us(410)), None);
    // A holder coming back after more than MAX_GRACE is not returning.
    r.hold(CH, 8, t0 + us(400) + MAX_GRACE + us(1));
    r.unhold(CH, 8, t0 + us(2000));
    assert_eq!(r.grace(CH, t0 + us(2001)), None);
}

#[test]
fn the_grace_is_bounded() {
    let t0 = origin();
    let us = Duration::from_micros;
    let mut r = subscribed();
    r.hold(CH, 7, t0);
    r.unhold(CH, 7, t0);
    r.hold(CH, 7, t0 + MAX_GRACE);
    r.unhold(CH, 7, t0 + MAX_GRACE);
    assert_eq!(
        r.grace(CH, t0 + MAX_GRACE),
        Some(t0 + MAX_GRACE * 2),
        "twice the return time, capped at MAX_GRACE"
    );
    let mut r = subscribed();
    r.hold(CH, 7, t0);
    r.unhold(CH, 7, t0);
    r.hold(CH, 7, t0 + us(1));
    r.unhold(CH, 7, t0 + us(1));
    assert_eq!(r.grace(CH, t0 + us(1)), Some(t0 + us(51)), "at least 50 µs");
    // Forgotten once idle past the linger.
    r.idle(t0 + Duration::from_secs(2), Duration::from_secs(1));
    assert_eq!(r.grace(CH, t0 + us(2)), None);
}

#[test]
fn an_attempt_in_flight_counts_as_held_and_a_refused_one_pays_what_it_held_back() {
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1));
    r.attempt(CH, 7, origin());
    assert!(r.held(CH), "in flight: a waiter woken now would race it");
    assert_eq!(
        r.message(CH, None, 2),
        Vec::<WaiterId>::new(),
        "a release while our attempt is in flight wakes nobody yet"
    );
    // Refused (the lock is another client's): the held-back release is passed on.
    assert_eq!(r.attempt_failed(CH), Some(w.id));
    assert!(!r.held(CH));
    assert_eq!(r.attempt_failed(CH), None, "nothing left to end");
    // Refused with nothing held back: nobody is woken.
    let _ = r.take(CH, w.id);
    r.attempt(CH, 7, origin());
    assert_eq!(r.attempt_failed(CH), None);
    // Refused while another hold here goes on: that hold owes the message.
    r.hold(CH, 8, origin());
    r.attempt(CH, 7, origin());
    assert_eq!(r.message(CH, None, 3), Vec::<WaiterId>::new());
    assert_eq!(r.attempt_failed(CH), None, "held by thread 8 still");
    assert_eq!(r.unhold(CH, 8, origin()), Some(w.id));
}

#[test]
fn an_announced_release_pays_a_stale_message_and_a_silent_one_wakes_a_waiter() {
    let t0 = origin();
    let mut r = subscribed();
    let w = r.register(&on(CH, None), Some(1));
    // A loop of critical sections: the release's message arrives while the holder's next
    // attempt is in flight, and is held back.
    r.attempt(CH, 7, t0);
    assert_eq!(r.message(CH, None, 2), Vec::<WaiterId>::new());
    // Granted: the attempt is the hold. Its release begins with a message owed.
    assert!(r.release_begun(CH, 7, t0));
    assert!(!r.held(CH));
    // The release announced itself: the owed message was our own old one, nobody wakes.
    assert_eq!(r.release_ended(CH, true), None);
    assert_eq!(r.take(CH, w.id), None);
    // Nothing owed: the release begins without a debt.
    r.hold(CH, 7, t0);
    assert!(!r.release_begun(CH, 7, t0));
    // Our lease ran out and someone else's release came while we held: our release finds
    // the lock not ours and announces nothing, so a waiter is woken for that message.
    r.hold(CH, 7, t0);
    assert_eq!(r.message(CH, None, 3), Vec::<WaiterId>::new());
    assert!(r.release_begun(CH, 7, t0));
    assert_eq!(r.release_ended(CH, false), Some(w.id));
    // Unless the lock is held here again by then: that hold owes it.
    let _ = r.take(CH, w.id);
    r.hold(CH, 7, t0);
    assert_eq!(r.message(CH, None, 4), Vec::<WaiterId>::new());
    assert!(r.release_begun(CH, 7, t0));
    r.hold(CH, 9, t0);
    assert_eq!(r.release_ended(CH, false), None);
    assert_eq!(r.unhold(CH, 9, t0), Some(w.id));
}

#[test]
fn an_attempt_sent_right_after_a_release_makes_its_thread_a_returning_holder() {
    let t0 = origin();
    let us = Duration::from_micros;
    let mut r = subscribed();
    r.hold(CH, 7, t0);
    assert!(!r.release_begun(CH, 7, t0 + us(10)));
    r.attempt(CH, 7, t0 + us(60));
    assert!(!r.release_begun(CH, 7, t0 + us(100)));
    // Back 50 µs after its release: the grace is twice that, from this release.
    assert_eq!(r.grace(CH, t0 + us(110)), Some(t0 + us(200)));
}

#[test]
fn released_since_tells_a_lock_that_changed_hands_from_one_held_all_along() {
    let t0 = origin();
    let ms = Duration::from_millis;
    let mut r = subscribed();
    assert!(!r.released_since(CH, t0), "never held here");
    r.hold(CH, 7, t0);
    assert!(
        !r.released_since(CH, t0),
        "held all along: an attempt would be refused"
    );
    assert!(!r.release_begun(CH, 7, t0 + ms(5)));
    r.attempt(CH, 7, t0 + ms(5));
    assert!(
        r.released_since(CH, t0),
        "released at 5 ms, after an attempt at 0"
    );
    assert!(!r.released_since(CH, t0 + ms(5)));
    assert!(PATIENCE >= ms(10), "no faster than a 10 ms poll");
}
