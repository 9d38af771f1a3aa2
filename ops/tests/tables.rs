//! The CLI's tables: every row has as many cells as the header, and each column shows the
//! `--json` field of its name (`-` read as `_`; `x/min` is `per_minute.x`; a time in
//! seconds is the field `<name>_ms`; the first column, named after what is listed, is
//! `name` or `id`).

mod common;

use common::{FullWorld, full_world, run, run_json};
use serde_json::Value;

/// A table's header cells and each row's cells, cut at the header's column starts. Fails
/// when a row does not fit the header: a cell that does not start where its column starts
/// (two spaces before it), or more cells than the header has.
fn parse(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let header_line = lines.next().expect("a header");
    // Columns are separated by at least two spaces; no header cell holds two in a row.
    let mut starts = Vec::new();
    let chars: Vec<char> = header_line.chars().collect();
    for i in 0..chars.len() {
        if chars[i] != ' ' && (i == 0 || (i >= 2 && chars[i - 1] == ' ' && chars[i - 2] == ' ')) {
            starts.push(i);
        }
    }
    let cut = |line: &str| -> Vec<String> {
        let chars: Vec<char> = line.chars().collect();
        starts
            .iter()
            .enumerate()
            .map(|(k, &start)| {
                let end = starts.get(k + 1).copied().unwrap_or(chars.len()).min(chars.len());
                if start >= chars.len() {
                    return String::new();
                }
                if k > 0 {
                    assert!(
                        start >= 2 && chars[start - 1] == ' ' && chars[start - 2] == ' ',
                        "column {k} does not start at its header in {line:?}:\n{text}"
                    );
                }
                let cell: String = chars[start..end].iter().collect();
                let cell = cell.trim_end().to_owned();
                assert!(
                    !cell.contains("  "),
                    "two cells under one header ({:?}) in {line:?}: a row has more cells than the header:\n{text}",
                    cell
                );
                cell
            })
            .collect()
    };
    let header = cut(header_line);
    let mut rows = Vec::new();
    for line in lines {
        if line.is_empty() || line.starts_with("more: ") || line == "(none)" {
            break;
        }
        rows.push(cut(line));
    }
    (header, rows)
}

/// The JSON field a column shows, if any.
fn field<'a>(json: &'a Value, column: &str, first: bool) -> Option<(&'a Value, bool)> {
    let key = column.replace('-', "_");
    if first {
        return json
            .get("name")
            .or_else(|| json.get("id"))
            .map(|v| (v, false));
    }
    if let Some(rate) = key.strip_suffix("/min") {
        return json.get("per_minute")?.get(rate).map(|v| (v, false));
    }
    if let Some(v) = json.get(&key) {
        return Some((v, false));
    }
    json.get(format!("{key}_ms")).map(|v| (v, true))
}

/// Whether `cell` shows `v` (`seconds`: `v` is in ms, shown in seconds; times move between
/// two runs, so within 10 s).
fn shows(cell: &str, v: &Value, seconds: bool) -> bool {
    match v {
        Value::Null => cell == "n/a" || cell.is_empty() || cell.starts_with('('),
        Value::Number(n) if seconds => cell
            .strip_suffix('s')
            .and_then(|c| c.parse::<f64>().ok())
            .is_some_and(|c| (c - n.as_f64().unwrap() / 1000.0).abs() < 10.0),
        Value::Number(n) => cell == n.to_string(),
        Value::Bool(b) => cell == b.to_string(),
        // Previews are cut shorter in the table.
        Value::String(s) => cell == s || (cell.chars().count() >= 20 && s.starts_with(cell)),
        Value::Array(items) => {
            let parts: Vec<&str> = if cell.is_empty() {
                Vec::new()
            } else {
                cell.split(", ").collect()
            };
            parts.len() == items.len()
                && parts.iter().zip(items).all(|(p, item)| match item {
                    // A holder and its time left; a schedule by its name.
                    Value::Object(o) => o
                        .get("holder")
                        .or_else(|| o.get("name"))
                        .and_then(Value::as_str)
                        .is_some_and(|h| p.starts_with(h)),
                    other => shows(p, other, false),
                })
        }
        Value::Object(_) => false,
    }
}

/// Runs `args` as a table and with `--json`; checks every row against the JSON item
/// (`items` picks them out of the JSON, in the table's order). Returns how many columns
/// were compared with a field.
fn check(w: &FullWorld, args: &[&str], items: fn(&Value) -> Vec<Value>) -> usize {
    let url = w.world.server.url();
    let out = run(&url, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (header, rows) = parse(&text);
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let json = items(&run_json(&url, &with_json));
    assert_eq!(
        rows.len(),
        json.len(),
        "{args:?}: rows vs JSON items:\n{text}"
    );
    assert!(!rows.is_empty(), "{args:?}: no rows to check:\n{text}");
    let mut compared = 0;
    for (row, item) in rows.iter().zip(&json) {
        assert_eq!(row.len(), header.len(), "{args:?}:\n{text}");
        for (k, (column, cell)) in header.iter().zip(row).enumerate() {
            if let Some((v, seconds)) = field(item, column, k == 0) {
                assert!(
                    shows(cell, v, seconds),
                    "{args:?}: column {column:?} shows {cell:?}, the JSON {v}:\n{text}\n{item}"
                );
                compared += 1;
            }
        }
    }
    compared
}

fn list(key: &'static str) -> impl Fn(&Value) -> Vec<Value> {
    move |v| v[key].as_array().cloned().unwrap_or_default()
}

#[test]
fn every_row_has_the_header_s_cells_and_each_column_its_json_field() {
    let w = full_world();
    let queues = check(&w, &["queues"], |v| list("queues")(v));
    assert!(queues >= 10 * 6, "{queues} cells compared");
    check(&w, &["jobs", "work"], |v| list("jobs")(v));
    check(&w, &["jobs", "work", "--state", "in_flight"], |v| {
        list("jobs")(v)
    });
    check(&w, &["jobs", "work", "--state", "delayed"], |v| {
        list("jobs")(v)
    });
    check(&w, &["jobs", "emails", "--state", "dead"], |v| {
        list("jobs")(v)
    });
    check(&w, &["dead", "emails"], |v| {
        v.as_array().cloned().unwrap_or_default()
    });
    // A grouped dead job, with its group.
    check(&w, &["dead", "partner"], |v| {
        v.as_array().cloned().unwrap_or_default()
    });
    check(&w, &["locks"], |v| list("locks")(v));
    check(&w, &["semaphores"], |v| list("semaphores")(v));
}

#[test]
fn the_parser_catches_a_row_with_one_cell_too_many() {
    // The queues table as it was: the least lease left under `acked/min`.
    let shifted = "queue  ready  acked/min  paused\nmail   6      8.7s       0       n/a\n";
    assert!(std::panic::catch_unwind(|| parse(shifted)).is_err());
    let fits = "queue  ready  acked/min  paused\nmail   6      0          n/a\n";
    assert_eq!(parse(fits).1, [["mail", "6", "0", "n/a"]]);
}

#[test]
fn every_lock_kind_shows_with_its_kind() {
    let w = full_world();
    let url = w.world.server.url();
    let v = run_json(&url, &["locks", "--json"]);
    let kinds: Vec<(&str, &str)> = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["kind"].as_str().unwrap()))
        .collect();
    // A semaphore shows in `semaphores`; an unfenced lock and a RedLock's hold on this
    // server are lease locks (the same key), without a fence for the RedLock.
    for want in [
        ("billing", "lease"),
        ("unfenced", "lease"),
        ("quorum", "lease"),
        ("config", "reentrant"),
        ("fifo", "fair"),
        ("catalog", "read"),
        ("ledger", "write"),
        ("old-cron", "legacy"),
    ] {
        assert!(kinds.contains(&want), "no {want:?} in {kinds:?}");
    }
    for l in v["locks"].as_array().unwrap() {
        let holder = l["holder"].as_str().unwrap_or_else(|| panic!("{l}"));
        assert!(
            holder.ends_with('…') && l["ttl_ms"].as_i64().unwrap() > 0,
            "{l}"
        );
    }
    let sems = run_json(&url, &["semaphores", "--json"]);
    assert_eq!(sems["semaphores"][0]["name"], "api");
    // The table has the kind column.
    let text = String::from_utf8(run(&url, &["locks"]).stdout).unwrap();
    let (header, rows) = parse(&text);
    assert_eq!(header[1], "kind", "{text}");
    assert!(
        rows.iter().any(|r| r[0] == "old-cron" && r[1] == "legacy"),
        "{text}"
    );
}
