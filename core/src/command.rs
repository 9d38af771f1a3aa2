//! Commands a machine asks its driver to send, and the requests that carry them.

use std::fmt;

/// Which Redis node a command is for.
///
/// Single-node protocols use [`NodeId::PRIMARY`]; multi-node protocols (RedLock) number
/// their independent masters from zero in the order the caller listed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The only node of a single-node deployment.
    pub const PRIMARY: NodeId = NodeId(0);
}

/// Identifies one request of a machine; its reply must come back with the same id.
///
/// Ids increase with every request a machine makes, so a reply to an earlier request
/// (one the machine has given up on) is recognised as stale and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// One Redis command: its arguments as bytes (the first is the command name) and the node it targets.
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    node: NodeId,
    args: Vec<Vec<u8>>,
}

impl Command {
    /// A command named `name` for the primary node, with no arguments yet.
    pub fn new(name: &str) -> Self {
        Command {
            node: NodeId::PRIMARY,
            args: vec![name.as_bytes().to_vec()],
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        self.args.push(arg.as_ref().to_vec());
        self
    }

    /// Appends an integer argument in its decimal form.
    pub fn int_arg(self, n: impl Into<i128>) -> Self {
        let n: i128 = n.into();
        self.arg(n.to_string())
    }

    /// Targets `node` instead of the primary node.
    pub fn on(mut self, node: NodeId) -> Self {
        self.node = node;
        self
    }

    /// The node this command is for.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// All arguments, the command name first.
    pub fn args(&self) -> &[Vec<u8>] {
        &self.args
    }

    /// The command name (`SET`, `EVALSHA`, ...), lossily decoded.
    pub fn name(&self) -> String {
        self.args
            .first()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .unwrap_or_default()
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command[{}]", self.node.0)?;
        for a in &self.args {
            // Scripts are long: show a prefix only.
            let s = String::from_utf8_lossy(a);
            if s.len() > 48 {
                let cut = s.char_indices().nth(40).map_or(s.len(), |(i, _)| i);
                write!(f, " {:?}..", &s[..cut])?;
            } else {
                write!(f, " {s:?}")?;
            }
        }
        Ok(())
    }
}

/// A command with the id its reply must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The id to answer with.
    pub id: RequestId,
    /// What to send.
    pub command: Command,
}

/// Hands out increasing [`RequestId`]s.
#[derive(Debug, Default, Clone)]
pub(crate) struct RequestIds {
    next: u64,
}

impl RequestIds {
    pub(crate) fn next(&mut self) -> RequestId {
        self.next += 1;
        RequestId(self.next)
    }
}
