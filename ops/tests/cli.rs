//! The CLI against a real redis-server.

mod common;

use common::{run, run_json, world};

#[test]
fn the_views_show_what_the_library_stored() {
    let w = world();
    let url = w.server.url();

    let queues = run_json(&url, &["queues", "--json"]);
    let emails = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "emails")
        .expect("emails listed");
    assert_eq!(emails["ready"], 1);
    assert_eq!(emails["dead"], 2);
    assert_eq!(emails["in_flight"], 0);
    // The oldest ready job's age, on the server's clock; counts of the last full minute.
    assert!(emails["oldest_age_ms"].as_u64().is_some(), "{emails}");
    assert!(emails["per_minute"]["acked"].as_u64().is_some(), "{emails}");
    assert!(
        emails["per_minute"]["deferred"].as_u64().is_some(),
        "{emails}"
    );

    let token = w.lock.lease().token.as_str().to_owned();
    let locks = run_json(&url, &["locks", "--json"]);
    let billing = &locks["locks"][0];
    assert_eq!(billing["name"], "billing");
    let holder = billing["holder"].as_str().unwrap();
    assert!(
        holder.ends_with('…') && holder.chars().count() == 9,
        "{holder}"
    );
    assert!(token.starts_with(holder.trim_end_matches('…')));
    assert!(
        !locks.to_string().contains(&token),
        "a whole owner token was shown"
    );
    let ttl = billing["ttl_ms"].as_i64().unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");

    let sems = run_json(&url, &["semaphores", "--json"]);
    let api = &sems["semaphores"][0];
    assert_eq!(api["name"], "api");
    assert_eq!(api["permits"], 3);
    assert_eq!(api["holders"].as_array().unwrap().len(), 1);

    let status = run_json(&url, &["status", "--json"]);
    assert!(status["server"]["version"].as_str().unwrap().contains('.'));
    assert!(status["server"]["redlease_connections"].as_u64().unwrap() >= 1);

    // The table for people.
    let table = run(&url, &["queues"]);
    let text = String::from_utf8_lossy(&table.stdout);
    let row = text.lines().find(|l| l.starts_with("emails")).expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..5], ["emails", "1", "0", "0", "2"]);
    assert!(cells[5].ends_with('s'), "oldest age {row}");
}

#[test]
fn dead_jobs_are_listed_requeued_and_deleted_by_filter() {
    let w = world();
    let url = w.server.url();
    let q = w.client.queue("emails").unwrap();

    let dead = run_json(&url, &["dead", "emails", "--json"]);
    let reasons: Vec<&str> = dead
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["smtp timeout", "bad address"]);
    // Each with its cause and time of death (the server's clock: this machine's).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for d in dead.as_array().unwrap() {
        assert_eq!(d["cause"], "failed", "{d}");
        let at = d["died_at_ms"].as_u64().expect("a time of death");
        assert!(at <= now_ms + 1000 && at + 600_000 > now_ms, "{d}");
    }
    let table = String::from_utf8(run(&url, &["dead", "emails"]).stdout).unwrap();
    assert!(
        table.contains(" ago") && table.contains("failed"),
        "{table}"
    );

    // Filters that pick nothing: another cause, jobs dead for an hour.
    let none = run_json(
        &url,
        &["requeue", "emails", "--cause", "cancelled", "--json"],
    );
    assert_eq!(none["requeued"], serde_json::json!([]));
    let none = run_json(&url, &["delete", "emails", "--older-than", "1h", "--json"]);
    assert_eq!(none["deleted"], serde_json::json!([]));
    for bad in [&["--cause", "old"][..], &["--older-than", "5 years"]] {
        let mut args = vec!["requeue", "emails"];
        args.extend_from_slice(bad);
        assert_eq!(run(&url, &args).status.code(), Some(2), "{bad:?}");
    }
    assert_eq!(q.stats().unwrap().dead, 2);

    // Without a filter nothing is done.
    let out = run(&url, &["requeue", "emails"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(q.stats().unwrap().dead, 2);

    let done = run_json(
        &url,
        &[
            "requeue",
            "emails",
            "--reason-contains",
            "timeout",
            "--cause",
            "failed",
            "--older-than",
            "0s",
            "--json",
        ],
    );
    assert_eq!(done["requeued"], serde_json::json!(["dead-0"]));
    let st = q.stats().unwrap();
    assert_eq!((st.ready, st.dead), (2, 1));

    let done = run_json(&url, &["delete", "emails", "--id", "dead-1", "--json"]);
    assert_eq!(done["deleted"], serde_json::json!(["dead-1"]));
    assert_eq!(q.stats().unwrap().dead, 0);
    assert!(q.dead_jobs(10).unwrap().is_empty());
}

#[test]
fn check_exits_by_its_thresholds() {
    let w = world();
    let url = w.server.url();
    let code = |args: &[&str]| run(&url, args).status.code();
    assert_eq!(code(&["check", "--max-dead", "5"]), Some(0));
    assert_eq!(code(&["check", "--max-dead", "1"]), Some(1));
    assert_eq!(
        code(&["check", "--max-dead", "5", "--queue", "nope"]),
        Some(3)
    );
    // The client of this test is a live redlease connection.
    assert_eq!(code(&["check", "--min-connections", "1"]), Some(0));
    assert_eq!(code(&["check", "--min-connections", "1000"]), Some(1));
    // The oldest ready job's age.
    assert_eq!(code(&["check", "--max-age", "600"]), Some(0));
    assert_eq!(code(&["check", "--max-age", "0"]), Some(1));
    let v = run(&url, &["check", "--max-dead", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(v["status"], "crossed");
    assert!(
        v["findings"][0]
            .as_str()
            .unwrap()
            .contains("emails: 2 dead > 1")
    );
    // No server: an error, exit 2.
    assert_eq!(
        run(
            "redis://127.0.0.1:1/",
            &["check", "--max-dead", "1", "--timeout", "1"]
        )
        .status
        .code(),
        Some(2)
    );
}

#[test]
fn the_tool_stays_out_of_the_library_s_dependency_tree() {
    // clap, tiny_http and serde_json are the tool's alone.
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "redlease",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    for name in ["clap ", "tiny_http ", "serde_json ", "redlease-ops "] {
        assert!(
            !tree.lines().any(|l| l.starts_with(name)),
            "{name} in the library's tree"
        );
    }
}

#[test]
fn watch_redraws_in_place_until_stopped() {
    use std::io::Read;
    let w = world();
    let mut child = std::process::Command::new(common::BIN)
        .args([
            "--url",
            &w.server.url(),
            "queues",
            "--watch",
            "--interval",
            "0.1",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    // Three frames, each starting with "home, clear screen"; the second push shows up.
    let q = w.client.queue("emails").unwrap();
    let mut pushed = false;
    while seen.windows(4).filter(|w| w == b"\x1b[2J").count() < 3 || !pushed {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended");
        seen.extend_from_slice(&buf[..n]);
        if !pushed {
            q.push("one more").unwrap();
            pushed = true;
        }
    }
    // Until a frame shows the new depth (2 ready).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = String::from_utf8_lossy(&seen);
        let last = text.rsplit("\x1b[2J").next().unwrap_or("");
        if last
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["emails", "2"]))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no frame with 2 ready: {text}"
        );
        let n = out.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn release_says_what_it_would_release_and_asks_for_confirmation() {
    let w = world();
    let url = w.server.url();
    let token = w.lock.lease().token.as_str().to_owned();
    let prefix: String = token.chars().take(8).collect();
    let out = run(&url, &["release", "billing", "--token-prefix", &prefix]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--yes") && text.contains(&prefix), "{text}");
    // Another holder's prefix, or no holder: nothing, exit 1.
    let other = if prefix.starts_with('0') {
        "11111111"
    } else {
        "00000000"
    };
    assert_eq!(
        run(&url, &["release", "billing", "--token-prefix", other])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        run(&url, &["release", "nobody", "--token-prefix", &prefix])
            .status
            .code(),
        Some(1)
    );
    // Too short to name a holder.
    assert_eq!(
        run(&url, &["release", "billing", "--token-prefix", "ab"])
            .status
            .code(),
        Some(2)
    );
    // The lock is still held by this test.
    assert!(!w.lock.is_lost());
    assert!(w.lock.inspect().is_ok());
}

#[test]
fn jobs_are_paged_by_state_and_looked_up_by_id() {
    let w = world();
    let url = w.server.url();
    let page = run_json(
        &url,
        &[
            "jobs", "emails", "--state", "dead", "--limit", "1", "--json",
        ],
    );
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
    let next = page["next"].as_str().expect("a second page").to_owned();
    let page2 = run_json(
        &url,
        &[
            "jobs", "emails", "--state", "dead", "--limit", "1", "--cursor", &next, "--json",
        ],
    );
    assert_eq!(page2["jobs"].as_array().unwrap().len(), 1);
    assert_ne!(page["jobs"][0]["id"], page2["jobs"][0]["id"]);
    let ready = run_json(&url, &["jobs", "emails", "--json"]);
    assert_eq!(ready["jobs"][0]["id"], "ready-0");
    let job = run_json(&url, &["job", "emails", "dead-1", "--json"]);
    assert_eq!(job["state"], "dead");
    assert_eq!(job["preview"], "to: user1@example.com");
    assert_eq!(run(&url, &["job", "emails", "nope"]).status.code(), Some(1));
    assert_eq!(
        run(&url, &["jobs", "emails", "--state", "bogus"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn grouped_dead_jobs_are_listed_with_their_group_and_requeued_and_deleted() {
    use redlease::{queue::PushOptions, queue::Retry};
    let w = world();
    let url = w.server.url();
    let partner = w.client.queue("partner").unwrap();
    let groups = partner.groups().unwrap();
    for (group, reason) in [("acme", "partner down"), ("globex", "bad answer")] {
        partner
            .push_with(format!("call {group}"), PushOptions::new().group(group))
            .unwrap();
        let job = groups
            .take(std::time::Duration::from_secs(5))
            .unwrap()
            .expect("a grouped job");
        job.fail(reason, Retry::Never).unwrap();
        // Apart in time: the list is merged by time of death.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    partner.push("plain").unwrap();
    let job = partner.try_take().unwrap().expect("a plain job");
    let plain_id = job.id().to_owned();
    job.fail("plain failure", Retry::Never).unwrap();

    // Both grouped jobs and the plain one, each with its group.
    let dead = run_json(&url, &["dead", "partner", "--json"]);
    let listed: Vec<(Option<&str>, &str)> = dead
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["group"].as_str(), d["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [
            (Some("acme"), "partner down"),
            (Some("globex"), "bad answer"),
            (None, "plain failure")
        ],
        "{dead}"
    );
    let acme_id = dead[0]["id"].as_str().unwrap().to_owned();
    let table = String::from_utf8(run(&url, &["dead", "partner"]).stdout).unwrap();
    let row = table.lines().find(|l| l.starts_with(&acme_id)).unwrap();
    assert_eq!(row.split_whitespace().nth(1), Some("acme"), "{table}");

    // An id alone names a plain job: the grouped one is not touched.
    let none = run_json(&url, &["requeue", "partner", "--id", &acme_id, "--json"]);
    assert_eq!(none["requeued"], serde_json::json!([]));
    // With its group it is requeued.
    let done = run_json(
        &url,
        &[
            "requeue", "partner", "--group", "acme", "--id", &acme_id, "--json",
        ],
    );
    assert_eq!(
        done["requeued"],
        serde_json::json!([format!("acme/{acme_id}")])
    );
    assert_eq!(groups.stats().unwrap().dead, 1);
    // A whole group's dead jobs, by --group alone.
    let done = run_json(&url, &["delete", "partner", "--group", "globex", "--json"]);
    assert_eq!(done["deleted"].as_array().unwrap().len(), 1, "{done}");
    assert_eq!(groups.stats().unwrap().dead, 0);
    // A filter without ids reaches the grouped list too: requeue the requeued job's
    // group again after it dies once more, by reason.
    let job = groups
        .take(std::time::Duration::from_secs(5))
        .unwrap()
        .expect("the requeued job");
    job.fail("partner down again", Retry::Never).unwrap();
    let done = run_json(
        &url,
        &["requeue", "partner", "--reason-contains", "again", "--json"],
    );
    assert_eq!(
        done["requeued"],
        serde_json::json!([format!("acme/{acme_id}")])
    );
    // The plain job is still dead.
    let left = run_json(&url, &["dead", "partner", "--json"]);
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    assert_eq!(left[0]["id"], plain_id.as_str());
}

#[test]
fn grouped_jobs_are_paged_by_state_with_their_group() {
    use redlease::queue::PushOptions;
    let w = world();
    let url = w.server.url();
    let partner = w.client.queue("partner").unwrap();
    partner
        .push_with("sync", PushOptions::new().group("acme"))
        .unwrap();
    let taken = partner
        .groups()
        .unwrap()
        .take(std::time::Duration::from_secs(5))
        .unwrap()
        .expect("a grouped job");
    let page = run_json(
        &url,
        &[
            "jobs",
            "partner",
            "--state",
            "in_flight",
            "--grouped",
            "--json",
        ],
    );
    let id = taken.id().rsplit('\u{1f}').next().unwrap();
    assert_eq!(page["jobs"][0]["id"], format!("acme/{id}"), "{page}");
    // Without --grouped: the queue's plain jobs only.
    let plain = run_json(&url, &["jobs", "partner", "--state", "in_flight", "--json"]);
    assert_eq!(plain["jobs"], serde_json::json!([]), "{plain}");
}
