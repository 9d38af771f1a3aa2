//! The dashboard in headless Chromium (Debian's `chromium`; scripts/test.sh installs it):
//! a page load shows a queue's depth, a paused queue, a queue's grouped jobs and the charts
//! (the README's screenshot is taken of that page); requeueing a dead job, pausing and resuming
//! a queue, releasing a lock, cancelling a job and pausing a group through the page's buttons
//! (each confirmed in the page) do it (checked in Redis); in read-only mode the page cannot.
//!
//! The clicks go through the DevTools protocol over a pipe (`--remote-debugging-pipe`: file
//! descriptors 3 and 4, here two FIFOs), so no WebSocket client is needed.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{World, full_world, serve, world};
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef-browser-token";

fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".to_owned())
}

/// Flags for a headless run as root in a container.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1600,1100",
];

fn profile(w: &World, name: &str) -> String {
    let dir = w.server.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    format!("--user-data-dir={}", dir.display())
}

/// Loads `url` and returns the DOM after the page's scripts ran.
fn dump_dom(w: &World, url: &str) -> String {
    let out = Command::new(chromium())
        .args(FLAGS)
        .arg(profile(w, "dump"))
        .args(["--virtual-time-budget=5000", "--dump-dom", url])
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): scripts/test.sh installs Debian's chromium",
                chromium()
            )
        });
    assert!(out.status.success(), "chromium --dump-dom failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn screenshot(w: &World, url: &str, to: &Path) {
    let status = Command::new(chromium())
        .args(FLAGS)
        .arg(profile(w, "shot"))
        .arg("--virtual-time-budget=5000")
        .arg(format!("--screenshot={}", to.display()))
        .arg(url)
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("chromium");
    assert!(status.success());
}

/// A browser driven over the DevTools protocol.
struct Browser {
    child: Child,
    to: std::fs::File,
    from: BufReader<std::fs::File>,
    next_id: u64,
    session: Option<String>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn start(w: &World) -> Browser {
        let dir = w.server.dir();
        let (to_path, from_path): (PathBuf, PathBuf) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for p in [&to_path, &from_path] {
            let _ = std::fs::remove_file(p);
            assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
        }
        let script = format!(
            "exec \"$0\" \"$@\" 3<'{}' 4>'{}'",
            to_path.display(),
            from_path.display()
        );
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg(chromium())
            .args(FLAGS)
            .arg(profile(w, "cdp"))
            .args(["--remote-debugging-pipe", "about:blank"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium");
        // The shell opens fd 3 (our writing end) first, then fd 4.
        let to = std::fs::OpenOptions::new()
            .write(true)
            .open(&to_path)
            .unwrap();
        let from = BufReader::new(std::fs::File::open(&from_path).unwrap());
        Browser {
            child,
            to,
            from,
            next_id: 0,
            session: None,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let reply = self.try_call(method, params);
        assert!(reply["error"].is_null(), "{method}: {reply}");
        reply["result"].clone()
    }

    /// The whole reply (`result` or `error`).
    fn try_call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = s.clone().into();
        }
        self.to.write_all(msg.to_string().as_bytes()).unwrap();
        self.to.write_all(b"\0").unwrap();
        self.to.flush().unwrap();
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).unwrap();
            assert!(n > 0, "chromium closed the pipe");
            buf.pop();
            let reply: Value = serde_json::from_slice(&buf).unwrap();
            if reply["id"] == id {
                return reply;
            }
        }
    }

    /// Opens `url` in a new tab and talks to it from now on.
    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({ "url": "about:blank" }));
        let session = self.call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        self.session = Some(session["sessionId"].as_str().unwrap().to_owned());
        self.call("Page.navigate", json!({ "url": url }));
        // Until the page is loaded (its context replaces about:blank's meanwhile); a cold
        // Chromium on a busy machine once took over 20 s.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.try_call(
                "Runtime.evaluate",
                json!({ "expression": "location.href + ' ' + document.readyState", "returnByValue": true }),
            );
            if r["result"]["result"]["value"] == format!("{url} complete") {
                return;
            }
            assert!(Instant::now() < deadline, "the page did not load: {r}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Evaluates `expr` (a promise is awaited) in the page; its value.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "awaitPromise": true, "returnByValue": true }),
        );
        assert!(r["exceptionDetails"].is_null(), "{expr}: {r}");
        r["result"]["value"].clone()
    }
}

/// JavaScript that waits (at most 20 s) until `cond` is true.
fn until(cond: &str) -> String {
    format!(
        "(async () => {{ const end = Date.now() + 20000; \
         while (!({cond})) {{ if (Date.now() > end) throw new Error('timed out: ' + {cond:?}); \
         await new Promise(r => setTimeout(r, 20)); }} return true; }})()"
    )
}

#[test]
fn a_page_load_shows_the_depth_and_a_chart() {
    // Every kind of primitive: queue `partner` with grouped jobs (one group paused), queue
    // `mail` paused, the others running.
    let full = full_world();
    let w = &full.world;
    let s = serve(&w.server.url(), &[]);
    let url = format!("http://{}/", s.addr);
    let dom = dump_dom(w, &url);
    let row = |queue: &str| -> String {
        dom.split(&format!("<tr data-queue=\"{queue}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("a row for queue {queue}"))
            .split("</tr>")
            .next()
            .unwrap()
            .to_owned()
    };
    let emails = row("emails");
    // ready 1, delayed 0, in flight 0, dead 2; not paused, no grouped jobs.
    assert!(emails.contains("data-field=\"ready\">1<"), "{emails}");
    assert!(emails.contains("data-field=\"dead\">2<"), "{emails}");
    assert!(emails.contains("data-field=\"paused\">no<"), "{emails}");
    assert!(
        emails.contains("data-field=\"grouped_jobs\">0<"),
        "{emails}"
    );
    // The paused queue.
    let mail = row("mail");
    assert!(mail.contains("data-field=\"paused\">yes<"), "{mail}");
    assert!(mail.contains("data-field=\"ready\">1<"), "{mail}");
    // The grouped jobs (3 in group acme, 3 in the paused group globex, 1 dead): the dead
    // one is counted. (The library's group stats do not yet count the jobs waiting in
    // their groups as ready, so no exact total is asserted here.)
    let partner = row("partner");
    assert!(partner.contains("data-field=\"dead\">1<"), "{partner}");
    assert!(
        partner.contains("data-field=\"grouped_jobs\">")
            && !partner.contains("data-field=\"grouped_jobs\">0<"),
        "{partner}"
    );
    assert!(partner.contains("data-field=\"paused\">no<"), "{partner}");
    // Every kind of lock, with its kind.
    for (lock, kind) in [
        ("billing", "lease"),
        ("unfenced", "lease"),
        ("quorum", "lease"),
        ("config", "reentrant"),
        ("fifo", "fair"),
        ("catalog", "read"),
        ("ledger", "write"),
        ("old-cron", "legacy"),
    ] {
        assert!(
            dom.contains(&format!("<tr data-lock=\"{lock}\" data-kind=\"{kind}\">")),
            "no {kind} lock {lock} on the page"
        );
    }
    let chart = dom.split("id=\"depth-chart\"").nth(1).expect("the chart");
    assert!(
        chart.contains("<svg")
            && chart.contains("<polyline")
            && chart.contains("data-series=\"emails\"")
            && chart.contains("data-series=\"partner\"")
    );
    // The throughput chart: the world's pushes, counted this minute by the library.
    let rates = dom
        .split("id=\"rate-chart\"")
        .nth(1)
        .expect("the throughput chart");
    let rates = rates.split("</section>").next().unwrap();
    assert!(
        rates.contains("<polyline") && rates.contains("data-series=\"pushed\""),
        "{rates}"
    );
    assert!(
        !dom.contains(w.lock.lease().token.as_str()),
        "a whole owner token was shown"
    );

    // The docs' screenshot (this page: a queue with groups, a paused queue, the charts),
    // after some traffic so that the charts move: into target/, then docs/dashboard.png.
    let reports = w.client.queue("reports").unwrap();
    for i in 0..12 {
        reports.push(format!("report {i}")).unwrap();
        if i % 3 == 0 {
            q_take_ack(w);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    println!(
        "history: {}",
        common::http(&s.addr, "GET", "/api/history", &[]).1
    );
    screenshot(w, &url, &shot);
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000);
    // The docs show the page as this test sees it: written there whenever it differs.
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/dashboard.png");
    if std::fs::read(&docs).ok().as_deref() != Some(png.as_slice()) {
        std::fs::write(&docs, &png).unwrap();
    }
}

/// Takes and acks one job of `emails`, if there is one.
fn q_take_ack(w: &World) {
    let q = w.client.queue("emails").unwrap();
    if let Some(job) = q.try_take().unwrap() {
        job.ack().unwrap();
    } else {
        q.push("more mail").unwrap();
    }
}

#[test]
fn requeueing_through_the_page_puts_the_job_back_and_read_only_refuses() {
    let w = world();
    let q = w.client.queue("emails").unwrap();

    // Read-only: the buttons are off, and the server refuses the request the page could send.
    let ro = serve(&w.server.url(), &[]);
    let mut b = Browser::start(&w);
    b.open(&format!("http://{}/", ro.addr));
    b.eval(&until(
        "document.querySelector('tr[data-queue=\"emails\"] button.show-dead')",
    ));
    b.eval("document.querySelector('tr[data-queue=\"emails\"] button.show-dead').click()");
    b.eval(&until(
        "document.querySelector('#dead tr[data-id=\"dead-0\"] button.requeue')",
    ));
    assert_eq!(
        b.eval("document.querySelector('#dead tr[data-id=\"dead-0\"] button.requeue').disabled"),
        true
    );
    let status = b.eval(&format!(
        "fetch('/api/queues/emails/dead/requeue?id=dead-0', {{method: 'POST', headers: {{'X-Redlease-Token': '{TOKEN}'}}}}).then(r => r.status)"
    ));
    assert_eq!(status, 403);
    assert_eq!(q.stats().unwrap().dead, 2);
    assert_eq!(
        b.eval("document.querySelector('tr[data-queue=\"emails\"] button.pause').disabled"),
        true
    );
    assert_eq!(
        b.eval("document.querySelector('tr[data-lock=\"billing\"] button.release').disabled"),
        true
    );
    for path in [
        "/api/queues/emails/pause",
        "/api/queues/emails/cancel?id=ready-0",
    ] {
        let status = b.eval(&format!(
            "fetch('{path}', {{method: 'POST', headers: {{'X-Redlease-Token': '{TOKEN}'}}}}).then(r => r.status)"
        ));
        assert_eq!(status, 403, "{path}");
    }
    assert!(!q.is_paused().unwrap());
    drop(b);

    // Actions allowed: type the token, open the dead letters, click requeue.
    let file = w.server.dir().join("browser-token");
    std::fs::write(&file, TOKEN).unwrap();
    let rw = serve(
        &w.server.url(),
        &["--allow-actions", "--token-file", file.to_str().unwrap()],
    );
    let mut b = Browser::start(&w);
    b.open(&format!("http://{}/", rw.addr));
    b.eval(&until(
        "document.querySelector('tr[data-queue=\"emails\"] button.show-dead')",
    ));
    b.eval(&format!(
        "(() => {{ const t = document.getElementById('token'); t.value = '{TOKEN}'; t.dispatchEvent(new Event('change')); }})()"
    ));
    b.eval("document.querySelector('tr[data-queue=\"emails\"] button.show-dead').click()");
    b.eval(&until(
        "document.querySelector('#dead tr[data-id=\"dead-0\"] button.requeue') && !document.querySelector('#dead tr[data-id=\"dead-0\"] button.requeue').disabled",
    ));
    b.eval("document.querySelector('#dead tr[data-id=\"dead-0\"] button.requeue').click()");
    // Confirmed in the page first: nothing is sent before "yes".
    b.eval(&until("!document.getElementById('confirm').hidden"));
    assert_eq!(q.stats().unwrap().dead, 2);
    b.eval("document.getElementById('confirm-yes').click()");
    b.eval(&until(
        "document.getElementById('dead-note').textContent.startsWith('requeue: dead-0')",
    ));
    // In Redis: back to ready, one dead left.
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        let st = q.stats().unwrap();
        if st.dead == 1 || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((st.ready, st.dead), (2, 1));
    let left: Vec<String> = q.dead_jobs(10).unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(left, ["dead-1"]);

    // Pause the queue with its button (confirmed), then resume it.
    b.eval(&until(
        "document.querySelector('tr[data-queue=\"emails\"] button.pause') && !document.querySelector('tr[data-queue=\"emails\"] button.pause').disabled",
    ));
    b.eval("document.querySelector('tr[data-queue=\"emails\"] button.pause').click()");
    b.eval(&until("!document.getElementById('confirm').hidden"));
    assert!(!q.is_paused().unwrap(), "paused before the confirmation");
    b.eval("document.getElementById('confirm-yes').click()");
    b.eval(&until(
        "document.getElementById('action-note').textContent === 'pause emails: emails'",
    ));
    assert!(q.is_paused().unwrap());
    b.eval(&until(
        "document.querySelector('tr[data-queue=\"emails\"] button.resume')",
    ));
    b.eval("document.querySelector('tr[data-queue=\"emails\"] button.resume').click()");
    b.eval("document.getElementById('confirm-yes').click()");
    b.eval(&until(
        "document.getElementById('action-note').textContent === 'resume emails: emails'",
    ));
    assert!(!q.is_paused().unwrap());

    // Release the lock by its holder's prefix; "no" first does nothing.
    b.eval("document.querySelector('tr[data-lock=\"billing\"] button.release').click()");
    b.eval("document.getElementById('confirm-no').click()");
    assert!(w.lock.inspect().is_ok());
    b.eval("document.querySelector('tr[data-lock=\"billing\"] button.release').click()");
    b.eval("document.getElementById('confirm-yes').click()");
    b.eval(&until(
        "document.getElementById('action-note').textContent === 'release billing: billing'",
    ));
    let locks = common::run_json(&w.server.url(), &["locks", "--json"]);
    assert!(
        !locks["locks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "billing"),
        "{locks}"
    );

    // Cancel a job and pause a group through the form.
    let waiting = q.push("to be cancelled").unwrap();
    b.eval(&format!(
        "(() => {{ document.getElementById('act-queue').value = 'emails'; document.getElementById('act-id').value = '{waiting}'; document.getElementById('cancel-job').click(); document.getElementById('confirm-yes').click(); }})()"
    ));
    b.eval(&until(&format!(
        "document.getElementById('action-note').textContent.startsWith('cancel {waiting}: {waiting}')"
    )));
    assert!(
        q.job(&waiting)
            .unwrap()
            .is_some_and(|j| j.state == redlease::inspect::JobStatus::Dead)
    );
    b.eval(
        "(() => { document.getElementById('act-group').value = 'acme'; document.getElementById('pause-group').click(); document.getElementById('confirm-yes').click(); })()",
    );
    b.eval(&until(
        "document.getElementById('action-note').textContent === 'pause group: acme'",
    ));
    assert!(q.is_group_paused("acme").unwrap());
    let job = q.try_take().unwrap().expect("a ready job");
    assert!(job.id() == "dead-0" || job.id() == "ready-0");
}

/// The cell of `row`'s line under `column` in a table of the CLI (cut at the header's
/// column start, up to the next two spaces).
fn cli_cell(table: &str, row: &str, column: &str) -> String {
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let start = header
        .find(&format!("  {column}"))
        .map(|i| i + 2)
        .unwrap_or_else(|| panic!("no column {column}:\n{table}"));
    let line = lines
        .find(|l| l.split_whitespace().next() == Some(row))
        .unwrap_or_else(|| panic!("no row {row}:\n{table}"));
    let rest: String = line.chars().skip(start).collect();
    rest.split("  ").next().unwrap().trim().to_owned()
}

#[test]
fn a_paused_queue_and_a_paused_group_show_in_every_view() {
    use redlease::{queue::PushOptions, queue::schedule::Schedule};
    let w = world();
    let url = w.server.url();
    let c = &w.client;
    let partner = c.queue("partner").unwrap();
    for g in ["acme", "globex", "initech"] {
        partner
            .push_with(format!("sync {g}"), PushOptions::new().group(g))
            .unwrap();
    }
    let work = c.queue("work").unwrap();
    work.push("first").unwrap();
    work.schedule(
        "nightly",
        &Schedule::every(Duration::from_secs(3600)).unwrap(),
    )
    .unwrap();
    // Pause a queue and a group through the CLI.
    for args in [
        &["pause", "work", "--yes"][..],
        &["pause", "partner", "--group", "globex", "--yes"],
    ] {
        let out = common::run(&url, args);
        assert!(out.status.success(), "{args:?}");
    }

    // The CLI's table.
    let table = String::from_utf8(common::run(&url, &["queues"]).stdout).unwrap();
    assert_eq!(cli_cell(&table, "work", "paused"), "true", "{table}");
    assert_eq!(cli_cell(&table, "emails", "paused"), "false", "{table}");
    assert_eq!(cli_cell(&table, "partner", "groups"), "3", "{table}");
    assert_eq!(cli_cell(&table, "partner", "paused-groups"), "1", "{table}");
    assert_eq!(cli_cell(&table, "work", "schedules"), "nightly", "{table}");
    assert!(
        cli_cell(&table, "work", "next-due").ends_with('Z'),
        "{table}"
    );

    // --json and /api/overview.
    let s = serve(&url, &[]);
    let api: Value =
        serde_json::from_str(&common::http(&s.addr, "GET", "/api/overview", &[]).1).unwrap();
    for v in [common::run_json(&url, &["queues", "--json"]), api] {
        let q = |name: &str| {
            v["queues"]
                .as_array()
                .unwrap()
                .iter()
                .find(|q| q["name"] == name)
                .unwrap()
                .clone()
        };
        assert_eq!(q("work")["paused"], true, "{v}");
        assert_eq!(q("partner")["paused"], false, "{v}");
        assert_eq!(q("partner")["groups"], 3, "{v}");
        assert_eq!(q("partner")["paused_groups"], 1, "{v}");
        assert_eq!(q("partner")["paused_group_ids"], json!(["globex"]), "{v}");
        assert_eq!(q("work")["schedules"][0]["name"], "nightly", "{v}");
        let next = q("work")["schedules"][0]["next_ms"].as_u64().unwrap();
        assert_eq!(q("work")["next_due_ms"], next, "{v}");
    }

    // /metrics.
    let metrics = common::http(&s.addr, "GET", "/metrics", &[]).1;
    for line in [
        "redlease_queue_paused{queue=\"work\"} 1",
        "redlease_queue_paused{queue=\"partner\"} 0",
        "redlease_queue_groups{queue=\"partner\"} 3",
        "redlease_queue_groups_paused{queue=\"partner\"} 1",
        "redlease_queue_schedules{queue=\"work\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "no {line}:\n{metrics}");
    }

    // The page.
    let dom = dump_dom(&w, &format!("http://{}/", s.addr));
    let row = |queue: &str| -> String {
        dom.split(&format!("<tr data-queue=\"{queue}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("a row for queue {queue}"))
            .split("</tr>")
            .next()
            .unwrap()
            .to_owned()
    };
    let work_row = row("work");
    assert!(
        work_row.contains("data-field=\"paused\">yes<"),
        "{work_row}"
    );
    assert!(
        work_row.contains("data-field=\"schedules\">nightly "),
        "{work_row}"
    );
    let partner_row = row("partner");
    assert!(
        partner_row.contains("data-field=\"paused\">no<"),
        "{partner_row}"
    );
    assert!(
        partner_row.contains("data-field=\"groups\">3<"),
        "{partner_row}"
    );
    assert!(
        partner_row.contains("data-field=\"paused_groups\">1 (globex)<"),
        "{partner_row}"
    );
}
