//! Lua scripts as constants with their SHA-1, and the EVALSHA call that falls back to EVAL
//! when the server does not know the script (after a restart, a failover or `SCRIPT FLUSH`).

use crate::command::{Command, NodeId, Request, RequestId, RequestIds};
use crate::reply::{Input, Reply, TransportFailure};

/// A Lua script and its SHA-1 (hex, lower case).
///
/// The digests are written out as constants so that the core needs no hashing code; a unit
/// test recomputes every digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script {
    /// A short name for diagnostics.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    /// SHA-1 of `source`, as Redis computes it for `EVALSHA`.
    pub sha1: &'static str,
}

/// One invocation of a script: keys and arguments, on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptCall {
    script: &'static Script,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
    node: NodeId,
}

impl ScriptCall {
    /// A call of `script` on the primary node.
    pub fn new(script: &'static Script) -> Self {
        ScriptCall {
            script,
            keys: Vec::new(),
            args: Vec::new(),
            node: NodeId::PRIMARY,
        }
    }

    /// Adds a key.
    pub fn key(mut self, key: &str) -> Self {
        self.keys.push(key.to_owned());
        self
    }

    /// Adds keys, in order.
    pub fn keys(mut self, keys: &[&str]) -> Self {
        self.keys.extend(keys.iter().map(|k| (*k).to_owned()));
        self
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        self.args.push(arg.as_ref().to_vec());
        self
    }

    /// Inserts an argument before the others (binds a value known only later, such as the
    /// id of a job taken from a queue).
    pub fn prepend_arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        self.args.insert(0, arg.as_ref().to_vec());
        self
    }

    /// Replaces argument `index` (0: the first after the keys), if there is one.
    pub fn with_arg(mut self, index: usize, arg: impl AsRef<[u8]>) -> Self {
        if let Some(a) = self.args.get_mut(index) {
            *a = arg.as_ref().to_vec();
        }
        self
    }

    /// Replaces the last argument.
    pub fn with_last_arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        if let Some(last) = self.args.last_mut() {
            *last = arg.as_ref().to_vec();
        }
        self
    }

    /// Targets another node.
    pub fn on(mut self, node: NodeId) -> Self {
        self.node = node;
        self
    }

    /// The script called.
    pub fn script(&self) -> &'static Script {
        self.script
    }

    fn command(&self, verb: &str, body: &str) -> Command {
        let mut cmd = Command::new(verb)
            .arg(body)
            .arg(self.keys.len().to_string())
            .on(self.node);
        for k in &self.keys {
            cmd = cmd.arg(k);
        }
        for a in &self.args {
            cmd = cmd.arg(a);
        }
        cmd
    }

    /// `EVALSHA sha1 numkeys keys... args...`
    pub fn evalsha(&self) -> Command {
        self.command("EVALSHA", self.script.sha1)
    }

    /// `EVAL source numkeys keys... args...`
    pub fn eval(&self) -> Command {
        self.command("EVAL", self.script.source)
    }
}

/// Where one script exchange stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    Ready { eval: bool },
    Sent { id: RequestId, eval: bool },
    Answered(Result<Reply, TransportFailure>),
}

/// What an exchange wants next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Send this request.
    Send(Request),
    /// The request is in flight.
    Awaiting,
    /// The answer (never a NOSCRIPT error: that is handled here).
    Answered(Result<Reply, TransportFailure>),
    /// Nothing started.
    Idle,
}

/// Runs one script call to its answer: sends EVALSHA, and on a `NOSCRIPT` error reply
/// sends the same call once as EVAL (which also loads the script for later calls).
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    call: ScriptCall,
    state: State,
}

impl Exchange {
    pub(crate) fn new(call: ScriptCall) -> Self {
        Exchange {
            call,
            state: State::Idle,
        }
    }

    /// Starts (or restarts, for a retry) the call.
    pub(crate) fn start(&mut self) {
        self.state = State::Ready { eval: false };
    }

    pub(crate) fn poll(&mut self, ids: &mut RequestIds) -> Progress {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => Progress::Idle,
            State::Ready { eval } => {
                let id = ids.next();
                let command = if eval {
                    self.call.eval()
                } else {
                    self.call.evalsha()
                };
                self.state = State::Sent { id, eval };
                Progress::Send(Request { id, command })
            }
            sent @ State::Sent { .. } => {
                self.state = sent;
                Progress::Awaiting
            }
            State::Answered(result) => Progress::Answered(result),
        }
    }

    /// Puts back an answer taken by [`poll`](Self::poll) (for a caller that polls several
    /// exchanges and must wait for the others).
    pub(crate) fn restore(&mut self, answer: Result<Reply, TransportFailure>) {
        if self.state == State::Idle {
            self.state = State::Answered(answer);
        }
    }

    /// Takes the outcome of a request; returns whether it was the one in flight.
    pub(crate) fn handle(&mut self, input: Input) -> bool {
        let State::Sent { id, eval } = self.state else {
            return false;
        };
        if input.id != id {
            return false;
        }
        self.state = match input.result {
            Ok(Reply::Error(e)) if e.is("NOSCRIPT") && !eval => State::Ready { eval: true },
            other => State::Answered(other),
        };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::ErrorReply;

    static ECHO: Script = Script {
        name: "echo",
        source: "return ARGV[1]",
        sha1: "0000000000000000000000000000000000000000",
    };

    #[test]
    fn noscript_is_answered_by_one_eval() {
        let mut ids = RequestIds::default();
        let mut ex = Exchange::new(ScriptCall::new(&ECHO).key("k").arg("v"));
        assert_eq!(ex.poll(&mut ids), Progress::Idle);
        ex.start();
        let Progress::Send(first) = ex.poll(&mut ids) else {
            panic!("expected a request")
        };
        assert_eq!(first.command.name(), "EVALSHA");
        assert_eq!(
            first.command.args()[1..],
            [
                b"0000000000000000000000000000000000000000".to_vec(),
                b"1".to_vec(),
                b"k".to_vec(),
                b"v".to_vec()
            ]
        );
        assert_eq!(ex.poll(&mut ids), Progress::Awaiting);
        assert!(ex.handle(Input::reply(
            first.id,
            Reply::Error(ErrorReply::new("NOSCRIPT", "No matching script."))
        )));
        let Progress::Send(second) = ex.poll(&mut ids) else {
            panic!("expected the EVAL")
        };
        assert_eq!(second.command.name(), "EVAL");
        assert_eq!(second.command.args()[1], b"return ARGV[1]".to_vec());
        // A late duplicate of the first reply is ignored.
        assert!(!ex.handle(Input::reply(first.id, Reply::Nil)));
        // A NOSCRIPT to the EVAL itself is an answer, not a loop.
        assert!(ex.handle(Input::reply(
            second.id,
            Reply::Error(ErrorReply::new("NOSCRIPT", "again"))
        )));
        assert!(matches!(
            ex.poll(&mut ids),
            Progress::Answered(Ok(Reply::Error(_)))
        ));
        assert_eq!(ex.poll(&mut ids), Progress::Idle);
    }
}
