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
    pub fn parse(line: &str) -> Self {
        let line = line.trim_start_matches('-');
        match line.split_once(' ') {
            Some((code, rest)) => ErrorReply {
                code: code.to_owned(),
                message: rest.to_owned(),
            },
            None => ErrorReply {
                code: line.to_owned(),
                message: String::new(),
            },
        }
    }

    /// An error reply from its parts.
    pub fn new(code: &str, message: &str) -> Self {
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

/// What a driver feeds back to a machine: the outcome of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The request this answers.
    pub id: RequestId,
    /// The reply, or why there is none.
    pub result: Result<Reply, TransportFailure>,
}

impl Input {
    /// A reply to request `id`.
    pub fn reply(id: RequestId, reply: Reply) -> Self {
        Input {
            id,
            result: Ok(reply),
        }
    }

    /// A transport failure of request `id`.
    pub fn failed(id: RequestId, failure: TransportFailure) -> Self {
        Input {
            id,
            result: Err(failure),
        }
    }
}
