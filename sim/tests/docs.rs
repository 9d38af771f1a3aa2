//! docs/simulation.md shows the checker's own table of properties and excuses
//! (`SIM_BLESS=1` rewrites it from the checker).

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
    if std::env::var_os("SIM_BLESS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/simulation.md");
        let new = format!("{}{}{}", &doc[..start], table, &doc[end..]);
        std::fs::write(path, new).expect("write docs/simulation.md");
        return;
    }
    assert_eq!(
        &doc[start..end],
        table,
        "docs/simulation.md is out of date; its table should read:\n{table}"
    );
}
