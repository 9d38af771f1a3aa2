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

    /// A command named `name` with room for `args` arguments after the name (saves the
    /// reallocations of a long command built one argument at a time).
    pub fn with_capacity(name: &str, args: usize) -> Self {
        let mut all = Vec::with_capacity(1 + args);
        all.push(name.as_bytes().to_vec());
        Command {
            node: NodeId::PRIMARY,
            args: all,
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

    /// Whether the command is `name` (ASCII case ignored).
    pub fn is(&self, name: &str) -> bool {
        self.args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(name.as_bytes()))
    }

    /// The command name (`SET`, `EVALSHA`, ...), lossily decoded.
    pub fn name(&self) -> String {
        self.args
            .first()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .unwrap_or_default()
    }
}

/// Shows the command name, the keys and plain numbers and keywords in full, and every other
/// argument (owner tokens, payloads, scripts) as a short prefix with its length: enough to
/// tell calls apart in a log, never enough to forge a release.
impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command[{}]", self.node.0)?;
        let name = self.name().to_ascii_uppercase();
        // Shown in full besides the name: for EVAL/EVALSHA the keys (after the script and
        // the key count), for other commands the first argument (the key or channel).
        let keys = if matches!(name.as_str(), "EVAL" | "EVALSHA") {
            let count = self
                .args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            3..count.saturating_add(3)
        } else {
            1..2
        };
        for (i, a) in self.args.iter().enumerate() {
            let s = String::from_utf8_lossy(a);
            let plain = i == 0 || keys.contains(&i) || is_number_or_keyword(a);
            if plain && s.len() <= 48 {
                write!(f, " {s:?}")?;
            } else {
                // A prefix only of long values (a quarter at most), so a short secret shows
                // nothing but its length.
                let shown = if a.len() >= 24 { 6 } else { 0 };
                let cut = s.char_indices().nth(shown).map_or(s.len(), |(i, _)| i);
                write!(f, " {:?}..({} bytes)", &s[..cut], a.len())?;
            }
        }
        Ok(())
    }
}

/// A decimal number (ttls, counts) or a short upper-case keyword (`NX`, `PX`): nothing secret.
fn is_number_or_keyword(a: &[u8]) -> bool {
    let number = {
        let digits = a.strip_prefix(b"-").unwrap_or(a);
        !digits.is_empty() && digits.len() <= 20 && digits.iter().all(u8::is_ascii_digit)
    };
    let keyword = !a.is_empty() && a.len() <= 8 && a.iter().all(u8::is_ascii_uppercase);
    number || keyword
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

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn debug_hides_owner_tokens_but_shows_keys_and_numbers() {
        let set = Command::new("SET")
            .arg("redlease:{a}:lock")
            .arg(TOKEN)
            .arg("NX")
            .arg("PX")
            .int_arg(30_000);
        let shown = format!("{set:?}");
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(shown.contains("\"012345\"..(32 bytes)"), "{shown}");
        assert!(
            shown.contains("redlease:{a}:lock") && shown.contains("30000"),
            "{shown}"
        );
        assert!(shown.contains("\"NX\" \"PX\""), "{shown}");

        let eval = Command::new("EVALSHA")
            .arg("e0e1f9fabfc9d4800c877a703b823ac0578ff831")
            .int_arg(2)
            .arg("redlease:{a}:lock")
            .arg("redlease:{a}:fence")
            .arg(TOKEN)
            .int_arg(100);
        let shown = format!("{eval:?}");
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(
            shown.contains("redlease:{a}:fence") && shown.contains("\"100\""),
            "{shown}"
        );
    }

    #[test]
    fn debug_shows_only_the_length_of_short_secrets() {
        let auth = Command::new("AUTH").arg("app").arg("hunter2secret");
        let shown = format!("{auth:?}");
        assert!(!shown.contains("hunter"), "{shown}");
        assert!(shown.contains("(13 bytes)"), "{shown}");
    }
}
