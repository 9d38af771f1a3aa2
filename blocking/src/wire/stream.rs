//! The pool's own connection to a single server (TCP, TLS or a Unix socket): one socket,
//! one read buffer zeroed once when the connection is made and reused for every reply, and
//! replies parsed straight into core [`Reply`]s by [`crate::wire::resp::parse`] (a reply that
//! arrives in pieces is measured by [`crate::wire::resp::Scan`] as they come and parsed once
//! complete). It does the set-up the `redis` crate did for the pool (AUTH, SELECT),
//! speaking RESP2. Limits: a line of at most 64 KiB, a bulk string of at most 512 MB
//! (the buffer grows to an announced length at once); bytes after a request's reply fail
//! it (the connection is out of step); the TLS handshake ends by the connect deadline. A
//! Unix socket's connect is not bounded by the connect timeout (as with the `redis`
//! crate: a local socket connects or fails at once).
//!
//! RESP3 (`?protocol=resp3`) and Redis Cluster connections stay on the `redis` crate (see
//! `transport::Link`), and so does TLS when the pool was not given the client's TLS
//! settings.

use std::io::{self, Read, Write};
use std::net::TcpStream;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError};
use redlease_core::Reply;

use crate::wire::resp::{self, ProtocolError};

/// The read buffer's size, allocated (and zeroed) once per connection: every reply of a
/// lock, semaphore or queue step fits many times over.
const READ_BUF: usize = 8 * 1024;

/// A read buffer grown past this for a large reply is given back once it is drained.
const KEEP_READ_BUF: usize = 64 * 1024;

/// How far past the bytes received the read buffer may grow for a frame that announced a
/// greater length (see [`Wire::make_room`]).
const GROW_AHEAD: usize = 1024 * 1024;

/// The shortest timeout a set-up step is given (a zero timeout means "none" to the socket).
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// Why a reply could not be read: the connection must not be used again.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The socket failed or timed out (a timeout reads as `WouldBlock` or `TimedOut`).
    Io(io::Error),
    /// The server closed the connection.
    Closed,
    /// The bytes are not RESP.
    Protocol(ProtocolError),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // A read past its timeout says "Resource temporarily unavailable (os error 11)"
            // (EAGAIN): say what happened.
            WireError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock) => {
                write!(f, "no reply within the io timeout ({e})")
            }
            WireError::Io(e) => write!(f, "{e}"),
            WireError::Closed => f.write_str("the server closed the connection"),
            WireError::Protocol(e) => write!(f, "protocol error: {}", e.0),
        }
    }
}

impl From<WireError> for RedisError {
    /// As the `redis` crate reports the same failure (so that set-up errors are told apart
    /// as before: `is_io_error`, `is_timeout`, `is_connection_dropped`).
    fn from(e: WireError) -> Self {
        match e {
            WireError::Io(e) => RedisError::from(e),
            WireError::Closed => RedisError::from(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )),
            WireError::Protocol(e) => RedisError::from((ErrorKind::Parse, "protocol error", e.0)),
        }
    }
}

enum Socket {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
    /// Boxed: the TLS state is large, and a connection moves in and out of the pool.
    #[cfg(feature = "tls-rustls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

/// The TLS configuration of a pool's connections, made from the client's TLS settings on
/// the first TLS connection (loading the platform's trust store once, not per connection).
#[derive(Default)]
pub(crate) struct TlsConfig {
    #[cfg(feature = "tls-rustls")]
    made: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

#[cfg(feature = "tls-rustls")]
impl TlsConfig {
    fn get(
        &self,
        tls: &crate::wire::connect::TlsSettings,
    ) -> Result<std::sync::Arc<rustls::ClientConfig>, RedisError> {
        if let Some(made) = self.made.get() {
            return Ok(made.clone());
        }
        let made = crate::wire::connect::rustls_config(tls).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "bad TLS settings",
                e.to_string(),
            ))
        })?;
        Ok(self.made.get_or_init(|| std::sync::Arc::new(made)).clone())
    }
}

/// A connection to one server, with its read buffer.
pub(crate) struct Wire {
    socket: Socket,
    /// Bytes read: `buf[start..end]` is not parsed yet. Zeroed once at creation; reads go
    /// into `buf[end..]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Cleared by the first failure (the connection is not used after it).
    open: bool,
    /// How many times a reply was parsed (built, or tried) and the buffer grown: tests
    /// check that a large reply is built once and its buffer grown once.
    #[cfg(test)]
    counts: Counts,
}

#[cfg(test)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    parses: usize,
    grows: usize,
}

/// Completes `stream`'s TLS handshake by `deadline`: one socket read or write per step,
/// each bounded by what is left (rustls' `complete_io` loops over reads until the
/// handshake ends, each within the socket's timeout, so a peer sending a byte at a time
/// would hold it far past the connect timeout).
#[cfg(feature = "tls-rustls")]
fn handshake(
    stream: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    deadline: Instant,
) -> io::Result<()> {
    let (conn, sock) = (&mut stream.conn, &mut stream.sock);
    // Until the handshake is over and its last message (the client's Finished) is sent.
    while conn.is_handshaking() || conn.wants_write() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            ));
        }
        let left = left.max(MIN_TIMEOUT);
        if conn.wants_write() {
            sock.set_write_timeout(Some(left))?;
            if conn.write_tls(sock)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            continue;
        }
        sock.set_read_timeout(Some(left))?;
        match conn.read_tls(sock) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection during the TLS handshake",
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if let Err(e) = conn.process_new_packets() {
            // The alert describing the failure, if one is queued: a last try, unchecked.
            let _ = conn.write_tls(sock);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
    }
    Ok(())
}

impl Wire {
    /// Whether the pool's connection to `info` can be one of these (a plain TCP or Unix
    /// socket address, RESP2); otherwise it is the `redis` crate's.
    ///
    /// `tls`: the client's TLS settings, `None` when the pool was not given them (TLS then
    /// stays the `redis` crate's).
    pub(crate) fn serves(
        info: &ConnectionInfo,
        tls: Option<&crate::wire::connect::TlsSettings>,
    ) -> bool {
        let ours = match info.addr() {
            ConnectionAddr::Tcp(..) => true,
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => true,
            #[cfg(feature = "tls-rustls")]
            ConnectionAddr::TcpTls {
                insecure: false, ..
            } => tls.is_some(),
            _ => false,
        };
        let _ = tls;
        ours && !info.redis_settings().protocol().supports_resp3()
    }

    /// Connects to `info`'s address and authenticates and selects its database, all
    /// within `timeout` (as the `redis` crate's `get_connection_with_timeout`). Errors are
    /// the `redis` crate's for the same failure: `AuthenticationFailed` for a refused
    /// password, "refused to switch database" for a refused SELECT.
    ///
    /// A TLS address is reached with `tls` (the client's settings) and the configuration
    /// made from them once per pool (`config`).
    pub(crate) fn open(
        info: &ConnectionInfo,
        tls: Option<&crate::wire::connect::TlsSettings>,
        config: &TlsConfig,
        timeout: Duration,
    ) -> Result<Wire, RedisError> {
        let deadline = Instant::now() + timeout;
        let _ = (tls, config);
        let socket = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                Socket::Tcp(crate::wire::connect::connect_tcp(host, *port, timeout)?)
            }
            #[cfg(feature = "tls-rustls")]
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                ..
            } if tls.is_some() => {
                let settings = tls.cloned().unwrap_or_default();
                let config = config.get(&settings)?;
                let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                    RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "bad TLS server name",
                        format!("{host:?}: {e}"),
                    ))
                })?;
                let conn = rustls::ClientConnection::new(config, name)
                    .map_err(|e| RedisError::from(io::Error::new(io::ErrorKind::InvalidData, e)))?;
                let sock = crate::wire::connect::connect_tcp(host, *port, timeout)?;
                let mut stream = rustls::StreamOwned::new(conn, sock);
                handshake(&mut stream, deadline)?;
                Socket::Tls(Box::new(stream))
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Socket::Unix(UnixStream::connect(path)?),
            other => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "not a plain TCP or Unix socket address",
                    format!("{other}"),
                )));
            }
        };
        let mut wire = Wire {
            socket,
            buf: vec![0; READ_BUF],
            start: 0,
            end: 0,
            open: true,
            #[cfg(test)]
            counts: Counts::default(),
        };
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(user) = settings.username() {
                args.push(user.as_bytes());
            }
            args.push(password.as_bytes());
            let mut reply = wire.setup_step(&args, deadline)?;
            if settings.username().is_some()
                && matches!(&reply, Reply::Error(e)
                    if e.message.contains("wrong number of arguments for 'auth' command"))
            {
                // A server before ACLs (Redis 5): the password alone.
                reply = wire.setup_step(&[b"AUTH", password.as_bytes()], deadline)?;
            }
            match reply {
                Reply::Status(s) if s == "OK" => {}
                Reply::Error(_) => {
                    return Err(RedisError::from((
                        ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                    )));
                }
                _ => {
                    return Err(RedisError::from((
                        ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                        "Redis server refused to authenticate, returns Ok() != Value::Okay",
                    )));
                }
            }
        }
        let db = settings.db();
        if db != 0 {
            let db = db.to_string();
            if let Reply::Error(e) = wire.setup_step(&[b"SELECT", db.as_bytes()], deadline)? {
                return Err(RedisError::from((
                    ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                    "Redis server refused to switch database",
                    format!("{} {}", e.code, e.message),
                )));
            }
        }
        Ok(wire)
    }

    /// One set-up command, bounded by what is left of `deadline`.
    fn setup_step(&mut self, args: &[&[u8]], deadline: Instant) -> Result<Reply, RedisError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection set-up timed out",
            )));
        }
        let left = left.max(MIN_TIMEOUT);
        self.set_read_timeout(Some(left))?;
        self.set_write_timeout(Some(left))?;
        Ok(self.request(args)?)
    }

    /// Sends one command and reads its reply (an error reply is a `Reply::Error`). Bytes
    /// that arrived after the reply answer nothing that was asked: the connection is out
    /// of step (the next request would read them as its reply), so that is an error that
    /// closes it.
    pub(crate) fn request(&mut self, args: &[&[u8]]) -> Result<Reply, WireError> {
        self.requests(&[args])?
            .pop()
            .ok_or_else(|| WireError::Protocol(ProtocolError("no reply read".into())))
    }

    /// Sends `commands` in one write and reads their replies, in order (as
    /// [`request`](Self::request) does for one; an empty list sends nothing).
    pub(crate) fn requests(&mut self, commands: &[&[&[u8]]]) -> Result<Vec<Reply>, WireError> {
        let mut packed = Vec::new();
        for args in commands {
            packed.extend(resp::encode(args));
        }
        self.write_all(&packed).map_err(WireError::Io)?;
        let replies = commands
            .iter()
            .map(|_| self.read_reply())
            .collect::<Result<Vec<_>, _>>()?;
        if self.has_unread() {
            self.open = false;
            return Err(WireError::Protocol(ProtocolError(format!(
                "{} bytes arrived that no request asked for",
                self.end - self.start
            ))));
        }
        Ok(replies)
    }

    /// Whether no failure was seen on this connection.
    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// Whether bytes arrived that no request asked for (after every reply of a batch was
    /// read): the connection is out of step with its requests and must not be used again.
    pub(crate) fn has_unread(&self) -> bool {
        self.start < self.end
    }

    /// Sets how long one read may block (`None`: forever).
    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match &self.socket {
            Socket::Tcp(s) => s.set_read_timeout(d),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_read_timeout(d),
            #[cfg(feature = "tls-rustls")]
            Socket::Tls(s) => s.sock.set_read_timeout(d),
        }
    }

    /// Sets how long one write may block (`None`: forever).
    pub(crate) fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match &self.socket {
            Socket::Tcp(s) => s.set_write_timeout(d),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_write_timeout(d),
            #[cfg(feature = "tls-rustls")]
            Socket::Tls(s) => s.sock.set_write_timeout(d),
        }
    }

    /// Writes all of `bytes`.
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let written = match &mut self.socket {
            // One `write` takes a batch whole on a healthy socket: `write_all`'s loop only
            // for the rest.
            Socket::Tcp(s) => match s.write(bytes) {
                Ok(n) if n == bytes.len() => Ok(()),
                Ok(n) => s.write_all(&bytes[n..]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => s.write_all(bytes),
                Err(e) => Err(e),
            },
            #[cfg(unix)]
            Socket::Unix(s) => s.write_all(bytes),
            // rustls' stream ignores a failure to send what it encrypted in `write`;
            // `flush` sends it, or reports the failure.
            #[cfg(feature = "tls-rustls")]
            Socket::Tls(s) => s.write_all(bytes).and_then(|()| s.flush()),
        };
        if written.is_err() {
            self.open = false;
        }
        written
    }

    /// Reads the next reply (bytes of the one after it stay buffered).
    pub(crate) fn read_reply(&mut self) -> Result<Reply, WireError> {
        let read = self.read_frame();
        if read.is_err() {
            self.open = false;
        }
        read
    }

    fn read_frame(&mut self) -> Result<Reply, WireError> {
        loop {
            if self.start < self.end {
                #[cfg(test)]
                {
                    self.counts.parses += 1;
                }
                let parsed =
                    resp::parse(&self.buf[self.start..self.end]).map_err(WireError::Protocol)?;
                return match parsed {
                    Some((reply, used)) => Ok(self.consumed(reply, used)),
                    None => self.read_frame_in_pieces(),
                };
            }
            // Empty: no frame can be cut across the buffer's end, room is made cheaply.
            self.make_room(1);
            self.read_more()?;
        }
    }

    /// The rest of a reply whose first bytes are buffered but incomplete. The common reply
    /// arrives whole in one read and is parsed once ([`read_frame`](Self::read_frame)). One
    /// that does not is measured as its bytes arrive (`resp::Scan`: each byte looked at
    /// once, nothing built) and parsed once complete: parsing it again from its start after
    /// every read would copy every finished bulk string each time, quadratic in a large
    /// reply's size.
    #[inline(never)]
    fn read_frame_in_pieces(&mut self) -> Result<Reply, WireError> {
        let mut scan = resp::Scan::default();
        loop {
            let unparsed = &self.buf[self.start..self.end];
            match scan.advance(unparsed).map_err(WireError::Protocol)? {
                resp::Scanned::Complete(len) => {
                    #[cfg(test)]
                    {
                        self.counts.parses += 1;
                    }
                    let unparsed = &self.buf[self.start..self.start + len];
                    return match resp::parse(unparsed).map_err(WireError::Protocol)? {
                        Some((reply, used)) => Ok(self.consumed(reply, used)),
                        None => Err(WireError::Protocol(ProtocolError(
                            "a frame measured complete did not parse".into(),
                        ))),
                    };
                }
                resp::Scanned::NeedsAtLeast(want) => {
                    self.make_room(want);
                    self.read_more()?;
                }
            }
        }
    }

    /// `reply`, taken from the first `used` unparsed bytes; an emptied buffer starts over
    /// at its front (and one grown for a large reply is given back).
    #[inline]
    fn consumed(&mut self, reply: Reply, used: usize) -> Reply {
        self.start += used;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP_READ_BUF {
                self.buf = vec![0; READ_BUF];
            }
        }
        reply
    }

    /// One read into the buffer after `end` (which has room).
    #[inline(always)]
    fn read_more(&mut self) -> Result<(), WireError> {
        loop {
            let n = match &mut self.socket {
                Socket::Tcp(s) => s.read(&mut self.buf[self.end..]),
                #[cfg(unix)]
                Socket::Unix(s) => s.read(&mut self.buf[self.end..]),
                #[cfg(feature = "tls-rustls")]
                Socket::Tls(s) => s.read(&mut self.buf[self.end..]),
            };
            return match n {
                Ok(0) => Err(WireError::Closed),
                Ok(n) => {
                    self.end += n;
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(WireError::Io(e)),
            };
        }
    }

    /// Makes room after `end` for the next read, for a frame known to take at least `want`
    /// bytes from `start`: moves the unparsed bytes to the front when the frame would not
    /// fit after them, and grows the buffer when it would not fit at all, towards what the
    /// frame needs (a large bulk string announces its length: few allocations, not a
    /// doubling per read), at least doubling it (a frame of many elements grows in few
    /// steps), but never more than [`GROW_AHEAD`] past the bytes received: memory follows
    /// what arrived, not what a header announced (`$536870000` with nothing after it
    /// costs 1 MiB, not 512 MiB).
    fn make_room(&mut self, want: usize) {
        let fits_after_start = self.start + want <= self.buf.len();
        if self.end < self.buf.len() && fits_after_start {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Room for the frame, up to GROW_AHEAD past what arrived.
        let target = want.min(self.end.saturating_add(GROW_AHEAD));
        let full = self.end == self.buf.len();
        if full || target > self.buf.len() {
            #[cfg(test)]
            {
                self.counts.grows += 1;
            }
            let grown = if full {
                target.max(self.buf.len() * 2)
            } else {
                target
            };
            self.buf.resize(grown, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// The pool's reader, fed generated replies (valid, truncated, garbled, hostile: see
    /// `crate::wire::fuzz`) over a Unix socket, each written in pieces cut at every byte boundary
    /// (or at random ones, for long replies): no panic, the frames of one whole parse in
    /// order, then an error where that parse fails or the input ends, and a read buffer
    /// that follows the bytes received, not a header's announced length (a `$536870000`
    /// header with three bytes after it grew the buffer to 512 MiB before).
    #[cfg(unix)]
    #[test]
    fn the_wire_agrees_with_one_parse_and_holds_what_arrived() {
        use crate::wire::fuzz::{Rng, cuts, frames_of, inputs, seed};
        use std::io::Write as _;
        let seed = seed();
        let mut rng = Rng::new(seed ^ 3);
        let inputs = inputs(seed, 400);
        let mut judged = 0usize;
        for input in &inputs {
            let (whole, _) = frames_of(input);
            let all = cuts(&mut rng, input);
            // Every cut for a short input, a few for the others (a thread per split).
            let picked: Vec<usize> = if all.len() <= 40 {
                all
            } else {
                (0..8).map(|_| all[rng.below(all.len())]).collect()
            };
            for cut in picked {
                let (a, mut b) = UnixStream::pair().unwrap();
                a.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let owned = input.clone();
                let writer = std::thread::spawn(move || {
                    // The reader may hang up early (an error): ignore failed writes.
                    let _ = b.write_all(&owned[..cut]);
                    let _ = b.flush();
                    let _ = b.write_all(&owned[cut..]);
                    let _ = b.shutdown(std::net::Shutdown::Write);
                });
                let mut w = Wire {
                    socket: Socket::Unix(a),
                    buf: vec![0; READ_BUF],
                    start: 0,
                    end: 0,
                    open: true,
                    counts: Counts::default(),
                };
                let mut got = Vec::new();
                loop {
                    match w.read_reply() {
                        Ok(reply) => got.push(reply),
                        Err(WireError::Io(e)) => panic!("{input:?}: {e}"),
                        Err(_) => break,
                    }
                    assert!(got.len() <= whole.len(), "{input:?}");
                }
                assert!(
                    w.buf.len() <= READ_BUF.max(2 * input.len()) + GROW_AHEAD,
                    "a {}-byte input grew the buffer to {} bytes",
                    input.len(),
                    w.buf.len()
                );
                drop(w);
                writer.join().unwrap();
                judged += 1;
                assert_eq!(got, whole, "{input:?} cut at {cut}");
            }
        }
        println!("{} inputs, {judged} splits judged", inputs.len());
    }

    /// A server on loopback that answers every connection with `script`'s chunks, each
    /// written separately (with a flush in between), then keeps the connection open until
    /// the test ends.
    fn serve(chunks: Vec<Vec<u8>>) -> (std::thread::JoinHandle<()>, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            for c in chunks {
                // The client may hang up early (a test of a refused reply).
                if s.write_all(&c).and_then(|()| s.flush()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut sink = [0u8; 64];
            // Until the client hangs up.
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        });
        (handle, port)
    }

    fn wire_to(port: u16) -> Wire {
        let info = redis::IntoConnectionInfo::into_connection_info(("127.0.0.1", port)).unwrap();
        let w = Wire::open(&info, None, &TlsConfig::default(), Duration::from_secs(5)).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        w
    }

    #[test]
    fn replies_split_across_reads_and_larger_than_the_buffer() {
        let big = vec![b'x'; KEEP_READ_BUF + 7];
        let mut bytes = b"+OK\r\n:42\r\n".to_vec();
        bytes.extend(format!("${}\r\n", big.len()).as_bytes());
        bytes.extend(&big);
        bytes.extend(b"\r\n*2\r\n$1\r\na\r\n$-1\r\n");
        // Cut into pieces of 3 bytes for the first 40, then large ones.
        let mut chunks: Vec<Vec<u8>> = bytes[..40].chunks(3).map(<[u8]>::to_vec).collect();
        chunks.extend(bytes[40..].chunks(5000).map(<[u8]>::to_vec));
        let (server, port) = serve(chunks);
        let mut w = wire_to(port);
        assert_eq!(w.read_reply().unwrap(), Reply::Status("OK".into()));
        assert_eq!(w.read_reply().unwrap(), Reply::Int(42));
        assert_eq!(w.read_reply().unwrap(), Reply::Bulk(big));
        assert_eq!(
            w.read_reply().unwrap(),
            Reply::Array(vec![Reply::Bulk(b"a".to_vec()), Reply::Nil])
        );
        assert!(w.is_open());
        assert!(!w.has_unread());
        // The big reply's buffer was given back once drained.
        assert_eq!(w.buf.len(), READ_BUF);
        drop(w);
        server.join().unwrap();
    }

    #[test]
    fn garbage_and_a_closed_connection_are_errors_that_close_the_wire() {
        let (server, port) = serve(vec![b"+OK\r\n?what\r\n".to_vec()]);
        let mut w = wire_to(port);
        assert_eq!(w.read_reply().unwrap(), Reply::Status("OK".into()));
        assert!(w.has_unread(), "the garbage arrived with the reply");
        assert!(matches!(w.read_reply(), Err(WireError::Protocol(_))));
        assert!(!w.is_open());
        drop(w);
        server.join().unwrap();

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"$10\r\nabc").unwrap();
            // Closed in the middle of a reply.
        });
        let mut w = wire_to(port);
        server.join().unwrap();
        assert!(matches!(w.read_reply(), Err(WireError::Closed)));
        assert!(!w.is_open());
    }

    #[test]
    fn a_read_times_out_and_closes_the_wire() {
        let (server, port) = serve(vec![b":1\r\n".to_vec()]);
        let mut w = wire_to(port);
        assert_eq!(w.read_reply().unwrap(), Reply::Int(1));
        w.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let e = w.read_reply().unwrap_err();
        assert!(
            matches!(&e, WireError::Io(e)
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)),
            "{e:?}"
        );
        assert!(!w.is_open());
        assert!(RedisError::from(e).is_timeout());
        drop(w);
        server.join().unwrap();
    }

    /// A large array reply arriving in many pieces is measured as it comes and built once
    /// (it was parsed from its start after every read: quadratic in its size), and its
    /// buffer grown by what its bulk strings announce, not doubled per read.
    #[test]
    fn a_large_reply_in_many_pieces_is_built_once() {
        let payload = vec![b'p'; 16 * 1024];
        let mut bytes = b"*64\r\n".to_vec();
        for _ in 0..64 {
            bytes.extend(format!("${}\r\n", payload.len()).as_bytes());
            bytes.extend(&payload);
            bytes.extend(b"\r\n");
        }
        let chunks = bytes.chunks(4000).map(<[u8]>::to_vec).collect();
        let (server, port) = serve(chunks);
        let mut w = wire_to(port);
        let reply = w.read_reply().unwrap();
        assert_eq!(reply, Reply::Array(vec![Reply::Bulk(payload); 64]));
        // One attempt on the first piece, one build once complete.
        assert_eq!(w.counts.parses, 2, "{:?}", w.counts);
        // 8 KiB to 1 MiB: at least doubling each time, seven steps without a known size.
        assert!(w.counts.grows <= 8, "{:?}", w.counts);
        drop(w);
        server.join().unwrap();
    }

    /// A bulk string announcing its length grows the buffer once, to that length.
    #[test]
    fn a_large_bulk_string_grows_the_buffer_once() {
        let big = vec![b'x'; 1024 * 1024];
        let mut bytes = format!("${}\r\n", big.len()).into_bytes();
        bytes.extend(&big);
        bytes.extend(b"\r\n");
        let chunks = bytes.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
        let (server, port) = serve(chunks);
        let mut w = wire_to(port);
        assert_eq!(w.read_reply().unwrap(), Reply::Bulk(big));
        assert_eq!(
            w.counts,
            Counts {
                parses: 2,
                grows: 1
            }
        );
        drop(w);
        server.join().unwrap();
    }

    /// A peer streaming bytes without a line end is refused once 64 KiB came, instead of
    /// buffered until the read times out (each read within its timeout: forever).
    #[test]
    fn a_header_line_without_an_end_is_refused() {
        let mut chunks = vec![b"+".to_vec()];
        chunks.extend((0..20).map(|_| vec![b'x'; 4096]));
        let (server, port) = serve(chunks);
        let mut w = wire_to(port);
        let e = w.read_reply().unwrap_err();
        assert!(matches!(&e, WireError::Protocol(_)), "{e:?}");
        assert!(!w.is_open());
        drop(w);
        server.join().unwrap();
    }

    /// Bytes after a request's reply (set-up steps, the idle-checkout PING) answer nothing
    /// that was asked: an error, and the connection is closed.
    #[test]
    fn bytes_after_a_requests_reply_are_an_error() {
        let (server, port) = serve(vec![b"+PONG\r\n+PONG\r\n".to_vec()]);
        let mut w = wire_to(port);
        let e = w.request(&[b"PING"]).unwrap_err();
        assert!(matches!(&e, WireError::Protocol(_)), "{e:?}");
        assert!(!w.is_open());
        drop(w);
        server.join().unwrap();
    }

    /// A set-up step (here AUTH) followed by an unasked reply fails the set-up.
    #[test]
    fn bytes_after_a_set_up_reply_fail_the_set_up() {
        let (server, port) = serve(vec![b"+OK\r\n:1\r\n".to_vec()]);
        let info = redis::IntoConnectionInfo::into_connection_info(format!(
            "redis://:pw@127.0.0.1:{port}/"
        ))
        .unwrap();
        let opened = Wire::open(&info, None, &TlsConfig::default(), Duration::from_secs(5));
        assert!(opened.is_err(), "set up out of step");
        server.join().unwrap();
    }

    /// A TLS peer sending its handshake a byte at a time cannot hold the connection past
    /// the connect timeout (rustls' `complete_io` kept reading while each byte came within
    /// the socket's timeout).
    #[cfg(feature = "tls-rustls")]
    #[test]
    fn a_trickling_tls_handshake_ends_at_the_connect_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut hello = [0u8; 4096];
            let _ = s.read(&mut hello);
            // A handshake record announcing 16 KiB, then a byte every 20 ms for 10 s at
            // most (or until the client hangs up).
            if s.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]).is_err() {
                return;
            }
            for _ in 0..500 {
                std::thread::sleep(Duration::from_millis(20));
                if s.write_all(&[0x02]).is_err() {
                    return;
                }
            }
        });
        let info = crate::wire::connect::ConnectionTarget::connection_info(format!(
            "rediss://127.0.0.1:{port}/"
        ))
        .unwrap();
        let tls = crate::wire::connect::TlsSettings::default();
        let started = Instant::now();
        let opened = Wire::open(
            &info,
            Some(&tls),
            &TlsConfig::default(),
            Duration::from_millis(300),
        );
        let took = started.elapsed();
        let e = opened.err().expect("no handshake");
        assert!(e.is_timeout(), "{e:?}");
        // The bound under test: 300 ms, with a wide margin for a loaded machine.
        assert!(took < Duration::from_secs(3), "took {took:?}");
        server.join().unwrap();
    }
}
