//! The one error type of every redlease protocol (the blocking driver re-exports it).

use std::time::Duration;

use crate::reply::TransportFailure;

/// Everything that can go wrong in a redlease operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent: nothing was written.
    #[error("invalid argument: {0}")]
    InvalidArgument(#[from] InvalidArgument),

    /// The lock was not acquired before the caller's deadline.
    #[error("timed out after {waited:?} waiting for {name} ({attempts} attempt(s))")]
    Timeout {
        /// The lock (or other primitive) waited for.
        name: String,
        /// How long the caller waited.
        waited: Duration,
        /// How many acquisition attempts were made.
        attempts: u32,
    },

    /// The caller's lease is no longer theirs.
    #[error("{name} is no longer held by this owner: {reason}")]
    NotOwner {
        /// The lock (or other primitive).
        name: String,
        /// What happened to the lease.
        reason: LossReason,
    },

    /// A key of this primitive holds a value of another Redis type; nothing was written.
    #[error("a key of {name} holds the wrong kind of value (one of: {keys}): {message}")]
    WrongType {
        /// The primitive.
        name: String,
        /// Its keys, comma separated.
        keys: String,
        /// Redis's message.
        message: String,
    },

    /// The lock was acquired on the master, but fewer replicas than required acknowledged
    /// it in time (`WAIT`), so it was released: a failover could have lost it.
    #[error(
        "only {acknowledged} of the {required} required replica(s) acknowledged {name} within {timeout:?}; it was released"
    )]
    ReplicationFailed {
        /// The primitive.
        name: String,
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
        /// How long they were waited for.
        timeout: Duration,
    },

    /// A multi-node (RedLock) operation did not reach a majority of the nodes.
    #[error(
        "{name}: no quorum: {granted} of {nodes} node(s) granted it, {needed} needed ({busy} held by another owner, {unreachable} unreachable or failed)"
    )]
    NoQuorum {
        /// The lock.
        name: String,
        /// Nodes in all.
        nodes: u16,
        /// Nodes needed.
        needed: u16,
        /// Nodes that granted the request.
        granted: u16,
        /// Nodes where another owner held the lock.
        busy: u16,
        /// Nodes that did not answer or answered with an error.
        unreachable: u16,
    },

    /// Redis answered with an error reply not covered by another variant.
    #[error("redis error {code}: {message}")]
    Redis {
        /// The error code (`ERR`, `OOM`, `READONLY`, ...).
        code: String,
        /// The message after the code.
        message: String,
    },

    /// Redis could not be reached (or did not answer) within the operation's deadline.
    #[error("redis unavailable after {attempts} attempt(s): {last}")]
    Unavailable {
        /// How many times the command was tried.
        attempts: u32,
        /// The last failure seen.
        last: TransportFailure,
    },

    /// Redis refused us for a reason that retrying cannot fix: a wrong or missing password
    /// or ACL username, a password given to a server that has none, an ACL user without
    /// permission for the commands redlease sends (`NOPERM`), a database number the server
    /// does not have. Returned at once, without retries; `problem` says what to fix. Neither
    /// field ever contains the password.
    #[error("redis at {server} refused this client's configuration: {problem}")]
    Configuration {
        /// The server (`host:port`, or how it was found: Sentinel service, cluster seeds).
        server: String,
        /// What is wrong, and what to change.
        problem: String,
    },

    /// Redis answered, but not in a shape this protocol expects (a foreign value in one of
    /// our keys, or a server that does not speak the protocol).
    #[error("unexpected reply to {context}: {reply}")]
    UnexpectedReply {
        /// The step that got the reply.
        context: &'static str,
        /// The reply, abbreviated.
        reply: String,
    },

    /// The operating system's random number generator failed (no token could be drawn).
    #[error("the OS random number generator failed: {0}")]
    Random(String),

    /// The driver broke the protocol contract (it polled a machine that was still owed
    /// replies); a bug in the driver, reported instead of hanging.
    #[error("protocol contract broken by the driver: {0}")]
    Driver(&'static str),

    /// The machine was polled after it had finished.
    #[error("the protocol machine has already finished")]
    Finished,
}

/// Why a lease is no longer ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The key was gone: the lease expired (or the key was deleted or evicted).
    Expired,
    /// Another holder owns the key now.
    Taken,
    /// The watchdog could not renew the lease (Redis unreachable or refusing) before it
    /// expired by the local clock; whether Redis still holds it is unknown, so it is not ours.
    RenewalFailed,
    /// The watchdog stopped because every handle of its client was dropped: nothing renews
    /// the lease any more, so it must not be relied on (it expires at the end of its ttl).
    WatchdogStopped,
    /// The lock's `max_hold` was reached: the watchdog stopped renewing so that the lease
    /// ended at the hold limit.
    MaxHoldReached,
    /// The lease was not watched (no watchdog renewal asked for) and its validity (its ttl
    /// less the drift allowance, counted from the acquisition or the last extension) has
    /// passed: it expires, or already expired, on the server.
    ValidityPassed,
    /// A queue job's delivery was cancelled ([`crate::queue::cancel`]): its lease ended then,
    /// and its renewal said so.
    Cancelled,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "the lease expired (the key was gone)",
            LossReason::Taken => "another holder owns it now",
            LossReason::WatchdogStopped => "its client was dropped, so nothing renews it any more",
            LossReason::ValidityPassed => {
                "its validity passed without an extension (the watchdog was off for it)"
            }
            LossReason::Cancelled => "the job was cancelled, which ended its lease",
            LossReason::MaxHoldReached => {
                "it was held for its max_hold, so it was not renewed further"
            }
            LossReason::RenewalFailed => {
                "it could not be renewed before it expired (Redis unreachable or refusing)"
            }
        })
    }
}

/// An argument that was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidArgument {
    /// Names must not be empty (an empty `{}` would also disable the cluster hash tag).
    #[error("the name is empty")]
    EmptyName,
    /// A name or prefix longer than [`crate::keys::MAX_NAME_LEN`] bytes.
    #[error("the name is {len} bytes long; at most {max} are allowed")]
    NameTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The key prefix is empty.
    #[error("the key prefix is empty")]
    EmptyPrefix,
    /// A duration below the setting's floor (see [`crate::limits`]).
    #[error("{what} must be between {min:?} and {max:?}, got {got:?} (too short)")]
    DurationTooShort {
        /// Which setting.
        what: &'static str,
        /// The value given.
        got: Duration,
        /// The shortest accepted.
        min: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// A duration above the setting's maximum (see [`crate::limits`]).
    #[error("{what} must be between {min:?} and {max:?}, got {got:?} (too long)")]
    DurationTooLong {
        /// Which setting.
        what: &'static str,
        /// The value given.
        got: Duration,
        /// The shortest accepted.
        min: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// A count outside the setting's range (see [`crate::limits`]).
    #[error("{what} must be between {min} and {max}, got {got}")]
    CountOutOfRange {
        /// Which setting.
        what: &'static str,
        /// The value given.
        got: u64,
        /// The smallest accepted.
        min: u64,
        /// The largest accepted.
        max: u64,
    },
    /// An owner token that is empty or too long.
    #[error("the token must be 1 to {max} bytes, got {len}")]
    BadToken {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A setting that does not make sense, with the reason.
    #[error("{0}")]
    Setting(String),
}
