//! Helpers shared by the integration tests. They panic on failure, as test code does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::RedisServer;

/// A throwaway redis-server; fails the test loudly if none can be started (the message says
/// how to install redis-server).
pub fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

/// A plain `redis` connection to `server`, for setting up and inspecting keys.
pub fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

/// A redlease client of `server` with short timeouts: 300 ms to connect, `io_timeout` per
/// reply, 1 s per release/extend/inspect.
pub fn client(server: &RedisServer, io_timeout: Duration) -> redlease::Client {
    redlease::Client::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(io_timeout)
        .op_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// Polls `cond` every 2 ms until it holds; fails the test after `limit`. For waiting on a
/// condition (a key expiring, a waiter joining a line), never as a blind sleep.
pub fn await_condition(limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
