//! `redlease serve`: the dashboard, `/api/` (JSON) and `/metrics` (Prometheus text).
//!
//! One sampler thread refreshes the snapshot every `--interval` (so the cost on Redis does not
//! grow with the number of viewers) and keeps a history of depths for the charts. Requests
//! are answered by a few threads from that snapshot.
//!
//! Safe by default: it listens on 127.0.0.1; it is read-only unless started with
//! `--allow-actions` and a token (`--token-file`), which every action must carry in the
//! `X-Redlease-Token` header; it refuses cross-site requests (`Sec-Fetch-Site`, `Origin`)
//! and, on a loopback address, requests for another host name (DNS rebinding); it never
//! shows a password or a whole owner token.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response, Server};

use crate::data::{self, DeadAction, DeadFilter, Snapshot, Source};
use crate::prom;

const INDEX_HTML: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const CHART_JS: &str = include_str!("web/chart.js");
/// The header an action carries its token in.
pub const TOKEN_HEADER: &str = "X-Redlease-Token";
/// Request threads.
const THREADS: usize = 4;
/// The least length of an action token.
const MIN_TOKEN_LEN: usize = 16;

/// `redlease serve`'s options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:9645")]
    listen: SocketAddr,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0)]
    interval: f64,
    /// Samples of history kept for the charts.
    #[arg(long, default_value_t = 300)]
    history: usize,
    /// Allow actions (requeue and delete dead jobs); needs --token-file.
    #[arg(long)]
    allow_actions: bool,
    /// A file holding the token actions must carry (at least 16 characters).
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
}

/// One sample of the charts: Unix ms, and per queue its name and (ready, delayed, in
/// flight, dead).
type Sample = (u64, Vec<(String, [u64; 4])>);

/// What the sampler keeps.
#[derive(Default)]
struct State {
    snapshot: Option<Snapshot>,
    error: Option<String>,
    /// (Unix ms, per queue: name, ready, delayed, in flight, dead).
    history: VecDeque<Sample>,
    /// All queues' counts per minute over the last hour (minute start in Unix ms), summed.
    throughput: Vec<(u64, data::Rates)>,
    /// When `throughput` was read (Unix ms).
    throughput_at: u64,
}

struct App {
    state: Mutex<State>,
    /// The connection the dead list is read and acted on with (the sampler has its own).
    on_demand: Mutex<Source>,
    /// The token actions must carry (`None`: read-only).
    token: Option<String>,
    listen: SocketAddr,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the dashboard until the process ends.
pub fn serve(url: &str, prefix: &str, timeout: Duration, args: ServeArgs) -> Result<(), String> {
    if !(args.interval >= 0.1 && args.interval < 3600.0) {
        return Err("--interval must be between 0.1 and 3600 seconds".into());
    }
    let token = match (&args.token_file, args.allow_actions) {
        (Some(path), true) => {
            let t = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --token-file {}: {e}", path.display()))?
                .trim()
                .to_owned();
            if t.len() < MIN_TOKEN_LEN {
                return Err(format!(
                    "the token in {} must have at least {MIN_TOKEN_LEN} characters",
                    path.display()
                ));
            }
            Some(t)
        }
        (None, true) => return Err("--allow-actions needs --token-file".into()),
        (_, false) => None,
    };
    let mut sampler = Source::open(url, prefix, timeout)?;
    let on_demand = Mutex::new(Source::open(url, prefix, timeout)?);
    let server =
        Server::http(args.listen).map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let listen = server.server_addr().to_ip().unwrap_or(args.listen);
    let app = Arc::new(App {
        state: Mutex::new(State::default()),
        on_demand,
        token,
        listen,
    });
    println!(
        "redlease serve: http://{listen}/ ({}; Redis {})",
        if app.token.is_some() {
            "actions allowed with the token"
        } else {
            "read-only"
        },
        data::redact_url(url)
    );
    let interval = Duration::from_secs_f64(args.interval);
    let keep = args.history.max(2);
    let sampling = app.clone();
    let (url, prefix) = (url.to_owned(), prefix.to_owned());
    std::thread::spawn(move || {
        loop {
            let result = sampler.snapshot();
            {
                let mut st = lock(&sampling.state);
                match result {
                    Ok(s) => {
                        let depths = s
                            .queues
                            .iter()
                            .filter_map(|q| {
                                let st = q.stats?;
                                Some((
                                    q.name.clone(),
                                    [st.ready, st.delayed, st.in_flight, st.dead],
                                ))
                            })
                            .collect();
                        st.history.push_back((s.at_ms, depths));
                        while st.history.len() > keep {
                            st.history.pop_front();
                        }
                        let stale = s.at_ms.saturating_sub(st.throughput_at) >= 30_000;
                        let names: Vec<String> = s.queues.iter().map(|q| q.name.clone()).collect();
                        let at = s.at_ms;
                        st.snapshot = Some(s);
                        st.error = None;
                        if stale {
                            // Once every 30 s: the hour's minutes change once a minute.
                            drop(st);
                            let counts = sampler.counts(&names, Duration::from_secs(3600));
                            let mut st = lock(&sampling.state);
                            if let Ok(counts) = counts {
                                let mut sum = std::collections::BTreeMap::<u64, data::Rates>::new();
                                for (start, r) in counts.into_iter().flatten().flatten() {
                                    let e = sum.entry(start).or_default();
                                    e.pushed += r.pushed;
                                    e.acked += r.acked;
                                    e.failed += r.failed;
                                    e.dead += r.dead;
                                    e.deferred += r.deferred;
                                }
                                st.throughput = sum.into_iter().collect();
                                st.throughput_at = at;
                            }
                            continue_sleep(interval);
                            continue;
                        }
                    }
                    Err(e) => {
                        st.error = Some(e);
                        // A broken connection is opened again for the next refresh.
                        if let Ok(fresh) = Source::open(&url, &prefix, timeout) {
                            sampler = fresh;
                        }
                    }
                }
            }
            std::thread::sleep(interval);
        }
    });
    let server = Arc::new(server);
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        let server = server.clone();
        let app = app.clone();
        threads.push(std::thread::spawn(move || {
            while let Ok(request) = server.recv() {
                handle(&app, request);
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn continue_sleep(interval: Duration) {
    std::thread::sleep(interval);
}

fn respond(request: Request, status: u16, content_type: &str, body: String) {
    let mut response = Response::from_string(body).with_status_code(status);
    for (name, value) in [
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        (
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    ] {
        // Every name and value here is plain ASCII, which `from_bytes` accepts.
        if let Ok(h) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    }
    let _ = request.respond(response);
}

fn json_response(request: Request, status: u16, v: Value) {
    respond(request, status, "application/json", v.to_string());
}

fn get_header<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Why a request is refused before it is looked at, if it is.
fn refusal(app: &App, request: &Request) -> Option<&'static str> {
    let host = get_header(request, "Host")?;
    if app.listen.ip().is_loopback() {
        let name = host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        if !matches!(name, "127.0.0.1" | "localhost" | "[::1]") {
            return Some(
                "this dashboard listens on a loopback address and answers only to its loopback names",
            );
        }
    }
    if let Some(site) = get_header(request, "Sec-Fetch-Site")
        && !matches!(site, "same-origin" | "none")
    {
        return Some("cross-site request refused");
    }
    if let Some(origin) = get_header(request, "Origin")
        && origin != format!("http://{host}")
    {
        return Some("cross-origin request refused");
    }
    None
}

/// Compares in time independent of where the first difference is.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `%XX` decoded; with `plus_is_space` (a query string), `+` is a space too.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(if plus_is_space && bytes[i] == b'+' {
                b' '
            } else {
                bytes[i]
            });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

fn handle(app: &App, request: Request) {
    if let Some(why) = refusal(app, &request) {
        return json_response(request, 403, json!({ "error": why }));
    }
    let url = request.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let params = query_params(query);
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode(s, false))
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = request.method().clone();
    match (&method, segments.as_slice()) {
        (Method::Get, []) => respond(
            request,
            200,
            "text/html; charset=utf-8",
            INDEX_HTML.to_owned(),
        ),
        (Method::Get, ["app.js"]) => respond(
            request,
            200,
            "text/javascript; charset=utf-8",
            APP_JS.to_owned(),
        ),
        (Method::Get, ["chart.js"]) => respond(
            request,
            200,
            "text/javascript; charset=utf-8",
            CHART_JS.to_owned(),
        ),
        (Method::Get, ["metrics"]) => {
            let st = lock(&app.state);
            match &st.snapshot {
                Some(s) => {
                    let body = prom::text(s);
                    drop(st);
                    respond(
                        request,
                        200,
                        "text/plain; version=0.0.4; charset=utf-8",
                        body,
                    )
                }
                None => {
                    let e = st.error.clone().unwrap_or_else(|| "no refresh yet".into());
                    drop(st);
                    respond(request, 503, "text/plain; charset=utf-8", e)
                }
            }
        }
        (Method::Get, ["api", "overview"]) => {
            let st = lock(&app.state);
            let mut v = st
                .snapshot
                .as_ref()
                .map_or_else(|| json!({}), Snapshot::to_json);
            v["error"] = st.error.clone().into();
            v["actions_allowed"] = app.token.is_some().into();
            drop(st);
            json_response(request, 200, v)
        }
        (Method::Get, ["api", "history"]) => {
            let st = lock(&app.state);
            let v: Vec<Value> = st
                .history
                .iter()
                .map(|(at, qs)| {
                    let mut m = serde_json::Map::new();
                    for (name, [r, d, f, x]) in qs {
                        m.insert(
                            name.clone(),
                            json!({"ready": r, "delayed": d, "in_flight": f, "dead": x}),
                        );
                    }
                    json!({ "at_ms": at, "queues": m })
                })
                .collect();
            let times: Vec<u64> = st.throughput.iter().map(|(t, _)| *t).collect();
            let series = |name: &str, color: &str, f: fn(&data::Rates) -> u64| json!({ "name": name, "color": color, "values": st.throughput.iter().map(|(_, r)| f(r)).collect::<Vec<_>>() });
            let throughput = json!({
                "times": times,
                "series": [
                    series("pushed", "#2563eb", |r| r.pushed),
                    series("acked", "#16a34a", |r| r.acked),
                    series("failed", "#ea580c", |r| r.failed),
                    series("dead", "#dc2626", |r| r.dead),
                    series("deferred", "#9333ea", |r| r.deferred),
                ],
            });
            drop(st);
            json_response(
                request,
                200,
                json!({ "samples": v, "throughput": throughput }),
            )
        }
        (Method::Get, ["api", "queues", queue, "dead"]) => {
            let limit = param("limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(100usize)
                .min(10_000);
            // Reads go through the sampler's snapshot for the views; the dead list is read
            // on demand on a connection of its own.
            let queue = queue.to_string();
            let result = read_dead(app, &queue, limit);
            match result {
                Ok(jobs) => json_response(
                    request,
                    200,
                    json!({ "queue": queue, "jobs": jobs.iter().map(data::dead_json).collect::<Vec<_>>() }),
                ),
                Err(e) => json_response(request, 502, json!({ "error": e })),
            }
        }
        (Method::Post, ["api", "queues", queue, "dead", verb]) => {
            let action = match *verb {
                "requeue" => DeadAction::Requeue,
                "delete" => DeadAction::Delete,
                _ => return json_response(request, 404, json!({ "error": "no such action" })),
            };
            if let Some(why) = unauthorized(app, &request) {
                return json_response(request, 403, json!({ "error": why }));
            }
            let ids: Vec<String> = params
                .iter()
                .filter(|(k, _)| k == "id")
                .map(|(_, v)| v.clone())
                .collect();
            let all = param("all").as_deref() == Some("1");
            let cause = match param("cause") {
                None => None,
                Some(c) => match redlease::queue::dead::DeathCause::parse(&c) {
                    Some(c) => Some(c),
                    None => {
                        return json_response(
                            request,
                            400,
                            json!({ "error": "cause: failed, expired, timed_out or cancelled" }),
                        );
                    }
                },
            };
            let died_before = match param("died_before_ms").map(|m| m.parse::<u64>()) {
                None => None,
                Some(Ok(ms)) => Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
                Some(Err(_)) => {
                    return json_response(
                        request,
                        400,
                        json!({ "error": "died_before_ms: ms since the epoch" }),
                    );
                }
            };
            let reason_contains = param("reason_contains");
            if ids.is_empty()
                && param("group").is_none()
                && !all
                && cause.is_none()
                && died_before.is_none()
                && reason_contains.is_none()
            {
                return json_response(
                    request,
                    400,
                    json!({ "error": "say which jobs: id=ID (repeatable), group=, cause=, died_before_ms=, reason_contains= or all=1" }),
                );
            }
            let group = param("group").filter(|g| !g.is_empty());
            let filter = DeadFilter {
                ids,
                group,
                reason_contains,
                cause,
                died_before,
                limit: param("limit").and_then(|l| l.parse().ok()).unwrap_or(1000),
                scan: 10_000,
            };
            let result = lock(&app.on_demand).act_on_dead(queue, &filter, action);
            match result {
                Ok(done) => json_response(request, 200, json!({ "done": done })),
                Err(e) => json_response(request, 502, json!({ "error": e })),
            }
        }
        (
            Method::Post,
            [
                "api",
                "queues",
                queue,
                verb @ ("pause" | "resume" | "cancel"),
            ],
        ) => {
            if let Some(why) = unauthorized(app, &request) {
                return json_response(request, 403, json!({ "error": why }));
            }
            let group = param("group").filter(|g| !g.is_empty());
            let mut source = lock(&app.on_demand);
            let result = match *verb {
                "cancel" => {
                    let Some(id) = param("id").filter(|i| !i.is_empty()) else {
                        drop(source);
                        return json_response(
                            request,
                            400,
                            json!({ "error": "say which job: id=ID (and group=G for a grouped one)" }),
                        );
                    };
                    let message =
                        param("message").unwrap_or_else(|| "cancelled by an operator".into());
                    source
                        .cancel(queue, group.as_deref(), &id, &message)
                        .map(|c| match c {
                            redlease::queue::Cancelled::NotFound => {
                                json!({ "done": [], "outcome": "not found" })
                            }
                            redlease::queue::Cancelled::InFlight => {
                                json!({ "done": [id], "outcome": "in flight: its holder is told" })
                            }
                            _ => json!({ "done": [id], "outcome": "waiting: it will not run" }),
                        })
                }
                verb => {
                    let pause = verb == "pause";
                    source
                        .is_paused(queue, group.as_deref())
                        .and_then(|was| {
                            if was == pause {
                                return Ok(false);
                            }
                            source
                                .set_paused(queue, group.as_deref(), pause)
                                .map(|()| true)
                        })
                        .map(|changed| {
                            let what = group.clone().unwrap_or_else(|| queue.to_string());
                            json!({ "done": if changed { vec![what] } else { Vec::new() } })
                        })
                }
            };
            drop(source);
            match result {
                Ok(v) => json_response(request, 200, v),
                Err(e) => json_response(request, 502, json!({ "error": e })),
            }
        }
        (Method::Post, ["api", "locks", name, "release"]) => {
            if let Some(why) = unauthorized(app, &request) {
                return json_response(request, 403, json!({ "error": why }));
            }
            let prefix = param("token_prefix").unwrap_or_default();
            let prefix = prefix.trim_end_matches('…');
            if prefix.chars().count() < data::TOKEN_SHOWN {
                return json_response(
                    request,
                    400,
                    json!({ "error": format!("token_prefix: the {} characters the holder shows", data::TOKEN_SHOWN) }),
                );
            }
            let result = lock(&app.on_demand).force_release(name, prefix);
            match result {
                Ok(released) => json_response(
                    request,
                    200,
                    json!({ "done": if released { vec![name.to_string()] } else { Vec::new() } }),
                ),
                Err(e) => json_response(request, 502, json!({ "error": e })),
            }
        }
        _ => json_response(request, 404, json!({ "error": "not found" })),
    }
}

/// Why an action is refused (read-only, or a missing or wrong token), if it is. The
/// cross-site and host checks ([`refusal`]) ran before.
fn unauthorized(app: &App, request: &Request) -> Option<String> {
    let Some(token) = &app.token else {
        return Some(
            "read-only: start `redlease serve` with --allow-actions --token-file FILE to allow actions"
                .into(),
        );
    };
    if !get_header(request, TOKEN_HEADER).is_some_and(|t| same(t, token)) {
        return Some(format!("missing or wrong {TOKEN_HEADER} header"));
    }
    None
}

fn read_dead(
    app: &App,
    queue: &str,
    limit: usize,
) -> Result<Vec<redlease::queue::dead::DeadJob>, String> {
    lock(&app.on_demand).dead(queue, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_paths_and_queries_are_decoded() {
        assert_eq!(percent_decode("a%2Fb+c", false), "a/b+c");
        assert_eq!(percent_decode("a%2Fb+c", true), "a/b c");
        assert_eq!(percent_decode("bad%zz%", false), "bad%zz%");
        assert_eq!(
            query_params("id=a%20b&id=c&all=1"),
            [
                ("id".into(), "a b".into()),
                ("id".into(), "c".into()),
                ("all".into(), "1".into())
            ]
        );
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
