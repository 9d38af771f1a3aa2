//! Replies as the core sees them: RESP values, error replies with their code, and the
//! transport failures that stand in for a reply that never came.

use std::fmt;

use crate::command::RequestId;

/// A Redis reply, mirroring RESP.
///
/// Drivers map their client library's value type onto this one (RESP3 maps, sets and
/// booleans become arrays and integers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The nil bulk string or nil array.
    Nil,
    /// An integer.
    Int(i64),
    /// A binary-safe bulk string.
    Bulk(Vec<u8>),
    /// A simple string such as `OK` or `QUEUED`.
    Status(String),
    /// An array of replies.
    Array(Vec<Reply>),
    /// An error reply (`-WRONGTYPE ...`).
    Error(ErrorReply),
}

impl Reply {
    /// The integer, if this is one (a bulk string holding a decimal integer counts too,
    /// since Redis returns either for numeric replies).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }

    /// The bytes, if this is a bulk string.
    pub fn as_bulk(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    /// A short human-readable rendering, for error messages.
    pub fn describe(&self) -> String {
        let mut s = format!("{self:?}");
        if s.len() > 120 {
            let cut = s.char_indices().nth(117).map_or(s.len(), |(i, _)| i);
            s.truncate(cut);
            s.push_str("...");
        }
        s
    }
}

/// An error reply, split into its code (the first word: `ERR`, `WRONGTYPE`, `NOSCRIPT`, ...)
/// and the rest of the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// The error code, upper case, such as `NOSCRIPT`.
    pub code: String,
    /// The message after the code.
    pub message: String,
}

impl ErrorReply {
    /// Splits a raw error line (`"WRONGTYPE Operation against ..."`) into code and message.
    /// An error raised inside a script that Redis 6.2 wraps (see [`new`](Self::new)) gets
    /// its original code back.
    pub fn parse(line: &str) -> Self {
        let line = line.trim_start_matches('-');
        match line.split_once(' ') {
            Some((code, rest)) => ErrorReply::new(code, rest),
            None => ErrorReply::new(line, ""),
        }
    }

    /// An error reply from its parts.
    ///
    /// Redis before 7.0 wraps an error that a command raised inside a script:
    /// `ERR Error running script (call to f_<sha>): @user_script:5: WRONGTYPE Operation
    /// against a key holding the wrong kind of value`. That error is read as the one inside
    /// (code `WRONGTYPE` here, the message keeping the wrapper's text), as Redis 7.0 and
    /// later send it, so that every server version is classified alike.
    pub fn new(code: &str, message: &str) -> Self {
        if code.eq_ignore_ascii_case("ERR")
            && let Some(inner) = unwrap_script_error(message)
        {
            return inner;
        }
        ErrorReply {
            code: code.to_owned(),
            message: message.to_owned(),
        }
    }

    /// Whether the error names this code.
    pub fn is(&self, code: &str) -> bool {
        self.code.eq_ignore_ascii_case(code)
    }

    /// Whether the command was refused for a passing reason and surely did not run: the
    /// node is a replica now (`READONLY`, during a failover), is loading its data
    /// (`LOADING`), has lost its master (`MASTERDOWN`), or the cluster is reconfiguring
    /// (`TRYAGAIN`, `CLUSTERDOWN`). Such a command may be sent again.
    pub fn is_transient(&self) -> bool {
        [
            "READONLY",
            "LOADING",
            "MASTERDOWN",
            "TRYAGAIN",
            "CLUSTERDOWN",
        ]
        .iter()
        .any(|c| self.is(c))
    }
}

/// The error inside Redis 6.2's `Error running script (call to f_...): @user_script:N: CODE
/// message`, if `message` is one and the inner error has an upper-case code.
fn unwrap_script_error(message: &str) -> Option<ErrorReply> {
    let rest = message.strip_prefix("Error running script")?;
    let (_, after) = rest.split_once("@user_script:")?;
    let (line, inner) = after.split_once(": ")?;
    if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (code, text) = inner
        .trim_start()
        .split_once(' ')
        .unwrap_or((inner.trim(), ""));
    let is_code = !code.is_empty()
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    // `ERR ...` inside is still `ERR`: nothing to unwrap.
    if !is_code || code == "ERR" {
        return None;
    }
    Some(ErrorReply {
        code: code.to_owned(),
        message: format!("{text} (script error, wrapped by the server: {message})"),
    })
}

impl fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

/// Whether a command that got no reply may have been carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The command surely never reached Redis (no connection could be had, connection refused).
    NotSent,
    /// The command may have been carried out, but its reply was lost (timeout, connection
    /// dropped after sending). Protocols treat the outcome as unknown.
    NoReply,
}

/// A command that got no reply, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFailure {
    /// Whether the command may have run.
    pub kind: FailureKind,
    /// What the driver saw (for error messages).
    pub message: String,
}

impl TransportFailure {
    /// The command surely never ran.
    pub fn not_sent(message: impl Into<String>) -> Self {
        TransportFailure {
            kind: FailureKind::NotSent,
            message: message.into(),
        }
    }

    /// The command may have run; its reply was lost.
    pub fn no_reply(message: impl Into<String>) -> Self {
        TransportFailure {
            kind: FailureKind::NoReply,
            message: message.into(),
        }
    }
}

impl fmt::Display for TransportFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FailureKind::NotSent => write!(f, "not sent: {}", self.message),
            FailureKind::NoReply => write!(f, "sent, no reply: {}", self.message),
        }
    }
}

/// What a driver feeds back to a machine: the outcome of one request, a reply (error
/// replies included) or the [`TransportFailure`] that stands in for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The request this answers.
    pub id: RequestId,
    /// The reply, or why there is none.
    pub result: Result<Reply, TransportFailure>,
}

impl Response {
    /// A reply to request `id`.
    pub fn reply(id: RequestId, reply: Reply) -> Self {
        Response {
            id,
            result: Ok(reply),
        }
    }

    /// A transport failure of request `id`.
    pub fn failed(id: RequestId, failure: TransportFailure) -> Self {
        Response {
            id,
            result: Err(failure),
        }
    }
}

#[cfg(test)]
mod wrapped_script_error_tests {
    use super::*;

    #[test]
    fn redis_6_2_wrapped_script_errors_keep_their_code() {
        let line = "-ERR Error running script (call to f_0123abcd): @user_script:5: \
                    WRONGTYPE Operation against a key holding the wrong kind of value";
        let e = ErrorReply::parse(line);
        assert!(e.is("WRONGTYPE"), "{e:?}");
        assert!(e.message.starts_with("Operation against a key"), "{e:?}");
        assert!(
            e.message.contains("f_0123abcd"),
            "the wrapper stays visible: {e:?}"
        );
        let e = ErrorReply::new(
            "ERR",
            "Error running script (call to f_1): @user_script:12: NOPERM this user has no \
             permissions to access one of the channels used as arguments",
        );
        assert!(e.is("NOPERM"), "{e:?}");
        let e = ErrorReply::new(
            "ERR",
            "Error running script (call to f_1): @user_script:1: OOM command not allowed",
        );
        assert!(e.is("OOM"), "{e:?}");
    }

    #[test]
    fn other_errors_are_left_alone() {
        // Redis 7's form is already right.
        let e = ErrorReply::parse(
            "-WRONGTYPE Operation against a key holding the wrong kind of value script: f_1, on @user_script:5.",
        );
        assert!(e.is("WRONGTYPE"));
        // A Lua error inside a script is a plain ERR.
        for message in [
            "Error running script (call to f_1): @user_script:3: user_script:3: attempt to \
             compare nil with number",
            "Error running script (call to f_1): @user_script:1: ERR wrong number of arguments",
            "Error running script (call to f_1): @enable_strict_lua:15: user_script:1: \
             Script attempted to access nonexistent global variable 'x'",
            "wrong number of arguments for 'get' command",
        ] {
            let e = ErrorReply::new("ERR", message);
            assert!(e.is("ERR"), "{e:?}");
            assert_eq!(e.message, message);
        }
    }
}
