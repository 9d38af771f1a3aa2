//! Checks of the documentation itself: what a first-time user reads first says what they
//! will see, the API documentation is built the way the README says, and every relative
//! link of the README and the guide (docs/) resolves.

const README: &str = include_str!("../README.md");
const TEST_SH: &str = include_str!("../scripts/test.sh");

/// The first fence the README prints is about 1.8e15 on a real server: the README says why
/// right after it, before the reader runs it and wonders.
#[test]
fn the_first_printed_fence_is_explained_next_to_it() {
    let first_print = README
        .find("guard.fence()")
        .expect("the README prints a fence");
    let code_end = first_print
        + README[first_print..]
            .find("```\n")
            .expect("the example's end");
    let next_heading = code_end + README[code_end..].find("\n#").expect("a next section");
    let after = &README[code_end..next_heading];
    assert!(
        after.contains("10^15") && after.contains("microseconds"),
        "the paragraph after the first printed fence should say why it is large: {after}"
    );
}

/// `cargo doc -p redlease --no-deps` alone leaves every core type unlinked: the README
/// documents both crates, and the test command builds exactly that with warnings denied
/// (so every intra-doc link resolves).
#[test]
fn the_api_documentation_covers_both_crates_and_is_checked() {
    let more = &README[README
        .find("## More documentation")
        .expect("a More documentation section")..];
    let command = "cargo doc --no-deps -p redlease -p redlease-core";
    assert!(more.contains(command), "the README should say: {command}");
    assert!(
        TEST_SH.contains(&format!("RUSTDOCFLAGS=-Dwarnings {command}")),
        "scripts/test.sh should build the documented docs with warnings denied"
    );
}

/// Every relative link of the README and of the guide (docs/*.md) reaches a file that
/// exists and, when it names an anchor, a heading of that file (GitHub's anchors: the
/// heading's text lowercased, punctuation dropped, spaces to '-', a repeat suffixed -1, -2).
#[test]
fn every_relative_link_and_anchor_resolves() {
    use std::path::{Path, PathBuf};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a readable page");
        let shown = page
            .strip_prefix(root)
            .unwrap_or(page)
            .display()
            .to_string();
        for (line, target) in relative_links(&text) {
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page's directory").join(path)
            };
            if !file.exists() {
                broken.push(format!(
                    "{shown}:{line}: ({target}): no file {}",
                    file.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            let heads = std::fs::read_to_string(&file)
                .map(|t| anchors(&t))
                .unwrap_or_default();
            if !heads.iter().any(|h| h == anchor) {
                broken.push(format!(
                    "{shown}:{line}: ({target}): no heading with anchor #{anchor} in {}",
                    file.strip_prefix(root).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} relative links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The lines of `text` outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `(line, target)` of every Markdown link `[..](target)` outside code whose target is
/// relative (not `http:`, `https:`, `mailto:`).
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text) {
        // Drop inline code spans, where `](` is not a link.
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            let target = target.split_whitespace().next().unwrap_or("");
            let external = ["http://", "https://", "mailto:"]
                .iter()
                .any(|s| target.starts_with(s));
            if !target.is_empty() && !external {
                out.push((n, target.to_owned()));
            }
            rest = &after[end..];
        }
    }
    out
}

/// The anchors GitHub gives the headings of `text`.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (_, line) in prose(text) {
        let trimmed = line.trim_start_matches('#');
        if trimmed.len() == line.len()
            || !trimmed.starts_with(' ')
            || line.len() - trimmed.len() > 6
        {
            continue;
        }
        let slug: String = trimmed
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let repeats = seen.iter().filter(|s| **s == slug).count();
        seen.push(slug.clone());
        out.push(if repeats == 0 {
            slug
        } else {
            format!("{slug}-{repeats}")
        });
    }
    out
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# Metrics (feature `metrics`)\n## Reading a queue's state\n```\n# not a heading\n```\n## A, b\n## A, b\n";
    assert_eq!(
        anchors(text),
        [
            "metrics-feature-metrics",
            "reading-a-queues-state",
            "a-b",
            "a-b-1"
        ]
    );
    assert_eq!(
        relative_links("[x](a.md#b) `[y](no.md)` [z](https://e.org) [w](#c)"),
        [(1, "a.md#b".to_owned()), (1, "#c".to_owned())]
    );
}
