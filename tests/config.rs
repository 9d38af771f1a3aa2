//! Mistakes in the client's configuration come back at once, typed, saying what to fix:
//! against real redis-server processes started with `requirepass` or ACL users. Also a
//! semaphore count that differs from the one stored in Redis.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use redlease::{Client, Error, FailureKind};
use redlease_suite::RedisServer;
use redlease_suite::testkit::server;

const PASSWORD: &str = "s3cret-pw";

/// A server that requires [`PASSWORD`], with the ACL users `alice` (password `alice-pw`, all
/// permissions) and `bob` (password `bob-pw`, no scripting).
fn protected() -> RedisServer {
    RedisServer::builder()
        .config("requirepass", PASSWORD)
        .config_args(&["user", "alice", "on", ">alice-pw", "~*", "&*", "+@all"])
        .config_args(&[
            "user",
            "bob",
            "on",
            ">bob-pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ])
        .start()
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

fn url(server: &RedisServer, auth: &str) -> String {
    format!("redis://{auth}127.0.0.1:{}/", server.port())
}

/// A lock acquisition that would wait 10 s for a busy lock; a refused configuration must
/// end it long before (before the fix: about 11 s of retries). 4 s leaves a loaded machine
/// room while still proving no retry loop ran to the wait.
fn acquire_fails_fast(client: &Client) -> Error {
    let started = Instant::now();
    let err = client
        .lock("config-test")
        .wait(Duration::from_secs(10))
        .acquire()
        .map(|_| ())
        .expect_err("acquired with a refused configuration");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?} to report {err}",
        started.elapsed()
    );
    err
}

fn assert_configuration(err: &Error, port: u16, says: &str) {
    let text = err.to_string();
    assert!(
        matches!(err, Error::Configuration { .. }),
        "expected Error::Configuration, got {err:?}"
    );
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains(says), "{text:?} should say {says:?}");
    for secret in [PASSWORD, "alice-pw", "bob-pw", "wrong-pw"] {
        assert!(!text.contains(secret), "{text:?} shows a password");
    }
}

#[test]
fn wrong_password_is_a_configuration_error_at_once() {
    let server = protected();
    let client = Client::open(url(&server, ":wrong-pw@")).unwrap();
    let err = acquire_fails_fast(&client);
    assert_configuration(&err, server.port(), "rejected the password");
    // Again (now with the refusal known): still at once, still typed.
    let err = acquire_fails_fast(&client);
    assert_configuration(&err, server.port(), "rejected the password");
    let err = client.ping().unwrap_err();
    assert_configuration(&err, server.port(), "rejected the password");
}

#[test]
fn wrong_password_of_an_acl_user_names_the_user() {
    let server = protected();
    let client = Client::open(url(&server, "alice:wrong-pw@")).unwrap();
    let err = acquire_fails_fast(&client);
    assert_configuration(&err, server.port(), "user \"alice\"");
}

#[test]
fn acl_user_in_the_url_works() {
    let server = protected();
    let client = Client::builder(url(&server, "alice:alice-pw@"))
        .build_and_check()
        .unwrap();
    let guard = client.lock("acl").acquire().unwrap();
    assert!(guard.fence() > 0, "a fence is issued");
    guard.release().unwrap();
}

#[test]
fn acl_user_without_scripting_is_told_noperm_at_once() {
    let server = protected();
    let client = Client::builder(url(&server, "bob:bob-pw@"))
        .build_and_check() // PING is allowed: the connection and password are fine
        .unwrap();
    let err = acquire_fails_fast(&client);
    assert_configuration(&err, server.port(), "NOPERM");
}

#[test]
fn password_for_a_server_without_one_says_so() {
    let server = server();
    let client = Client::open(url(&server, ":wrong-pw@")).unwrap();
    let err = acquire_fails_fast(&client);
    assert_configuration(&err, server.port(), "has none configured");
}

#[test]
fn missing_password_is_noauth_every_time() {
    let server = protected();
    let client = Client::open(url(&server, "")).unwrap();
    // Before the fix: NOAUTH once, then "Protocol error: unauthenticated multibulk length"
    // on the reused connection.
    for _ in 0..3 {
        let err = acquire_fails_fast(&client);
        assert_configuration(&err, server.port(), "requires a password");
    }
    let err = client
        .queue("q")
        .unwrap()
        .push(b"job".to_vec())
        .unwrap_err();
    assert_configuration(&err, server.port(), "requires a password");
    let err = client.ping().unwrap_err();
    assert_configuration(&err, server.port(), "requires a password");
}

#[test]
fn right_password_works_and_ping_measures_a_round_trip() {
    let server = protected();
    let client = Client::builder(url(&server, &format!(":{PASSWORD}@")))
        .build_and_check()
        .unwrap();
    assert!(client.ping().unwrap() < Duration::from_secs(1));
    let guard = client.lock("pw").acquire().unwrap();
    guard.release().unwrap();
}

#[test]
fn database_the_server_does_not_have_is_a_configuration_error() {
    let server = server();
    let client = Client::open(format!("redis://127.0.0.1:{}/99", server.port())).unwrap();
    let err = client.ping().unwrap_err();
    assert_configuration(&err, server.port(), "no such database");
    let err = acquire_fails_fast(&client);
    assert_configuration(&err, server.port(), "no such database");
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn unreachable_server_is_named_and_ping_fails_fast() {
    let port = closed_port();
    let client = Client::builder(format!("redis://:{PASSWORD}@127.0.0.1:{port}/"))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.ping().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{err}");
    let text = err.to_string();
    assert!(
        matches!(&err, Error::Unavailable { last, .. } if last.kind == FailureKind::NotSent),
        "{err:?}"
    );
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    // An unreachable server may come back: acquisitions keep trying until their wait, and
    // then say where they tried.
    let err = client
        .lock("x")
        .wait(Duration::from_millis(300))
        .acquire()
        .map(|_| ())
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    let err = Client::builder(format!("redis://127.0.0.1:{port}/"))
        .build_and_check()
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
}

#[test]
fn a_semaphore_count_stored_earlier_is_kept_and_declare_semaphore_says_so() {
    let server = server();
    let client = Client::open(server.url()).unwrap();
    // An earlier deployment used 2 permits.
    client.declare_semaphore("api", 2).unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| client.semaphore("api", 2).try_acquire().unwrap().unwrap())
        .collect();
    // The new one asks for 5: the stored 2 still rules (no third permit) ...
    assert!(client.semaphore("api", 5).try_acquire().unwrap().is_none());
    assert_eq!(client.semaphore_state("api").unwrap().permits, Some(2));
    // ... and declare_semaphore makes that visible, naming both counts and the fix.
    let err = client.declare_semaphore("api", 5).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        text.contains("2 permit(s)") && text.contains("not 5"),
        "{text}"
    );
    assert!(text.contains("set_permits"), "{text}");
    // The documented path: change the count deliberately.
    assert_eq!(client.set_permits("api", 5).unwrap(), Some(2));
    client.declare_semaphore("api", 5).unwrap();
    assert!(client.semaphore("api", 5).try_acquire().unwrap().is_some());
    drop(held);
}

#[test]
fn a_bad_url_is_an_invalid_argument_that_does_not_show_the_password() {
    let err = Client::open(format!("redis://:{PASSWORD}@127.0.0.1:notaport/")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(text.contains("bad Redis URL"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
}
