//! A loopback RESP listener for the in-process server: [`MemoryServer::listen`] lets any
//! Redis client (the `redis` crate, a `Client::open` of redlease itself, `redis-cli`)
//! talk to it over TCP, so an application's own Redis calls run on the same server as its
//! locks and queues in a test.
//!
//! One thread accepts, one thread serves each connection (RESP2: arrays of bulk strings
//! in, replies out). They hold only a weak reference to the server: dropping the last
//! [`MemoryServer`] handle closes the listening socket and every connection.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use redlease_core::Reply;

use super::{MemoryServer, Shared};

/// What the server keeps to stop one listener when it is dropped.
pub(crate) struct Stop {
    addr: SocketAddr,
    stopped: Arc<AtomicBool>,
    connections: Arc<Mutex<Connections>>,
}

/// The open connections (a copy of each stream, to shut it down on stop), by number; a
/// connection's serving thread removes its own when it ends.
type Connections = HashMap<u64, TcpStream>;

impl Stop {
    /// Closes the listening socket (woken by a connection of our own) and every connection.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        let connections =
            std::mem::take(&mut *self.connections.lock().unwrap_or_else(|p| p.into_inner()));
        for c in connections.into_values() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// Starts listening on a free loopback port; returns its address.
pub(crate) fn listen(server: &MemoryServer) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    let stopped = Arc::new(AtomicBool::new(false));
    let connections = Arc::new(Mutex::new(Connections::new()));
    let weak = Arc::downgrade(&server.shared);
    {
        let (stopped, connections) = (stopped.clone(), connections.clone());
        std::thread::Builder::new()
            .name("redlease-memory-listen".into())
            .spawn(move || accept(&listener, &weak, &stopped, &connections))?;
    }
    server
        .shared
        .listeners
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Stop {
            addr,
            stopped,
            connections,
        });
    Ok(addr)
}

fn accept(
    listener: &TcpListener,
    server: &Weak<Shared>,
    stopped: &AtomicBool,
    connections: &Arc<Mutex<Connections>>,
) {
    let mut next = 0u64;
    for stream in listener.incoming() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        next += 1;
        let id = next;
        if let Ok(copy) = stream.try_clone() {
            connections
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, copy);
        }
        // Checked after the copy is in the table: a stop that took the table before this
        // insert set `stopped` before it locked, so it is seen here (the mutex orders them),
        // and this connection is shut down instead of outliving the server.
        if stopped.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        let server = server.clone();
        let table = Arc::clone(connections);
        let spawned = std::thread::Builder::new()
            .name("redlease-memory-conn".into())
            .spawn(move || {
                serve(stream, &server);
                // Its copy closes with it: a closed connection holds no descriptor until
                // the server stops.
                table.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            });
        if spawned.is_err() {
            connections
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            continue;
        }
    }
}

/// Serves one connection until the peer closes it, sends a malformed frame, or the server
/// is dropped.
fn serve(mut stream: TcpStream, server: &Weak<Shared>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        loop {
            let (frame, used) = match crate::wire::resp::parse(&buf) {
                Ok(Some(parsed)) => parsed,
                Ok(None) => break,
                Err(_) => return,
            };
            buf.drain(..used);
            let Some(server) = server.upgrade() else {
                return;
            };
            let server = MemoryServer { shared: server };
            let Some(reply) = answer(&server, frame) else {
                // A fault swallowed the reply, or QUIT: the connection ends here.
                let _ = stream.shutdown(Shutdown::Both);
                return;
            };
            let mut out = Vec::new();
            encode(&mut out, &reply);
            if stream.write_all(&out).is_err() {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The reply to one request frame; `None` closes the connection.
fn answer(server: &MemoryServer, frame: Reply) -> Option<Reply> {
    let Reply::Array(items) = frame else {
        return Some(super::err(
            "ERR Protocol error: expected an array of bulk strings",
        ));
    };
    let args: Vec<Vec<u8>> = items
        .into_iter()
        .map(|i| match i {
            Reply::Bulk(b) => b,
            Reply::Status(s) => s.into_bytes(),
            Reply::Int(n) => n.to_string().into_bytes(),
            _ => Vec::new(),
        })
        .collect();
    let name = args
        .first()
        .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
        .unwrap_or_default();
    let ok = || Some(Reply::Status("OK".into()));
    match name.as_str() {
        // Connection set-up that clients send: names and library info are accepted and
        // forgotten; there is one database.
        "CLIENT" => ok(),
        "SELECT" if args.get(1).is_some_and(|db| db.as_slice() == b"0") => ok(),
        "SELECT" => Some(super::err("ERR DB index is out of range")),
        "QUIT" => None,
        "INFO" => Some(Reply::Bulk(
            b"# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nredlease_memory_server:1\r\n"
                .to_vec(),
        )),
        _ => server.call(&args).ok(),
    }
}

/// Writes `reply` in RESP2.
fn encode(out: &mut Vec<u8>, reply: &Reply) {
    match reply {
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Reply::Bulk(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Status(s) => {
            out.push(b'+');
            out.extend_from_slice(one_line(s).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for i in items {
                encode(out, i);
            }
        }
        Reply::Error(e) => {
            out.push(b'-');
            let line = if e.message.is_empty() {
                e.code.clone()
            } else {
                format!("{} {}", e.code, e.message)
            };
            out.extend_from_slice(one_line(&line).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A status or error line cannot hold a line break.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}
