//! `/metrics` in Prometheus' text exposition format: each family is one group of lines
//! (its HELP, its TYPE, then all its samples), and `promtool check metrics` accepts a
//! scrape of a server holding every kind of primitive.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{full_world, http, serve};

/// The family a sample line belongs to: its metric name (a summary's or histogram's
/// `_sum`, `_count` and `_bucket` lines are not written by this tool).
fn sample_family(line: &str) -> &str {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    &line[..end]
}

/// Each family's lines are contiguous, HELP first, TYPE second, and every sample follows
/// its family's TYPE; no family appears twice. Returns the families in order.
fn families_are_whole(text: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    // (family, lines of it so far)
    let mut current: Option<(String, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.is_empty() {
            continue;
        }
        let (family, kind) = if let Some(rest) = line.strip_prefix("# HELP ") {
            (rest.split(' ').next().unwrap().to_owned(), "help")
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            (rest.split(' ').next().unwrap().to_owned(), "type")
        } else if line.starts_with('#') {
            continue;
        } else {
            (sample_family(line).to_owned(), "sample")
        };
        match (&mut current, kind) {
            (Some((f, count)), _) if *f == family => {
                match (kind, *count) {
                    ("type", 1) | ("sample", 2..) => {}
                    _ => panic!("line {n}: {kind} of {family} out of place:\n{text}"),
                }
                *count += 1;
            }
            (_, "help") => {
                assert!(
                    !seen.contains(&family),
                    "line {n}: family {family} starts a second time:\n{text}"
                );
                seen.push(family.clone());
                current = Some((family, 1));
            }
            _ => panic!(
                "line {n}: {kind} of {family} outside its family's group (HELP and TYPE first):\n{text}"
            ),
        }
    }
    seen
}

#[test]
fn each_metric_family_is_one_group_with_help_and_type_first() {
    let w = full_world();
    let s = serve(&w.world.server.url(), &[]);
    let (status, text) = http(&s.addr, "GET", "/metrics", &[]);
    assert_eq!(status, 200);
    let families = families_are_whole(&text);
    for f in [
        "redlease_queue_jobs",
        "redlease_lock_ttl_seconds",
        "redlease_semaphore_holders",
        "redlease_semaphore_waiters",
        "redlease_redis_connections",
    ] {
        assert!(families.iter().any(|g| g == f), "no {f}:\n{text}");
    }
    assert!(
        text.contains("redlease_semaphore_holders{semaphore=\"api\"} 1"),
        "{text}"
    );
    // Every kind of lock, each under its kind.
    for (lock, kind) in [
        ("billing", "lease"),
        ("config", "reentrant"),
        ("fifo", "fair"),
        ("catalog", "read"),
        ("ledger", "write"),
        ("old-cron", "legacy"),
        ("quorum", "lease"),
        ("unfenced", "lease"),
    ] {
        let series = format!("redlease_lock_ttl_seconds{{lock=\"{lock}\",kind=\"{kind}\"}} ");
        assert!(text.contains(&series), "no {series}:\n{text}");
    }
    assert!(
        text.contains("redlease_semaphore_waiters{semaphore=\"api\"} 0"),
        "{text}"
    );
}

#[test]
fn the_checker_catches_split_families() {
    let split = "# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\na 1\nb 2\n";
    assert!(std::panic::catch_unwind(|| families_are_whole(split)).is_err());
    let whole = "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n# TYPE b gauge\nb 2\n";
    assert_eq!(families_are_whole(whole), ["a", "b"]);
}

/// `promtool` (Debian's `prometheus` package; scripts/test.sh installs it when missing).
/// `PROMTOOL` names another binary.
fn promtool() -> String {
    std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".to_owned())
}

#[test]
fn promtool_accepts_a_scrape_of_every_kind_of_primitive() {
    let w = full_world();
    let s = serve(&w.world.server.url(), &[]);
    let (status, text) = http(&s.addr, "GET", "/metrics", &[]);
    assert_eq!(status, 200);
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not be run ({e}): install Debian's `prometheus` package \
                 (apt-get install prometheus; scripts/test.sh does) or set PROMTOOL"
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics failed ({}):\n{}{}\n--- scrape:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The value of the sample `name{labels}` (labels written as the tool writes them).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn pauses_groups_and_schedules_have_their_families() {
    let w = full_world();
    let s = serve(&w.world.server.url(), &[]);
    let (status, text) = http(&s.addr, "GET", "/metrics", &[]);
    assert_eq!(status, 200);
    let families = families_are_whole(&text);
    for f in [
        "redlease_queue_paused",
        "redlease_queue_groups",
        "redlease_queue_groups_paused",
        "redlease_queue_schedules",
        "redlease_queue_schedule_next_timestamp_seconds",
    ] {
        assert!(families.iter().any(|g| g == f), "no {f}:\n{text}");
    }
    let v = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series}:\n{text}"));
    // Queue `mail` is paused, `emails` is not.
    assert_eq!(v("redlease_queue_paused{queue=\"mail\"}"), 1.0);
    assert_eq!(v("redlease_queue_paused{queue=\"emails\"}"), 0.0);
    // Queue `partner`: groups acme and globex hold jobs; globex is paused.
    assert_eq!(v("redlease_queue_groups{queue=\"partner\"}"), 2.0);
    assert_eq!(v("redlease_queue_groups_paused{queue=\"partner\"}"), 1.0);
    assert_eq!(v("redlease_queue_groups{queue=\"emails\"}"), 0.0);
    // Queue `reports`: one schedule, every minute, next due within the minute.
    assert_eq!(v("redlease_queue_schedules{queue=\"reports\"}"), 1.0);
    assert_eq!(v("redlease_queue_schedules{queue=\"emails\"}"), 0.0);
    let next = v(
        "redlease_queue_schedule_next_timestamp_seconds{queue=\"reports\",schedule=\"every-minute\"}",
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(next > now - 5.0 && next <= now + 61.0, "{next} vs {now}");
}
