use std::time::Duration;

use super::*;

#[test]
fn every_falls_on_multiples_of_its_period_from_the_start() {
    let s = Schedule::every(Duration::from_secs(1)).unwrap();
    assert_eq!(s.first_after(0), Some(1000));
    assert_eq!(s.first_after(999), Some(1000));
    assert_eq!(s.first_after(1000), Some(2000));
    let s = s.starting_at_ms(1500).ending_at_ms(3500);
    assert_eq!(s.first_after(0), Some(1500));
    assert_eq!(s.first_after(1500), Some(2500));
    assert_eq!(s.first_after(2500), Some(3500));
    assert_eq!(s.first_after(3500), None);
}

#[test]
fn bad_periods_are_refused() {
    assert!(Schedule::every(Duration::ZERO).is_err());
    assert!(Schedule::every(Duration::from_micros(1500)).is_err());
}

#[test]
fn specs_round_trip() {
    let s = Schedule::every(Duration::from_millis(250))
        .unwrap()
        .starting_at_ms(7)
        .ending_at_ms(9_000)
        .missed(Missed::CatchUp)
        .payload("p")
        .priority(4);
    let back = Schedule::from_spec(&s.spec(), b"p".to_vec(), 4).unwrap();
    assert_eq!(back, s);
    assert!(Schedule::from_spec("every=x\n", Vec::new(), 0).is_err());
    assert!(Schedule::from_spec("nonsense\n", Vec::new(), 0).is_err());
    assert!(Schedule::from_spec("", Vec::new(), 0).is_err());
}

#[test]
fn occurrence_ids_parse() {
    assert_eq!(occurrence("sched:a:b:1000"), Some(("a:b", 1000)));
    assert_eq!(occurrence("sched:a:"), None);
    assert_eq!(occurrence("sched::5"), None);
    assert_eq!(occurrence("job:a:5"), None);
    assert_eq!(occurrence("sched:a:+5"), None);
}

#[test]
fn missed_means_the_next_was_due_already() {
    let s = Schedule::every(Duration::from_secs(1)).unwrap();
    assert!(!missed(&s, 1000, 1999));
    assert!(missed(&s, 1000, 2000));
    assert_eq!(advance_from(&s, 1000, 5300), (5300, Some(6000)));
}

#[cfg(feature = "cron")]
#[test]
fn cron_across_spring_forward_in_new_york_has_no_missing_or_doubled_hour() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT. Hourly at minute 30, from 2026-03-07 23:00 EST.
    let s = Schedule::cron("30 * * * *", "America/New_York").unwrap();
    let start = 1_772_942_400_000; // 2026-03-08 04:00 UTC = 2026-03-07 23:00 EST
    let mut t = start;
    let mut dues = Vec::new();
    for _ in 0..6 {
        t = s.first_after(t).unwrap();
        dues.push(t);
    }
    // Every occurrence one real hour apart: 23:30, 00:30, 01:30 EST, 03:30, 04:30, 05:30 EDT.
    for w in dues.windows(2) {
        assert_eq!(w[1] - w[0], 3_600_000, "{dues:?}");
    }
    assert_eq!(dues[0], start + 1_800_000);
}

#[cfg(feature = "cron")]
#[test]
fn bad_cron_and_zones_are_refused() {
    assert!(Schedule::cron("61 * * * *", "UTC").is_err());
    assert!(Schedule::cron("* * * * *", "Mars/Olympus").is_err());
    let s = Schedule::cron("0 9 * * 1-5", "Europe/Paris").unwrap();
    let back = Schedule::from_spec(&s.spec(), Vec::new(), 0).unwrap();
    assert_eq!(back, s);
}

#[test]
fn script_digests_match_and_include_exactly_their_prelude() {
    crate::script::tests::check_scripts(&ALL);
}

#[test]
fn a_schedule_on_a_queues_grouped_keys_is_refused() {
    use crate::keys::Keyspace;
    let grouped = QueueKeys::grouped(&Keyspace::default(), "q").unwrap();
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    let at = crate::testing::origin();
    assert!(matches!(
        upsert(&grouped, "tick", &every, None, at),
        Err(Error::InvalidArgument(_))
    ));
}
