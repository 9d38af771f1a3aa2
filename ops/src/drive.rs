//! Runs many of the core's machines as one, so that every machine's batch goes out in the
//! same pipeline: reading 50 queues costs one round trip, not 50. The combined machine runs
//! on the library's own client ([`redlease::Client::run`]): its pool, TLS, passwords and
//! timeouts, nothing of the tool's own.
//!
//! The machines are the library's (`redlease::core`): the tool knows no script and builds
//! no key of a queue or a semaphore itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlease::core::{
    Batch, Command, Error, Protocol, Reply, Request, RequestId, Response, Step, TransportFailure,
    Wait,
};

/// How many batches one combined run may send: a machine's first `EVALSHA` may come back
/// `NOSCRIPT` and be sent again as `EVAL`, so two are the norm at the first refresh.
const MAX_ROUNDS: u64 = 4;

/// The library's client, counting the batches (round trips) sent through it.
pub struct Conn {
    client: redlease::Client,
    timeout: Duration,
    /// Batches sent so far.
    pub round_trips: u64,
}

impl Conn {
    /// A client of `url` for keys under `prefix`, `timeout` for every step; checked (one
    /// `PING`) so that an unreachable server or a refused password is known now.
    pub fn open(url: &str, prefix: &str, timeout: Duration) -> Result<Conn, String> {
        let client = redlease::Client::builder(url)
            .key_prefix(prefix)
            .client_name("redlease-ops")
            .pool_size(2)
            .connect_timeout(timeout)
            .io_timeout(timeout)
            .op_timeout(timeout)
            .build_and_check()
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            client,
            timeout,
            round_trips: 0,
        })
    }

    /// The client, for the library's own calls (the actions).
    pub fn client(&self) -> &redlease::Client {
        &self.client
    }

    /// Sends `commands` in one pipeline; a reply (an error reply included) for each.
    pub fn commands(&mut self, commands: Vec<Command>) -> Result<Vec<Reply>, String> {
        let machine = Raw {
            commands: Some(commands),
            replies: Vec::new(),
            deadline: Instant::now() + self.timeout,
        };
        self.round_trips += 1;
        self.client.run(machine).map_err(|e| e.to_string())
    }

    /// Runs every machine to its end, all of them in the same batches; one result per
    /// machine, in order. `Err` only when the run as a whole failed (Redis unreachable).
    pub fn drive_all<P: Protocol>(
        &mut self,
        machines: Vec<P>,
    ) -> Result<Vec<Result<P::Output, String>>, String> {
        if machines.is_empty() {
            return Ok(Vec::new());
        }
        let machine = Batched {
            out: machines.iter().map(|_| None).collect(),
            machines,
            routes: HashMap::new(),
            next: 0,
            rounds: 0,
            deadline: Instant::now() + self.timeout,
        };
        let (results, rounds) = self.client.run(machine).map_err(|e| e.to_string())?;
        self.round_trips += rounds;
        Ok(results
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect())
    }
}

/// Sends a list of commands once and yields their replies.
struct Raw {
    commands: Option<Vec<Command>>,
    replies: Vec<Option<Result<Reply, TransportFailure>>>,
    deadline: Instant,
}

impl Protocol for Raw {
    type Output = Vec<Reply>;

    fn poll(&mut self, _: Instant) -> Step<Vec<Reply>> {
        if let Some(commands) = self.commands.take() {
            self.replies = commands.iter().map(|_| None).collect();
            let requests = commands
                .into_iter()
                .enumerate()
                .map(|(i, command)| Request {
                    id: RequestId(i as u64),
                    command,
                })
                .collect();
            return Step::Send(Batch::new(requests, self.deadline));
        }
        if self.replies.iter().any(Option::is_none) {
            return Step::Wait(Wait::until(self.deadline));
        }
        let mut out = Vec::with_capacity(self.replies.len());
        for reply in self.replies.drain(..).flatten() {
            match reply {
                Ok(reply) => out.push(reply),
                Err(last) => return Step::Done(Err(Error::Unavailable { attempts: 1, last })),
            }
        }
        Step::Done(Ok(out))
    }

    fn handle(&mut self, response: Response, _: Instant) {
        if let Some(slot) = self.replies.get_mut(response.id.0 as usize) {
            *slot = Some(response.result);
        }
    }
}

/// Many machines run as one: each poll gathers every machine's batch into one.
struct Batched<P: Protocol> {
    machines: Vec<P>,
    out: Vec<Option<Result<P::Output, Error>>>,
    /// Our request id -> (machine, its request id).
    routes: HashMap<u64, (usize, RequestId)>,
    next: u64,
    rounds: u64,
    deadline: Instant,
}

impl<P: Protocol> Protocol for Batched<P> {
    /// Each machine's result, and how many batches were sent.
    type Output = (Vec<Result<P::Output, Error>>, u64);

    fn poll(&mut self, now: Instant) -> Step<Self::Output> {
        if !self.routes.is_empty() {
            return Step::Wait(Wait::until(self.deadline));
        }
        let mut requests = Vec::new();
        for (i, machine) in self.machines.iter_mut().enumerate() {
            if self.out[i].is_some() {
                continue;
            }
            match machine.poll(now) {
                Step::Send(batch) => {
                    for request in batch.requests {
                        self.next += 1;
                        self.routes.insert(self.next, (i, request.id));
                        requests.push(Request {
                            id: RequestId(self.next),
                            command: request.command,
                        });
                    }
                }
                Step::Done(result) => self.out[i] = Some(result),
                // A read never waits; one that asks to is reported, not waited for.
                Step::Wait(_) => self.out[i] = Some(Err(Error::Driver("a read asked to wait"))),
            }
        }
        if !requests.is_empty() && self.rounds < MAX_ROUNDS {
            self.rounds += 1;
            return Step::Send(Batch::new(requests, self.deadline));
        }
        self.routes.clear();
        let out = self
            .out
            .iter_mut()
            .map(|o| {
                o.take()
                    .unwrap_or(Err(Error::Driver("no answer after several rounds")))
            })
            .collect();
        Step::Done(Ok((out, self.rounds)))
    }

    fn handle(&mut self, response: Response, now: Instant) {
        if let Some((i, id)) = self.routes.remove(&response.id.0) {
            let response = Response {
                id,
                result: response.result,
            };
            self.machines[i].handle(response, now);
        }
    }
}
