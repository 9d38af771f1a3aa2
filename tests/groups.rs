//! Job groups against real redis-server: fair takes, per-group and queue-wide concurrency
//! and rate limits (across OS processes where it says so: the test binary runs itself as a
//! child, see [`child`]), slots of a killed process freed at lease expiry, the "rate
//! limited for d" answer, and idle takers that sleep rather than poll.
//!
//! Long figures run short by default; `GROUPS_FULL=1` runs them at the size.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlease::{
    Client, Error, queue::GroupLimits, queue::JobError, queue::LimitsOf, queue::NewJob,
    queue::PushOptions, queue::Pushed, queue::Queue, rate::RateLimit,
};
use redlease_suite::RedisServer;
use redlease_suite::testkit::{self, Monitor, await_condition, server};

fn client(server: &RedisServer) -> Client {
    testkit::client(server, Duration::from_millis(500))
}

fn full() -> bool {
    std::env::var_os("GROUPS_FULL").is_some()
}

/// Tests that measure time or throughput run one at a time.
static HEAVY: RwLock<()> = RwLock::new(());

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    HEAVY.write().unwrap_or_else(|p| p.into_inner())
}

fn shared() -> RwLockReadGuard<'static, ()> {
    HEAVY.read().unwrap_or_else(|p| p.into_inner())
}

fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Pushes `n` jobs into `group` (batches of 1,000).
fn fill(q: &Queue, group: &str, n: usize) {
    let mut done = 0;
    while done < n {
        let batch: Vec<NewJob> = (done..n.min(done + 1000))
            .map(|i| NewJob {
                id: format!("{group}-{i}"),
                payload: group.as_bytes().to_vec(),
            })
            .collect();
        done += batch.len();
        let out = q
            .push_batch(&batch, PushOptions::new().group(group))
            .unwrap();
        assert!(out.iter().all(|p| matches!(p, Pushed::Queued(_))));
    }
}

// ---------------------------------------------------------------------------------------
// Child processes: the test binary run again with GROUPS_CHILD set runs `child` only.

/// A child: runs `GROUPS_WORKERS` workers on the groups of queue `GROUPS_QUEUE` at
/// `GROUPS_URL`, each job `GROUPS_HANDLER_MS` long (`hold`: until killed), printing
/// `STAMP <group> <enter µs> <exit µs>` per job and `TAKEN <group>` as it starts one;
/// stops when the queue is empty (nothing ready, delayed or in flight) for 300 ms.
#[test]
fn child() {
    let Ok(mode) = std::env::var("GROUPS_CHILD") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let client = Client::builder(var("GROUPS_URL"))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let q = client
        .queue(&var("GROUPS_QUEUE"))
        .unwrap()
        .visibility(Duration::from_millis(
            var("GROUPS_VISIBILITY_MS").parse().unwrap(),
        ))
        .groups()
        .unwrap();
    let workers: usize = var("GROUPS_WORKERS").parse().unwrap();
    let handler_ms: u64 = var("GROUPS_HANDLER_MS").parse().unwrap();
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let pool = q
        .work(workers, move |job| {
            let enter = wall_us();
            let group = job.group().unwrap_or("-").to_owned();
            {
                use std::io::Write;
                let mut o = out.lock().unwrap();
                writeln!(o, "TAKEN {group}").unwrap();
                o.flush().unwrap();
            }
            if mode == "hold" {
                thread::sleep(Duration::from_secs(3600));
            }
            thread::sleep(Duration::from_millis(handler_ms));
            let exit = wall_us();
            use std::io::Write;
            let mut o = out.lock().unwrap();
            writeln!(o, "STAMP {group} {enter} {exit}").unwrap();
            Ok::<(), String>(())
        })
        .unwrap();
    let mut empty_since: Option<Instant> = None;
    loop {
        let s = q.stats().unwrap();
        if s.ready + s.delayed + s.in_flight == 0
            && grouped_ready(&var("GROUPS_URL"), &var("GROUPS_QUEUE")) == 0
        {
            let since = *empty_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_millis(300) {
                break;
            }
        } else {
            empty_since = None;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let report = pool.stop();
    assert_eq!(report.errors, 0, "{report:?}");
}

/// Ready grouped jobs of queue `name` (summed over its groups' ready zsets).
fn grouped_ready(url: &str, name: &str) -> u64 {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("redlease:{{{name}}}:q:g:r:*"))
        .query(&mut conn)
        .unwrap();
    keys.iter()
        .map(|k| redis::cmd("ZCARD").arg(k).query::<u64>(&mut conn).unwrap())
        .sum()
}

fn spawn_child(
    server: &RedisServer,
    queue: &str,
    mode: &str,
    workers: usize,
    handler_ms: u64,
    visibility_ms: u64,
) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env("GROUPS_CHILD", mode)
        .env("GROUPS_URL", server.url())
        .env("GROUPS_QUEUE", queue)
        .env("GROUPS_WORKERS", workers.to_string())
        .env("GROUPS_HANDLER_MS", handler_ms.to_string())
        .env("GROUPS_VISIBILITY_MS", visibility_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The stamps a child printed: (group, enter µs, exit µs).
fn stamps(child: Child) -> Vec<(String, i64, i64)> {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "a child failed: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // (The first may follow libtest's "test child ... " on its line.)
            let mut w = l[l.find("STAMP ")? + 6..].split(' ');
            Some((
                w.next()?.to_owned(),
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// The stamps of every child, each child's output read on a thread of its own: read one
/// after the other, a child whose pipe is full blocks its workers (holding jobs in flight)
/// while the one being read waits for the queue to drain (10,000 jobs in GROUPS_FULL).
fn all_stamps(children: Vec<Child>) -> Vec<(String, i64, i64)> {
    let readers: Vec<_> = children
        .into_iter()
        .map(|c| thread::spawn(move || stamps(c)))
        .collect();
    readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect()
}

/// The most stamped intervals open at once, per group (`None`: over every group).
fn most_at_once(stamps: &[(String, i64, i64)], per_group: bool) -> usize {
    let mut events: HashMap<&str, Vec<(i64, i32)>> = HashMap::new();
    for (g, enter, exit) in stamps {
        let key = if per_group { g.as_str() } else { "" };
        let e = events.entry(key).or_default();
        e.push((*enter, 1));
        e.push((*exit, -1));
    }
    let mut most = 0;
    for (_, mut e) in events {
        // An exit before an enter at the same µs: they did not overlap.
        e.sort();
        let mut open = 0;
        for (_, d) in e {
            open += d;
            most = most.max(open as usize);
        }
    }
    most
}

// ---------------------------------------------------------------------------------------
// Fairness

/// 10,000 jobs in group A, then 10 each in B and C, 4 workers: every B and C job is taken
/// before A's 60th (round robin: B and C are done by about A's 11th). Before groups, B and
/// C waited behind the 10,000.
#[test]
fn a_large_group_does_not_delay_small_ones() {
    let _g = shared();
    let server = server();
    let c = client(&server);
    let q = c.queue("fair").unwrap();
    fill(&q, "A", 10_000);
    fill(&q, "B", 10);
    fill(&q, "C", 10);
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let small_done = Arc::new(AtomicUsize::new(0));
    let (o, s) = (order.clone(), small_done.clone());
    let workers = q
        .groups()
        .unwrap()
        .work(4, move |job| {
            let g = job.group().unwrap().to_owned();
            if g != "A" {
                s.fetch_add(1, Ordering::SeqCst);
            }
            o.lock().unwrap().push(g);
            Ok::<(), String>(())
        })
        .unwrap();
    await_condition(Duration::from_secs(30), || {
        small_done.load(Ordering::SeqCst) == 20
    });
    drop(workers);
    let order = order.lock().unwrap();
    let a_60th = order
        .iter()
        .enumerate()
        .filter(|(_, g)| *g == "A")
        .nth(59)
        .map(|(i, _)| i)
        .unwrap_or(usize::MAX);
    let last_small = order.iter().rposition(|g| g != "A").unwrap();
    assert!(
        last_small < a_60th,
        "the last B/C job was taken at {last_small}, A's 60th at {a_60th}"
    );
}

// ---------------------------------------------------------------------------------------
// Concurrency

/// 2 processes x 8 workers, 20 groups of jobs (500 each with GROUPS_FULL, 25 otherwise),
/// 5 ms each, at most 2 running per group: never 3 stamped as running in one group; and
/// the fleet's throughput against 16 unlimited workers on the same jobs (at least 0.9 of
/// it with GROUPS_FULL; printed either way).
#[test]
fn per_group_concurrency_holds_across_processes() {
    let _g = exclusive();
    let server = server();
    let c = client(&server);
    let per_group = if full() { 500 } else { 25 };
    let run = |name: &str, limit: Option<u32>, groups: usize| {
        let q = c.queue(name).unwrap();
        if let Some(n) = limit {
            q.set_group_limits(
                LimitsOf::EveryGroup,
                Some(GroupLimits::new().concurrency(n)),
            )
            .unwrap();
        }
        for g in 0..groups {
            fill(&q, &format!("g{g}"), per_group);
        }
        let started = Instant::now();
        let children: Vec<Child> = (0..2)
            .map(|_| spawn_child(&server, name, "work", 8, 5, 30_000))
            .collect();
        let all = all_stamps(children);
        let first = all.iter().map(|s| s.1).min().unwrap();
        let last = all.iter().map(|s| s.2).max().unwrap();
        let _ = started;
        (all, (last - first) as f64 / 1e6)
    };
    let (limited, limited_secs) = run("conc", Some(2), 20);
    assert_eq!(limited.len(), 20 * per_group, "every job ran once");
    let most = most_at_once(&limited, true);
    assert!(most <= 2, "{most} jobs of one group ran at once (limit 2)");
    // 4 groups: 8 slots for 16 workers, so the limit binds all the time.
    let (tight, _) = run("tight", Some(2), 4);
    assert_eq!(tight.len(), 4 * per_group, "every job ran once");
    let most = most_at_once(&tight, true);
    assert_eq!(most, 2, "{most} jobs of one group ran at once (limit 2)");
    let (free, free_secs) = run("free", None, 20);
    assert_eq!(free.len(), 20 * per_group);
    let ratio = free_secs / limited_secs;
    eprintln!(
        "{} jobs: limited {limited_secs:.2} s, unlimited {free_secs:.2} s, throughput ratio {ratio:.3}",
        20 * per_group
    );
    if full() {
        assert!(ratio >= 0.9, "throughput ratio {ratio:.3} < 0.9");
    }
}

/// A queue-wide concurrency of 1 across 3 processes (4 workers each): never 2 running.
#[test]
fn queue_concurrency_holds_across_processes() {
    let _g = exclusive();
    let server = server();
    let c = client(&server);
    let q = c.queue("global").unwrap();
    q.set_group_limits(LimitsOf::Queue, Some(GroupLimits::new().concurrency(1)))
        .unwrap();
    let per_group = if full() { 200 } else { 20 };
    for g in 0..5 {
        fill(&q, &format!("g{g}"), per_group);
    }
    let children: Vec<Child> = (0..3)
        .map(|_| spawn_child(&server, "global", "work", 4, 2, 30_000))
        .collect();
    let all = all_stamps(children);
    assert_eq!(all.len(), 5 * per_group);
    assert_eq!(most_at_once(&all, false), 1, "2 jobs ran at once");
}

/// A process holding a group's 2 slots is SIGKILLed: a taker waiting on that group gets
/// a job within the visibility timeout (300 ms) plus 10 ms of the kill (its leases were
/// renewed until then at the latest), and the group's in-flight record empties.
#[test]
fn slots_of_a_killed_process_free_at_lease_expiry() {
    let _g = exclusive();
    let server = server();
    let c = client(&server);
    let visibility = Duration::from_millis(300);
    let q = c.queue("killed").unwrap().visibility(visibility);
    q.set_group_limits(
        LimitsOf::EveryGroup,
        Some(GroupLimits::new().concurrency(2)),
    )
    .unwrap();
    fill(&q, "g", 3);
    let mut child = spawn_child(&server, "killed", "hold", 2, 0, 300);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut taken = 0;
    while taken < 2 {
        let line = lines.next().expect("the child took 2 jobs").unwrap();
        if line.contains("TAKEN g") {
            taken += 1;
        }
    }
    let groups = q.groups().unwrap();
    // The third job is not given while both slots are held.
    assert!(
        groups.try_take().unwrap().is_none(),
        "a third slot was given"
    );
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let job = groups
        .take(Duration::from_secs(5))
        .unwrap()
        .expect("a slot freed");
    let after = killed.elapsed();
    assert!(
        after <= visibility + Duration::from_millis(10) + rtt(&c),
        "a slot freed {after:?} after the kill (visibility {visibility:?})"
    );
    job.ack().unwrap();
    // Both leases of the killed process ran out; the other two jobs are taken in turn.
    let a = groups
        .take(Duration::from_secs(2))
        .unwrap()
        .expect("second");
    let b = groups.take(Duration::from_secs(2)).unwrap().expect("third");
    a.ack().unwrap();
    b.ack().unwrap();
    let mut conn = testkit::connection(&server);
    let left: u64 = redis::cmd("ZCARD")
        .arg("redlease:{killed}:q:g:inflight")
        .query(&mut conn)
        .unwrap();
    assert_eq!(left, 0);
}

/// A round trip to the server now (a bound's slack on a busy machine).
fn rtt(c: &Client) -> Duration {
    let q = c.queue("rtt").unwrap();
    let t = Instant::now();
    q.stats().unwrap();
    t.elapsed()
}

// ---------------------------------------------------------------------------------------
// Rates

/// Per-group 50/s burst 1 on 16 workers for `secs` of the server's clock (10 with
/// GROUPS_FULL, 2 otherwise), two groups: exactly 50 x secs + 1 (± 1) started per group in
/// such a window, never two within 19.9 ms. Start times are the server's record: each take
/// stores its group's rate state (the GCRA time, µs), which with a burst of 1 is its slot
/// plus one interval, seen in MONITOR's `SET ...:q:g:t:<group> <µs>`; a take that comes a
/// little before its slot books it (`GROUP_RESERVE`) and its handler starts no earlier,
/// checked on this machine's clock (the server's) against the slot.
#[test]
fn per_group_rate_holds_on_the_server_clock() {
    rate_holds("rate", LimitsOf::EveryGroup, &["a", "b"]);
}

/// The same for the whole queue's rate (50/s burst 1) over four groups without limits of
/// their own: its slots are booked as a group's are, so the queue starts exactly
/// 50 x secs plus one (± 1) in such a window, never two within 19.9 ms (the server's record:
/// the queue's rate state, `SET ...:q:g:rate <µs>`).
#[test]
fn whole_queue_rate_holds_on_the_server_clock() {
    rate_holds("qrate", LimitsOf::Queue, &["a", "b", "c", "d"]);
}

/// The commands the server ran inside scripts (`MONITOR` lines with `lua]`) over `span`.
fn script_lines(monitor: &mut Monitor, span: Duration) -> Vec<String> {
    let end = Instant::now() + span;
    let mut lines = Vec::new();
    while Instant::now() < end {
        if let Some(line) = monitor.next_line(Duration::from_millis(100))
            && line.contains("lua]")
        {
            lines.push(line);
        }
    }
    lines
}

/// Both rates at once: group "a" 20/s (50 ms apart), group "b" 4/s (250 ms), the whole
/// queue 100 per 3 s (30 ms), 16 workers. A take that books its group's slot and the
/// queue's starts at the later one; each rate's time must then move from that start. When
/// the queue's slot is the later (a's slot at 50 ms, the queue's at 60 after b's take at
/// 30), a time moved from a's own slot would let a start again 40 ms later, while b waits
/// and leaves the queue free. By the server's record (the booked slot, else the queue's
/// rate state less one interval), no group starts two jobs closer than its interval and
/// the queue none within 30 ms.
#[test]
fn group_and_queue_rates_together_keep_both_spacings() {
    let _g = exclusive();
    let server = server();
    let c = client(&server);
    let secs: i64 = if full() { 10 } else { 2 };
    let queue_us = 30_000i64;
    let interval_of = |series: &str| match series {
        "queue" => queue_us,
        "b" => 250_000,
        _ => 50_000,
    };
    let q = c.queue("both").unwrap();
    let rate = |n, period| {
        GroupLimits::new().rate(RateLimit::new(n, Duration::from_secs(period), 1).unwrap())
    };
    q.set_group_limits(LimitsOf::EveryGroup, Some(rate(20, 1)))
        .unwrap();
    q.set_group_limits(LimitsOf::Group("b"), Some(rate(4, 1)))
        .unwrap();
    q.set_group_limits(LimitsOf::Queue, Some(rate(100, 3)))
        .unwrap();
    for g in ["a", "b"] {
        fill(&q, g, 20 * secs as usize + 50);
    }
    let mut monitor = Monitor::start(&server);
    let workers = q
        .groups()
        .unwrap()
        .work(16, |_job| Ok::<(), String>(()))
        .unwrap();
    // Each take as the server ran it: its group (from its delivery count's `HINCRBY`), when
    // it ran (the clock its script read: the queue's rate state it stores, less one
    // interval, when it booked nothing) and the slot it booked (`SET ...:q:g:s:<token> <µs>`).
    let mut takes: Vec<(String, i64, Option<i64>)> = Vec::new();
    for line in script_lines(&mut monitor, Duration::from_secs(secs as u64 + 3)) {
        // `<s>.<µs> [0 lua] "HINCRBY" "redlease:{both}:q:g:deliveries" "a\x1fa-1" "1"`
        if line.contains("\"HINCRBY\"") && line.contains(":q:g:deliveries") {
            let stamp = line.split(' ').next().unwrap().replace('.', "");
            let id = line.split('"').nth(5).unwrap();
            let group = id.split("\\x1f").next().unwrap().to_owned();
            takes.push((group, stamp.parse().unwrap(), None));
        }
        if line.contains("\"SET\"") && line.contains(":q:g:s:") {
            let slot: i64 = line.split('"').nth(5).unwrap().parse().unwrap();
            takes.last_mut().unwrap().2 = Some(slot);
        }
        // `... "SET" "redlease:{both}:q:g:rate" "<µs>" "PX" "20"`: the queue's time after
        // the take, its start plus one interval.
        if line.contains("\"SET\"") && line.contains(":q:g:rate\"") {
            let tat: i64 = line.split('"').nth(5).unwrap().parse().unwrap();
            let take = takes.last_mut().unwrap();
            if take.2.is_none() {
                take.1 = tat - queue_us;
            }
        }
    }
    // Start µs per series ("queue", or the group): the booked slot, else when it ran.
    let mut starts: HashMap<String, Vec<i64>> = HashMap::new();
    let booked = takes.iter().filter(|t| t.2.is_some()).count();
    for (group, ran, slot) in &takes {
        let at = slot.unwrap_or(*ran);
        starts.entry("queue".into()).or_default().push(at);
        starts.entry(group.clone()).or_default().push(at);
    }
    eprintln!("{} takes, {booked} of them booked a slot", takes.len());
    // The bookings are what this judges: most takes come before their slot.
    assert!(
        booked * 4 >= takes.len(),
        "only {booked} of {} takes booked",
        takes.len()
    );
    drop(workers);
    assert_eq!(starts.len(), 3, "{:?}", starts.keys());
    for (series, times) in &starts {
        let interval = interval_of(series);
        let mut times = times.clone();
        times.sort_unstable();
        let closest = times.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        let in_window = times
            .iter()
            .filter(|&&t| t - times[0] <= secs * 1_000_000)
            .count() as i64;
        eprintln!("{series}: {in_window} started in {secs} s, closest {closest} µs apart");
        assert!(
            closest >= interval,
            "{series}: two starts {closest} µs apart (interval {interval})"
        );
        let most = secs * 1_000_000 / interval + 1;
        assert!(
            in_window <= most + 1 && in_window * 2 >= most,
            "{series}: {in_window} started in {secs} s (at most {most})"
        );
    }
}

/// Runs 16 workers on queue `name` under a rate of 50/s burst 1 set for `limits`, with
/// `groups` filled, and judges the starts by the server's record: per group for a group
/// rate, for the whole queue (series "queue") for the queue's.
fn rate_holds(name: &str, limits: LimitsOf<'_>, groups: &[&str]) {
    let _g = exclusive();
    let server = server();
    let c = client(&server);
    let secs: i64 = if full() { 10 } else { 2 };
    let interval_us: i64 = 20_000;
    let whole = matches!(limits, LimitsOf::Queue);
    let q = c.queue(name).unwrap();
    q.set_group_limits(
        limits,
        Some(GroupLimits::new().rate(RateLimit::new(50, Duration::from_secs(1), 1).unwrap())),
    )
    .unwrap();
    let per_group = if whole {
        (50 * secs as usize) / groups.len() + 100
    } else {
        (50 * secs as usize) + 100
    };
    for g in groups {
        fill(&q, g, per_group);
    }
    let started: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let seen = started.clone();
    let mut monitor = Monitor::start(&server);
    let workers = q
        .groups()
        .unwrap()
        .work(16, move |job| {
            let id = job.id().rsplit('\u{1f}').next().unwrap().to_owned();
            seen.lock().unwrap().insert(id, wall_us());
            Ok::<(), String>(())
        })
        .unwrap();
    // (slot µs, job id) per group, in the order the server ran the takes.
    let mut slots: HashMap<String, Vec<(i64, String)>> = HashMap::new();
    let mut last_id = String::new();
    for line in script_lines(&mut monitor, Duration::from_secs(secs as u64 + 3)) {
        // `<s>.<µs> [0 lua] "HINCRBY" "redlease:{rate}:q:g:deliveries" "a\x1fa-1" "1"`
        if line.contains("\"HINCRBY\"") && line.contains(":q:g:deliveries") {
            let id = line.split('"').nth(5).unwrap();
            last_id = id.rsplit("\\x1f").next().unwrap().to_owned();
        }
        // `... "SET" "redlease:{rate}:q:g:t:a" "1764230000123456" "PX" "20"` (a group's),
        // `... "SET" "redlease:{qrate}:q:g:rate" "1764230000123456" "PX" "20"` (the queue's)
        let marker = if whole { ":q:g:rate\"" } else { ":q:g:t:" };
        if line.contains("\"SET\"") && line.contains(marker) {
            let mut parts = line.split('"');
            let key = parts.nth(3).unwrap();
            let tat: i64 = parts.nth(1).unwrap().parse().unwrap();
            let group = if whole {
                "queue".to_owned()
            } else {
                key.rsplit(":t:").next().unwrap().to_owned()
            };
            slots
                .entry(group)
                .or_default()
                .push((tat - interval_us, last_id.clone()));
        }
    }
    drop(workers);
    let started = started.lock().unwrap();
    let series = if whole { 1 } else { groups.len() };
    assert_eq!(slots.len(), series, "{:?}", slots.keys());
    for (g, taken) in &slots {
        let times: Vec<i64> = taken.iter().map(|(t, _)| *t).collect();
        let first = times[0];
        let in_window = times
            .iter()
            .filter(|&&t| t - first <= secs * 1_000_000)
            .count() as i64;
        let spacing = times.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        let late = times
            .windows(2)
            .filter(|w| w[1] - w[0] > interval_us)
            .count();
        eprintln!(
            "group {g}: {in_window} started in {secs} s (slots on the server's clock), closest {spacing} µs apart, {late} slots taken late"
        );
        assert!(
            spacing >= 19_900,
            "group {g}: two starts {spacing} µs apart"
        );
        // Exactly rate x window + burst: no slot is lost but by a take that came after it
        // (its wake-up and round trip longer than the booking margin on a busy machine),
        // which starts the next slots from when it ran; give or take one for the edge.
        let lost_us: i64 = times
            .windows(2)
            .filter(|w| w[1] - first <= secs * 1_000_000)
            .map(|w| w[1] - w[0] - interval_us)
            .sum();
        let exact = 1 + (secs * 1_000_000 - lost_us) / interval_us;
        assert!(
            in_window <= 50 * secs + 2 && (exact - 1..=exact + 1).contains(&in_window),
            "group {g}: {in_window} started in {secs} s ({exact} expected, {lost_us} µs lost to late takes)",
        );
        if late == 0 {
            assert!((50 * secs..=50 * secs + 2).contains(&in_window));
        }
        // Booked, a slot is lost only to a take later than the booking margin: a few on a
        // busy machine. Unbooked (each take a wake-up and a round trip after its slot),
        // every slot is late (before the queue's rate was booked: 616 late, 475 started).
        assert!(
            late * 4 <= times.len(),
            "group {g}: {late} of {} slots taken late",
            times.len()
        );
        // No handler started before its slot (the same clock: one machine).
        let mut judged = 0;
        for (slot, id) in taken {
            if let Some(&at) = started.get(id) {
                judged += 1;
                assert!(
                    at >= *slot,
                    "job {id:?} started at {at}, before its slot {slot}"
                );
            }
        }
        assert!(
            judged as i64 >= in_window - 20,
            "only {judged} starts judged"
        );
    }
}

/// A job answered "rate limited" 10 times with max_deliveries(1) still completes: the
/// answers count no delivery; its delivery number still increases on each take.
#[test]
fn a_rate_limited_job_loses_no_delivery() {
    let _g = shared();
    let server = server();
    let c = client(&server);
    let q = c.queue("429").unwrap().max_deliveries(1);
    q.push_with("call", PushOptions::new().group("partner"))
        .unwrap();
    let groups = q.groups().unwrap();
    let mut last = 0;
    for _ in 0..10 {
        let job = groups
            .take(Duration::from_secs(2))
            .unwrap()
            .expect("the job");
        assert_eq!(job.attempt(), 1);
        assert!(job.delivery() > last, "delivery numbers increase");
        last = job.delivery();
        assert_eq!(
            (job.group(), job.payload()),
            (Some("partner"), &b"call"[..])
        );
        job.rate_limit_group(Duration::from_millis(5)).unwrap();
    }
    let job = groups
        .take(Duration::from_secs(2))
        .unwrap()
        .expect("the job");
    job.ack().unwrap();
    assert!(q.groups().unwrap().dead_jobs(10).unwrap().is_empty());
    // Through a worker pool too.
    q.push_with("again", PushOptions::new().group("partner"))
        .unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let a = answered.clone();
    let workers = groups
        .work(2, move |_job| {
            if a.fetch_add(1, Ordering::SeqCst) < 10 {
                return Err(JobError::rate_limited(Duration::from_millis(5), "429"));
            }
            Ok(())
        })
        .unwrap();
    await_condition(Duration::from_secs(10), || {
        answered.load(Ordering::SeqCst) >= 11
    });
    let report = workers.stop();
    assert_eq!(report.acked, 1, "{report:?}");
    assert!(groups.dead_jobs(10).unwrap().is_empty());
}

/// A rate-limited group waits: answered "rate limited for 400 ms", the job is not taken
/// again for 400 ms (the server's blocking, judged from the answer's send), while another
/// group's job is taken at once.
#[test]
fn a_rate_limited_group_waits_and_others_do_not() {
    let _g = shared();
    let server = server();
    let c = client(&server);
    let q = c.queue("wait").unwrap();
    q.push_with("x", PushOptions::new().group("slow")).unwrap();
    let groups = q.groups().unwrap();
    let job = groups.take(Duration::from_secs(1)).unwrap().unwrap();
    let sent = Instant::now();
    job.rate_limit_group(Duration::from_millis(400)).unwrap();
    q.push_with("y", PushOptions::new().group("fast")).unwrap();
    let other = groups.take(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(other.group(), Some("fast"));
    other.ack().unwrap();
    let again = groups.take(Duration::from_secs(2)).unwrap().unwrap();
    assert!(sent.elapsed() >= Duration::from_millis(400));
    assert_eq!(again.group(), Some("slow"));
    again.ack().unwrap();
}

/// While every group is rate-blocked, an idle taker sends at most 5 commands a second: it
/// sleeps until the earliest group may take again (here 2 s away), it does not poll.
#[test]
fn an_idle_taker_sleeps_while_every_group_is_blocked() {
    let _g = shared();
    let server = server();
    let c = client(&server);
    let q = c.queue("idle").unwrap();
    q.set_group_limits(
        LimitsOf::EveryGroup,
        Some(GroupLimits::new().rate(RateLimit::new(1, Duration::from_secs(3), 1).unwrap())),
    )
    .unwrap();
    for g in ["a", "b", "c"] {
        fill(&q, g, 2);
    }
    let groups = q.groups().unwrap();
    for _ in 0..3 {
        groups.try_take().unwrap().unwrap().ack().unwrap();
    }
    // Every group waits about 3 s now.
    let taker = {
        let groups = groups.clone();
        thread::spawn(move || groups.take(Duration::from_secs(10)).unwrap())
    };
    let mut monitor = Monitor::start(&server);
    let commands = monitor.commands_during(Duration::from_secs(2));
    assert!(
        commands.len() <= 10,
        "{} commands in 2 s while every group was blocked: {commands:#?}",
        commands.len()
    );
    let job = taker
        .join()
        .unwrap()
        .expect("a job once a group may take again");
    job.ack().unwrap();
}

// ---------------------------------------------------------------------------------------
// Limits, sizes, input

/// Limits change at run time: a group's own limit replaces the defaults, clearing it
/// restores them; a maximum group size refuses pushes with GroupFull.
#[test]
fn limits_change_at_run_time_and_a_full_group_refuses_pushes() {
    let _g = shared();
    let server = server();
    let c = client(&server);
    let q = c.queue("limits").unwrap();
    q.set_group_limits(
        LimitsOf::EveryGroup,
        Some(GroupLimits::new().concurrency(1)),
    )
    .unwrap();
    fill(&q, "g", 3);
    let groups = q.groups().unwrap();
    let first = groups.try_take().unwrap().unwrap();
    assert!(
        groups.try_take().unwrap().is_none(),
        "the default limit of 1"
    );
    q.set_group_limits(
        LimitsOf::Group("g"),
        Some(GroupLimits::new().concurrency(2)),
    )
    .unwrap();
    let second = groups.try_take().unwrap().expect("its own limit of 2");
    assert!(groups.try_take().unwrap().is_none());
    q.set_group_limits(LimitsOf::Group("g"), None).unwrap();
    first.ack().unwrap();
    assert!(
        groups.try_take().unwrap().is_none(),
        "the default again: 1 running"
    );
    second.ack().unwrap();
    groups
        .try_take()
        .unwrap()
        .expect("a slot freed by the ack")
        .ack()
        .unwrap();

    q.set_group_limits(
        LimitsOf::Group("small"),
        Some(GroupLimits::new().max_size(2)),
    )
    .unwrap();
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| NewJob {
            id: i.to_string(),
            payload: vec![],
        })
        .collect();
    let out = q
        .push_batch(&jobs, PushOptions::new().group("small"))
        .unwrap();
    assert_eq!(
        out,
        vec![
            Pushed::Queued("0".into()),
            Pushed::Queued("1".into()),
            Pushed::GroupFull("2".into())
        ]
    );
}

/// Bad group ids are refused before anything is sent; a groups view refuses a push
/// without a group; plain jobs are not taken by the groups and grouped ones not by the
/// plain takes.
#[test]
fn bad_input_and_separate_lanes() {
    let _g = shared();
    let server = server();
    let c = client(&server);
    let q = c.queue("lanes").unwrap();
    for bad in ["", "a\u{1f}b"] {
        let out = q.push_with("x", PushOptions::new().group(bad));
        assert!(
            matches!(out, Err(Error::InvalidArgument(_))),
            "{bad:?}: {out:?}"
        );
    }
    let groups = q.groups().unwrap();
    assert!(matches!(groups.push("x"), Err(Error::InvalidArgument(_))));
    q.push("plain").unwrap();
    q.push_with("grouped", PushOptions::new().group("g"))
        .unwrap();
    let g = groups.try_take().unwrap().unwrap();
    assert_eq!(
        (g.payload(), g.group(), g.id().len()),
        (&b"grouped"[..], Some("g"), 32)
    );
    assert!(groups.try_take().unwrap().is_none());
    let p = q.try_take().unwrap().unwrap();
    assert_eq!((p.payload(), p.group()), (&b"plain"[..], None));
    assert!(q.try_take().unwrap().is_none());
    g.ack().unwrap();
    p.ack().unwrap();
}

/// A take's work does not grow with the number of groups: 1,000 takes from a queue of 10
/// groups and from one of 10,000 groups (100,000 with GROUPS_FULL), one job each beyond the
/// first 10.
///
/// Judged two ways from `INFO commandstats`, which counts the commands a script calls:
/// - exactly: the takes call as many commands at both sizes (a take that walked the groups
///   would call more at 10,000; which commands differs, as a group of one job leaves the
///   rotation where a group of many is moved to its end);
/// - by server time (the scripts' `usec_per_call`): five rounds of each, interleaved, the
///   least of each kept (a busy machine stretches a round, never shortens one), at most 1.5x
///   apart. The 1.2x is the figure printed here; the bound asserted leaves room for a
///   shared machine's noise (a round on CI measured 1.215x with identical work) while a walk
///   over 10,000 groups would cost tens of times more.
#[test]
fn a_take_costs_the_same_at_many_groups() {
    const ROUNDS: usize = 5;
    const TAKES: usize = 1000;
    let _g = exclusive();
    let server = server();
    let c = client(&server);
    let mut conn = testkit::connection(&server);
    let many = if full() { 100_000 } else { 10_000 };
    let queue = |name: &str, groups: usize| {
        let q = c.queue(name).unwrap();
        for g in 0..groups {
            fill(
                &q,
                &format!("g{g}"),
                if groups <= 10 { 200 * ROUNDS } else { 1 },
            );
        }
        let groups_q = q.groups().unwrap();
        // The scripts loaded.
        groups_q.try_take().unwrap().unwrap().ack().unwrap();
        groups_q
    };
    // (server time per take in µs, the commands the takes called by name with their counts)
    let per_take = |groups_q: &Queue, conn: &mut redis::Connection| {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
        let mut held = Vec::new();
        for _ in 0..TAKES {
            held.push(groups_q.try_take().unwrap().expect("a job"));
        }
        let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
        for job in held {
            job.abandon();
        }
        let field = |line: &str, name: &str| -> f64 {
            line.split([':', ','])
                .find_map(|f| f.strip_prefix(name))
                .unwrap()
                .parse()
                .unwrap()
        };
        let mut usec = None;
        let mut called = std::collections::BTreeMap::new();
        for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
            let name = &line["cmdstat_".len()..line.find(':').unwrap()];
            match name {
                "evalsha" => usec = Some(field(line, "usec_per_call=")),
                // The statistics' own commands.
                _ if name.starts_with("config") || name.starts_with("info") => {}
                _ => {
                    called.insert(name.to_owned(), field(line, "calls=") as u64);
                }
            }
        }
        (usec.expect("the takes ran a script"), called)
    };
    let few_q = queue("few", 10);
    let lots_q = queue("lots", many);
    let (mut few, mut lots) = (f64::MAX, f64::MAX);
    for round in 0..ROUNDS {
        let (few_usec, few_called) = per_take(&few_q, &mut conn);
        let (lots_usec, lots_called) = per_take(&lots_q, &mut conn);
        let calls: u64 = few_called.values().sum();
        assert!(
            calls >= TAKES as u64,
            "round {round}: {calls} commands called by {TAKES} takes: {few_called:?}"
        );
        assert_eq!(
            calls,
            lots_called.values().sum::<u64>(),
            "round {round}: the commands {TAKES} takes called at 10 groups ({few_called:?}), \
             then at {many} ({lots_called:?})"
        );
        few = few.min(few_usec);
        lots = lots.min(lots_usec);
    }
    eprintln!(
        "a take: {few:.2} µs at 10 groups, {lots:.2} µs at {many} groups ({:.3}x), least of {ROUNDS} rounds; as many commands called at both",
        lots / few
    );
    assert!(
        lots <= few * 1.5,
        "{lots:.2} µs at {many} groups, {few:.2} µs at 10"
    );
}
