//! Drives many of the core's machines at once over one connection: every machine's batch
//! goes into one pipeline, so reading 50 queues costs one round trip, not 50.
//!
//! The machines are the library's own (`redlease::core`): the tool knows no script and
//! builds no key of a queue or a semaphore itself.

use std::time::{Duration, Instant};

use redlease::adapter;
use redlease::core::{Protocol, Step};

/// How many pipelines one call may send: a machine's first `EVALSHA` may come back
/// `NOSCRIPT` and be sent again as `EVAL`, so two are the norm at the first refresh.
const MAX_ROUNDS: usize = 4;

/// A plain connection to one server, counting its round trips.
pub struct Conn {
    conn: redis::Connection,
    /// Pipelines (and single commands) sent so far.
    pub round_trips: u64,
}

impl Conn {
    /// Connects to `url` with `timeout` for the connection and every reply.
    pub fn open(url: &str, timeout: Duration) -> Result<Conn, String> {
        let client = redis::Client::open(url).map_err(|e| format!("bad URL: {e}"))?;
        let conn = client
            .get_connection_with_timeout(timeout)
            .map_err(|e| format!("cannot connect: {e}"))?;
        conn.set_read_timeout(Some(timeout))
            .and_then(|()| conn.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("cannot set timeouts: {e}"))?;
        Ok(Conn {
            conn,
            round_trips: 0,
        })
    }

    /// Sends `pipe` (errors of single commands come back as `Value::ServerError`).
    pub fn pipeline(&mut self, pipe: &mut redis::Pipeline) -> Result<Vec<redis::Value>, String> {
        pipe.ignore_errors();
        self.round_trips += 1;
        pipe.query::<Vec<redis::Value>>(&mut self.conn)
            .map_err(|e| format!("Redis: {e}"))
    }

    /// Sends one command.
    pub fn command(&mut self, cmd: &redis::Cmd) -> Result<redis::Value, String> {
        self.round_trips += 1;
        cmd.query::<redis::Value>(&mut self.conn)
            .map_err(|e| format!("Redis: {e}"))
    }

    /// Runs every machine to its end, all of them in the same pipelines; one result per
    /// machine, in order. `Err` only when the connection failed.
    pub fn drive_all<P: Protocol>(
        &mut self,
        mut machines: Vec<P>,
    ) -> Result<Vec<Result<P::Output, String>>, String> {
        let mut out: Vec<Option<Result<P::Output, String>>> =
            machines.iter().map(|_| None).collect();
        for _ in 0..MAX_ROUNDS {
            let now = Instant::now();
            let mut pipe = redis::pipe();
            let mut sent = Vec::new();
            for (i, machine) in machines.iter_mut().enumerate() {
                if out[i].is_some() {
                    continue;
                }
                match machine.poll(now) {
                    Step::Send(batch) => {
                        for request in batch.requests {
                            pipe.add_command(adapter::command(&request.command));
                            sent.push((i, request.id));
                        }
                    }
                    Step::Done(result) => out[i] = Some(result.map_err(|e| e.to_string())),
                    // A read never waits; one that asks to is reported, not waited for.
                    Step::Wait(_) => out[i] = Some(Err("the read asked to wait".to_owned())),
                }
            }
            if sent.is_empty() {
                break;
            }
            let values = self.pipeline(&mut pipe)?;
            let now = Instant::now();
            for ((i, id), value) in sent.into_iter().zip(values) {
                machines[i].handle(adapter::response(id, Ok(value)), now);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err("no answer after several rounds".to_owned())))
            .collect())
    }
}
