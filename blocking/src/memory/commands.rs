//! The plain commands, with Redis' replies and error messages (checked against Redis 7.0 by
//! tests/memory_diff.rs).

use std::collections::{HashMap, VecDeque};

use redlease_core::{ErrorReply, Reply};

use super::keyspace::{Db, Score, Value, ZSet};
use super::pubsub::PubSub;

/// What a command runs against.
pub(crate) struct Ctx<'a> {
    pub(crate) db: &'a mut Db,
    pub(crate) pubsub: &'a mut PubSub,
    /// The server clock, Unix µs.
    pub(crate) now_us: i64,
    /// Called by a script (`redis.call`): some commands are refused there.
    pub(crate) in_script: bool,
    /// Called by a script run as `EVAL_RO` / `EVALSHA_RO`: writes are refused.
    pub(crate) read_only: bool,
    /// In a strict script ([`MemoryServer::strict_keys`](super::MemoryServer::strict_keys)):
    /// the keys it declared, the only ones it may touch.
    pub(crate) declared: Option<&'a [Vec<u8>]>,
}

/// The keys of command `argv` (its name first): every argument of `DEL`, `EXISTS`,
/// `UNLINK`, `MGET`; both of `RENAME`; none of `TIME`, `PUBLISH`, `SPUBLISH`, `PING`,
/// `PUBSUB`, `SCAN`, `INFO`; the first
/// argument of any other command the library's scripts call.
pub(crate) fn keys_of(argv: &[Vec<u8>]) -> &[Vec<u8>] {
    let name = argv
        .first()
        .map(|n| n.to_ascii_uppercase())
        .unwrap_or_default();
    match name.as_slice() {
        b"DEL" | b"EXISTS" | b"UNLINK" | b"MGET" => &argv[1..],
        b"RENAME" => &argv[1..argv.len().min(3)],
        b"TIME" | b"PUBLISH" | b"SPUBLISH" | b"PING" | b"PUBSUB" | b"SCAN" | b"INFO" => &[],
        _ => &argv[1.min(argv.len())..argv.len().min(2)],
    }
}

impl Ctx<'_> {
    fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }
}

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const SYNTAX: &str = "ERR syntax error";

/// An error reply from a raw line (`"ERR syntax error"`).
pub(crate) fn err(line: &str) -> Reply {
    Reply::Error(ErrorReply::parse(line))
}

fn ok() -> Reply {
    Reply::Status("OK".into())
}

fn arity(name: &str) -> Reply {
    err(&format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

fn bool_int(b: bool) -> Reply {
    Reply::Int(i64::from(b))
}

/// Redis' strict integer parsing (`string2ll`): an optional `-`, no `+`, no leading zeros,
/// no spaces.
pub(crate) fn parse_int(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty()
        || !digits.bytes().all(|c| c.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
        || (s.starts_with('-') && digits == "0")
    {
        return None;
    }
    s.parse().ok()
}

/// A float as Redis reads one (`strtod` on the whole string): `inf`, `-inf`, `+inf` allowed,
/// NaN refused.
pub(crate) fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// C's `printf("%.17g", v)`, which Redis 7.0 uses for scores in replies and for Lua numbers
/// passed as command arguments.
pub(crate) fn format_g17(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v.is_nan() {
        return "nan".into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let decimals = usize::try_from(16 - exp).unwrap_or(0);
        trim_zeros(&format!("{v:.decimals$}")).to_owned()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn score_reply(v: f64) -> Reply {
    Reply::Bulk(format_g17(v).into_bytes())
}

fn upper(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_uppercase()
}

/// Runs one plain command (not EVAL/EVALSHA/SCRIPT: the server runs those).
pub(crate) fn run(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if ctx.read_only
        && args.first().is_some_and(|name| {
            redlease_core::script::WRITE_COMMANDS.contains(&upper(name).as_str())
        })
    {
        return err("ERR Write commands are not allowed from read-only scripts.");
    }
    let reply = dispatch(ctx, args);
    match reply {
        Reply::Error(e) if ctx.in_script && e.message.starts_with("wrong number of arguments") => {
            err("ERR Wrong number of args calling Redis command from script")
        }
        other => other,
    }
}

fn dispatch(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(first) = args.first() else {
        return err("ERR empty command");
    };
    let name = upper(first);
    let a = &args[1..];
    macro_rules! need {
        ($cond:expr) => {
            if !($cond) {
                return arity(&name);
            }
        };
    }
    match name.as_str() {
        "PING" => match a {
            [] => Reply::Status("PONG".into()),
            [m] => Reply::Bulk(m.clone()),
            _ => arity(&name),
        },
        "ECHO" => {
            need!(a.len() == 1);
            Reply::Bulk(a[0].clone())
        }
        "TIME" => {
            need!(a.is_empty());
            Reply::Array(vec![
                Reply::Bulk(ctx.now_us.div_euclid(1_000_000).to_string().into_bytes()),
                Reply::Bulk(ctx.now_us.rem_euclid(1_000_000).to_string().into_bytes()),
            ])
        }
        "WAIT" => {
            need!(a.len() == 2);
            if ctx.in_script {
                return err("ERR This Redis command is not allowed from script");
            }
            let (Some(_), Some(t)) = (parse_int(&a[0]), parse_int(&a[1])) else {
                return err(NOT_INT);
            };
            if t < 0 {
                return err("ERR timeout is negative");
            }
            // No replicas: none acknowledges (Redis would first wait out the timeout).
            Reply::Int(0)
        }
        "DBSIZE" => {
            need!(a.is_empty());
            let n = ctx.db.len(ctx.now_ms());
            Reply::Int(n as i64)
        }
        "FLUSHALL" | "FLUSHDB" => {
            ctx.db.clear();
            ok()
        }
        "PUBLISH" | "SPUBLISH" => {
            need!(a.len() == 2);
            let n = ctx.pubsub.publish(&a[0], &a[1], name == "SPUBLISH");
            Reply::Int(n as i64)
        }
        "PUBSUB" => {
            need!(!a.is_empty());
            let sharded = match upper(&a[0]).as_str() {
                "NUMSUB" => false,
                "SHARDNUMSUB" => true,
                _ => return err("ERR unknown PUBSUB subcommand"),
            };
            let mut out = Vec::with_capacity(2 * (a.len() - 1));
            for channel in &a[1..] {
                out.push(Reply::Bulk(channel.clone()));
                out.push(Reply::Int(ctx.pubsub.numsub(channel, sharded) as i64));
            }
            Reply::Array(out)
        }
        "SCAN" => scan(ctx, a),
        "GET" => {
            need!(a.len() == 1);
            match ctx.db.get(&a[0], ctx.now_ms()) {
                None => Reply::Nil,
                Some(e) => match &e.value {
                    Value::Str(s) => Reply::Bulk(s.clone()),
                    _ => err(WRONGTYPE),
                },
            }
        }
        "MGET" => {
            need!(!a.is_empty());
            let now = ctx.now_ms();
            Reply::Array(
                a.iter()
                    .map(|k| match ctx.db.get(k, now).map(|e| &e.value) {
                        Some(Value::Str(s)) => Reply::Bulk(s.clone()),
                        _ => Reply::Nil,
                    })
                    .collect(),
            )
        }
        "SET" => set(ctx, a),
        "SETNX" => {
            need!(a.len() == 2);
            let now = ctx.now_ms();
            if ctx.db.get(&a[0], now).is_some() {
                Reply::Int(0)
            } else {
                ctx.db.set(&a[0], Value::Str(a[1].clone()), None);
                Reply::Int(1)
            }
        }
        "GETSET" => {
            need!(a.len() == 2);
            let now = ctx.now_ms();
            let old = match ctx.db.get(&a[0], now) {
                None => Reply::Nil,
                Some(e) => match &e.value {
                    Value::Str(s) => Reply::Bulk(s.clone()),
                    _ => return err(WRONGTYPE),
                },
            };
            ctx.db.set(&a[0], Value::Str(a[1].clone()), None);
            old
        }
        "DEL" | "UNLINK" => {
            need!(!a.is_empty());
            let now = ctx.now_ms();
            let n = a.iter().filter(|k| ctx.db.remove(k, now)).count();
            Reply::Int(n as i64)
        }
        "RENAME" => {
            need!(a.len() == 2);
            let now = ctx.now_ms();
            match ctx.db.get(&a[0], now).cloned() {
                None => err("ERR no such key"),
                Some(entry) => {
                    // The value and its expiry move; the destination's old value goes.
                    ctx.db.remove(&a[0], now);
                    ctx.db.set(&a[1], entry.value, entry.expires_at);
                    ok()
                }
            }
        }
        "EXISTS" => {
            need!(!a.is_empty());
            let now = ctx.now_ms();
            let n = a.iter().filter(|k| ctx.db.get(k, now).is_some()).count();
            Reply::Int(n as i64)
        }
        "TYPE" => {
            need!(a.len() == 1);
            let t = ctx
                .db
                .get(&a[0], ctx.now_ms())
                .map_or("none", |e| e.value.type_name());
            Reply::Status(t.into())
        }
        "INCR" | "DECR" | "INCRBY" | "DECRBY" => {
            let by = match name.as_str() {
                "INCR" | "DECR" => {
                    need!(a.len() == 1);
                    1
                }
                _ => {
                    need!(a.len() == 2);
                    match parse_int(&a[1]) {
                        Some(n) => n,
                        None => return err(NOT_INT),
                    }
                }
            };
            let by = if name.starts_with("DECR") {
                match by.checked_neg() {
                    Some(n) => n,
                    None => return err("ERR decrement would overflow"),
                }
            } else {
                by
            };
            incr(ctx, &a[0], by)
        }
        "EXPIRE" | "PEXPIRE" => expire(ctx, &name, a),
        "PERSIST" => {
            need!(a.len() == 1);
            match ctx.db.get_mut(&a[0], ctx.now_ms()) {
                Some(e) if e.expires_at.is_some() => {
                    e.expires_at = None;
                    Reply::Int(1)
                }
                _ => Reply::Int(0),
            }
        }
        "PTTL" | "TTL" => {
            need!(a.len() == 1);
            let now = ctx.now_ms();
            match ctx.db.get(&a[0], now) {
                None => Reply::Int(-2),
                Some(e) => match e.expires_at {
                    None => Reply::Int(-1),
                    Some(at) => {
                        let ms = (at - now).max(0);
                        Reply::Int(if name == "PTTL" {
                            ms
                        } else {
                            (ms + 500) / 1000
                        })
                    }
                },
            }
        }
        "HSET" | "HMSET" => {
            need!(a.len() >= 3 && a.len() % 2 == 1);
            let now = ctx.now_ms();
            let Some(h) = hash_mut(ctx.db, &a[0], now, true) else {
                return err(WRONGTYPE);
            };
            let mut added = 0;
            for pair in a[1..].chunks(2) {
                if h.insert(pair[0].clone(), pair[1].clone()).is_none() {
                    added += 1;
                }
            }
            if name == "HMSET" {
                ok()
            } else {
                Reply::Int(added)
            }
        }
        "HSETNX" => {
            need!(a.len() == 3);
            let now = ctx.now_ms();
            let Some(h) = hash_mut(ctx.db, &a[0], now, true) else {
                return err(WRONGTYPE);
            };
            if h.contains_key(&a[1]) {
                Reply::Int(0)
            } else {
                h.insert(a[1].clone(), a[2].clone());
                Reply::Int(1)
            }
        }
        "HGET" => {
            need!(a.len() == 2);
            match read_hash(ctx, &a[0]) {
                Err(e) => e,
                Ok(h) => h
                    .and_then(|h| h.get(&a[1]))
                    .map_or(Reply::Nil, |v| Reply::Bulk(v.clone())),
            }
        }
        "HMGET" => {
            need!(a.len() >= 2);
            match read_hash(ctx, &a[0]) {
                Err(e) => e,
                Ok(h) => Reply::Array(
                    a[1..]
                        .iter()
                        .map(|f| {
                            h.and_then(|h| h.get(f))
                                .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                        })
                        .collect(),
                ),
            }
        }
        "HEXISTS" => {
            need!(a.len() == 2);
            match read_hash(ctx, &a[0]) {
                Err(e) => e,
                Ok(h) => bool_int(h.is_some_and(|h| h.contains_key(&a[1]))),
            }
        }
        "HLEN" => {
            need!(a.len() == 1);
            match read_hash(ctx, &a[0]) {
                Err(e) => e,
                Ok(h) => Reply::Int(h.map_or(0, |h| h.len() as i64)),
            }
        }
        "HGETALL" => {
            need!(a.len() == 1);
            match read_hash(ctx, &a[0]) {
                Err(e) => e,
                Ok(h) => {
                    let mut pairs: Vec<_> = h.map(|h| h.iter().collect()).unwrap_or_default();
                    pairs.sort();
                    Reply::Array(
                        pairs
                            .into_iter()
                            .flat_map(|(k, v)| [Reply::Bulk(k.clone()), Reply::Bulk(v.clone())])
                            .collect(),
                    )
                }
            }
        }
        "HDEL" => {
            need!(a.len() >= 2);
            let now = ctx.now_ms();
            let n = match ctx.db.get_mut(&a[0], now) {
                None => 0,
                Some(e) => match &mut e.value {
                    Value::Hash(h) => a[1..].iter().filter(|f| h.remove(*f).is_some()).count(),
                    _ => return err(WRONGTYPE),
                },
            };
            ctx.db.drop_if_empty(&a[0]);
            Reply::Int(n as i64)
        }
        "HINCRBY" => {
            need!(a.len() == 3);
            let Some(by) = parse_int(&a[2]) else {
                return err(NOT_INT);
            };
            let now = ctx.now_ms();
            let Some(h) = hash_mut(ctx.db, &a[0], now, true) else {
                return err(WRONGTYPE);
            };
            let old = match h.get(&a[1]) {
                None => 0,
                Some(v) => match parse_int(v) {
                    Some(n) => n,
                    None => return err("ERR hash value is not an integer"),
                },
            };
            let Some(new) = old.checked_add(by) else {
                return err("ERR increment or decrement would overflow");
            };
            h.insert(a[1].clone(), new.to_string().into_bytes());
            Reply::Int(new)
        }
        "ZADD" => zadd(ctx, a),
        "ZCARD" => {
            need!(a.len() == 1);
            match read_zset(ctx, &a[0]) {
                Err(e) => e,
                Ok(z) => Reply::Int(z.map_or(0, |z| z.len() as i64)),
            }
        }
        "ZCOUNT" => {
            need!(a.len() == 3);
            let Some(range) = ScoreRange::parse(&a[1], &a[2]) else {
                return err("ERR min or max is not a float");
            };
            match read_zset(ctx, &a[0]) {
                Err(e) => e,
                Ok(z) => Reply::Int(z.map_or(0, |z| {
                    z.order.iter().filter(|(s, _)| range.contains(s.0)).count() as i64
                })),
            }
        }
        "ZSCORE" => {
            need!(a.len() == 2);
            match read_zset(ctx, &a[0]) {
                Err(e) => e,
                Ok(z) => z
                    .and_then(|z| z.scores.get(&a[1]))
                    .map_or(Reply::Nil, |s| score_reply(*s)),
            }
        }
        "ZRANK" => {
            need!(a.len() == 2);
            match read_zset(ctx, &a[0]) {
                Err(e) => e,
                Ok(z) => z
                    .and_then(|z| {
                        let score = *z.scores.get(&a[1])?;
                        let at = (Score(score), a[1].clone());
                        Some(Reply::Int(z.order.range(..at).count() as i64))
                    })
                    .unwrap_or(Reply::Nil),
            }
        }
        "ZREM" => {
            need!(a.len() >= 2);
            let now = ctx.now_ms();
            let n = match ctx.db.get_mut(&a[0], now) {
                None => 0,
                Some(e) => match &mut e.value {
                    Value::ZSet(z) => a[1..].iter().filter(|m| z.remove(m)).count(),
                    _ => return err(WRONGTYPE),
                },
            };
            ctx.db.drop_if_empty(&a[0]);
            Reply::Int(n as i64)
        }
        "ZREMRANGEBYSCORE" => {
            need!(a.len() == 3);
            let Some(range) = ScoreRange::parse(&a[1], &a[2]) else {
                return err("ERR min or max is not a float");
            };
            let now = ctx.now_ms();
            let n = match ctx.db.get_mut(&a[0], now) {
                None => 0,
                Some(e) => match &mut e.value {
                    Value::ZSet(z) => {
                        let gone: Vec<Vec<u8>> = z
                            .order
                            .iter()
                            .filter(|(s, _)| range.contains(s.0))
                            .map(|(_, m)| m.clone())
                            .collect();
                        for m in &gone {
                            z.remove(m);
                        }
                        gone.len()
                    }
                    _ => return err(WRONGTYPE),
                },
            };
            ctx.db.drop_if_empty(&a[0]);
            Reply::Int(n as i64)
        }
        "ZRANGEBYSCORE" => {
            need!(a.len() >= 3);
            zrange_by_score(ctx, a)
        }
        "ZRANGE" => {
            need!(a.len() >= 3);
            zrange(ctx, a)
        }
        "RPUSH" | "LPUSH" => {
            need!(a.len() >= 2);
            let now = ctx.now_ms();
            if ctx.db.get(&a[0], now).is_none() {
                ctx.db.set(&a[0], Value::List(VecDeque::new()), None);
            }
            match ctx.db.get_mut(&a[0], now).map(|e| &mut e.value) {
                Some(Value::List(l)) => {
                    for v in &a[1..] {
                        if name == "RPUSH" {
                            l.push_back(v.clone());
                        } else {
                            l.push_front(v.clone());
                        }
                    }
                    Reply::Int(l.len() as i64)
                }
                _ => err(WRONGTYPE),
            }
        }
        "LPOP" | "RPOP" => {
            need!(a.len() == 1 || a.len() == 2);
            let count = match a.get(1) {
                None => None,
                Some(c) => match parse_int(c) {
                    Some(n) if n >= 0 => Some(n as usize),
                    _ => return err("ERR value is out of range, must be positive"),
                },
            };
            let now = ctx.now_ms();
            let reply = match ctx.db.get_mut(&a[0], now) {
                None => Reply::Nil,
                Some(e) => match &mut e.value {
                    Value::List(l) => {
                        let mut pop = || {
                            if name == "LPOP" {
                                l.pop_front()
                            } else {
                                l.pop_back()
                            }
                        };
                        match count {
                            None => pop().map_or(Reply::Nil, Reply::Bulk),
                            Some(n) => Reply::Array(
                                std::iter::from_fn(pop).take(n).map(Reply::Bulk).collect(),
                            ),
                        }
                    }
                    _ => return err(WRONGTYPE),
                },
            };
            ctx.db.drop_if_empty(&a[0]);
            reply
        }
        "LLEN" => {
            need!(a.len() == 1);
            match read_list(ctx, &a[0]) {
                Err(e) => e,
                Ok(l) => Reply::Int(l.map_or(0, |l| l.len() as i64)),
            }
        }
        "LINDEX" => {
            need!(a.len() == 2);
            // Redis looks the key up before it reads the index.
            match read_list(ctx, &a[0]) {
                Err(e) => e,
                Ok(None) => Reply::Nil,
                Ok(Some(l)) => {
                    let Some(i) = parse_int(&a[1]) else {
                        return err(NOT_INT);
                    };
                    let i = if i < 0 { l.len() as i64 + i } else { i };
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| l.get(i))
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                }
            }
        }
        "LRANGE" => {
            need!(a.len() == 3);
            let (Some(start), Some(stop)) = (parse_int(&a[1]), parse_int(&a[2])) else {
                return err(NOT_INT);
            };
            match read_list(ctx, &a[0]) {
                Err(e) => e,
                Ok(l) => {
                    let l: Vec<Vec<u8>> =
                        l.map(|l| l.iter().cloned().collect()).unwrap_or_default();
                    Reply::Array(
                        index_range(l.len(), start, stop)
                            .map(|i| Reply::Bulk(l[i].clone()))
                            .collect(),
                    )
                }
            }
        }
        "LREM" => {
            need!(a.len() == 3);
            let Some(count) = parse_int(&a[1]) else {
                return err(NOT_INT);
            };
            let now = ctx.now_ms();
            let n = match ctx.db.get_mut(&a[0], now) {
                None => 0,
                Some(e) => match &mut e.value {
                    Value::List(l) => lrem(l, count, &a[2]),
                    _ => return err(WRONGTYPE),
                },
            };
            ctx.db.drop_if_empty(&a[0]);
            Reply::Int(n as i64)
        }
        "LTRIM" => {
            need!(a.len() == 3);
            let (Some(start), Some(stop)) = (parse_int(&a[1]), parse_int(&a[2])) else {
                return err(NOT_INT);
            };
            let now = ctx.now_ms();
            match ctx.db.get_mut(&a[0], now).map(|e| &mut e.value) {
                None => {}
                Some(Value::List(l)) => {
                    let keep = index_range(l.len(), start, stop);
                    l.truncate(keep.end);
                    l.drain(..keep.start);
                }
                Some(_) => return err(WRONGTYPE),
            }
            ctx.db.drop_if_empty(&a[0]);
            ok()
        }
        "LSET" => {
            need!(a.len() == 3);
            let Some(i) = parse_int(&a[1]) else {
                return err(NOT_INT);
            };
            let now = ctx.now_ms();
            match ctx.db.get_mut(&a[0], now).map(|e| &mut e.value) {
                None => err("ERR no such key"),
                Some(Value::List(l)) => {
                    let i = if i < 0 { l.len() as i64 + i } else { i };
                    match usize::try_from(i).ok().and_then(|i| l.get_mut(i)) {
                        Some(v) => {
                            *v = a[2].clone();
                            ok()
                        }
                        None => err("ERR index out of range"),
                    }
                }
                Some(_) => err(WRONGTYPE),
            }
        }
        "LPOS" => lpos(ctx, a),
        "EVAL" | "EVALSHA" | "SCRIPT" | "EVAL_RO" | "EVALSHA_RO" | "MULTI" | "EXEC"
        | "SUBSCRIBE" | "SSUBSCRIBE" | "PSUBSCRIBE"
            if ctx.in_script =>
        {
            err("ERR This Redis command is not allowed from script")
        }
        _ => unknown(&name, ctx.in_script),
    }
}

/// The reply to a command this server does not implement: an error naming it.
/// `SCAN cursor [MATCH pattern] [COUNT n]` over the live keys in sorted order: the cursor is
/// how many of them were passed (Redis's own cursor is opaque; what callers may rely on, a
/// walk from 0 back to 0 visiting every key that lives throughout, holds).
fn scan(ctx: &mut Ctx<'_>, a: &[Vec<u8>]) -> Reply {
    let Some(cursor) = a.first().and_then(|c| parse_int(c)) else {
        return err("ERR invalid cursor");
    };
    let (mut pattern, mut count) = (None, 10i64);
    let mut i = 1;
    while i < a.len() {
        match (upper(&a[i]).as_str(), a.get(i + 1)) {
            ("MATCH", Some(p)) => pattern = Some(p.clone()),
            ("COUNT", Some(n)) => match parse_int(n) {
                Some(n) if n >= 1 => count = n,
                _ => return err("ERR syntax error"),
            },
            _ => return err("ERR syntax error"),
        }
        i += 2;
    }
    let keys = ctx.db.keys(ctx.now_ms());
    let start = usize::try_from(cursor)
        .unwrap_or(usize::MAX)
        .min(keys.len());
    let end = start
        .saturating_add(usize::try_from(count).unwrap_or(usize::MAX))
        .min(keys.len());
    let found = keys[start..end]
        .iter()
        .filter(|k| pattern.as_deref().is_none_or(|p| glob(p, k)))
        .map(|k| Reply::Bulk(k.clone()))
        .collect();
    let next = if end >= keys.len() { 0 } else { end };
    Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(found),
    ])
}

/// Whether `text` matches the glob `pattern` as Redis matches them (`*`, `?`, `[...]` with
/// ranges and `^`, `\` escaping the next byte).
pub(crate) fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it stands for up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, text[t]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&c) => (c == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((sp, st))) => {
                star = Some((sp, st + 1));
                p = sp + 1;
                t = st + 1;
            }
            (None, None) => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at `pattern[p]` against `c`: the position after it if `c` is in it.
fn class(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    let mut i = p + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            hit |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= pattern[i] == c;
            i += 1;
        }
    }
    (hit != negate).then_some(i + 1)
}

pub(crate) fn unknown(name: &str, in_script: bool) -> Reply {
    let origin = if in_script {
        "Unknown Redis command called from script"
    } else {
        "unknown command"
    };
    err(&format!(
        "ERR {origin} '{name}': redlease's in-process server (MemoryServer) does not implement it"
    ))
}

fn set(ctx: &mut Ctx<'_>, a: &[Vec<u8>]) -> Reply {
    if a.len() < 2 {
        return arity("SET");
    }
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expiry: Option<(bool, i64, bool)> = None; // (ms unit, n, absolute)
    let mut i = 2;
    while i < a.len() {
        let opt = upper(&a[i]);
        match opt.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" if expiry.is_none() => keepttl = true,
            "EX" | "PX" | "EXAT" | "PXAT" if expiry.is_none() && !keepttl => {
                let Some(v) = a.get(i + 1) else {
                    return err(SYNTAX);
                };
                let Some(n) = parse_int(v) else {
                    return err(NOT_INT);
                };
                expiry = Some((opt.starts_with('P'), n, opt.ends_with("AT")));
                i += 1;
            }
            _ => return err(SYNTAX),
        }
        i += 1;
    }
    let now = ctx.now_ms();
    let expires_at = match expiry {
        None => None,
        Some((ms, n, absolute)) => {
            let at = if ms { Some(n) } else { n.checked_mul(1000) };
            let at = match (at, absolute) {
                (Some(v), true) => Some(v),
                (Some(v), false) => v.checked_add(now),
                (None, _) => None,
            };
            match at {
                Some(at) if n > 0 => Some(at),
                _ => return err("ERR invalid expire time in 'set' command"),
            }
        }
    };
    let old = ctx
        .db
        .get(&a[0], now)
        .map(|e| (e.value.clone(), e.expires_at));
    let old_value = match &old {
        None => Reply::Nil,
        Some((Value::Str(s), _)) => Reply::Bulk(s.clone()),
        Some(_) if get => return err(WRONGTYPE),
        Some(_) => Reply::Nil,
    };
    if (nx && old.is_some()) || (xx && old.is_none()) {
        return if get { old_value } else { Reply::Nil };
    }
    let expires_at = if keepttl {
        old.and_then(|(_, at)| at)
    } else {
        expires_at
    };
    ctx.db.set(&a[0], Value::Str(a[1].clone()), expires_at);
    if get { old_value } else { ok() }
}

fn incr(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Reply {
    let now = ctx.now_ms();
    let (old, at) = match ctx.db.get(key, now) {
        None => (0, None),
        Some(e) => match &e.value {
            Value::Str(s) => match parse_int(s) {
                Some(n) => (n, e.expires_at),
                None => return err(NOT_INT),
            },
            _ => return err(WRONGTYPE),
        },
    };
    let Some(new) = old.checked_add(by) else {
        return err("ERR increment or decrement would overflow");
    };
    ctx.db
        .set(key, Value::Str(new.to_string().into_bytes()), at);
    Reply::Int(new)
}

fn expire(ctx: &mut Ctx<'_>, name: &str, a: &[Vec<u8>]) -> Reply {
    if a.len() < 2 {
        return arity(name);
    }
    let Some(n) = parse_int(&a[1]) else {
        return err(NOT_INT);
    };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &a[2..] {
        match upper(opt).as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return err(&format!("ERR Unsupported option {other}")),
        }
    }
    if nx && (xx || gt || lt) {
        return err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return err("ERR GT and LT options at the same time are not compatible");
    }
    let now = ctx.now_ms();
    let ms = if name == "EXPIRE" {
        n.checked_mul(1000)
    } else {
        Some(n)
    };
    let Some(at) = ms.and_then(|ms| ms.checked_add(now)) else {
        return err(&format!(
            "ERR invalid expire time in '{}' command",
            name.to_ascii_lowercase()
        ));
    };
    let Some(e) = ctx.db.get_mut(&a[0], now) else {
        return Reply::Int(0);
    };
    let allowed = match e.expires_at {
        None => !xx && !gt,
        Some(cur) => !nx && (!gt || at > cur) && (!lt || at < cur),
    };
    if !allowed {
        return Reply::Int(0);
    }
    if at <= now {
        ctx.db.remove(&a[0], now);
    } else {
        e.expires_at = Some(at);
    }
    Reply::Int(1)
}

/// The hash at `key` (created empty if `create`), or `None` for another type.
fn hash_mut<'d>(
    db: &'d mut Db,
    key: &[u8],
    now: i64,
    create: bool,
) -> Option<&'d mut HashMap<Vec<u8>, Vec<u8>>> {
    if create && db.get(key, now).is_none() {
        db.set(key, Value::Hash(HashMap::new()), None);
    }
    match db.get_mut(key, now).map(|e| &mut e.value) {
        Some(Value::Hash(h)) => Some(h),
        _ => None,
    }
}

type Hash = HashMap<Vec<u8>, Vec<u8>>;

fn read_hash<'c>(ctx: &'c mut Ctx<'_>, key: &[u8]) -> Result<Option<&'c Hash>, Reply> {
    let now = ctx.now_ms();
    match ctx.db.get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

fn read_zset<'c>(ctx: &'c mut Ctx<'_>, key: &[u8]) -> Result<Option<&'c ZSet>, Reply> {
    let now = ctx.now_ms();
    match ctx.db.get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

fn read_list<'c>(ctx: &'c mut Ctx<'_>, key: &[u8]) -> Result<Option<&'c VecDeque<Vec<u8>>>, Reply> {
    let now = ctx.now_ms();
    match ctx.db.get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::List(l)) => Ok(Some(l)),
        Some(_) => Err(err(WRONGTYPE)),
    }
}

/// Indexes `start..=stop` of a sequence of `len` (negative: from the end), as LRANGE and
/// ZRANGE read them.
fn index_range(len: usize, start: i64, stop: i64) -> std::ops::Range<usize> {
    let len_i = len as i64;
    let start = if start < 0 {
        (len_i + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len_i + stop
    } else {
        stop.min(len_i - 1)
    };
    if start > stop || start >= len_i {
        return 0..0;
    }
    (start as usize)..(stop as usize + 1)
}

fn lrem(l: &mut VecDeque<Vec<u8>>, count: i64, value: &[u8]) -> usize {
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut removed = 0;
    let mut keep: Vec<bool> = vec![true; l.len()];
    let idx: Vec<usize> = if count < 0 {
        (0..l.len()).rev().collect()
    } else {
        (0..l.len()).collect()
    };
    for i in idx {
        if removed == limit {
            break;
        }
        if l[i] == value {
            keep[i] = false;
            removed += 1;
        }
    }
    let mut i = 0;
    l.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    removed
}

fn lpos(ctx: &mut Ctx<'_>, a: &[Vec<u8>]) -> Reply {
    if a.len() < 2 {
        return arity("LPOS");
    }
    let (mut rank, mut count, mut maxlen): (i64, Option<i64>, i64) = (1, None, 0);
    let mut i = 2;
    while i < a.len() {
        let Some(v) = a.get(i + 1) else {
            return err(SYNTAX);
        };
        let opt = upper(&a[i]);
        let n = match (parse_int(v), opt.as_str()) {
            (Some(n), _) => n,
            (None, "COUNT" | "MAXLEN") => return err(&format!("ERR {opt} can't be negative")),
            (None, _) => return err(NOT_INT),
        };
        match opt.as_str() {
            "RANK" => {
                if n == 0 {
                    return err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                    );
                }
                rank = n;
            }
            "COUNT" if n >= 0 => count = Some(n),
            "COUNT" => return err("ERR COUNT can't be negative"),
            "MAXLEN" if n >= 0 => maxlen = n,
            "MAXLEN" => return err("ERR MAXLEN can't be negative"),
            _ => return err(SYNTAX),
        }
        i += 2;
    }
    let l: Vec<Vec<u8>> = match read_list(ctx, &a[0]) {
        Err(e) => return e,
        Ok(l) => l.map(|l| l.iter().cloned().collect()).unwrap_or_default(),
    };
    let order: Vec<usize> = if rank > 0 {
        (0..l.len()).collect()
    } else {
        (0..l.len()).rev().collect()
    };
    let scan = if maxlen == 0 {
        order.len()
    } else {
        maxlen as usize
    };
    let want = match count {
        None => 1,
        Some(0) => usize::MAX,
        Some(c) => c as usize,
    };
    let mut skip = rank.unsigned_abs() - 1;
    let mut found = Vec::new();
    for &i in order.iter().take(scan) {
        if l[i] == a[1] {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            found.push(Reply::Int(i as i64));
            if found.len() >= want {
                break;
            }
        }
    }
    match count {
        None => found.into_iter().next().unwrap_or(Reply::Nil),
        Some(_) => Reply::Array(found),
    }
}

/// A score interval (`(` makes a bound exclusive).
struct ScoreRange {
    min: f64,
    min_ex: bool,
    max: f64,
    max_ex: bool,
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Option<Self> {
        let bound = |b: &[u8]| match b.strip_prefix(b"(") {
            Some(rest) => parse_float(rest).map(|v| (v, true)),
            None => parse_float(b).map(|v| (v, false)),
        };
        let (min, min_ex) = bound(min)?;
        let (max, max_ex) = bound(max)?;
        Some(ScoreRange {
            min,
            min_ex,
            max,
            max_ex,
        })
    }

    fn contains(&self, s: f64) -> bool {
        let above = if self.min_ex {
            s > self.min
        } else {
            s >= self.min
        };
        let below = if self.max_ex {
            s < self.max
        } else {
            s <= self.max
        };
        above && below
    }
}

fn zadd(ctx: &mut Ctx<'_>, a: &[Vec<u8>]) -> Reply {
    if a.len() < 3 {
        return arity("ZADD");
    }
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 1;
    while i < a.len() {
        match upper(&a[i]).as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            "CH" => ch = true,
            "INCR" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &a[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return err(SYNTAX);
    }
    if nx && xx {
        return err("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs.len() > 2 {
        return err("ERR INCR option supports a single increment-element pair");
    }
    let mut parsed = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        let Some(score) = parse_float(&p[0]) else {
            return err(NOT_FLOAT);
        };
        parsed.push((score, &p[1]));
    }
    let now = ctx.now_ms();
    let exists = match ctx.db.get(&a[0], now).map(|e| &e.value) {
        None => false,
        Some(Value::ZSet(_)) => true,
        Some(_) => return err(WRONGTYPE),
    };
    if !exists {
        if xx {
            return if incr { Reply::Nil } else { Reply::Int(0) };
        }
        ctx.db.set(&a[0], Value::ZSet(ZSet::default()), None);
    }
    let Some(Value::ZSet(z)) = ctx.db.get_mut(&a[0], now).map(|e| &mut e.value) else {
        return err(WRONGTYPE);
    };
    let (mut added, mut changed) = (0, 0);
    let mut incr_result = Reply::Nil;
    for (score, member) in parsed {
        let cur = z.scores.get(member.as_slice()).copied();
        let new = match (incr, cur) {
            (true, Some(c)) => c + score,
            _ => score,
        };
        if new.is_nan() {
            return err("ERR resulting score is not a number (NaN)");
        }
        match cur {
            None if xx => {}
            None => {
                z.insert(member, new);
                added += 1;
                incr_result = score_reply(new);
            }
            Some(_) if nx => {}
            Some(c) => {
                if (gt && new <= c) || (lt && new >= c) {
                    continue;
                }
                if Score(c) != Score(new) {
                    z.insert(member, new);
                    changed += 1;
                }
                incr_result = score_reply(new);
            }
        }
    }
    ctx.db.drop_if_empty(&a[0]);
    if incr {
        incr_result
    } else {
        Reply::Int(if ch { added + changed } else { added })
    }
}

fn zrange_by_score(ctx: &mut Ctx<'_>, a: &[Vec<u8>]) -> Reply {
    let (mut withscores, mut offset, mut count) = (false, 0i64, -1i64);
    let mut i = 3;
    while i < a.len() {
        match upper(&a[i]).as_str() {
            "WITHSCORES" => withscores = true,
            "LIMIT" => {
                let (Some(o), Some(c)) = (a.get(i + 1), a.get(i + 2)) else {
                    return err(SYNTAX);
                };
                let (Some(o), Some(c)) = (parse_int(o), parse_int(c)) else {
                    return err(NOT_INT);
                };
                (offset, count) = (o, c);
                i += 2;
            }
            _ => return err(SYNTAX),
        }
        i += 1;
    }
    // Redis reads the options before the range.
    let Some(range) = ScoreRange::parse(&a[1], &a[2]) else {
        return err("ERR min or max is not a float");
    };
    let z = match read_zset(ctx, &a[0]) {
        Err(e) => return e,
        Ok(z) => z,
    };
    let mut out = Vec::new();
    if offset < 0 {
        return Reply::Array(out);
    }
    if let Some(z) = z {
        let take = if count < 0 {
            usize::MAX
        } else {
            count as usize
        };
        for (s, m) in z
            .order
            .iter()
            .filter(|(s, _)| range.contains(s.0))
            .skip(offset as usize)
            .take(take)
        {
            out.push(Reply::Bulk(m.clone()));
            if withscores {
                out.push(score_reply(s.0));
            }
        }
    }
    Reply::Array(out)
}

fn zrange(ctx: &mut Ctx<'_>, a: &[Vec<u8>]) -> Reply {
    let mut withscores = false;
    for opt in &a[3..] {
        match upper(opt).as_str() {
            "WITHSCORES" => withscores = true,
            "BYSCORE" | "BYLEX" | "REV" | "LIMIT" => {
                return err(&format!(
                    "ERR ZRANGE option '{}' is not implemented by redlease's in-process server (MemoryServer)",
                    upper(opt)
                ));
            }
            _ => return err(SYNTAX),
        }
    }
    let (Some(start), Some(stop)) = (parse_int(&a[1]), parse_int(&a[2])) else {
        return err(NOT_INT);
    };
    let z = match read_zset(ctx, &a[0]) {
        Err(e) => return e,
        Ok(z) => z,
    };
    let mut out = Vec::new();
    if let Some(z) = z {
        let r = index_range(z.len(), start, stop);
        for (s, m) in z.order.iter().skip(r.start).take(r.len()) {
            out.push(Reply::Bulk(m.clone()));
            if withscores {
                out.push(score_reply(s.0));
            }
        }
    }
    Reply::Array(out)
}

#[cfg(test)]
mod glob_tests {
    use super::glob;

    #[test]
    fn globs_match_as_redis_matches_them() {
        let yes = |p: &str, t: &str| assert!(glob(p.as_bytes(), t.as_bytes()), "{p} {t}");
        let no = |p: &str, t: &str| assert!(!glob(p.as_bytes(), t.as_bytes()), "{p} {t}");
        yes("*", "");
        yes("a:{*}:*", "a:{x}:lock");
        yes("a:{*}:*", "a:{x}:y}:lock");
        no("a:{*}:*", "b:{x}:lock");
        yes("a:{job-?}:*", "a:{job-1}:fair");
        no("a:{job-?}:*", "a:{job-12}:fair");
        yes("a:{[a-c]x}:*", "a:{bx}:lock");
        no("a:{[^a-c]x}:*", "a:{bx}:lock");
        yes("a\\*b", "a*b");
        no("a\\*b", "axb");
        yes("*lock", "a:{x}:lock");
        no("*lock", "a:{x}:locks");
    }
}
