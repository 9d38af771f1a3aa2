//! Checks of the documentation itself (issue 27): what a first-time user reads first says
//! what they will see, and the API documentation is built the way the README says.

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
