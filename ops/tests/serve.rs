//! `redlease serve` against a real redis-server: the JSON API, `/metrics`, the safety rules,
//! a read-only ACL user, and the cost of one refresh.

mod common;

use std::time::Duration;

use common::{World, http, redis_conn, run, run_json, serve, world};
use serde_json::Value;

const TOKEN: &str = "0123456789abcdef-test-token";

fn token_file(w: &World) -> String {
    let path = w.server.dir().join("ops-token");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn the_api_and_metrics_show_the_queues_locks_and_semaphores() {
    let w = world();
    let s = serve(&w.server.url(), &[]);
    let (status, body) = http(&s.addr, "GET", "/api/overview", &[]);
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    let emails = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "emails")
        .unwrap();
    assert_eq!(
        (emails["ready"].as_u64(), emails["dead"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(v["locks"][0]["name"], "billing");
    assert_eq!(v["semaphores"][0]["permits"], 3);
    assert_eq!(v["actions_allowed"], false);
    assert!(!body.contains(w.lock.lease().token.as_str()));

    let (status, body) = http(&s.addr, "GET", "/api/queues/emails/dead", &[]);
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["jobs"][0]["reason"], "smtp timeout");

    let (status, body) = http(&s.addr, "GET", "/api/history", &[]);
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["samples"].as_array().unwrap().last().unwrap()["queues"]["emails"]["dead"],
        2
    );

    let (status, metrics) = http(&s.addr, "GET", "/metrics", &[]);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("redlease_queue_jobs{queue=\"emails\",state=\"dead\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("redlease_queue_jobs{queue=\"emails\",state=\"ready\"} 1"));
    assert!(metrics.contains("redlease_semaphore_holders{semaphore=\"api\"} 1"));
    assert!(metrics.contains("# TYPE redlease_lock_ttl_seconds gauge"));
}

#[test]
fn actions_need_the_flag_the_token_and_the_same_site() {
    let w = world();
    let url = w.server.url();
    let q = w.client.queue("emails").unwrap();
    let requeue = "/api/queues/emails/dead/requeue?id=dead-0";

    // Read-only by default, whatever the request carries.
    let ro = serve(&url, &[]);
    let (status, body) = http(&ro.addr, "POST", requeue, &[("X-Redlease-Token", TOKEN)]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"));
    assert_eq!(q.stats().unwrap().dead, 2);

    // Actions allowed: only with the token, from the same site, under a loopback name.
    let file = token_file(&w);
    let rw = serve(&url, &["--allow-actions", "--token-file", &file]);
    let refused: [&[(&str, &str)]; 5] = [
        &[],
        &[("X-Redlease-Token", "0123456789abcdef-wrong-token")],
        &[
            ("X-Redlease-Token", TOKEN),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        &[
            ("X-Redlease-Token", TOKEN),
            ("Origin", "http://evil.example"),
        ],
        &[("X-Redlease-Token", TOKEN), ("Host", "evil.example")],
    ];
    for headers in refused {
        let (status, body) = http(&rw.addr, "POST", requeue, headers);
        assert_eq!(status, 403, "{headers:?}: {body}");
    }
    // The page's other actions are held to the same checks.
    for path in [
        "/api/queues/emails/pause",
        "/api/queues/emails/pause?group=acme",
        "/api/queues/emails/cancel?id=ready-0",
        "/api/locks/billing/release?token_prefix=00000000",
    ] {
        for headers in refused {
            let (status, body) = http(&rw.addr, "POST", path, headers);
            assert_eq!(status, 403, "{path} {headers:?}: {body}");
        }
    }
    assert!(!q.is_paused().unwrap() && !q.is_group_paused("acme").unwrap());
    assert!(w.lock.inspect().is_ok());
    assert_eq!(
        q.stats().unwrap().dead,
        2,
        "a refused action changed something"
    );
    let origin = format!("http://{}", rw.addr);
    let (status, body) = http(
        &rw.addr,
        "POST",
        requeue,
        &[
            ("X-Redlease-Token", TOKEN),
            ("Origin", &origin),
            ("Sec-Fetch-Site", "same-origin"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    let st = q.stats().unwrap();
    assert_eq!((st.ready, st.dead), (2, 1));

    // Starting with actions but no token (or a short one) is refused.
    let out = run(&url, &["serve", "--allow-actions"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(&file, "short").unwrap();
    let out = run(&url, &["serve", "--allow-actions", "--token-file", &file]);
    assert_eq!(out.status.code(), Some(2));
}

/// The ACL rule docs/acl.md gives for a read-only operator: on Redis 7+ and Valkey, keys it
/// may only read (`%R~`) and the read-only script commands; on Redis 6.2 (which has neither),
/// keys without a write command and the plain script commands.
fn viewer_rule(conn: &mut redis::Connection) -> Vec<&'static str> {
    let info: String = redis::cmd("INFO").arg("server").query(conn).unwrap();
    let major: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse().ok())
        .unwrap();
    let (keys, scripts) = if major >= 7 {
        ("%R~redlease:*", ["+evalsha_ro", "+eval_ro"])
    } else {
        ("~redlease:*", ["+evalsha", "+eval"])
    };
    let mut rule = vec![
        "viewer",
        "on",
        ">viewer-password",
        "resetkeys",
        "resetchannels",
        "-@all",
        keys,
        "+ping",
        "+info",
        "+scan",
    ];
    rule.extend(scripts);
    rule.extend([
        "+time",
        "+client|list",
        "+get",
        "+mget",
        "+pttl",
        "+llen",
        "+lrange",
        "+hlen",
        "+hget",
        "+hmget",
        "+hgetall",
        "+hexists",
        "+lpos",
        "+type",
        "+zcount",
        "+zrank",
        "+zcard",
        "+zrange",
        "+zrangebyscore",
        "+zscore",
        "+pubsub|numsub",
    ]);
    rule
}

#[test]
fn a_user_without_write_rights_sees_everything_and_changes_nothing() {
    let w = world();
    // A paused queue beside `emails` (not paused): the pause read is a read-only script.
    let held = w.client.queue("held").unwrap();
    held.push("parked").unwrap();
    held.pause().unwrap();
    let mut admin = redis_conn(&w.server.url());
    let rule = viewer_rule(&mut admin);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(rule)
        .query(&mut admin)
        .unwrap();
    let url = format!(
        "redis://viewer:viewer-password@127.0.0.1:{}/",
        w.server.port()
    );

    let v = run_json(&url, &["queues", "--json"]);
    assert_eq!(v["queues"][0]["name"], "emails");
    assert_eq!(v["queues"][0]["dead"], 2);
    assert!(v["queues"][0]["per_minute"]["dead"].is_u64(), "{v}");
    assert_eq!(v["queues"][0]["paused"], false, "{v}");
    assert_eq!(v["queues"][1]["name"], "held");
    assert_eq!(v["queues"][1]["paused"], true, "{v}");
    assert!(v["queues"][1]["error"].is_null(), "{v}");
    // The table's paused column too (not n/a).
    let out = run(&url, &["queues"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let mut lines = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>());
    let header = lines.next().unwrap();
    let col = header.iter().position(|h| *h == "paused").unwrap();
    let paused: Vec<(&str, &str)> = lines.map(|r| (r[0], r[col])).collect();
    assert_eq!(paused, [("emails", "false"), ("held", "true")], "{table}");
    let v = run_json(&url, &["jobs", "emails", "--json"]);
    assert_eq!(v["jobs"][0]["id"], "ready-0");
    let v = run_json(&url, &["locks", "--json"]);
    assert_eq!(v["locks"][0]["name"], "billing");
    let v = run_json(&url, &["semaphores", "--json"]);
    assert_eq!(v["semaphores"][0]["permits"], 3);
    let v = run_json(&url, &["status", "--json"]);
    assert!(
        !v.to_string().contains("viewer-password"),
        "a password was shown"
    );
    let v = run_json(&url, &["dead", "emails", "--json"]);
    assert_eq!(v.as_array().unwrap().len(), 2);

    // Writing is refused by the server, and nothing was written.
    let out = run(&url, &["requeue", "emails", "--all"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let st = w.client.queue("emails").unwrap().stats().unwrap();
    assert_eq!((st.ready, st.dead), (1, 2));

    // The dashboard reads with it too.
    let s = serve(&url, &[]);
    let (status, body) = http(&s.addr, "GET", "/api/overview", &[]);
    assert_eq!(status, 200);
    assert!(body.contains("\"emails\"") && !body.contains("viewer-password"));
    let v: Value = serde_json::from_str(&body).unwrap();
    let paused: Vec<(&str, &Value)> = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["name"].as_str().unwrap(), &q["paused"]))
        .collect();
    assert_eq!(
        paused,
        [
            ("emails", &Value::Bool(false)),
            ("held", &Value::Bool(true))
        ],
        "{body}"
    );
}

/// The commands the tool sends itself (its scripts' inner calls are counted inside
/// `evalsha` too, and are not added again: `mget` alone is both, and counted whole). The
/// read scripts go as `evalsha_ro` on Redis 7+ and Valkey.
const SENT: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "scan",
    "pttl",
    "mget",
    "client",
    "ping",
];

/// Calls and server time (µs) of the commands the tool sends ([`SENT`]), from
/// `INFO commandstats`.
fn commandstats(conn: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let mut calls = 0;
    let mut usec = 0;
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest.split_once(':').unwrap();
        if !SENT
            .iter()
            .any(|s| name == *s || name.starts_with(&format!("{s}|")))
        {
            continue;
        }
        for f in fields.split(',') {
            if let Some(n) = f.strip_prefix("calls=") {
                calls += n.parse::<u64>().unwrap();
            }
            if let Some(n) = f.strip_prefix("usec=") {
                usec += n.parse::<u64>().unwrap();
            }
        }
    }
    (calls, usec)
}

#[test]
fn one_refresh_of_50_queues_and_1000_locks_costs_at_most_60_round_trips_and_5_ms() {
    let w = world();
    let url = w.server.url();
    for i in 0..50 {
        let q = w.client.queue(&format!("q{i:02}")).unwrap();
        q.push_many((0..3).map(|j| format!("job {j}"))).unwrap();
    }
    let mut guards = Vec::new();
    for i in 0..1000 {
        guards.push(
            w.client
                .lock(&format!("lock{i:04}"))
                .ttl(Duration::from_secs(120))
                .watchdog(false)
                .try_acquire()
                .unwrap()
                .unwrap(),
        );
    }
    // Once, so that the scripts are loaded (a first EVALSHA meets NOSCRIPT once per server).
    run_json(&url, &["queues", "--json"]);
    // Server time is measured in wall-clock time inside each command, which a busy machine
    // stretches: the least of nine refreshes is the cost; each must keep to the round trips.
    let mut conn = redis_conn(&url);
    let mut least = u64::MAX;
    for _ in 0..9 {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn)
            .unwrap();
        let (calls_before, usec_before) = commandstats(&mut conn);
        let v = run_json(&url, &["queues", "--json"]);
        let (calls, usec) = commandstats(&mut conn);
        let (calls, usec) = (calls - calls_before, usec - usec_before);
        assert_eq!(v["queues"].as_array().unwrap().len(), 51);
        assert_eq!(v["locks"].as_array().unwrap().len(), 1001);
        let round_trips = v["round_trips"].as_u64().unwrap();
        println!(
            "one refresh: {round_trips} round trips, {calls} commands, {usec} us of server time"
        );
        assert!(round_trips <= 60, "{round_trips} round trips");
        least = least.min(usec);
    }
    let detail: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    println!("{detail}");
    assert!(least <= 5000, "{least} us of server time");
    drop(guards);
}

#[test]
fn a_grouped_dead_job_is_listed_and_requeued_through_the_api() {
    use redlease::{queue::PushOptions, queue::Retry};
    let w = world();
    let partner = w.client.queue("partner").unwrap();
    partner
        .push_with("call", PushOptions::new().group("acme"))
        .unwrap();
    let groups = partner.groups().unwrap();
    let job = groups.take(Duration::from_secs(5)).unwrap().unwrap();
    let id = job.id().rsplit('\u{1f}').next().unwrap().to_owned();
    job.fail("partner down", Retry::Never).unwrap();
    let file = token_file(&w);
    let s = serve(&w.server.url(), &["--allow-actions", "--token-file", &file]);
    let (status, body) = http(&s.addr, "GET", "/api/queues/partner/dead", &[]);
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&v["jobs"][0]["group"], &v["jobs"][0]["id"]),
        (&"acme".into(), &Value::from(id.as_str())),
        "{v}"
    );
    let (status, body) = http(
        &s.addr,
        "POST",
        &format!("/api/queues/partner/dead/requeue?id={id}&group=acme"),
        &[("X-Redlease-Token", TOKEN)],
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["done"], serde_json::json!([format!("acme/{id}")]));
    assert_eq!(groups.stats().unwrap().dead, 0);
}

/// Without `+pubsub|numsub` a lock of those kinds shows its error, not nothing.
#[test]
fn a_user_without_pubsub_numsub_sees_why_a_lock_is_not_read() {
    let w = common::full_world();
    let mut admin = redis_conn(&w.world.server.url());
    let mut rule = viewer_rule(&mut admin);
    rule.retain(|r| *r != "+pubsub|numsub");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(rule)
        .query(&mut admin)
        .unwrap();
    let url = format!(
        "redis://viewer:viewer-password@127.0.0.1:{}/",
        w.world.server.port()
    );
    let v = run_json(&url, &["locks", "--json"]);
    let config = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "config")
        .unwrap_or_else(|| panic!("the reentrant lock is not listed: {v}"));
    assert!(
        config["error"]
            .as_str()
            .is_some_and(|e| e.contains("not allowed to read") && e.contains("+pubsub|numsub")),
        "{config}"
    );
}

#[test]
fn a_user_without_write_rights_sees_every_lock_kind() {
    let w = common::full_world();
    let mut admin = redis_conn(&w.world.server.url());
    // The library's lock_info counts a kind's waiting clients (`PUBSUB NUMSUB`): the
    // reentrant, fair and read-write locks need it (docs/acl.md's table of lock_info).
    let rule = viewer_rule(&mut admin);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(rule)
        .query(&mut admin)
        .unwrap();
    let url = format!(
        "redis://viewer:viewer-password@127.0.0.1:{}/",
        w.world.server.port()
    );
    let v = run_json(&url, &["locks", "--json"]);
    let kinds: Vec<&str> = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    for kind in ["lease", "reentrant", "fair", "read", "write", "legacy"] {
        assert!(kinds.contains(&kind), "no {kind} lock in {v}");
    }
    let v = run_json(&url, &["queues", "--json"]);
    let reports = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "reports")
        .unwrap();
    assert_eq!(reports["schedules"][0]["name"], "every-minute", "{v}");
}
