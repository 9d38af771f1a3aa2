//! # redlease-redis
//!
//! The bridge between the [`redis`] crate and the sans-IO machines of [`redlease_core`], for
//! writing your own driver (async, an event loop) over `redis` connections. It depends on
//! nothing else: no runtime, no pool, no threads, and no `redis` features of its own (an
//! application's features, an async runtime among them, unify in as usual). The blocking
//! driver, the crate `redlease`, uses these same functions (re-exported there as
//! `redlease::adapter`) on Redis Cluster connections (and on RESP3 ones); on a single
//! server it has its own connections, packing a batch's commands into RESP itself (the same
//! bytes [`command`] packs to) and reading replies straight into [`Reply`]s, with the same
//! rules ([`failure`], [`refusal`]).
//!
//! - [`command`]: a core [`Command`] as a [`redis::Cmd`] (its node is yours to route).
//! - [`to_reply`]: a [`redis::Value`] as a core [`Reply`]; an error reply inside it
//!   (`Value::ServerError`, which is how `req_packed_command` and `recv_response` hand error
//!   replies back) becomes [`Reply::Error`].
//! - [`error_reply`]: the error reply a [`redis::RedisError`] carries, if it carries one
//!   (`query_async` and `query` return error replies as `Err`).
//! - [`failure`]: a `RedisError` that is not an error reply, as a [`TransportFailure`]:
//!   "not sent" only when the connection was refused, otherwise "no reply" (the command may
//!   have run). This is the rule that keeps a retried release or ack safe.
//! - [`response`]: all of the above for one request's outcome, ready for
//!   [`Protocol::handle`](redlease_core::Protocol::handle).
//! - [`refusal`]: an error reply that says the client is misconfigured (a missing or wrong
//!   password, an ACL user without permissions): retrying cannot help.
//!
//! ```
//! use redlease_core::{Command, Reply, RequestId};
//!
//! let cmd = redlease_redis::command(&Command::new("SET").arg("k").arg("v"));
//! assert_eq!(cmd.get_packed_command(), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
//!
//! // What `conn.req_packed_command(&cmd).await` returned, fed back to the machine:
//! let outcome: redis::RedisResult<redis::Value> = Ok(redis::Value::Okay);
//! let response = redlease_redis::response(RequestId(1), outcome);
//! assert_eq!(response.result, Ok(Reply::Status("OK".to_owned())));
//! ```
//!
//! `docs/embedding.md` in the repository walks through a whole driver;
//! `examples/tokio_embed.rs` is one, on tokio.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use redis::{RedisError, Value};
use redlease_core::{Command, ErrorReply, Reply, RequestId, Response, TransportFailure};

/// `command` as a [`redis::Cmd`], every argument as bytes, in order. Which node it goes to
/// ([`Command::node`]) is for the driver to honour: the `Cmd` does not carry it.
pub fn command(command: &Command) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in command.args() {
        cmd.arg(a);
    }
    cmd
}

/// Maps a `redis` value onto the core's RESP mirror.
///
/// RESP3 maps become flat arrays (key, value, key, value ...), sets become arrays, booleans
/// the integers 0 and 1, doubles and big numbers their decimal text; attributes are dropped
/// and push messages become arrays. `Value::ServerError` becomes [`Reply::Error`], read as
/// [`ErrorReply::new`] reads it (Redis 6.2's wrapped script errors get their own code).
pub fn to_reply(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(b) => Reply::Bulk(b),
        Value::Array(items) | Value::Set(items) => {
            Reply::Array(items.into_iter().map(to_reply).collect())
        }
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::Map(pairs) => Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [to_reply(k), to_reply(v)])
                .collect(),
        ),
        Value::Attribute { data, .. } => to_reply(*data),
        Value::Double(d) => Reply::Bulk(d.to_string().into_bytes()),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::VerbatimString { text, .. } => Reply::Bulk(text.into_bytes()),
        // The payload is `Vec<u8>` (its digits), or a `num_bigint::BigInt` when any crate of
        // the application turns on `redis`'s `num-bigint` feature (one of its defaults;
        // features unify across the dependency graph). Both write themselves as one
        // argument of decimal digits, so this compiles, and means the same, either way.
        Value::BigNumber(n) => Reply::Bulk(redis::ToRedisArgs::to_redis_args(&n).concat()),
        Value::Push { data, .. } => Reply::Array(data.into_iter().map(to_reply).collect()),
        Value::ServerError(e) => {
            Reply::Error(ErrorReply::new(e.code(), e.details().unwrap_or_default()))
        }
        // `Value` is non-exhaustive; a future kind reaches the machine as a shape it rejects.
        #[allow(unreachable_patterns)]
        other => Reply::Status(format!("{other:?}")),
    }
}

/// The error reply `e` carries (`-WRONGTYPE ...`, `-NOSCRIPT ...`), if it is one: the
/// server answered, so this is a [`Reply::Error`] for the machine, not a transport failure.
/// `None` for every other error (I/O, timeouts, a refused connection, parse errors).
pub fn error_reply(e: &RedisError) -> Option<ErrorReply> {
    e.code()
        .map(|code| ErrorReply::new(code, e.detail().unwrap_or_default()))
}

/// What a `redis` error that is not an error reply (see [`error_reply`]) means for the
/// command it came from.
///
/// The rule: only a refused connection (nothing listening, or a Unix socket that does not
/// exist) proves the command was never sent ([`FailureKind::NotSent`]); every other error
/// (a timeout, a connection dropped, a parse error) may have come after the server ran
/// the command, so its outcome is unknown ([`FailureKind::NoReply`]). The machines rely on
/// it: they retry a "not sent" command freely, and resolve a "no reply" one (by reading
/// the key, or by counting the command as done) instead of repeating an acquisition,
/// release or ack blindly. When in doubt, report `NoReply`: it is always safe, `NotSent`
/// is not.
///
/// [`FailureKind::NotSent`]: redlease_core::FailureKind::NotSent
/// [`FailureKind::NoReply`]: redlease_core::FailureKind::NoReply
pub fn failure(e: &RedisError) -> TransportFailure {
    if e.is_connection_refusal() {
        TransportFailure::not_sent(e.to_string())
    } else {
        TransportFailure::no_reply(e.to_string())
    }
}

/// The outcome of request `id` as the machine's [`Response`]: a reply (an error reply
/// included, whether it came as `Ok(Value::ServerError)` or as an `Err` carrying a code),
/// or a [`failure`].
pub fn response(id: RequestId, outcome: redis::RedisResult<Value>) -> Response {
    match outcome {
        Ok(value) => Response::reply(id, to_reply(value)),
        Err(e) => match error_reply(&e) {
            Some(reply) => Response::reply(id, Reply::Error(reply)),
            None => Response::failed(id, failure(&e)),
        },
    }
}

/// An error reply that says the client is misconfigured rather than the command failing:
/// what to fix, in words, or `None` for any other error reply. `NOAUTH` (and the protocol
/// error Redis sends an unauthenticated client for a large command), `WRONGPASS` and
/// `NOPERM`: retrying cannot help, so a driver should stop and report it.
pub fn refusal(reply: &ErrorReply) -> Option<String> {
    let (code, message) = (reply.code.as_str(), reply.message.as_str());
    // Redis answers a large command of an unauthenticated client (more than 10 arguments,
    // or a long one) with this protocol error instead of NOAUTH, and closes the connection.
    let unauthenticated =
        code.eq_ignore_ascii_case("ERR") && message.starts_with("Protocol error: unauthenticated");
    if code.eq_ignore_ascii_case("NOAUTH") || unauthenticated {
        return Some(
            "the server requires a password (NOAUTH): put it in the URL \
             (redis://:password@host:port/, or redis://user:password@host:port/ for an ACL user)"
                .to_owned(),
        );
    }
    match code.to_ascii_uppercase().as_str() {
        "WRONGPASS" => Some(format!(
            "authentication failed (WRONGPASS {message}): check the password and ACL username"
        )),
        "NOPERM" => Some(format!(
            "the ACL user may not run what redlease sends (NOPERM {message}): grant it the \
             scripting, key and pub/sub permissions of the redlease docs"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlease_core::FailureKind;

    fn parse(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    #[test]
    fn a_command_keeps_every_argument_as_bytes() {
        let c = Command::new("EVALSHA")
            .arg("abc")
            .int_arg(1)
            .arg("k")
            .arg([0u8, 255, b'\r', b'\n']);
        let packed = command(&c).get_packed_command();
        assert_eq!(
            packed,
            b"*5\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n$4\r\n\x00\xff\r\n\r\n"
        );
    }

    #[test]
    fn resp2_and_resp3_values_become_replies() {
        assert_eq!(to_reply(parse("$-1\r\n")), Reply::Nil);
        assert_eq!(to_reply(parse("_\r\n")), Reply::Nil);
        assert_eq!(to_reply(parse(":-7\r\n")), Reply::Int(-7));
        assert_eq!(to_reply(parse("+OK\r\n")), Reply::Status("OK".to_owned()));
        assert_eq!(
            to_reply(parse("+QUEUED\r\n")),
            Reply::Status("QUEUED".into())
        );
        assert_eq!(to_reply(parse("$2\r\nab\r\n")), Reply::Bulk(b"ab".to_vec()));
        assert_eq!(to_reply(parse("#t\r\n")), Reply::Int(1));
        assert_eq!(to_reply(parse(",1.5\r\n")), Reply::Bulk(b"1.5".to_vec()));
        assert_eq!(
            to_reply(parse("*2\r\n:1\r\n*1\r\n$1\r\nx\r\n")),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Array(vec![Reply::Bulk(b"x".to_vec())])
            ])
        );
        assert_eq!(
            to_reply(parse("%1\r\n+a\r\n:2\r\n")),
            Reply::Array(vec![Reply::Status("a".into()), Reply::Int(2)])
        );
        assert_eq!(
            to_reply(parse("~1\r\n:3\r\n")),
            Reply::Array(vec![Reply::Int(3)])
        );
    }

    /// A RESP3 big number keeps its digits whichever type `redis` gives its payload (the
    /// `num-bigint` feature changes it; `scripts/test.sh` checks the build with it on).
    #[test]
    fn big_number_becomes_its_digits() {
        let digits = "3492890328409238509324850943850943825024385";
        let value = parse(&format!("({digits}\r\n"));
        assert!(matches!(value, Value::BigNumber(_)), "{value:?}");
        assert_eq!(to_reply(value), Reply::Bulk(digits.as_bytes().to_vec()));
    }

    #[test]
    fn error_replies_keep_their_code_in_a_value_and_in_an_error() {
        let value = parse("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        let Reply::Error(e) = to_reply(value.clone()) else {
            panic!("not an error reply")
        };
        assert!(e.is("WRONGTYPE"), "{e:?}");
        assert!(e.message.starts_with("Operation against"), "{e:?}");
        // `query_async` hands the same reply back as an `Err`.
        let err = value.extract_error().unwrap_err();
        assert_eq!(error_reply(&err), Some(e.clone()));
        assert_eq!(
            response(RequestId(3), Err(err)),
            Response::reply(RequestId(3), Reply::Error(e))
        );
        let nos = response(RequestId(4), Ok(parse("-NOSCRIPT No matching script.\r\n")));
        assert!(
            matches!(&nos.result, Ok(Reply::Error(e)) if e.is("NOSCRIPT")),
            "{nos:?}"
        );
    }

    /// Redis 6.2 wraps an error raised inside a script in `ERR Error running script`; it is
    /// read as the error inside, both as a value and as an error.
    #[test]
    fn redis_6_2_wrapped_script_errors_are_classified_by_the_inner_code() {
        let line = "-ERR Error running script (call to f_0123): @user_script:5: WRONGTYPE \
                    Operation against a key holding the wrong kind of value\r\n";
        let Reply::Error(e) = to_reply(parse(line)) else {
            panic!("not an error reply")
        };
        assert!(e.is("WRONGTYPE"), "{e:?}");
        let err = parse(line).extract_error().unwrap_err();
        assert!(error_reply(&err).is_some_and(|e| e.is("WRONGTYPE")));
    }

    #[test]
    fn only_a_refused_connection_is_not_sent() {
        let io = |kind| RedisError::from(std::io::Error::new(kind, "boom"));
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(error_reply(&refused), None);
        assert_eq!(failure(&refused).kind, FailureKind::NotSent);
        let kinds = [
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::WouldBlock,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
        ];
        for kind in kinds {
            let e = io(kind);
            assert_eq!(error_reply(&e), None, "{kind:?}");
            assert_eq!(failure(&e).kind, FailureKind::NoReply, "{kind:?}");
            let i = response(RequestId(9), Err(e));
            assert!(
                matches!(&i.result, Err(f) if f.kind == FailureKind::NoReply),
                "{i:?}"
            );
        }
        let client_side = RedisError::from((redis::ErrorKind::Client, "dropped"));
        assert_eq!(error_reply(&client_side), None);
        assert_eq!(failure(&client_side).kind, FailureKind::NoReply);
        let refused_input = response(RequestId(1), Err(refused));
        assert!(
            matches!(&refused_input.result, Err(f) if f.kind == FailureKind::NotSent),
            "{refused_input:?}"
        );
    }

    #[test]
    fn replies_that_mean_a_misconfigured_client() {
        let r = |code: &str, message: &str| refusal(&ErrorReply::new(code, message));
        for (code, message) in [
            ("NOAUTH", "Authentication required."),
            ("ERR", "Protocol error: unauthenticated multibulk length"),
            ("ERR", "Protocol error: unauthenticated bulk length"),
            (
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            ),
            (
                "NOPERM",
                "User bob has no permissions to run the 'evalsha' command",
            ),
        ] {
            assert!(r(code, message).is_some(), "{code} {message}");
        }
        for (code, message) in [
            ("ERR", "Protocol error: invalid multibulk length"),
            ("ERR", "unknown command"),
            (
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
            ),
            ("READONLY", "You can't write against a read only replica."),
            ("LOADING", "Redis is loading the dataset in memory"),
        ] {
            assert!(r(code, message).is_none(), "{code} {message}");
        }
    }
}
