//! docs/simulation.md shows the checker's own table of properties and excuses.

#[test]
fn the_docs_table_is_the_checkers_table() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/simulation.md"
    ))
    .expect("docs/simulation.md");
    let start = doc
        .find("<!-- table:start -->\n")
        .expect("table:start marker")
        + 21;
    let end = doc.find("<!-- table:end -->").expect("table:end marker");
    let table = redlease_sim::check::table_markdown();
    assert_eq!(
        &doc[start..end],
        table,
        "docs/simulation.md is out of date; its table should read:\n{table}"
    );
}
