//! The throwaway `redis-server` process behind [`RedisServer`].

use crate::HarnessError;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How long a freshly spawned `redis-server` gets to answer `PING` (it takes milliseconds;
/// the rest is room for a loaded machine).
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How many fresh ports [`RedisServer::start`] tries before giving up.
const START_ATTEMPTS: u32 = 5;
/// How long [`RedisServer::restart`] keeps retrying the same port.
const RESTART_PORT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between readiness probes and between bind retries.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How many log lines an error carries.
const LOG_TAIL_LINES: usize = 20;
/// Log lines meaning "someone else owns this port": worth retrying.
const PORT_IN_USE_MARKERS: [&str; 2] = [
    "Could not create server TCP listening socket",
    "Address already in use",
];

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A `redis-server` process owned by the current test, example or benchmark.
///
/// It listens on `127.0.0.1` on a port picked at start, keeps nothing on disk (`--save ""`,
/// `--appendonly no`), runs in its own temporary directory
/// (`<temp dir>/redlease-test-<pid>-<n>`, which also holds its log, `redis.log`) and is killed,
/// with that directory removed, when the value is dropped.
///
/// Besides starting, it can simulate failures: [`kill`](Self::kill) (crash),
/// [`restart`](Self::restart) (come back empty on the same port), and
/// [`pause`](Self::pause) / [`resume`](Self::resume) (hang).
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    extra_args: Vec<OsString>,
    port: u16,
    dir: PathBuf,
    log_path: PathBuf,
    /// `None` once killed. A mutex so that [`RedisServer::is_running`] can reap through `&self`.
    child: Mutex<Option<Child>>,
}

/// Builds a [`RedisServer`] with extra `redis-server` configuration.
///
/// Created by [`RedisServer::builder`]. Extra arguments are appended after the harness's own
/// (`--port`, `--bind`, `--save ""`, `--appendonly no`, `--dir`, `--daemonize no`,
/// `--protected-mode no`), so overriding `port`, `bind` or `dir` breaks the harness.
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `.start()` is called"]
pub struct RedisServerBuilder {
    args: Vec<OsString>,
    /// The first `(name, message)` that [`RedisServerBuilder::config`] could not split.
    invalid: Option<(String, String)>,
    /// The binary to run instead of the one `REDIS_SERVER` or `PATH` names.
    binary: Option<PathBuf>,
}

impl RedisServerBuilder {
    /// Adds one configuration directive, written as in `redis.conf`: `name` without the
    /// leading `--`, and `value` as the rest of the line.
    ///
    /// The value is split into words the way `redis.conf` lines are (whitespace separates
    /// words; `"..."` and `'...'` quote them, `""` is an empty word), and each word becomes its
    /// own command-line argument. So directives taking several words work:
    /// `.config("rename-command", "EVAL \"\"")` disables `EVAL`, `.config("save", "")`
    /// disables snapshots. An unbalanced quote makes [`start`](Self::start) fail with
    /// [`HarnessError::InvalidConfig`].
    pub fn config(mut self, name: &str, value: &str) -> Self {
        match split_config_value(value) {
            Ok(words) => {
                self.args.push(option_name(name));
                if words.is_empty() {
                    // `--save ""`: an explicitly empty value.
                    self.args.push(OsString::new());
                } else {
                    self.args.extend(words.into_iter().map(OsString::from));
                }
            }
            Err(message) => {
                if self.invalid.is_none() {
                    self.invalid = Some((name.to_owned(), message));
                }
            }
        }
        self
    }

    /// Adds one configuration directive from raw words: `args[0]` is the directive name
    /// (`--` is prepended unless present), the remaining elements are passed verbatim, one
    /// command-line argument each, e.g. `.config_args(&["rename-command", "EVAL", ""])`.
    /// An empty slice adds nothing.
    pub fn config_args(mut self, args: &[&str]) -> Self {
        if let Some((name, values)) = args.split_first() {
            self.args.push(option_name(name));
            self.args.extend(values.iter().map(OsString::from));
        }
        self
    }

    /// Runs a Redis Sentinel instead of a server (`redis-server <dir>/sentinel.conf
    /// --sentinel`; the harness creates the writable config file Sentinel needs). Configure
    /// what it monitors with `SENTINEL MONITOR` once it runs.
    pub fn sentinel(mut self) -> Self {
        self.args.insert(0, OsString::from(SENTINEL_MARKER));
        self
    }

    /// Runs this `redis-server` binary instead of the one `REDIS_SERVER` or `PATH` names
    /// (for a test that needs a build with a feature, such as TLS).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts the server; see [`RedisServer::start`].
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`], plus [`HarnessError::InvalidConfig`] for a value that
    /// [`config`](Self::config) could not split.
    pub fn start(self) -> Result<RedisServer, HarnessError> {
        if let Some((name, message)) = self.invalid {
            return Err(HarnessError::InvalidConfig { name, message });
        }
        let binary = match self.binary {
            Some(path) if is_executable(&path) => path,
            Some(path) => return Err(HarnessError::InvalidBinary { path }),
            None => find_binary()?,
        };
        RedisServer::launch(binary, self.args)
    }
}

impl RedisServer {
    /// Starts a `redis-server` with the default configuration on a free loopback port and
    /// waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotFound`] if there is no `redis-server` binary (run `scripts/test.sh`,
    /// which installs it), [`HarnessError::Startup`] (with the end of the server log) if it
    /// does not come up within 20 seconds or fails on 5 different ports,
    /// [`HarnessError::Io`] if the temporary directory or the process cannot be created.
    pub fn start() -> Result<RedisServer, HarnessError> {
        RedisServer::builder().start()
    }

    /// Returns a builder to pass extra configuration to `redis-server`.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The TCP port the server listens on (on `127.0.0.1`). It does not change on
    /// [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The process id of the current `redis-server` process, `None` after
    /// [`kill`](Self::kill) (until [`restart`](Self::restart)).
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// The server's own temporary directory (its working directory, holding the log).
    /// Removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file receiving the server's stdout and stderr (appended to on every restart).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Whether the process is alive: `false` after [`kill`](Self::kill) or if it died on its
    /// own; `true` while [paused](Self::pause).
    pub fn is_running(&self) -> bool {
        let mut guard = self.lock_child();
        let alive = match guard.as_mut() {
            None => false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        };
        if !alive {
            // Reaped (or unusable): forget it so that `pid()` reports `None`.
            *guard = None;
        }
        alive
    }

    /// Kills the server with `SIGKILL` (no shutdown, no goodbye to clients) and waits for the
    /// process to exit. Afterwards connections to [`port`](Self::port) are refused. Does
    /// nothing if the server is already killed; works on a paused server.
    pub fn kill(&mut self) {
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(child) = child {
            stop_child(child);
        }
    }

    /// Starts the server again on the same port with the same arguments and waits until it
    /// answers `PING`. A running server is killed first. The new process starts with an empty
    /// dataset (there is no persistence), unless a test wrote a snapshot with `SAVE`: the new
    /// process then loads that older `dump.rdb` from its directory (a restart from an old
    /// snapshot). Binding is retried for a few seconds in case the
    /// port is briefly unavailable.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Startup`] if the port stays taken or the server does not come up,
    /// [`HarnessError::Io`] if the process cannot be spawned.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        let deadline = Instant::now() + RESTART_PORT_TIMEOUT;
        loop {
            match spawn_ready(
                &self.binary,
                &self.extra_args,
                self.port,
                &self.dir,
                &self.log_path,
            ) {
                Ok(child) => {
                    *self.child.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(child);
                    return Ok(());
                }
                Err(Attempt::Retry(_)) if Instant::now() < deadline => {
                    thread::sleep(POLL_INTERVAL);
                }
                Err(Attempt::Retry(err) | Attempt::Fatal(err)) => return Err(err),
            }
        }
    }

    /// Freezes the server with `SIGSTOP` (sent with the `kill` command): it keeps its port and
    /// connections but answers nothing until [`resume`](Self::resume). Useful to simulate a
    /// hung server or a network partition.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotRunning`] after [`kill`](Self::kill); [`HarnessError::Signal`] or
    /// [`HarnessError::Io`] if the `kill` command fails.
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.signal("STOP")
    }

    /// Lets a [paused](Self::pause) server continue with `SIGCONT`. Harmless on a server that
    /// is not paused.
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.signal("CONT")
    }

    fn signal(&self, signal: &'static str) -> Result<(), HarnessError> {
        let pid = self.pid().ok_or(HarnessError::NotRunning)?;
        let output = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|source| HarnessError::Io {
                context: format!("cannot run `kill -{signal} {pid}`"),
                source,
            })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(HarnessError::Signal {
                signal,
                pid,
                detail: format!(
                    "{}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            })
        }
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn launch(binary: PathBuf, extra_args: Vec<OsString>) -> Result<RedisServer, HarnessError> {
        let dir = create_temp_dir()?;
        let log_path = dir.join("redis.log");
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let attempt = free_port().map_err(Attempt::Fatal).and_then(|port| {
                spawn_ready(&binary, &extra_args, port, &dir, &log_path).map(|c| (port, c))
            });
            match attempt {
                Ok((port, child)) => {
                    return Ok(RedisServer {
                        binary,
                        extra_args,
                        port,
                        dir,
                        log_path,
                        child: Mutex::new(Some(child)),
                    });
                }
                Err(Attempt::Retry(mut err)) => {
                    if let HarnessError::Startup { reason, .. } = &mut err {
                        reason.push_str(&format!(" (gave up after trying {START_ATTEMPTS} ports)"));
                    }
                    last_error = Some(err);
                }
                Err(Attempt::Fatal(err)) => {
                    last_error = Some(err);
                    break;
                }
            }
        }
        // Best effort: the directory only holds the log, whose tail is in the error.
        let _ = fs::remove_dir_all(&dir);
        Err(last_error.unwrap_or_else(|| HarnessError::Startup {
            port: 0,
            reason: "no start attempt was made".to_owned(),
            log_tail: String::new(),
        }))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The outcome of one failed start attempt.
enum Attempt {
    /// The port was taken by someone else: try again (another port, or later).
    Retry(HarnessError),
    /// Retrying would not help.
    Fatal(HarnessError),
}

/// The first extra argument of a server started with [`RedisServerBuilder::sentinel`].
const SENTINEL_MARKER: &str = "--redlease-sentinel-mode";

/// Spawns `redis-server` on `port` and waits until it answers `PING`.
fn spawn_ready(
    binary: &Path,
    extra_args: &[OsString],
    port: u16,
    dir: &Path,
    log_path: &Path,
) -> Result<Child, Attempt> {
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|source| io_failure(format!("cannot open {}", log_path.display()), source))?;
    let _ = writeln!(
        log,
        "--- redlease-suite: starting {} on port {port} ---",
        binary.display()
    );
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let stderr = log
        .try_clone()
        .map_err(|source| io_failure(format!("cannot open {}", log_path.display()), source))?;

    let mut command = Command::new(binary);
    let extra_args = match extra_args.split_first() {
        Some((first, rest)) if first == SENTINEL_MARKER => {
            let conf = dir.join("sentinel.conf");
            if !conf.exists() {
                std::fs::write(&conf, b"").map_err(|source| {
                    io_failure(format!("cannot write {}", conf.display()), source)
                })?;
            }
            command.arg(&conf).arg("--sentinel");
            rest
        }
        _ => extra_args,
    };
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(["--daemonize", "no", "--protected-mode", "no"])
        .args(extra_args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr);
    let mut child = command
        .spawn()
        .map_err(|source| io_failure(format!("cannot spawn {}", binary.display()), source))?;

    let startup_error = |reason: String| HarnessError::Startup {
        port,
        reason,
        log_tail: log_tail(log_path, log_start),
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let err = startup_error(format!(
                    "redis-server exited ({status}) before accepting connections"
                ));
                let port_in_use = matches!(&err, HarnessError::Startup { log_tail, .. }
                    if PORT_IN_USE_MARKERS.iter().any(|m| log_tail.contains(m)));
                return Err(if port_in_use {
                    Attempt::Retry(err)
                } else {
                    Attempt::Fatal(err)
                });
            }
            Ok(None) => {}
            Err(source) => {
                stop_child(child);
                return Err(Attempt::Fatal(HarnessError::Io {
                    context: "cannot check on redis-server".to_owned(),
                    source,
                }));
            }
        }
        match probe(addr, child.id()) {
            Probe::Ready => return Ok(child),
            Probe::Foreign(other) => {
                stop_child(child);
                return Err(Attempt::Retry(startup_error(format!(
                    "another redis-server (pid {other}) answered on the port"
                ))));
            }
            Probe::NotYet => {}
        }
        if Instant::now() >= deadline {
            stop_child(child);
            return Err(Attempt::Fatal(startup_error(format!(
                "no +PONG within {} s",
                READY_TIMEOUT.as_secs()
            ))));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

fn io_failure(context: String, source: io::Error) -> Attempt {
    Attempt::Fatal(HarnessError::Io { context, source })
}

enum Probe {
    /// Our process answers.
    Ready,
    /// A different redis process (this pid) answers on the port.
    Foreign(u32),
    /// Nothing useful yet.
    NotYet,
}

/// Sends `PING`; on `+PONG` (or `-NOAUTH`, when a password is configured) checks with
/// `INFO server` that the answering process is `expected_pid`.
fn probe(addr: SocketAddr, expected_pid: u32) -> Probe {
    let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(250)) else {
        return Probe::NotYet;
    };
    let timeout = Some(Duration::from_secs(1));
    if stream.set_read_timeout(timeout).is_err() || stream.set_write_timeout(timeout).is_err() {
        return Probe::NotYet;
    }
    let mut writer = &stream;
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if writer.write_all(b"PING\r\n").is_err() || reader.read_line(&mut line).is_err() {
        return Probe::NotYet;
    }
    if !(line.starts_with("+PONG") || line.starts_with("-NOAUTH")) {
        return Probe::NotYet;
    }
    // Make sure it is our process answering, not one that won a race for the port.
    match answering_pid(writer, &mut reader) {
        Some(pid) if pid != expected_pid => Probe::Foreign(pid),
        // Our pid, or unverifiable (INFO renamed or behind AUTH): it is a responsive redis and
        // our process is alive (checked before probing), so it is ours.
        _ => Probe::Ready,
    }
}

/// The `process_id` reported by `INFO server`, if it can be read.
fn answering_pid(mut writer: &TcpStream, reader: &mut BufReader<&TcpStream>) -> Option<u32> {
    writer.write_all(b"INFO server\r\n").ok()?;
    let mut header = String::new();
    reader.read_line(&mut header).ok()?;
    let len: usize = header.strip_prefix('$')?.trim_end().parse().ok()?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Kills and reaps a child, ignoring errors (it may have exited already).
fn stop_child(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines written to the log since byte `from`.
fn log_tail(path: &Path, from: u64) -> String {
    let mut text = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(from))?;
        file.read_to_end(&mut text)
    });
    if let Err(err) = read {
        return format!("(cannot read {}: {err})", path.display());
    }
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.trim_matches(['\r', '\n']).lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// The lowest port [`free_port`] picks.
const PORT_FLOOR: u32 = 20_000;
/// One above the highest port [`free_port`] picks: a Cluster node's bus port is its port
/// + 10000, which must stay a valid port (redis-server refuses to start otherwise).
const PORT_CEILING: u32 = 55_536;
/// How many random ports [`free_port`] tries before asking the kernel.
const PORT_PICKS: u32 = 64;

static NEXT_PICK: AtomicUsize = AtomicUsize::new(0);

/// A free loopback port, picked at random outside the kernel's ephemeral range (read from
/// `/proc/sys/net/ipv4/ip_local_port_range`) and below 55536. Outside the ephemeral range no
/// outgoing connection ever has the port as its local port: such a connection would keep a
/// killed server from binding its port again on [`RedisServer::restart`], and a client
/// reconnecting to a killed server could even connect to itself. When the ephemeral range
/// leaves no room, the kernel picks (`bind` to port 0). The listener is dropped before
/// `redis-server` binds, so another process may grab the port in between; callers retry.
fn free_port() -> Result<u16, HarnessError> {
    let ranges = ports_outside(ephemeral_range());
    let total: u32 = ranges.iter().map(|(lo, hi)| hi - lo).sum();
    if total > 0 {
        let mut seed = pick_seed();
        for _ in 0..PORT_PICKS {
            // xorshift: a few random picks need no crate.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut n = (seed % u64::from(total)) as u32;
            for &(lo, hi) in &ranges {
                if n < hi - lo {
                    let port = u16::try_from(lo + n).unwrap_or(0);
                    if port != 0 && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                        return Ok(port);
                    }
                    break;
                }
                n -= hi - lo;
            }
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| HarnessError::Io {
            context: "cannot bind 127.0.0.1:0 to pick a free port".to_owned(),
            source,
        })
}

/// The kernel's ephemeral port range, inclusive; the Linux default if it cannot be read.
fn ephemeral_range() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut words = text.split_whitespace().map(str::parse::<u32>);
            match (words.next(), words.next()) {
                (Some(Ok(lo)), Some(Ok(hi))) if lo <= hi => Some((lo, hi)),
                _ => None,
            }
        })
        .unwrap_or((32_768, 60_999))
}

/// The half-open port ranges within `[PORT_FLOOR, PORT_CEILING)` that avoid the inclusive
/// ephemeral range `(lo, hi)`.
fn ports_outside((lo, hi): (u32, u32)) -> Vec<(u32, u32)> {
    [
        (PORT_FLOOR, lo.min(PORT_CEILING)),
        ((hi + 1).max(PORT_FLOOR), PORT_CEILING),
    ]
    .into_iter()
    .filter(|(a, b)| a < b)
    .collect()
}

/// A seed that differs between processes, calls and moments (never zero).
fn pick_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_usize(NEXT_PICK.fetch_add(1, Ordering::Relaxed));
    if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    hasher.finish() | 1
}

/// Creates `<temp dir>/redlease-test-<pid>-<counter>`, replacing a stale one.
fn create_temp_dir() -> Result<PathBuf, HarnessError> {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("redlease-test-{}-{n}", std::process::id()));
    if dir.exists() {
        // Left over by an earlier process that had the same pid.
        let _ = fs::remove_dir_all(&dir);
    }
    fs::create_dir_all(&dir).map_err(|source| HarnessError::Io {
        context: format!("cannot create {}", dir.display()),
        source,
    })?;
    Ok(dir)
}

/// Finds `redis-server`: `$REDIS_SERVER`, then `PATH`, then the usual install locations.
fn find_binary() -> Result<PathBuf, HarnessError> {
    if let Some(value) = std::env::var_os("REDIS_SERVER").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&value);
        let found = if path.components().count() > 1 {
            is_executable(&path).then_some(path.clone())
        } else {
            search_path(&value)
        };
        return found.ok_or(HarnessError::InvalidBinary { path });
    }
    search_path("redis-server".as_ref())
        .or_else(|| {
            ["/usr/local/bin/redis-server", "/usr/bin/redis-server"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| is_executable(p))
        })
        .ok_or(HarnessError::NotFound)
}

fn search_path(name: &std::ffi::OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    match fs::metadata(path) {
        #[cfg(unix)]
        Ok(meta) => {
            use std::os::unix::fs::PermissionsExt;
            meta.is_file() && meta.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(meta) => meta.is_file(),
        Err(_) => false,
    }
}

fn option_name(name: &str) -> OsString {
    if name.starts_with("--") {
        OsString::from(name)
    } else {
        OsString::from(format!("--{name}"))
    }
}

/// Splits a `redis.conf` value into words like redis does (`sdssplitargs`): whitespace
/// separates words, `"..."` supports `\n \r \t \b \a \\ \" \xHH` escapes, `'...'` supports
/// `\'`, and a closing quote must be followed by whitespace or the end.
fn split_config_value(value: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return Ok(words);
        };
        let mut word = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unbalanced {first} quote in {value:?}")),
                    Some(c) if c == first => break,
                    Some('\\') if first == '"' => match chars.next() {
                        Some('n') => word.push('\n'),
                        Some('r') => word.push('\r'),
                        Some('t') => word.push('\t'),
                        Some('b') => word.push('\u{8}'),
                        Some('a') => word.push('\u{7}'),
                        Some('x') => {
                            let hex: String = chars.by_ref().take(2).collect();
                            match u8::from_str_radix(&hex, 16) {
                                Ok(byte) if hex.len() == 2 => word.push(char::from(byte)),
                                _ => {
                                    word.push('x');
                                    word.push_str(&hex);
                                }
                            }
                        }
                        Some(c) => word.push(c),
                        None => return Err(format!("unbalanced \" quote in {value:?}")),
                    },
                    Some('\\') if chars.peek() == Some(&'\'') => {
                        chars.next();
                        word.push('\'');
                    }
                    Some(c) => word.push(c),
                }
            }
            if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                return Err(format!(
                    "closing quote must be followed by a space in {value:?}"
                ));
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                word.push(c);
            }
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn port_taken_by_another_process_is_retryable() -> TestResult {
        let holder = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = holder.local_addr()?.port();
        let dir = create_temp_dir()?;
        let log_path = dir.join("redis.log");
        let result = spawn_ready(&find_binary()?, &[], port, &dir, &log_path);
        let _ = fs::remove_dir_all(&dir);
        match result {
            Err(Attempt::Retry(HarnessError::Startup { log_tail, .. })) => {
                assert!(
                    PORT_IN_USE_MARKERS.iter().any(|m| log_tail.contains(m)),
                    "{log_tail}"
                );
                Ok(())
            }
            Err(Attempt::Retry(err) | Attempt::Fatal(err)) => {
                Err(format!("expected a retryable startup error, got {err:?}").into())
            }
            Ok(mut child) => {
                let _ = child.kill();
                Err("redis-server started on a taken port".into())
            }
        }
    }

    #[test]
    fn port_taken_by_another_redis_is_retryable() -> TestResult {
        let other = RedisServer::start()?;
        let dir = create_temp_dir()?;
        let log_path = dir.join("redis.log");
        let result = spawn_ready(&other.binary, &[], other.port(), &dir, &log_path);
        let _ = fs::remove_dir_all(&dir);
        match result {
            Err(Attempt::Retry(_)) => Ok(()),
            Err(Attempt::Fatal(err)) => Err(format!("expected retryable, got {err:?}").into()),
            Ok(mut child) => {
                let _ = child.kill();
                Err("the other redis was taken for ours".into())
            }
        }
    }

    #[test]
    fn restart_waits_for_the_port_to_be_released() -> TestResult {
        let mut server = RedisServer::start()?;
        let port = server.port();
        server.kill();
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        let log_path = server.log_path().to_path_buf();
        let release = thread::spawn(move || {
            // Held until two attempts failed on it (however long a loaded machine takes to
            // spawn them), within the restart's own 3 s.
            let deadline = Instant::now() + Duration::from_secs(2);
            let failures = || {
                fs::read_to_string(&log_path)
                    .map_or(0, |log| log.matches("Address already in use").count())
            };
            while failures() < 2 && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
            drop(squatter);
        });
        let restarted = server.restart();
        let _ = release.join();
        restarted?;
        assert_eq!(server.port(), port);
        assert!(server.is_running());
        // The log holds one marker line per start attempt, and the failed ones explain why.
        let log = fs::read_to_string(server.log_path())?;
        assert!(
            log.matches("--- redlease-suite: starting").count() >= 3,
            "{log}"
        );
        assert!(log.contains("Address already in use"), "{log}");
        Ok(())
    }

    #[test]
    fn restart_gives_up_when_the_port_stays_taken() -> TestResult {
        let mut server = RedisServer::start()?;
        let port = server.port();
        server.kill();
        let _squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        let started = Instant::now();
        let err = match server.restart() {
            Ok(()) => return Err("restart succeeded on a taken port".into()),
            Err(err) => err,
        };
        assert!(started.elapsed() >= RESTART_PORT_TIMEOUT);
        assert!(
            matches!(err, HarnessError::Startup { port: p, .. } if p == port),
            "{err:?}"
        );
        assert!(!server.is_running());
        Ok(())
    }

    #[test]
    fn free_ports_avoid_the_ephemeral_range_and_leave_room_for_a_cluster_bus() -> TestResult {
        let (lo, hi) = ephemeral_range();
        let room = !ports_outside((lo, hi)).is_empty();
        for _ in 0..50 {
            let port = u32::from(free_port()?);
            if room {
                assert!(!(lo..=hi).contains(&port), "{port} in {lo}-{hi}");
                assert!((PORT_FLOOR..PORT_CEILING).contains(&port), "{port}");
            }
        }
        Ok(())
    }

    #[test]
    fn port_ranges_outside_the_ephemeral_range() {
        assert_eq!(ports_outside((32_768, 60_999)), vec![(20_000, 32_768)]);
        assert_eq!(
            ports_outside((40_000, 50_000)),
            vec![(20_000, 40_000), (50_001, 55_536)]
        );
        assert_eq!(ports_outside((1_024, 65_535)), vec![]);
        assert_eq!(ports_outside((10_000, 19_999)), vec![(20_000, 55_536)]);
    }

    #[test]
    fn splits_like_redis_conf() {
        let split = |v: &str| split_config_value(v);
        assert_eq!(
            split("EVAL \"\""),
            Ok(vec!["EVAL".to_owned(), String::new()])
        );
        assert_eq!(split(""), Ok(vec![]));
        assert_eq!(
            split("  900 1  300 10 "),
            Ok(vec!["900", "1", "300", "10"]
                .into_iter()
                .map(String::from)
                .collect())
        );
        assert_eq!(
            split("'a b' \"c\\\"d\\x41\""),
            Ok(vec!["a b".to_owned(), "c\"dA".to_owned()])
        );
        assert!(split("\"open").is_err());
        assert!(split("'open").is_err());
        assert!(split("\"a\"b").is_err());
    }
}
