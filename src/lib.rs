//! Test support for the redlease workspace.
//!
//! This crate is not published. It owns the workspace's integration tests, examples and
//! benchmarks, and provides [`RedisServer`]: a harness that starts a throwaway `redis-server`
//! process on a free loopback port, with no persistence and its own temporary directory, and
//! cleans everything up when dropped.
//!
//! ```no_run
//! use redlease_suite::RedisServer;
//!
//! # fn main() -> Result<(), redlease_suite::HarnessError> {
//! let mut server = RedisServer::start()?;
//! println!("redis is listening at {}", server.url());
//!
//! // Failure injection for tests:
//! server.pause()?; // SIGSTOP: the server stops answering
//! server.resume()?; // SIGCONT
//! server.kill(); // SIGKILL: connections are refused
//! server.restart()?; // same port, same arguments, empty dataset
//! # Ok(())
//! # }
//! ```
//!
//! To lose, delay or cut replies between a client and a server, put a [`Proxy`] between them.
//!
//! Extra configuration is passed on the `redis-server` command line:
//!
//! ```no_run
//! use redlease_suite::RedisServer;
//!
//! # fn main() -> Result<(), redlease_suite::HarnessError> {
//! // Both forms disable EVAL by renaming it to the empty string.
//! let a = RedisServer::builder().config("rename-command", "EVAL \"\"").start()?;
//! let b = RedisServer::builder().config_args(&["rename-command", "EVAL", ""]).start()?;
//! # Ok(())
//! # }
//! ```
//!
//! The `redis-server` binary is taken from the `REDIS_SERVER` environment variable if set,
//! otherwise from `PATH` (then `/usr/local/bin` and `/usr/bin`). `scripts/test.sh` installs it
//! when it is missing.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::dbg_macro
)]

mod cluster;
pub mod proxy;
mod server;
pub mod testkit;

/// docs/embedding.md, its code compiled and run as doctests (with this package's
/// dev-dependencies: tokio, getrandom, redlease-redis), so that what it shows an embedder
/// stays true: random tokens, the retry defaults, releasing a renewed lease, the
/// cancel-safe acquisition.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
pub struct EmbeddingDoctests;

// The guide's pages (docs/README.md indexes them), their code compiled and run as doctests
// like the README's (which blocking/src/lib.rs includes), so that what they show stays true.

/// docs/locks.md: the lock family, `run_once`, RedLock, who holds a lock.
#[cfg(doctest)]
#[doc = include_str!("../docs/locks.md")]
pub struct LocksDoctests;

/// docs/semaphores-and-rate-limits.md: the semaphore and the rate limiter.
#[cfg(doctest)]
#[doc = include_str!("../docs/semaphores-and-rate-limits.md")]
pub struct SemaphoresAndRateLimitsDoctests;

/// docs/queues.md: the queue and its worker pool.
#[cfg(doctest)]
#[doc = include_str!("../docs/queues.md")]
pub struct QueuesDoctests;

/// docs/flow-control.md: pause, groups, timeouts and cancellation, dedup, batches.
#[cfg(doctest)]
#[doc = include_str!("../docs/flow-control.md")]
pub struct FlowControlDoctests;

/// docs/jobs.md: the dead list and durable schedules.
#[cfg(doctest)]
#[doc = include_str!("../docs/jobs.md")]
pub struct JobsDoctests;

/// docs/testing.md: the in-process server (the `memory` feature, which this package's dev-dependency on redlease turns on: these examples run, unguarded).
#[cfg(doctest)]
#[doc = include_str!("../docs/testing.md")]
pub struct TestingDoctests;

/// docs/operating.md: reading a queue's state.
#[cfg(doctest)]
#[doc = include_str!("../docs/operating.md")]
pub struct OperatingDoctests;

/// docs/deployment.md: the production settings.
#[cfg(doctest)]
#[doc = include_str!("../docs/deployment.md")]
pub struct DeploymentDoctests;

/// docs/connections.md: TLS settings.
#[cfg(doctest)]
#[doc = include_str!("../docs/connections.md")]
pub struct ConnectionsDoctests;

/// docs/observability.md: the tracing subscriber (ignored: it needs tracing-subscriber).
#[cfg(doctest)]
#[doc = include_str!("../docs/observability.md")]
pub struct ObservabilityDoctests;

pub use cluster::RedisCluster;
pub use proxy::Proxy;
pub use server::{RedisServer, RedisServerBuilder};

use std::fmt;
use std::io;

/// Why the [`RedisServer`] harness could not do what it was asked.
#[derive(Debug)]
#[non_exhaustive]
pub enum HarnessError {
    /// No `redis-server` binary was found (neither via `REDIS_SERVER` nor on `PATH`, nor in
    /// `/usr/local/bin` or `/usr/bin`).
    NotFound,
    /// The `REDIS_SERVER` environment variable names something that is not an executable file.
    InvalidBinary {
        /// The value of `REDIS_SERVER`.
        path: std::path::PathBuf,
    },
    /// A configuration value passed to [`RedisServerBuilder::config`] could not be split into
    /// arguments (for example an unbalanced quote).
    InvalidConfig {
        /// The configuration directive name.
        name: String,
        /// What is wrong with its value.
        message: String,
    },
    /// An I/O operation of the harness failed (creating the temporary directory, the log file,
    /// spawning a process, ...).
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// `redis-server` did not come up: it exited early, or did not answer `PING` in time.
    Startup {
        /// The port it was started on (0 if no port could be used).
        port: u16,
        /// What went wrong.
        reason: String,
        /// The last lines `redis-server` wrote to its log for this attempt.
        log_tail: String,
    },
    /// The operation needs a running server, but it was killed (see [`RedisServer::kill`]).
    NotRunning,
    /// The `kill` command used by [`RedisServer::pause`] / [`RedisServer::resume`] failed.
    Signal {
        /// The signal that was sent (`STOP` or `CONT`).
        signal: &'static str,
        /// The target process id.
        pid: u32,
        /// The exit status of `kill` and what it printed.
        detail: String,
    },
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::NotFound => f.write_str(
                "redis-server not found on PATH: run scripts/test.sh (installs it with apt-get) \
                 or `apt-get install redis-server`",
            ),
            HarnessError::InvalidBinary { path } => write!(
                f,
                "REDIS_SERVER={} is not an executable file (unset it to search PATH)",
                path.display()
            ),
            HarnessError::InvalidConfig { name, message } => {
                write!(f, "invalid redis-server config `{name}`: {message}")
            }
            HarnessError::Io { context, source } => write!(f, "{context}: {source}"),
            HarnessError::Startup {
                port,
                reason,
                log_tail,
            } => {
                write!(
                    f,
                    "redis-server failed to start on 127.0.0.1:{port}: {reason}"
                )?;
                if log_tail.trim().is_empty() {
                    f.write_str(" (its log is empty)")
                } else {
                    write!(f, "\n--- end of redis-server log ---\n{log_tail}")
                }
            }
            HarnessError::NotRunning => f.write_str("redis-server is not running (it was killed)"),
            HarnessError::Signal {
                signal,
                pid,
                detail,
            } => write!(f, "`kill -{signal} {pid}` failed: {detail}"),
        }
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HarnessError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// Sends one inline command and returns the first reply line (without CRLF).
    fn send(port: u16, command: &str) -> io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(format!("{command}\r\n").as_bytes())?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line.trim_end().to_owned())
    }

    #[test]
    fn start_ping_kill_restart_drop() -> TestResult {
        let mut server = RedisServer::start()?;
        let port = server.port();
        let dir = server.dir().to_path_buf();
        assert_ne!(port, 0);
        assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/"));
        assert!(server.is_running());
        let first_pid = server.pid().ok_or("no pid while running")?;
        assert!(dir.is_dir(), "temp dir {} should exist", dir.display());
        assert!(server.log_path().starts_with(&dir));

        assert_eq!(send(port, "PING")?, "+PONG");
        assert_eq!(send(port, "SET k v")?, "+OK");
        assert_eq!(send(port, "GET k")?, "$1");

        server.kill();
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "connecting to a killed server must fail"
        );
        server.kill(); // idempotent
        assert!(matches!(server.pause(), Err(HarnessError::NotRunning)));

        server.restart()?;
        assert_eq!(server.port(), port, "restart must reuse the port");
        assert!(server.is_running());
        let second_pid = server.pid().ok_or("no pid after restart")?;
        assert_ne!(first_pid, second_pid);
        assert_eq!(send(port, "PING")?, "+PONG");
        // No persistence: the restarted server starts empty.
        assert_eq!(send(port, "GET k")?, "$-1");

        // Restarting a running server replaces the process.
        server.restart()?;
        assert_ne!(server.pid(), Some(second_pid));
        assert_eq!(send(port, "PING")?, "+PONG");

        drop(server);
        assert!(!dir.exists(), "drop must remove {}", dir.display());
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
        Ok(())
    }

    #[test]
    fn pause_and_resume() -> TestResult {
        let mut server = RedisServer::start()?;
        let port = server.port();
        server.pause()?;
        assert!(server.is_running(), "a stopped process is still running");
        // The kernel still accepts the connection, but nobody answers.
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_millis(300)))?;
        stream.write_all(b"PING\r\n")?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).is_err(),
            "a paused server must not answer, got {line:?}"
        );
        server.resume()?;
        // The pending PING is answered once the process continues.
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(5)))?;
        line.clear();
        reader.read_line(&mut line)?;
        assert_eq!(line.trim_end(), "+PONG");
        // Killing a paused server works too.
        server.pause()?;
        server.kill();
        assert!(!server.is_running());
        Ok(())
    }

    #[test]
    fn servers_are_independent() -> TestResult {
        let a = RedisServer::start()?;
        let b = RedisServer::start()?;
        assert_ne!(a.port(), b.port());
        assert_ne!(a.dir(), b.dir());
        assert_eq!(send(a.port(), "SET only-a 1")?, "+OK");
        assert_eq!(send(b.port(), "EXISTS only-a")?, ":0");
        Ok(())
    }

    #[test]
    fn config_value_with_two_words_renames_eval() -> TestResult {
        let mut server = RedisServer::builder()
            .config("rename-command", "EVAL \"\"")
            .config("maxmemory", "10mb")
            .start()?;
        let port = server.port();
        let reply = send(port, "EVAL \"return 1\" 0")?;
        assert!(reply.starts_with("-ERR unknown command"), "got {reply:?}");
        assert_eq!(send(port, "CONFIG GET maxmemory")?, "*2");
        // Extra arguments survive a restart.
        server.restart()?;
        let reply = send(port, "EVAL \"return 1\" 0")?;
        assert!(reply.starts_with("-ERR unknown command"), "got {reply:?}");
        Ok(())
    }

    #[test]
    fn raw_config_args_rename_eval() -> TestResult {
        let server = RedisServer::builder()
            .config_args(&["rename-command", "EVAL", ""])
            .start()?;
        let reply = send(server.port(), "EVAL \"return 1\" 0")?;
        assert!(reply.starts_with("-ERR unknown command"), "got {reply:?}");
        // Other commands are untouched.
        assert_eq!(send(server.port(), "PING")?, "+PONG");
        Ok(())
    }

    #[test]
    fn bad_config_reports_log_tail() -> TestResult {
        let err = match RedisServer::builder()
            .config("no-such-directive", "1")
            .start()
        {
            Ok(_) => return Err("redis-server accepted a bogus directive".into()),
            Err(err) => err,
        };
        let HarnessError::Startup { log_tail, .. } = &err else {
            return Err(format!("expected a startup error, got {err:?}").into());
        };
        assert!(
            log_tail.contains("no-such-directive"),
            "log tail should explain the failure: {log_tail:?}"
        );
        assert!(err.to_string().contains("no-such-directive"));
        Ok(())
    }

    #[test]
    fn unbalanced_quote_is_rejected_before_spawning() {
        let result = RedisServer::builder()
            .config("rename-command", "EVAL \"oops")
            .start();
        assert!(
            matches!(result, Err(HarnessError::InvalidConfig { ref name, .. }) if name == "rename-command"),
            "got {result:?}"
        );
    }

    #[test]
    fn not_found_message_says_how_to_install() {
        assert_eq!(
            HarnessError::NotFound.to_string(),
            "redis-server not found on PATH: run scripts/test.sh (installs it with apt-get) \
             or `apt-get install redis-server`"
        );
    }
}
