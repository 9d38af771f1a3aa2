//! A minimal RESP2 reader and writer: for the pub/sub connection, which needs what the
//! `redis` crate's blocking `PubSub` does not offer (subscribing from other threads while one
//! thread reads, and read timeouts that never lose half a message: bytes are buffered by the
//! caller), and for the pool's own connections (`crate::wire::stream`), where replies are read
//! straight into core [`Reply`]s.

use redlease_core::{Command, ErrorReply, Reply};

/// Encodes a command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    push_header(&mut out, b'*', args.len());
    for a in args {
        push_bulk(&mut out, a);
    }
    out
}

/// Appends `command` to `out` as a RESP array of bulk strings, byte for byte what the
/// `redis` crate packs for the same arguments (so a batch is written without building a
/// `redis::Cmd` per command): the array header, then the command's arguments, which it
/// keeps framed already ([`Command::framed`]), in one copy.
pub(crate) fn encode_command(out: &mut Vec<u8>, command: &Command) {
    push_header(out, b'*', command.args().len());
    out.extend_from_slice(command.framed());
}

/// [`encode_command`], with a read-only script call (`EVALSHA_RO`, `EVAL_RO`) sent as the
/// plain command (`EVALSHA`, `EVAL`): for a server or user that refused the read-only form.
pub(crate) fn encode_command_plain(out: &mut Vec<u8>, command: &Command) {
    let framed = command.framed();
    for (ro, plain) in [
        (&b"$10\r\nEVALSHA_RO\r\n"[..], &b"$7\r\nEVALSHA\r\n"[..]),
        (b"$7\r\nEVAL_RO\r\n", b"$4\r\nEVAL\r\n"),
    ] {
        if let Some(rest) = framed.strip_prefix(ro) {
            push_header(out, b'*', command.args().len());
            out.extend_from_slice(plain);
            out.extend_from_slice(rest);
            return;
        }
    }
    encode_command(out, command);
}

/// `$<len>\r\n<bytes>\r\n`.
fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 16);
    push_header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// `<kind><n>\r\n`, the number in decimal (without formatting machinery or allocation;
/// one and two digits, the common lengths, without a loop).
fn push_header(out: &mut Vec<u8>, kind: u8, n: usize) {
    // The casts below take values below 10.
    if n < 10 {
        out.extend_from_slice(&[kind, b'0' + n as u8, b'\r', b'\n']);
        return;
    }
    if n < 100 {
        out.extend_from_slice(&[
            kind,
            b'0' + (n / 10) as u8,
            b'0' + (n % 10) as u8,
            b'\r',
            b'\n',
        ]);
        return;
    }
    let mut digits = [0u8; 24];
    let mut at = digits.len();
    let mut n = n;
    while n > 0 {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.push(kind);
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// A malformed frame: the connection must be dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtocolError(pub(crate) String);

/// Parses one frame from the start of `buf`: `Ok(None)` when more bytes are needed,
/// `Ok(Some((frame, consumed)))` otherwise. RESP3 push frames (`>`) read as arrays.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ProtocolError> {
    parse_at(buf, 0, 0)
}

/// How deep arrays may nest (our scripts' replies nest two or three levels).
const MAX_DEPTH: usize = 16;
/// The longest bulk string accepted (Redis' own `proto-max-bulk-len` default).
const MAX_LEN: i64 = 512 * 1024 * 1024;
/// The most elements an array may announce.
const MAX_ITEMS: i64 = 1024 * 1024;

/// The longest line a peer may send without its CRLF (a header, a status or an error
/// line): past this many bytes without a line end, the frame is refused rather than
/// buffered forever.
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// The line starting at `at` (without its CRLF) and where the next one starts; `None`
/// until the CRLF has arrived (see [`unended`]). A CR not followed by LF is not a line end
/// (RESP2 lines of status and error replies never hold one; such a frame then fails
/// elsewhere or waits).
#[inline]
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let mut from = 0;
    loop {
        let cr = rest.get(from..)?.iter().position(|&b| b == b'\r')? + from;
        match rest.get(cr + 1) {
            Some(b'\n') => return Some((&rest[..cr], at + cr + 2)),
            Some(_) => from = cr + 1,
            None => return None,
        }
    }
}

/// No line end among the bytes of `buf` from `at` (a line's first byte): more are
/// needed, unless more than [`MAX_LINE`] came already (a peer streaming bytes without a
/// line end is refused, not buffered forever).
#[cold]
fn unended(buf: &[u8], at: usize) -> Result<(), ProtocolError> {
    let seen = buf.len().saturating_sub(at);
    if seen > MAX_LINE {
        return Err(ProtocolError(format!(
            "no line end in {seen} bytes (at most {MAX_LINE} accepted)"
        )));
    }
    Ok(())
}

/// A decimal integer (an optional `-`, then 1 to 19 digits), without UTF-8 checks or
/// `str::parse`.
#[inline]
fn number(bytes: &[u8]) -> Result<i64, ProtocolError> {
    let bad = || ProtocolError(format!("bad number {:?}", String::from_utf8_lossy(bytes)));
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(bad());
    }
    // 19 digits always fit a u64.
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(bad());
        }
        n = n * 10 + u64::from(d - b'0');
    }
    let n = if negative {
        0i64.checked_sub_unsigned(n)
    } else {
        i64::try_from(n).ok()
    };
    n.ok_or_else(bad)
}

/// Refuses a frame type RESP does not have, known at once from its first byte (without
/// waiting for a line end that may never come).
#[inline]
fn known_kind(kind: u8) -> Result<(), ProtocolError> {
    if matches!(kind, b'+' | b'-' | b':' | b'$' | b'*' | b'>') {
        return Ok(());
    }
    Err(ProtocolError(format!(
        "unknown frame type {:?}",
        kind as char
    )))
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError("frames nested too deeply".into()));
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    known_kind(kind)?;
    let Some((body, next)) = line(buf, at + 1) else {
        unended(buf, at + 1)?;
        return Ok(None);
    };
    match kind {
        b'+' => Ok(Some((Reply::Status(status(body)), next))),
        b'-' => Ok(Some((
            Reply::Error(ErrorReply::parse(&String::from_utf8_lossy(body))),
            next,
        ))),
        b':' => Ok(Some((Reply::Int(number(body)?), next))),
        b'$' => {
            let len = number(body)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            if len > MAX_LEN {
                return Err(ProtocolError(format!("bulk string of {len} bytes")));
            }
            // At most MAX_LEN: fits a usize on every platform Rust supports with std.
            let end = next + len as usize;
            let Some(tail) = buf.get(end..end + 2) else {
                return Ok(None);
            };
            if tail != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated".into()));
            }
            Ok(Some((Reply::Bulk(buf[next..end].to_vec()), end + 2)))
        }
        _ => {
            let n = number(body)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            if n > MAX_ITEMS {
                return Err(ProtocolError(format!("array of {n} elements")));
            }
            // Every element takes at least 3 bytes: reserve no more than what has arrived
            // can hold (a huge announced length allocates nothing up front).
            let room = buf.len().saturating_sub(next) / 3;
            let mut items = Vec::with_capacity((n as usize).min(room));
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((item, after)) => {
                        items.push(item);
                        pos = after;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), pos)))
        }
    }
}

/// Measures one frame without building it: fed the bytes of a frame as they arrive (always
/// from the frame's first byte), it says when the frame is complete and how long it is,
/// resuming where it stopped (every byte is looked at once, nothing is allocated or
/// copied), so a large reply read in many pieces costs time linear in its size. It accepts
/// exactly what [`parse`] accepts: once it reports a length, `parse` of that many bytes
/// builds the frame.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Where the next element not yet measured starts.
    pos: usize,
    /// For each array entered and not finished: how many of its elements are still to come.
    open: Vec<u64>,
    /// The fewest bytes the frame is known to take so far (a bulk string's announced end).
    needs: usize,
}

/// What [`Scan::advance`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scanned {
    /// The frame is complete and this many bytes long.
    Complete(usize),
    /// More bytes are needed: the frame is at least this many bytes long (from what was
    /// announced so far; more than have arrived).
    NeedsAtLeast(usize),
}

impl Scan {
    /// Measures on over `buf` (the frame's bytes from its first, including those already
    /// seen by earlier calls).
    pub(crate) fn advance(&mut self, buf: &[u8]) -> Result<Scanned, ProtocolError> {
        loop {
            if self.open.len() > MAX_DEPTH {
                return Err(ProtocolError("frames nested too deeply".into()));
            }
            let at = self.pos;
            let more = Ok(Scanned::NeedsAtLeast(self.needs.max(buf.len() + 1)));
            let Some(&kind) = buf.get(at) else {
                return more;
            };
            known_kind(kind)?;
            let Some((body, next)) = line(buf, at + 1) else {
                unended(buf, at + 1)?;
                return more;
            };
            match kind {
                b'+' | b'-' => self.pos = next,
                b':' => {
                    number(body)?;
                    self.pos = next;
                }
                b'$' => {
                    let len = number(body)?;
                    if len < 0 {
                        self.pos = next;
                    } else {
                        if len > MAX_LEN {
                            return Err(ProtocolError(format!("bulk string of {len} bytes")));
                        }
                        // At most MAX_LEN: fits a usize on every platform Rust supports.
                        let end = next + len as usize;
                        let Some(tail) = buf.get(end..end + 2) else {
                            self.needs = end + 2;
                            return Ok(Scanned::NeedsAtLeast(end + 2));
                        };
                        if tail != b"\r\n" {
                            return Err(ProtocolError("bulk string not terminated".into()));
                        }
                        self.pos = end + 2;
                    }
                }
                _ => {
                    let n = number(body)?;
                    if n > MAX_ITEMS {
                        return Err(ProtocolError(format!("array of {n} elements")));
                    }
                    self.pos = next;
                    if n > 0 {
                        // Positive and at most MAX_ITEMS.
                        self.open.push(n as u64);
                        continue;
                    }
                }
            }
            // An element ended: so do the arrays it was the last element of.
            loop {
                let Some(left) = self.open.last_mut() else {
                    return Ok(Scanned::Complete(self.pos));
                };
                *left -= 1;
                if *left > 0 {
                    break;
                }
                self.open.pop();
            }
        }
    }
}

/// A status line as text (`OK` and `QUEUED` without a UTF-8 check).
#[inline]
fn status(body: &[u8]) -> String {
    match body {
        b"OK" => "OK".to_owned(),
        b"QUEUED" => "QUEUED".to_owned(),
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands() {
        assert_eq!(
            encode(&[b"SUBSCRIBE", b"a:b"]),
            b"*2\r\n$9\r\nSUBSCRIBE\r\n$3\r\na:b\r\n".to_vec()
        );
    }

    /// A read-only script call goes out as the plain command when asked, with its other
    /// arguments as they were; any other command is encoded as it is.
    #[test]
    fn read_only_script_calls_encode_as_plain_ones_when_asked() {
        let plain = |cmd: &Command| {
            let mut out = Vec::new();
            encode_command_plain(&mut out, cmd);
            out
        };
        let sent = |cmd: &Command| {
            let mut out = Vec::new();
            encode_command(&mut out, cmd);
            out
        };
        for (ro, name) in [("EVALSHA_RO", "EVALSHA"), ("EVAL_RO", "EVAL")] {
            let args = |c: Command| c.arg("body").int_arg(1).arg("k").arg("v");
            assert_eq!(
                plain(&args(Command::new(ro))),
                sent(&args(Command::new(name)))
            );
        }
        for cmd in [
            Command::new("EVALSHA").arg("x").int_arg(0),
            Command::new("GET").arg("EVALSHA_RO"),
        ] {
            assert_eq!(plain(&cmd), sent(&cmd));
        }
    }

    /// The packed bytes equal the `redis` crate's for the same arguments: empty, binary,
    /// CRLF inside, lengths of one, two and more digits, and many arguments.
    #[test]
    fn commands_encode_as_the_redis_crate_packs_them() {
        let long = vec![b'x'; 12_345];
        let commands = [
            Command::new("PING"),
            Command::new("SET")
                .arg("k")
                .arg("v")
                .arg("PX")
                .int_arg(30_000),
            Command::new("EVALSHA")
                .arg("")
                .int_arg(-1)
                .arg([0u8, 255, b'\r', b'\n'])
                .arg(&long),
            (0..120).fold(Command::new("DEL"), |c, i| c.int_arg(i)),
        ];
        let mut out = Vec::new();
        let mut expected = Vec::new();
        for c in &commands {
            let mut one = Vec::new();
            encode_command(&mut one, c);
            assert_eq!(one, crate::adapter::command(c).get_packed_command());
            encode_command(&mut out, c);
            expected.extend(crate::adapter::command(c).get_packed_command());
        }
        assert_eq!(out, expected, "a batch is its commands one after another");
    }

    #[test]
    fn parses_pubsub_frames_incrementally() {
        let frame = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n1\r\n";
        for cut in 0..frame.len() {
            assert_eq!(parse(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        let (reply, used) = parse(frame).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Bulk(b"message".to_vec()),
                Reply::Bulk(b"ch".to_vec()),
                Reply::Bulk(b"1".to_vec())
            ])
        );
        let two = [frame.as_slice(), b":5\r\n+PONG\r\n".as_slice()].concat();
        let (_, used) = parse(&two).unwrap().unwrap();
        assert_eq!(parse(&two[used..]).unwrap().unwrap().0, Reply::Int(5));
        assert_eq!(
            parse(b">1\r\n$-1\r\n").unwrap().unwrap().0,
            Reply::Array(vec![Reply::Nil])
        );
        assert!(
            matches!(parse(b"-NOAUTH x\r\n").unwrap().unwrap().0, Reply::Error(e) if e.code == "NOAUTH")
        );
    }

    /// Every frame kind, alone and in a pipeline, cut at every byte offset: incomplete
    /// until its last byte, then exactly one frame of the expected length.
    #[test]
    fn every_frame_kind_split_at_every_offset() {
        let frames: [(&[u8], Reply); 11] = [
            (b"+OK\r\n", Reply::Status("OK".into())),
            (b"+QUEUED\r\n", Reply::Status("QUEUED".into())),
            (b"+caf\xc3\xa9\r\n", Reply::Status("caf\u{e9}".into())),
            (
                b"-NOSCRIPT No matching script\r\n",
                Reply::Error(ErrorReply::new("NOSCRIPT", "No matching script")),
            ),
            (b":-9223372036854775808\r\n", Reply::Int(i64::MIN)),
            (b":9223372036854775807\r\n", Reply::Int(i64::MAX)),
            (b"$0\r\n\r\n", Reply::Bulk(Vec::new())),
            (b"$4\r\na\r\nb\r\n", Reply::Bulk(b"a\r\nb".to_vec())),
            (b"$-1\r\n", Reply::Nil),
            (b"*-1\r\n", Reply::Nil),
            (
                b"*3\r\n:1\r\n*2\r\n+a\r\n$-1\r\n*0\r\n",
                Reply::Array(vec![
                    Reply::Int(1),
                    Reply::Array(vec![Reply::Status("a".into()), Reply::Nil]),
                    Reply::Array(Vec::new()),
                ]),
            ),
        ];
        let mut all = Vec::new();
        for (bytes, expected) in &frames {
            for cut in 0..bytes.len() {
                assert_eq!(parse(&bytes[..cut]), Ok(None), "{bytes:?} cut at {cut}");
            }
            assert_eq!(parse(bytes), Ok(Some((expected.clone(), bytes.len()))));
            all.extend_from_slice(bytes);
        }
        // One after another, as a pipeline's replies arrive.
        let mut at = 0;
        for (_, expected) in &frames {
            let (reply, used) = parse(&all[at..]).unwrap().unwrap();
            assert_eq!(&reply, expected);
            at += used;
        }
        assert_eq!(at, all.len());
    }

    #[test]
    fn numbers_are_checked() {
        for bad in [
            &b":\r\n"[..],
            b":-\r\n",
            b":+1\r\n",
            b": 1\r\n",
            b":1.5\r\n",
            b":9223372036854775808\r\n",
            b":99999999999999999999\r\n",
            b"$-\r\n",
            b"*x\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse(b":-0\r\n").unwrap().unwrap().0, Reply::Int(0));
        assert_eq!(parse(b":007\r\n").unwrap().unwrap().0, Reply::Int(7));
    }

    #[test]
    fn huge_lengths_and_deep_nesting_are_refused_without_allocating() {
        assert!(parse(b"$536870913\r\n").is_err());
        assert!(parse(b"*1048577\r\n").is_err());
        // Announced but not arrived: waits, reserving nothing for the missing elements.
        assert_eq!(parse(b"*1048576\r\n:1\r\n"), Ok(None));
        assert_eq!(parse(b"$536870912\r\nabc"), Ok(None));
        let deep = |n: usize| {
            let mut f = b"*1\r\n".repeat(n);
            f.extend_from_slice(b":1\r\n");
            f
        };
        assert!(parse(&deep(MAX_DEPTH)).unwrap().is_some());
        assert!(parse(&deep(MAX_DEPTH + 1)).is_err());
        assert!(parse(&deep(100_000)).is_err(), "no stack overflow");
    }

    /// No byte sequence panics: every prefix of frames with one byte changed to each of a
    /// set of troublesome values, and a run of pseudo-random bytes.
    #[test]
    fn no_input_panics() {
        let base = b"*3\r\n$5\r\nhello\r\n:-12\r\n*1\r\n+OK\r\n";
        for i in 0..base.len() {
            for b in [0u8, b'\r', b'\n', b'*', b'$', b'-', b':', b'+', b'9', 0xff] {
                let mut f = base.to_vec();
                f[i] = b;
                for cut in 0..=f.len() {
                    let _ = parse(&f[..cut]);
                }
            }
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut noise = Vec::with_capacity(64 * 1024);
        for _ in 0..64 * 1024 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push(b"*$:+-\r\n0123456789x"[(x % 18) as usize]);
        }
        for start in 0..2048 {
            let _ = parse(&noise[start..]);
        }
    }

    #[test]
    fn rejects_garbage() {
        // An unknown first byte is refused at once, before any line end arrives.
        assert!(parse(b"?").is_err());
        assert!(parse(b"$3\r\nabc\r").is_ok_and(|p| p.is_none()));
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b":abc\r\n").is_err());
        assert!(parse(b"$3\r\nabcXY").is_err());
        assert!(parse(b"$99999999999\r\n").is_err());
    }

    /// Fed a frame's bytes as they arrive, `Scan` agrees with `parse` on every prefix:
    /// incomplete, complete with the same length, or refused; for good frames, for frames
    /// with one byte changed, and for noise.
    #[test]
    fn scan_agrees_with_parse_on_every_prefix() {
        let base = b"*3\r\n$5\r\nhello\r\n:-12\r\n*2\r\n+OK\r\n*-1\r\n";
        let mut inputs = vec![base.to_vec(), b"$-1\r\n".to_vec(), b"*0\r\n".to_vec()];
        for i in 0..base.len() {
            for b in [
                0u8, b'\r', b'\n', b'*', b'$', b'-', b':', b'+', b'9', b'0', 0xff,
            ] {
                let mut f = base.to_vec();
                f[i] = b;
                inputs.push(f);
            }
        }
        let deep = |n: usize| {
            let mut f = b"*1\r\n".repeat(n);
            f.extend_from_slice(b":1\r\n");
            f
        };
        inputs.extend([deep(MAX_DEPTH), deep(MAX_DEPTH + 1)]);
        for f in &inputs {
            let mut scan = Scan::default();
            for cut in 0..=f.len() {
                let parsed = parse(&f[..cut]);
                let scanned = scan.advance(&f[..cut]);
                match (&parsed, &scanned) {
                    (Ok(None), Ok(Scanned::NeedsAtLeast(n))) => assert!(*n > cut),
                    (Ok(Some((_, used))), Ok(Scanned::Complete(len))) => {
                        assert_eq!(used, len, "{f:?} cut at {cut}");
                        break;
                    }
                    (Err(_), Err(_)) => break,
                    _ => panic!("{f:?} cut at {cut}: parse {parsed:?}, scan {scanned:?}"),
                }
            }
        }
    }

    /// A line (a header, a status or an error) over 64 KiB without its end is refused by
    /// both; up to that it waits.
    #[test]
    fn an_endless_line_is_refused() {
        for kind in [b'+', b'-', b':', b'$', b'*'] {
            let mut f = vec![kind];
            f.extend(std::iter::repeat_n(b'1', MAX_LINE));
            assert_eq!(parse(&f), Ok(None));
            assert!(matches!(
                Scan::default().advance(&f),
                Ok(Scanned::NeedsAtLeast(_))
            ));
            f.push(b'1');
            assert!(parse(&f).is_err(), "{}", kind as char);
            assert!(Scan::default().advance(&f).is_err());
        }
    }
}
