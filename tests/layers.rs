//! The layers of the blocking driver (`blocking/src`), checked: every `crate::` path in its
//! code (in `use` and in expressions, `super::` climbing out of a file included) may only
//! name its own layer or one below it, the layers form no cycle, and every file is in a
//! layer. The order is the table below; `blocking/src/lib.rs` ("How the crate is laid
//! out") says what each layer owns. Comments and string literals are not read: a doc link
//! is no import.
//!
//! Run with `--nocapture` to see every arrow between two layers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, each a folder of `blocking/src`, with its rank: a layer may use the layers
/// of a greater rank. Two layers of one rank are side by side and may not use each other.
const LAYERS: &[(&str, u32)] = &[
    ("api", 1),
    ("runtime", 2),
    ("driver", 3),
    ("transport", 4),
    ("memory", 4),
    ("wire", 5),
    ("observe", 6),
];

/// The crate root: it declares the layers and re-exports the public API, and may use all.
const ROOT: &str = "lib.rs";

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("blocking/src")
}

fn rank(layer: &str) -> Option<u32> {
    LAYERS.iter().find(|(l, _)| *l == layer).map(|(_, r)| *r)
}

/// The source with comments, string and character literals blanked out (newlines kept, so
/// line numbers stay true).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if (c == b'r' || (c == b'b' && next == Some(b'r')))
            && !prev_is_ident(b, i)
            && raw_start(b, i + usize::from(c == b'b') + 1).is_some()
        {
            let start = i + usize::from(c == b'b') + 1;
            let hashes = raw_start(b, start).unwrap_or(0);
            let mut j = start + hashes + 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            let end = (j + close.len()).min(b.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            if i < b.len() {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime ('a).
            let len = if next == Some(b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| p + 3)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(3)
            } else {
                None
            };
            match len {
                Some(n) => {
                    for &x in &b[i..(i + n).min(b.len())] {
                        blank(&mut out, x);
                    }
                    i += n;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// At `i`: `#*"` opens a raw string; the number of `#`.
fn raw_start(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b.get(i..)?.iter().take_while(|&&x| x == b'#').count();
    (b.get(i + hashes) == Some(&b'"')).then_some(hashes)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Path, // ::
    Open,
    Close,
    Comma,
    Dollar,
    Other(char),
}

fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let mut line = 1;
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(chars[start..i].iter().collect()), line));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((
                match c {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    ',' => Tok::Comma,
                    '$' => Tok::Dollar,
                    c => Tok::Other(c),
                },
                line,
            ));
            i += 1;
        }
    }
    out
}

/// The paths that start at `toks[i]` (after its `crate` or `super`s): one, or several for a
/// use tree (`a::{b::C, d}`). Each is the list of its segments.
fn paths_at(toks: &[(Tok, usize)], mut i: usize, prefix: Vec<String>) -> Vec<Vec<String>> {
    let mut path = prefix;
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(name)) => {
                path.push(name.clone());
                if toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) {
                    i += 2;
                } else {
                    return vec![path];
                }
            }
            Some(Tok::Open) => {
                // A use tree: each item up to the matching brace.
                let mut all = Vec::new();
                let mut j = i + 1;
                let mut item_start = j;
                let mut depth = 0;
                while let Some((t, _)) = toks.get(j) {
                    match t {
                        Tok::Open => depth += 1,
                        Tok::Close if depth == 0 => break,
                        Tok::Close => depth -= 1,
                        Tok::Comma if depth == 0 => {
                            all.extend(paths_at(toks, item_start, path.clone()));
                            item_start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                if item_start < j {
                    all.extend(paths_at(toks, item_start, path.clone()));
                }
                return all;
            }
            _ => return vec![path],
        }
    }
}

/// One `crate::` path read in a file: where, and the module path it names (from the
/// crate root).
struct Use {
    line: usize,
    path: Vec<String>,
}

/// The module path of a file of `blocking/src` (`api/queue/mod.rs` -> `api::queue`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

fn uses_of(rel: &Path, text: &str) -> Vec<Use> {
    let toks = tokens(&code_only(text));
    let module = module_of(rel);
    let mut uses = Vec::new();
    // Inline modules (`mod tests { .. }`) open where, at which brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = &toks[i];
        match tok {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Open, _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                }
            }
            Tok::Ident(kw)
                if kw == "crate"
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path)
                    && (i == 0 || toks[i - 1].0 != Tok::Dollar) =>
            {
                for path in paths_at(&toks, i + 2, Vec::new()) {
                    uses.push(Use { line: *line, path });
                }
            }
            Tok::Ident(kw)
                if kw == "super"
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path)
                    && (i < 2 || toks[i - 1].0 != Tok::Path) =>
            {
                let mut here: Vec<String> = module.clone();
                here.extend(inline.iter().map(|(n, _)| n.clone()));
                let mut j = i;
                while let (Some((Tok::Ident(s), _)), Some((Tok::Path, _))) =
                    (toks.get(j), toks.get(j + 1))
                {
                    if s != "super" {
                        break;
                    }
                    here.pop();
                    j += 2;
                }
                for path in paths_at(&toks, j, here.clone()) {
                    uses.push(Use { line: *line, path });
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    uses
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The layer of a file (its first folder under `blocking/src`), or `None`: in no layer.
fn layer_of(rel: &Path) -> Option<String> {
    if rel == Path::new(ROOT) {
        return Some("root".to_owned());
    }
    let mut parts = rel.iter();
    let first = parts.next()?.to_string_lossy().into_owned();
    parts.next()?; // a file straight under src/ is in no layer
    rank(&first).map(|_| first)
}

/// What the crate root re-exports from the crate itself: name -> the layer it comes from.
fn root_exports(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let toks = tokens(&code_only(text));
    for (i, (tok, _)) in toks.iter().enumerate() {
        if *tok == Tok::Ident("use".into()) {
            for path in paths_at(&toks, i + 1, Vec::new()) {
                if let (Some(first), Some(last)) = (path.first(), path.last())
                    && rank(first).is_some()
                {
                    out.insert(last.clone(), first.clone());
                }
            }
        }
    }
    out
}

/// An arrow from one layer to another: the file and line it is read at, and the path.
struct Arrow {
    file: String,
    line: usize,
    from: String,
    to: String,
    path: String,
}

fn arrows() -> (Vec<Arrow>, Vec<String>) {
    let src = src();
    let mut all = Vec::new();
    files(&src, &mut all);
    assert!(
        all.len() > 20,
        "blocking/src not found at {}",
        src.display()
    );
    let exports = root_exports(&fs::read_to_string(src.join(ROOT)).unwrap());
    let mut arrows = Vec::new();
    let mut unplaced = Vec::new();
    for path in &all {
        let rel = path.strip_prefix(&src).unwrap();
        let shown = format!("blocking/src/{}", rel.display());
        let Some(from) = layer_of(rel) else {
            unplaced.push(shown);
            continue;
        };
        let text = fs::read_to_string(path).unwrap();
        for u in uses_of(rel, &text) {
            let Some(first) = u.path.first() else {
                continue;
            };
            // A layer by name, or a name the root re-exports from one; anything else (an
            // external crate the root re-exports, a root attribute) is no arrow.
            let to = if rank(first).is_some() {
                first.clone()
            } else if let Some(layer) = exports.get(first) {
                layer.clone()
            } else {
                continue;
            };
            if to != from {
                arrows.push(Arrow {
                    file: shown.clone(),
                    line: u.line,
                    from: from.clone(),
                    to,
                    path: format!("crate::{}", u.path.join("::")),
                });
            }
        }
    }
    (arrows, unplaced)
}

/// The cycles of the graph of layers (each as its layers in order, first repeated last).
fn cycles(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    fn walk(
        at: &str,
        edges: &BTreeSet<(String, String)>,
        stack: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(p) = stack.iter().position(|s| s == at) {
            let mut cycle = stack[p..].to_vec();
            cycle.push(at.to_owned());
            found.push(cycle);
            return;
        }
        stack.push(at.to_owned());
        for (_, to) in edges.iter().filter(|(f, _)| f == at) {
            if stack.first().is_some_and(|s| s.as_str() <= to.as_str())
                || stack.iter().any(|s| s == to)
            {
                walk(to, edges, stack, found);
            }
        }
        stack.pop();
    }
    let mut found = Vec::new();
    let nodes: BTreeSet<&String> = edges.iter().map(|(f, _)| f).collect();
    for n in nodes {
        walk(n, edges, &mut Vec::new(), &mut found);
    }
    // Each cycle is found from its smallest layer only.
    found.retain(|c| c.iter().all(|l| l >= &c[0]));
    found
}

#[test]
fn blocking_src_keeps_its_layers() {
    let (arrows, unplaced) = arrows();
    let mut failures = Vec::new();
    for file in &unplaced {
        failures.push(format!(
            "{file}: in no layer (put it in one of the folders {:?}, and the folder in \
             tests/layers.rs's table)",
            LAYERS.iter().map(|(l, _)| *l).collect::<Vec<_>>()
        ));
    }
    let mut edges = BTreeSet::new();
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for a in &arrows {
        *counts.entry((a.from.clone(), a.to.clone())).or_default() += 1;
        edges.insert((a.from.clone(), a.to.clone()));
        if a.from == "root" {
            continue;
        }
        let (from, to) = (rank(&a.from).unwrap(), rank(&a.to).unwrap());
        if to <= from {
            let why = if to == from {
                "side by side: neither may use the other"
            } else {
                "up: a layer may use only the layers below it"
            };
            failures.push(format!(
                "{}:{}: {} -> {} ({}): {why}",
                a.file, a.line, a.from, a.to, a.path
            ));
        }
    }
    for cycle in cycles(&edges) {
        failures.push(format!("an import cycle of layers: {}", cycle.join(" -> ")));
    }
    println!("arrows between layers (from -> to: uses):");
    for ((from, to), n) in &counts {
        println!("  {from} -> {to}: {n}");
    }
    assert!(
        failures.is_empty(),
        "the layers of blocking/src (table in tests/layers.rs):\n{}",
        failures.join("\n")
    );
}

/// The reader itself, on a made-up file: `use` trees, paths in code, `super::` out of a
/// file, and no path read in comments or strings.
#[test]
fn the_reader_finds_paths_in_code_only() {
    let text = r##"
use crate::{wire::resp, driver::backend::{Node, Time}};
// use crate::api::client::Client;
/// [`X`](crate::api::X)
fn f() { let s = "crate::api::x"; let r = r#"crate::api::y"#; crate::observe::events::held(); }
pub(crate) fn g<'a>(x: &'a str) -> char { 'c' }
mod tests { use super::*; use super::super::memory::MemoryServer; }
"##;
    let uses = uses_of(Path::new("transport/listener.rs"), text);
    let shown: Vec<(usize, String)> = uses.iter().map(|u| (u.line, u.path.join("::"))).collect();
    assert_eq!(
        shown,
        vec![
            (2, "wire::resp".to_owned()),
            (2, "driver::backend::Node".to_owned()),
            (2, "driver::backend::Time".to_owned()),
            (5, "observe::events::held".to_owned()),
            (7, "transport::listener".to_owned()),
            (7, "transport::memory::MemoryServer".to_owned()),
        ]
    );
}
