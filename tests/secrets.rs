//! Passwords and owner tokens never appear in `Debug` output or error messages.

use redlease::{Client, lock::RedLock};

const PASSWORD: &str = "hunter2-very-secret";

#[test]
fn client_builder_debug_hides_passwords() {
    let url = format!("redis://app:{PASSWORD}@127.0.0.1:6379/0");
    let shown = format!("{:?}", Client::builder(&url));
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(
        shown.contains("redis://app:***@127.0.0.1:6379/0"),
        "{shown}"
    );

    let shown = format!(
        "{:?}",
        Client::sentinel(&[format!("redis://:{PASSWORD}@127.0.0.1:26379")], "main")
            .master_auth(Some("app"), PASSWORD)
    );
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("master_password: Some(\"***\")"), "{shown}");

    let shown = format!(
        "{:?}",
        Client::cluster(&[format!("redis://:{PASSWORD}@127.0.0.1:7000")])
    );
    assert!(!shown.contains(PASSWORD), "{shown}");
}

#[test]
fn redlock_builder_debug_hides_passwords() {
    let urls = [
        format!("redis://:{PASSWORD}@127.0.0.1:1"),
        format!("redis://app:{PASSWORD}@127.0.0.1:2"),
    ];
    let shown = format!("{:?}", RedLock::builder(&urls));
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("redis://app:***@127.0.0.1:2"), "{shown}");
}

#[test]
fn url_errors_hide_passwords() {
    // An invalid database number: the URL is rejected when the client is built.
    let bad = [
        format!("redis://app:{PASSWORD}@127.0.0.1:6379/not-a-db"),
        format!("unknown://app:{PASSWORD}@127.0.0.1:6379"),
    ];
    for url in &bad {
        let err = Client::open(url).expect_err("a bad URL is refused");
        let (shown, debug) = (err.to_string(), format!("{err:?}"));
        assert!(shown.contains("bad Redis URL"), "{shown}");
        assert!(
            !shown.contains(PASSWORD) && !debug.contains(PASSWORD),
            "{shown} / {debug}"
        );

        let err = RedLock::builder(&[url]).build().expect_err("refused");
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("bad Redis URL"), "{shown}");
        assert!(!shown.contains(PASSWORD), "{shown}");

        let err = Client::cluster(&[url]).build().expect_err("refused");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
}
