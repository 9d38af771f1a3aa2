//! A minimal RESP reader and writer for the pub/sub connection, which needs what the `redis`
//! crate's blocking `PubSub` does not offer: subscribing from other threads while one thread
//! reads, and read timeouts that never lose half a message (bytes are buffered here).

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
/// `redis::Cmd` per command).
pub(crate) fn encode_command(out: &mut Vec<u8>, command: &Command) {
    let mut size = 16;
    for a in command.args() {
        size += a.len() + 16;
    }
    out.reserve(size);
    push_header(out, b'*', command.args().len());
    for a in command.args() {
        push_header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
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

const MAX_DEPTH: usize = 8;
const MAX_LEN: i64 = 512 * 1024 * 1024;

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn number(bytes: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ProtocolError(format!("bad number {:?}", String::from_utf8_lossy(bytes))))
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError("frames nested too deeply".into()));
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((body, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    match kind {
        b'+' => Ok(Some((
            Reply::Status(String::from_utf8_lossy(body).into_owned()),
            next,
        ))),
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
            let len = len as usize;
            let end = next + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated".into()));
            }
            Ok(Some((Reply::Bulk(buf[next..end].to_vec()), end + 2)))
        }
        b'*' | b'>' => {
            let n = number(body)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            if n > 1024 * 1024 {
                return Err(ProtocolError(format!("array of {n} elements")));
            }
            let mut items = Vec::with_capacity(n as usize);
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
        other => Err(ProtocolError(format!(
            "unknown frame type {:?}",
            other as char
        ))),
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

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b":abc\r\n").is_err());
        assert!(parse(b"$3\r\nabcXY").is_err());
        assert!(parse(b"$99999999999\r\n").is_err());
    }
}
