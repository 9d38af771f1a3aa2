//! The actions the library offers, through the CLI: forced release by the prefix `locks`
//! shows, pause and resume of a queue and of a group, cancel; each only with `--yes`. And
//! what they change shows in the views: paused, grouped jobs.

mod common;

use common::{full_world, run, run_json};

fn queue<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == name)
        .unwrap_or_else(|| panic!("no queue {name} in {v}"))
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn release_by_the_shown_prefix_with_yes_releases_the_holder() {
    let w = full_world();
    let url = w.world.server.url();
    let locks = run_json(&url, &["locks", "--json"]);
    let billing = locks["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "billing")
        .unwrap();
    let shown = billing["holder"].as_str().unwrap();
    // Without --yes: nothing changes.
    let out = run(&url, &["release", "billing", "--token-prefix", shown]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(w.world.lock.inspect().is_ok());
    let out = run(
        &url,
        &["release", "billing", "--token-prefix", shown, "--yes"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("released"), "{}", stdout(&out));
    let locks = run_json(&url, &["locks", "--json"]);
    assert!(
        !locks["locks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "billing"),
        "{locks}"
    );
    // Again: nobody holds it.
    let out = run(
        &url,
        &["release", "billing", "--token-prefix", shown, "--yes"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
}

#[test]
fn pause_resume_and_cancel_act_through_the_library_and_show_in_the_views() {
    let w = full_world();
    let url = w.world.server.url();
    let c = &w.world.client;
    let v = run_json(&url, &["queues", "--json"]);
    assert_eq!(queue(&v, "mail")["paused"], true);
    assert_eq!(queue(&v, "emails")["paused"], false);
    // The grouped jobs count: 6 waiting in groups acme and globex, 1 dead.
    assert_eq!(queue(&v, "partner")["dead"], 1, "{v}");
    assert!(
        queue(&v, "partner")["grouped_jobs"].as_u64().unwrap() >= 1,
        "{v}"
    );

    // Without --yes nothing changes.
    let out = run(&url, &["pause", "emails"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("--yes"));
    let emails = c.queue("emails").unwrap();
    assert!(!emails.is_paused().unwrap());
    let out = run(&url, &["pause", "emails", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(emails.is_paused().unwrap());
    assert_eq!(
        queue(&run_json(&url, &["queues", "--json"]), "emails")["paused"],
        true
    );
    let out = run(&url, &["resume", "emails", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!emails.is_paused().unwrap());

    let partner = c.queue("partner").unwrap();
    assert!(partner.is_group_paused("globex").unwrap());
    let out = run(&url, &["resume", "partner", "--group", "globex", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!partner.is_group_paused("globex").unwrap());
    let out = run(&url, &["pause", "partner", "--group", "acme", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(partner.is_group_paused("acme").unwrap());

    // Cancel a waiting job: it goes to the dead list.
    let out = run(&url, &["cancel", "emails", "ready-0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(emails.stats().unwrap().ready, 1);
    let out = run(&url, &["cancel", "emails", "ready-0", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let st = emails.stats().unwrap();
    assert_eq!((st.ready, st.dead), (0, 3));
    let out = run(&url, &["cancel", "emails", "ready-0", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
}

#[test]
fn check_judges_grouped_jobs() {
    let w = full_world();
    let url = w.world.server.url();
    let code = |args: &[&str]| run(&url, args).status.code();
    assert_eq!(
        code(&["check", "--max-dead", "0", "--queue", "partner"]),
        Some(1)
    );
    assert_eq!(
        code(&["check", "--max-dead", "1", "--queue", "partner"]),
        Some(0)
    );
}

#[test]
fn no_text_says_not_available_or_names_a_branch() {
    let w = full_world();
    let url = w.world.server.url();
    let mut texts = Vec::new();
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["queues"],
        &["queues", "--json"],
        &["locks"],
        &["--help"],
        &["release", "--help"],
        &["pause", "--help"],
        &["cancel", "--help"],
    ] {
        texts.push((format!("{args:?}"), stdout(&run(&url, args))));
    }
    for doc in ["README.md", "docs/operating.md"] {
        let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
        texts.push((doc.into(), std::fs::read_to_string(path).unwrap()));
    }
    for file in ["index.html", "app.js"] {
        let path = format!("{}/src/web/{file}", env!("CARGO_MANIFEST_DIR"));
        texts.push((file.into(), std::fs::read_to_string(path).unwrap()));
    }
    for (what, text) in texts {
        let lower = text.to_lowercase();
        for bad in ["not available yet", "branch", "until the library", "issue "] {
            assert!(!lower.contains(bad), "{what} says {bad:?}:\n{text}");
        }
    }
}

#[test]
fn release_reaches_a_lock_of_another_kind() {
    let w = full_world();
    let url = w.world.server.url();
    let holder_of = |name: &str| {
        run_json(&url, &["locks", "--json"])["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .map(|l| l["holder"].as_str().unwrap().to_owned())
    };
    let shown = holder_of("config").expect("the reentrant lock is listed");
    let out = run(&url, &["release", "config", "--token-prefix", &shown]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(holder_of("config").is_some());
    let out = run(
        &url,
        &["release", "config", "--token-prefix", &shown, "--yes"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("released"), "{}", stdout(&out));
    assert_eq!(holder_of("config"), None);
}
