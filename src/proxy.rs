//! A loopback TCP proxy in front of a server, for tests that need replies lost, delayed or
//! connections cut at a moment they choose.
//!
//! ```no_run
//! use redlease_suite::{Proxy, RedisServer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = RedisServer::start()?;
//! let proxy = Proxy::start(server.port())?;
//! let url = proxy.url(); // point the client under test here
//! proxy.drop_next_reply(); // the next reply the server sends is never delivered
//! proxy.blackhole(true); // a partition: nothing passes either way, nothing is queued
//! proxy.blackhole(false);
//! proxy.delay_requests(std::time::Duration::from_millis(500)); // commands arrive late
//! proxy.cut(); // close every open connection (new ones are accepted)
//! # Ok(())
//! # }
//! ```
//!
//! Std threads only: one accepting thread, two per connection. Dropping the proxy closes
//! every connection and joins every thread.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How often idle threads look at the stop flag and the cut counter.
const TICK: Duration = Duration::from_millis(5);

#[derive(Debug, Default)]
struct Control {
    stop: AtomicBool,
    blackhole: AtomicBool,
    /// How many of the next replies from the server to swallow (each the chunk it arrives
    /// in and the rest of the reply that chunk ends in).
    drop_replies: AtomicU32,
    /// Chunks swallowed so far (by `drop_next_reply` or the blackhole).
    dropped: AtomicU64,
    delay_ms: AtomicU64,
    request_delay_ms: AtomicU64,
    /// Chunks being held back by a delay right now.
    held: AtomicU64,
    /// Bumped by `cut`: every connection opened before closes.
    cuts: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A TCP proxy on a free loopback port that forwards to `127.0.0.1:<upstream port>`; see the
/// [module docs](self).
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    control: Arc<Control>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:upstream_port`.
    ///
    /// # Errors
    ///
    /// When the listening socket cannot be set up.
    pub fn start(upstream_port: u16) -> io::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let control = Arc::new(Control::default());
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let c = control.clone();
        let acceptor = thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(&listener, upstream, &c))?;
        Ok(Proxy {
            port,
            control,
            acceptor: Some(acceptor),
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Swallows the next chunk of bytes the server sends on any connection (one reply, when
    /// one command is in flight): the command ran, its reply is lost, the connection stays
    /// open.
    pub fn drop_next_reply(&self) {
        self.control.drop_replies.fetch_add(1, Ordering::SeqCst);
    }

    /// How many chunks were swallowed so far (by [`drop_next_reply`](Self::drop_next_reply)
    /// or the [`blackhole`](Self::blackhole)).
    pub fn dropped(&self) -> u64 {
        self.control.dropped.load(Ordering::SeqCst)
    }

    /// While on, every byte either way is swallowed (not queued): commands do not reach the
    /// server and nothing comes back, as in a network partition. Connections stay open.
    pub fn blackhole(&self, on: bool) {
        self.control.blackhole.store(on, Ordering::SeqCst);
    }

    /// Holds every chunk from the server this long before passing it on (zero: none).
    pub fn delay_replies(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.control.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Holds every chunk from a client this long before passing it on (zero: none): the
    /// command reaches the server late. Each connection is delayed on its own, so a command
    /// sent later on another connection (after the delay is lowered) can overtake it.
    pub fn delay_requests(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.control.request_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// How many chunks are being held back by a delay right now.
    pub fn held(&self) -> u64 {
        self.control.held.load(Ordering::SeqCst)
    }

    /// Closes every connection open now (both sides); later connections are accepted.
    pub fn cut(&self) {
        self.control.cuts.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.control.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let threads = std::mem::take(
            &mut *self
                .control
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, control: &Arc<Control>) {
    while !control.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(e) = open(client, upstream, control) {
                    eprintln!("proxy: cannot forward a connection to {upstream}: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(TICK),
            Err(_) => thread::sleep(TICK),
        }
    }
}

/// Connects `client` to the upstream and starts its two pumps.
fn open(client: TcpStream, upstream: SocketAddr, control: &Arc<Control>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&upstream, Duration::from_secs(2))?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(TICK))?;
    }
    let epoch = control.cuts.load(Ordering::SeqCst);
    let pumps = [
        (client.try_clone()?, server.try_clone()?, false),
        (server, client, true),
    ];
    let mut threads = control
        .threads
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (from, to, replies) in pumps {
        let c = control.clone();
        threads.push(
            thread::Builder::new()
                .name("proxy-pump".into())
                .spawn(move || pump(from, to, replies, epoch, &c))?,
        );
    }
    Ok(())
}

/// Copies `from` to `to` until either side closes, the proxy stops or the connection is cut.
fn pump(mut from: TcpStream, mut to: TcpStream, replies: bool, epoch: u64, control: &Control) {
    let mut buf = vec![0u8; 64 * 1024];
    // A chunk being dropped, and the chunks after it until the reply it ends in is whole:
    // a server may write one reply in several chunks (Redis 6.2 does for arrays), and
    // dropping only the first chunk left the rest in the stream, read by the client as a
    // reply of its own. (The first chunk's length, and the bytes so far.)
    let mut dropping: Option<(usize, Vec<u8>)> = None;
    loop {
        if control.stop.load(Ordering::SeqCst) || control.cuts.load(Ordering::SeqCst) != epoch {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        if control.blackhole.load(Ordering::SeqCst) {
            control.dropped.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        let mut start = 0;
        if replies {
            let take_one = |n: u32| n.checked_sub(1);
            if dropping.is_none()
                && control
                    .drop_replies
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take_one)
                    .is_ok()
            {
                control.dropped.fetch_add(1, Ordering::SeqCst);
                dropping = Some((n, Vec::new()));
            }
            if let Some((first, mut pending)) = dropping.take() {
                let before = pending.len();
                pending.extend_from_slice(&buf[..n]);
                match replies_through(&pending, first) {
                    // Every reply the first chunk began is whole: what follows is passed on.
                    Some(len) => start = len.saturating_sub(before).min(n),
                    None => {
                        dropping = Some((first, pending));
                        continue;
                    }
                }
                if start == n {
                    continue;
                }
            }
        }
        let delay = if replies {
            control.delay_ms.load(Ordering::SeqCst)
        } else {
            control.request_delay_ms.load(Ordering::SeqCst)
        };
        if delay > 0 {
            control.held.fetch_add(1, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(delay));
            control.held.fetch_sub(1, Ordering::SeqCst);
        }
        if to.write_all(&buf[start..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Where the replies that begin in `b`'s first `first` bytes end, or `None` while the last
/// of them is incomplete (bytes that are not RESP: all of `b`).
fn replies_through(b: &[u8], first: usize) -> Option<usize> {
    let mut end = 0;
    while end < first {
        end = resp_end(b, end)?;
    }
    Some(end.min(b.len()))
}

/// Where the RESP value starting at `at` ends, or `None` while it is incomplete.
fn resp_end(b: &[u8], at: usize) -> Option<usize> {
    let kind = *b.get(at)?;
    if !b"+-:$*_#,(!=%~>|".contains(&kind) {
        // Not RESP (a test's own bytes): the chunk is the reply.
        return Some(b.len());
    }
    let line_end = at + 1 + b.get(at + 1..)?.windows(2).position(|w| w == b"\r\n")?;
    let next = line_end + 2;
    let count = || -> Option<i64> { std::str::from_utf8(&b[at + 1..line_end]).ok()?.parse().ok() };
    match kind {
        b'$' | b'=' | b'!' => match count()? {
            n if n < 0 => Some(next),
            n => {
                let end = next + usize::try_from(n).ok()? + 2;
                (end <= b.len()).then_some(end)
            }
        },
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = count()?;
            let items = if matches!(kind, b'%' | b'|') {
                n * 2
            } else {
                n
            };
            let mut end = next;
            for _ in 0..items.max(0) {
                end = resp_end(b, end)?;
            }
            Some(end)
        }
        // Simple strings, errors, integers, doubles, booleans, nulls, big numbers.
        _ => Some(next),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// An echo server on a free port for `connections` connections.
    fn echo(connections: usize) -> (u16, JoinHandle<()>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = thread::spawn(move || {
            let mut pumps = Vec::new();
            for _ in 0..connections {
                let (mut s, _) = listener.accept().unwrap();
                pumps.push(thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }));
            }
            for p in pumps {
                let _ = p.join();
            }
        });
        (port, handle)
    }

    fn connect(proxy: &Proxy) -> TcpStream {
        TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port())).unwrap()
    }

    /// How long a reply that must come back may take (a loaded machine).
    const ANSWERED: Duration = Duration::from_secs(5);
    /// How long to watch for a reply that must not come back.
    const SILENT: Duration = Duration::from_millis(300);

    /// What comes back for `msg` within `limit`, or `None`.
    fn round_trip(s: &mut TcpStream, msg: &[u8], limit: Duration) -> Option<Vec<u8>> {
        s.set_read_timeout(Some(limit)).unwrap();
        s.write_all(msg).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => Some(buf[..n].to_vec()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn forwards_drops_blackholes_delays_and_cuts_on_command() {
        let (port, echo) = echo(2);
        let proxy = Proxy::start(port).unwrap();
        let mut s = connect(&proxy);
        assert_eq!(
            round_trip(&mut s, b"a", ANSWERED).as_deref(),
            Some(&b"a"[..])
        );

        proxy.drop_next_reply();
        assert_eq!(
            round_trip(&mut s, b"b", SILENT),
            None,
            "the reply was dropped"
        );
        assert_eq!(proxy.dropped(), 1);
        assert_eq!(
            round_trip(&mut s, b"c", ANSWERED).as_deref(),
            Some(&b"c"[..])
        );

        proxy.blackhole(true);
        assert_eq!(round_trip(&mut s, b"d", SILENT), None);
        proxy.blackhole(false);
        // Swallowed, not queued: only what is sent now comes back.
        assert_eq!(
            round_trip(&mut s, b"e", ANSWERED).as_deref(),
            Some(&b"e"[..])
        );

        // Held long enough to be seen held on a loaded machine.
        proxy.delay_requests(Duration::from_secs(1));
        s.write_all(b"f").unwrap();
        let watching = std::time::Instant::now();
        while proxy.held() == 0 {
            assert!(
                watching.elapsed() < Duration::from_secs(1),
                "the request was not held back"
            );
            thread::sleep(Duration::from_millis(1));
        }
        let mut buf = [0u8; 8];
        s.set_read_timeout(Some(ANSWERED)).unwrap();
        assert_eq!(
            s.read(&mut buf).unwrap(),
            1,
            "and delivered after the delay"
        );
        proxy.delay_requests(Duration::ZERO);

        proxy.cut();
        let mut buf = [0u8; 8];
        assert!(
            matches!(s.read(&mut buf), Ok(0) | Err(_)),
            "the connection was closed"
        );
        let mut again = connect(&proxy);
        assert_eq!(
            round_trip(&mut again, b"g", ANSWERED).as_deref(),
            Some(&b"g"[..])
        );
        drop(again);
        drop(proxy);
        // Every proxy thread was joined, and every upstream connection closed with it.
        echo.join().unwrap();
    }

    #[test]
    fn dropping_the_proxy_stops_listening() {
        let (port, echo) = echo(0);
        let proxy = Proxy::start(port).unwrap();
        let listening = proxy.port();
        drop(proxy);
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, listening)).is_err());
        echo.join().unwrap();
    }
}
