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
///
/// The arguments live in one buffer, each already framed as a RESP bulk string
/// (`$<len>\r\n<bytes>\r\n`), so building a command costs one allocation however many
/// arguments it has, and a driver sends it with one copy: the `*<n>\r\n` array header, then
/// [`framed`](Command::framed).
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    node: NodeId,
    /// Each argument as a RESP bulk string, one after another.
    bytes: Vec<u8>,
    /// How many arguments `bytes` holds.
    count: usize,
}

/// The bytes a RESP bulk string adds to an argument shorter than 1,000 bytes
/// (`$`, three digits, two CRLFs): the room reserved per argument.
const FRAME: usize = 8;

/// Appends `arg` to `out` as a RESP bulk string: `$<len>\r\n<bytes>\r\n`.
pub(crate) fn frame(out: &mut Vec<u8>, arg: &[u8]) {
    // The common lengths, below 100, in one store; the casts take values below 10.
    match arg.len() {
        n @ 0..10 => out.extend_from_slice(&[b'$', b'0' + n as u8, b'\r', b'\n']),
        n @ 10..100 => out.extend_from_slice(&[
            b'$',
            b'0' + (n / 10) as u8,
            b'0' + (n % 10) as u8,
            b'\r',
            b'\n',
        ]),
        n => {
            let mut buf = [0u8; 40];
            out.push(b'$');
            out.extend_from_slice(decimal(n as i128, &mut buf));
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// The first bulk string framed at the start of `bytes` (as [`frame`] writes it): its
/// value and the bytes after it; `None` if `bytes` does not start with one.
pub(crate) fn unframe(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = bytes.strip_prefix(b"$")?;
    let digits = rest.iter().position(|&b| b == b'\r')?;
    let mut len = 0usize;
    for &d in &rest[..digits] {
        if !d.is_ascii_digit() {
            return None;
        }
        len = len.checked_mul(10)?.checked_add(usize::from(d - b'0'))?;
    }
    let rest = rest.get(digits + 2..)?;
    let (arg, rest) = rest.split_at_checked(len)?;
    Some((arg, rest.get(2..)?))
}

impl Command {
    /// A command named `name` for the primary node, with no arguments yet.
    pub fn new(name: &str) -> Self {
        Self::with_capacity(name, 4)
    }

    /// A command named `name` with room for `args` arguments after the name (saves the
    /// reallocations of a long command built one argument at a time).
    pub fn with_capacity(name: &str, args: usize) -> Self {
        Self::with_bytes(name, args, args * 24)
    }

    /// A command named `name` with room for `args` arguments of `bytes` bytes in all
    /// (framing not included).
    pub(crate) fn with_bytes(name: &str, args: usize, bytes: usize) -> Self {
        let mut cmd = Command {
            node: NodeId::PRIMARY,
            bytes: Vec::with_capacity(FRAME * (1 + args) + name.len() + bytes),
            count: 0,
        };
        cmd.push(name.as_bytes());
        cmd
    }

    fn push(&mut self, arg: &[u8]) {
        frame(&mut self.bytes, arg);
        self.count += 1;
    }

    /// Appends `count` arguments already framed by [`frame`] (a run of a script call's
    /// shared items), in one copy.
    pub(crate) fn push_framed(&mut self, framed: &[u8], count: usize) {
        self.bytes.extend_from_slice(framed);
        self.count += count;
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        self.push(arg.as_ref());
        self
    }

    /// Appends an integer argument in its decimal form.
    pub fn int_arg(mut self, n: impl Into<i128>) -> Self {
        let mut buf = [0u8; 40];
        self.push(decimal(n.into(), &mut buf));
        self
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
    pub fn args(&self) -> Args<'_> {
        Args {
            rest: &self.bytes,
            count: self.count,
        }
    }

    /// The arguments as RESP bulk strings, one after another: on the wire, the command is
    /// `*<n>\r\n` (n = `args().len()`) followed by these bytes.
    pub fn framed(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the command is `name` (ASCII case ignored).
    pub fn is(&self, name: &str) -> bool {
        self.args()
            .next()
            .is_some_and(|a| a.eq_ignore_ascii_case(name.as_bytes()))
    }

    /// The command name (`SET`, `EVALSHA`, ...), lossily decoded.
    pub fn name(&self) -> String {
        self.args()
            .next()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .unwrap_or_default()
    }
}

/// `n` in decimal, written at the end of `buf` (40 bytes hold every `i128`).
fn decimal(n: i128, buf: &mut [u8; 40]) -> &[u8] {
    let mut v = n.unsigned_abs();
    let mut at = buf.len();
    // 128-bit division is a library call per digit: the usual numbers (counts, ttls,
    // lengths) take the 64-bit loop.
    if let Ok(mut small) = u64::try_from(v) {
        loop {
            at -= 1;
            buf[at] = b'0' + (small % 10) as u8;
            small /= 10;
            if small == 0 {
                break;
            }
        }
        v = 0;
    }
    while v != 0 || at == buf.len() {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

/// The arguments of a [`Command`], in order, the command name first: an iterator of
/// `&[u8]` that knows its length, and can be indexed (`args[i]`, by walking the buffer).
#[derive(Clone, Copy)]
pub struct Args<'a> {
    rest: &'a [u8],
    count: usize,
}

impl<'a> Args<'a> {
    /// The arguments left.
    pub fn iter(&self) -> Args<'a> {
        *self
    }

    /// Argument `i` of those left, if there is one.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        self.iter().nth(i)
    }

    /// The arguments left, each copied.
    pub fn to_vec(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.count == 0 {
            return None;
        }
        let (arg, rest) = unframe(self.rest)?;
        self.rest = rest;
        self.count -= 1;
        Some(arg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.count, Some(self.count))
    }
}

impl ExactSizeIterator for Args<'_> {}

impl std::ops::Index<usize> for Args<'_> {
    type Output = [u8];

    /// Argument `i`; panics when there is none, as a slice does (use
    /// [`get`](Args::get) for a checked look-up).
    #[allow(clippy::panic)] // The contract of `Index`, as for slices.
    fn index(&self, i: usize) -> &[u8] {
        match self.get(i) {
            Some(arg) => arg,
            None => panic!("argument {i} of a command with {} arguments", self.count),
        }
    }
}

impl fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
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
                .args()
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            3..count.saturating_add(3)
        } else {
            1..2
        };
        for (i, a) in self.args().enumerate() {
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

    #[test]
    fn arguments_come_back_in_order_with_their_count() {
        let cmd = Command::new("SET")
            .arg("k")
            .arg(b"\x00\xff bin")
            .arg("")
            .int_arg(0)
            .int_arg(-7)
            .int_arg(i128::MIN)
            .int_arg(u64::MAX);
        let args = cmd.args();
        assert_eq!(args.len(), 8);
        let all: Vec<&[u8]> = args.collect();
        let expected: [&[u8]; 8] = [
            b"SET",
            b"k",
            b"\x00\xff bin",
            b"",
            b"0",
            b"-7",
            b"-170141183460469231731687303715884105728",
            b"18446744073709551615",
        ];
        assert_eq!(all, expected);
        // As the transport reads them: each as bytes, and the count up front.
        let mut n = 0;
        for a in cmd.args() {
            #[allow(clippy::useless_asref)] // The transport's own words: it must compile.
            let a: &[u8] = a.as_ref();
            assert_eq!(a, expected[n]);
            n += 1;
        }
        assert_eq!(n, cmd.args().len());
        assert_eq!(&cmd.args()[6], expected[6]);
        assert_eq!(cmd.args().get(8), None);
        assert!(cmd.is("set") && !cmd.is("SETNX"));
        assert_eq!(cmd.args().skip(7).len(), 1);
    }

    #[test]
    fn arguments_are_kept_framed_as_resp_bulk_strings() {
        let long = vec![b'x'; 1_234];
        let cmd = Command::new("SET")
            .arg("k")
            .arg(b"a\r\n$3\r\n")
            .arg("")
            .arg([b'y'; 42])
            .arg(&long)
            .int_arg(-7);
        let mut expected =
            b"$3\r\nSET\r\n$1\r\nk\r\n$7\r\na\r\n$3\r\n\r\n$0\r\n\r\n$42\r\n".to_vec();
        expected.extend([b'y'; 42]);
        expected.extend(b"\r\n$1234\r\n");
        expected.extend(&long);
        expected.extend(b"\r\n$2\r\n-7\r\n");
        assert_eq!(cmd.framed(), expected.as_slice());
        // Read back through the framing: values with CR, LF and `$` inside, and long ones.
        let args: Vec<&[u8]> = cmd.args().collect();
        let want: [&[u8]; 7] = [b"SET", b"k", b"a\r\n$3\r\n", b"", &[b'y'; 42], &long, b"-7"];
        assert_eq!(args, want);
        // A framed run copied into another command counts its arguments.
        let mut other = Command::new("EVALSHA");
        let run = &cmd.framed()[b"$3\r\nSET\r\n".len()..];
        other.push_framed(run, 6);
        assert_eq!(other.args().skip(1).collect::<Vec<_>>(), want[1..]);
        assert_eq!(unframe(b"$5\r\nab"), None, "a cut value is no argument");
        assert_eq!(unframe(b"$x\r\n\r\n"), None);
    }
}
