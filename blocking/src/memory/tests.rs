use std::time::Duration;

use redlease_core::keys::Keyspace;
use redlease_core::lease::{LockSpec, Token};
use redlease_core::{Command, Reply};

use super::commands::format_g17;
use super::*;

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn ok() -> Reply {
    Reply::Status("OK".into())
}

fn call(s: &MemoryServer, args: &[&str]) -> Reply {
    s.call(args).expect("no fault injected")
}

fn code(r: &Reply) -> String {
    match r {
        Reply::Error(e) => e.code.clone(),
        other => panic!("not an error: {other:?}"),
    }
}

fn eval(s: &MemoryServer, script: &str, keys: &[&str], args: &[&str]) -> Reply {
    let mut c = vec!["EVAL", script];
    let n = keys.len().to_string();
    c.push(&n);
    c.extend_from_slice(keys);
    c.extend_from_slice(args);
    call(s, &c)
}

#[test]
fn strings_set_options_and_expiry() {
    let s = MemoryServer::new();
    assert_eq!(call(&s, &["SET", "k", "a", "NX", "PX", "100"]), ok());
    assert_eq!(call(&s, &["SET", "k", "b", "NX", "PX", "100"]), Reply::Nil);
    assert_eq!(call(&s, &["GET", "k"]), bulk("a"));
    assert_eq!(call(&s, &["PTTL", "k"]), Reply::Int(100));
    assert_eq!(call(&s, &["TTL", "k"]), Reply::Int(0));
    s.clock().advance(Duration::from_millis(100));
    // Redis: expired only once now > expiry.
    assert_eq!(call(&s, &["PTTL", "k"]), Reply::Int(0));
    s.clock().advance(Duration::from_millis(1));
    assert_eq!(call(&s, &["GET", "k"]), Reply::Nil);
    assert_eq!(call(&s, &["PTTL", "k"]), Reply::Int(-2));
    assert_eq!(call(&s, &["SET", "k", "x", "XX"]), Reply::Nil);
    assert_eq!(call(&s, &["SETNX", "k", "1"]), Reply::Int(1));
    assert_eq!(call(&s, &["SETNX", "k", "2"]), Reply::Int(0));
    assert_eq!(call(&s, &["PTTL", "k"]), Reply::Int(-1));
    assert_eq!(call(&s, &["GETSET", "k", "3"]), bulk("1"));
    assert_eq!(call(&s, &["INCR", "k"]), Reply::Int(4));
    assert_eq!(call(&s, &["PEXPIRE", "k", "50"]), Reply::Int(1));
    assert_eq!(call(&s, &["EXPIRE", "nope", "5"]), Reply::Int(0));
    assert_eq!(call(&s, &["INCR", "k"]), Reply::Int(5));
    assert_eq!(
        call(&s, &["PTTL", "k"]),
        Reply::Int(50),
        "INCR keeps the ttl"
    );
    assert_eq!(call(&s, &["PEXPIRE", "k", "40", "GT"]), Reply::Int(0));
    assert_eq!(call(&s, &["PEXPIRE", "k", "60", "GT"]), Reply::Int(1));
    assert_eq!(call(&s, &["PEXPIRE", "k", "70", "LT"]), Reply::Int(0));
    assert_eq!(call(&s, &["PEXPIRE", "k", "50", "LT"]), Reply::Int(1));
    assert_eq!(call(&s, &["PEXPIRE", "k", "10", "NX"]), Reply::Int(0));
    assert_eq!(call(&s, &["PTTL", "k"]), Reply::Int(50));
    assert_eq!(call(&s, &["PERSIST", "k"]), Reply::Int(1));
    assert_eq!(call(&s, &["PEXPIRE", "k", "10", "XX"]), Reply::Int(0));
    assert_eq!(
        call(&s, &["PEXPIRE", "k", "10", "GT"]),
        Reply::Int(0),
        "no ttl is infinite"
    );
    assert_eq!(call(&s, &["PEXPIRE", "k", "10", "LT"]), Reply::Int(1));
    assert_eq!(call(&s, &["PEXPIRE", "k", "0"]), Reply::Int(1));
    assert_eq!(
        call(&s, &["EXISTS", "k"]),
        Reply::Int(0),
        "a ttl <= 0 deletes"
    );
    assert_eq!(
        call(&s, &["SET", "k", "v", "PX", "0"]),
        Reply::Error(redlease_core::ErrorReply::parse(
            "ERR invalid expire time in 'set' command"
        ))
    );
    assert_eq!(code(&call(&s, &["SET", "k", "v", "PX", "x"])), "ERR");
    assert_eq!(code(&call(&s, &["SET", "k", "v", "BOGUS"])), "ERR");
    assert_eq!(call(&s, &["SET", "n", "abc"]), ok());
    assert_eq!(code(&call(&s, &["INCR", "n"])), "ERR");
    assert_eq!(call(&s, &["DEL", "n", "n", "zz"]), Reply::Int(1));
    assert_eq!(code(&call(&s, &["GET"])), "ERR");
}

#[test]
fn wrong_types_are_refused_by_every_reader() {
    let s = MemoryServer::new();
    call(&s, &["HSET", "h", "f", "1"]);
    call(&s, &["SET", "str", "1"]);
    for c in [
        &["GET", "h"][..],
        &["GETSET", "h", "x"],
        &["INCR", "h"],
        &["ZCARD", "h"],
        &["ZADD", "h", "1", "m"],
        &["ZSCORE", "h", "m"],
        &["LLEN", "h"],
        &["RPUSH", "h", "x"],
        &["HGET", "str", "f"],
        &["HLEN", "str"],
        &["HINCRBY", "str", "f", "1"],
        &["LRANGE", "str", "0", "-1"],
        &["ZRANGEBYSCORE", "str", "-inf", "+inf"],
    ] {
        assert_eq!(code(&call(&s, c)), "WRONGTYPE", "{c:?}");
    }
    // SET overwrites any type.
    assert_eq!(call(&s, &["SET", "h", "x"]), ok());
    assert_eq!(call(&s, &["TYPE", "h"]), Reply::Status("string".into()));
}

#[test]
fn hashes_zsets_and_lists() {
    let s = MemoryServer::new();
    assert_eq!(call(&s, &["HSET", "h", "a", "1", "b", "2"]), Reply::Int(2));
    assert_eq!(call(&s, &["HSET", "h", "a", "3"]), Reply::Int(0));
    assert_eq!(call(&s, &["HSETNX", "h", "a", "9"]), Reply::Int(0));
    assert_eq!(call(&s, &["HINCRBY", "h", "a", "-4"]), Reply::Int(-1));
    assert_eq!(call(&s, &["HLEN", "h"]), Reply::Int(2));
    assert_eq!(call(&s, &["HDEL", "h", "a", "b", "c"]), Reply::Int(2));
    assert_eq!(
        call(&s, &["EXISTS", "h"]),
        Reply::Int(0),
        "empty hashes vanish"
    );

    assert_eq!(
        call(&s, &["ZADD", "z", "2", "b", "1", "a", "2", "c"]),
        Reply::Int(3)
    );
    assert_eq!(
        call(&s, &["ZADD", "z", "XX", "5", "a", "1", "new"]),
        Reply::Int(0)
    );
    assert_eq!(call(&s, &["ZSCORE", "z", "a"]), bulk("5"));
    assert_eq!(call(&s, &["ZSCORE", "z", "new"]), Reply::Nil);
    assert_eq!(
        call(&s, &["ZRANGE", "z", "0", "-1"]),
        Reply::Array(vec![bulk("b"), bulk("c"), bulk("a")])
    );
    assert_eq!(
        call(&s, &["ZRANGEBYSCORE", "z", "(2", "+inf", "WITHSCORES"]),
        Reply::Array(vec![bulk("a"), bulk("5")])
    );
    assert_eq!(
        call(&s, &["ZRANGEBYSCORE", "z", "-inf", "10", "LIMIT", "1", "1"]),
        Reply::Array(vec![bulk("c")])
    );
    assert_eq!(
        call(&s, &["ZREMRANGEBYSCORE", "z", "-inf", "2"]),
        Reply::Int(2)
    );
    assert_eq!(call(&s, &["ZCARD", "z"]), Reply::Int(1));
    assert_eq!(call(&s, &["ZADD", "z", "0.1", "f"]), Reply::Int(1));
    assert_eq!(call(&s, &["ZSCORE", "z", "f"]), bulk("0.10000000000000001"));
    assert_eq!(code(&call(&s, &["ZADD", "z", "nan", "f"])), "ERR");

    assert_eq!(call(&s, &["RPUSH", "l", "a", "b", "a", "c"]), Reply::Int(4));
    assert_eq!(call(&s, &["LPOS", "l", "a", "RANK", "2"]), Reply::Int(2));
    assert_eq!(call(&s, &["LINDEX", "l", "-1"]), bulk("c"));
    assert_eq!(call(&s, &["LREM", "l", "0", "a"]), Reply::Int(2));
    assert_eq!(
        call(&s, &["LRANGE", "l", "0", "-1"]),
        Reply::Array(vec![bulk("b"), bulk("c")])
    );
    assert_eq!(call(&s, &["LPOP", "l"]), bulk("b"));
    assert_eq!(call(&s, &["LPOP", "l"]), bulk("c"));
    assert_eq!(call(&s, &["LPOP", "l"]), Reply::Nil);
    assert_eq!(call(&s, &["EXISTS", "l"]), Reply::Int(0));
    // RENAME moves the value and its expiry, replacing the destination's.
    assert_eq!(code(&call(&s, &["RENAME", "none", "x"])), "ERR");
    assert_eq!(call(&s, &["RPUSH", "from", "a"]), Reply::Int(1));
    assert_eq!(call(&s, &["RPUSH", "to", "b", "c"]), Reply::Int(2));
    assert_eq!(
        call(&s, &["RENAME", "from", "to"]),
        Reply::Status("OK".into())
    );
    assert_eq!(call(&s, &["EXISTS", "from"]), Reply::Int(0));
    assert_eq!(
        call(&s, &["LRANGE", "to", "0", "-1"]),
        Reply::Array(vec![bulk("a")])
    );
    assert_eq!(call(&s, &["DEL", "to"]), Reply::Int(1));
    // LSET and LTRIM, as Redis answers them.
    assert_eq!(code(&call(&s, &["LSET", "l", "0", "x"])), "ERR");
    assert_eq!(call(&s, &["RPUSH", "l", "a", "b", "c", "d"]), Reply::Int(4));
    assert_eq!(
        call(&s, &["LSET", "l", "-1", "z"]),
        Reply::Status("OK".into())
    );
    assert_eq!(code(&call(&s, &["LSET", "l", "4", "x"])), "ERR");
    assert_eq!(
        call(&s, &["LTRIM", "l", "1", "-1"]),
        Reply::Status("OK".into())
    );
    assert_eq!(
        call(&s, &["LRANGE", "l", "0", "-1"]),
        Reply::Array(vec![bulk("b"), bulk("c"), bulk("z")])
    );
    assert_eq!(
        call(&s, &["LTRIM", "l", "5", "-1"]),
        Reply::Status("OK".into())
    );
    assert_eq!(call(&s, &["EXISTS", "l"]), Reply::Int(0));
}

#[test]
fn unknown_commands_are_errors_naming_them() {
    let s = MemoryServer::new();
    // Its scripts name keys they do not declare (what is checked is elsewhere).
    s.strict_keys(false);
    let r = call(&s, &["XADD", "s", "*", "f", "v"]);
    let Reply::Error(e) = &r else { panic!("{r:?}") };
    assert!(e.message.contains("XADD"), "{e:?}");
    let r = eval(&s, "return redis.call('SUNION', 'a')", &[], &[]);
    let Reply::Error(e) = &r else { panic!("{r:?}") };
    assert!(e.message.contains("SUNION"), "{e:?}");
    let r = call(&s, &["ZRANGE", "z", "0", "1", "BYSCORE"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.message.contains("BYSCORE")),
        "{r:?}"
    );
}

#[test]
fn lua_to_resp_conversion_follows_redis() {
    let s = MemoryServer::new();
    // Its scripts name keys they do not declare (what is checked is elsewhere).
    s.strict_keys(false);
    assert_eq!(eval(&s, "return 3.99", &[], &[]), Reply::Int(3));
    assert_eq!(eval(&s, "return -3.99", &[], &[]), Reply::Int(-3));
    assert_eq!(eval(&s, "return false", &[], &[]), Reply::Nil);
    assert_eq!(eval(&s, "return true", &[], &[]), Reply::Int(1));
    assert_eq!(eval(&s, "return nil", &[], &[]), Reply::Nil);
    assert_eq!(
        eval(&s, "return {1, 'a', {2}, nil, 5}", &[], &[]),
        Reply::Array(vec![
            Reply::Int(1),
            bulk("a"),
            Reply::Array(vec![Reply::Int(2)])
        ])
    );
    assert_eq!(
        eval(&s, "return {1, false, 2}", &[], &[]),
        Reply::Array(vec![Reply::Int(1), Reply::Nil, Reply::Int(2)])
    );
    assert_eq!(
        eval(&s, "return redis.status_reply('FINE')", &[], &[]),
        Reply::Status("FINE".into())
    );
    assert_eq!(
        eval(&s, "return {ok='X'}", &[], &[]),
        Reply::Status("X".into())
    );
    let r = eval(&s, "return redis.error_reply('MY bad thing')", &[], &[]);
    assert_eq!(
        r,
        Reply::Error(redlease_core::ErrorReply::parse("MY bad thing"))
    );
    let r = eval(&s, "return redis.error_reply('oops')", &[], &[]);
    assert_eq!(
        r,
        Reply::Error(redlease_core::ErrorReply::parse("ERR oops"))
    );
    // RESP -> Lua: nil is false, status a table, numbers numbers.
    assert_eq!(
        eval(
            &s,
            "return {redis.call('GET', KEYS[1]) == false, redis.call('SET', KEYS[1], ARGV[1]).ok, redis.call('INCR', KEYS[1]) + 1}",
            &["k"],
            &["41"]
        ),
        Reply::Array(vec![Reply::Int(1), bulk("OK"), Reply::Int(43)])
    );
    // Lua numbers as arguments: %.17g, integers without a fraction.
    assert_eq!(
        eval(
            &s,
            "redis.call('SET', 'n', 1767225600000 + 5) return redis.call('GET', 'n')",
            &[],
            &[]
        ),
        bulk("1767225600005")
    );
    assert_eq!(
        eval(
            &s,
            "redis.call('SET', 'n', 0.5) return redis.call('GET', 'n')",
            &[],
            &[]
        ),
        bulk("0.5")
    );
    // pcall returns the error as a table; call raises it with the script's line.
    assert_eq!(
        eval(
            &s,
            "redis.call('HSET', 'h', 'f', 'v')\nlocal e = redis.pcall('GET', 'h')\nreturn e.err",
            &[],
            &[]
        ),
        bulk("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    let r = eval(&s, "local x = 1\nreturn redis.call('GET', 'h')", &[], &[]);
    let Reply::Error(e) = &r else { panic!("{r:?}") };
    assert_eq!(e.code, "WRONGTYPE");
    assert!(e.message.ends_with("on @user_script:2."), "{e:?}");
    // Runtime errors, globals.
    let r = eval(&s, "return nil < 1", &[], &[]);
    assert!(
        matches!(&r, Reply::Error(e) if e.code == "ERR" && e.message.starts_with("user_script:1: attempt to compare")),
        "{r:?}"
    );
    let r = eval(&s, "return undefined_thing", &[], &[]);
    assert!(
        matches!(&r, Reply::Error(e) if e.message.contains("nonexistent global variable 'undefined_thing'")),
        "{r:?}"
    );
    let r = eval(&s, "x = 1", &[], &[]);
    assert!(matches!(&r, Reply::Error(e) if e.code == "ERR"), "{r:?}");
    assert_eq!(
        code(&eval(&s, "return redis.call('WAIT', 0, 0)", &[], &[])),
        "ERR"
    );
}

#[test]
fn evalsha_needs_a_known_script_and_restart_forgets_it() {
    let s = MemoryServer::new();
    let script = "return ARGV[1]";
    let sha = sha1_hex(script.as_bytes());
    assert_eq!(code(&call(&s, &["EVALSHA", &sha, "0", "x"])), "NOSCRIPT");
    assert_eq!(call(&s, &["SCRIPT", "LOAD", script]), bulk(&sha));
    assert_eq!(
        call(&s, &["EVALSHA", &sha.to_uppercase(), "0", "x"]),
        bulk("x")
    );
    s.restart_empty();
    assert_eq!(code(&call(&s, &["EVALSHA", &sha, "0", "x"])), "NOSCRIPT");
    assert_eq!(eval(&s, script, &[], &["y"]), bulk("y"));
    assert_eq!(
        call(&s, &["EVALSHA", &sha, "0", "z"]),
        bulk("z"),
        "EVAL caches"
    );
    assert_eq!(code(&call(&s, &["EVAL", script, "2", "a"])), "ERR");
    assert_eq!(code(&call(&s, &["EVAL", script, "-1"])), "ERR");
}

/// `EVAL_RO` / `EVALSHA_RO` run a script that reads, and refuse a write inside one (as
/// Redis 7 does) without writing anything.
#[test]
fn read_only_scripts_read_and_are_refused_writes() {
    let s = MemoryServer::new();
    assert_eq!(call(&s, &["SET", "k", "v"]), Reply::Status("OK".into()));
    let read = "return redis.call('GET', KEYS[1])";
    assert_eq!(call(&s, &["EVAL_RO", read, "1", "k"]), bulk("v"));
    let sha = sha1_hex(read.as_bytes());
    assert_eq!(call(&s, &["EVALSHA_RO", &sha, "1", "k"]), bulk("v"));
    let unknown = sha1_hex(b"return 2");
    assert_eq!(code(&call(&s, &["EVALSHA_RO", &unknown, "0"])), "NOSCRIPT");
    let write = "redis.call('SET', KEYS[1], 'w') return 1";
    let r = call(&s, &["EVAL_RO", write, "1", "k"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.message.contains("not allowed from read-only scripts")),
        "{r:?}"
    );
    assert_eq!(call(&s, &["GET", "k"]), bulk("v"));
    // The same script as a plain EVAL writes.
    assert_eq!(call(&s, &["EVAL", write, "1", "k"]), Reply::Int(1));
    assert_eq!(call(&s, &["GET", "k"]), bulk("w"));
}

#[test]
fn the_lease_scripts_run_on_the_virtual_clock() {
    let s = MemoryServer::new();
    let ks = Keyspace::default();
    let ttl = Duration::from_millis(1000);
    let a = LockSpec::lease(&ks, "m", Token::new("a").unwrap(), ttl).unwrap();
    let b = LockSpec::lease(&ks, "m", Token::new("b").unwrap(), ttl).unwrap();
    let run = |c: Command| s.execute(&c).unwrap();
    // A grant answers the fence: the server clock in µs.
    let start_us = s.clock().unix_micros();
    assert_eq!(run(a.acquire.eval()), Reply::Int(start_us));
    s.clock().advance(Duration::from_millis(400));
    assert_eq!(
        run(b.acquire.evalsha()),
        Reply::Array(vec![Reply::Int(0), Reply::Int(600)])
    );
    s.clock().advance(Duration::from_millis(601));
    assert_eq!(run(b.acquire.evalsha()), Reply::Int(start_us + 1_001_000));
    assert_eq!(run(a.calls.release().eval()), Reply::Int(-1));
    assert_eq!(run(b.calls.release().eval()), Reply::Int(1));
}

#[test]
fn scripts_publish_to_subscribers() {
    let s = MemoryServer::new();
    let sub = s.subscriber();
    assert!(sub.subscribe(&["ch"]));
    assert_eq!(call(&s, &["PUBLISH", "ch", "hi"]), Reply::Int(1));
    assert_eq!(call(&s, &["PUBLISH", "other", "hi"]), Reply::Int(0));
    assert_eq!(
        call(&s, &["SPUBLISH", "ch", "x"]),
        Reply::Int(0),
        "shard channels are apart"
    );
    assert_eq!(
        eval(
            &s,
            "return redis.call('PUBLISH', 'ch', 'from lua')",
            &[],
            &[]
        ),
        Reply::Int(1)
    );
    let m = sub.try_recv().unwrap();
    assert_eq!(
        (m.channel.as_slice(), m.payload.as_slice(), m.sharded),
        (&b"ch"[..], &b"hi"[..], false)
    );
    assert_eq!(sub.try_recv().unwrap().payload, b"from lua");
    assert!(sub.try_recv().is_none());
    assert!(sub.ssubscribe(&["sh"]));
    assert_eq!(call(&s, &["SPUBLISH", "sh", "x"]), Reply::Int(1));
    assert!(sub.try_recv().unwrap().sharded);
    // Dropped messages still count their subscriber.
    s.drop_next_messages(1);
    assert_eq!(call(&s, &["PUBLISH", "ch", "lost"]), Reply::Int(1));
    assert!(sub.try_recv().is_none());
    assert_eq!(s.dropped_messages(), 1);
    assert_eq!(call(&s, &["PUBLISH", "ch", "kept"]), Reply::Int(1));
    assert_eq!(sub.try_recv().unwrap().payload, b"kept");
    assert!(sub.unsubscribe(&["ch"]));
    assert_eq!(call(&s, &["PUBLISH", "ch", "x"]), Reply::Int(0));
    // A restart cuts the connection.
    s.restart_empty();
    assert!(!sub.is_connected());
    assert!(sub.receiver().try_recv().is_err());
    drop(sub);
    assert_eq!(call(&s, &["SPUBLISH", "sh", "x"]), Reply::Int(0));
}

#[test]
fn faults_lose_replies_pause_restart_and_evict() {
    let s = MemoryServer::new();
    s.lose_next_reply(Loss::BeforeRun);
    assert_eq!(s.call(&["SET", "k", "1"]), Err(MemoryFault::RequestLost));
    assert_eq!(call(&s, &["GET", "k"]), Reply::Nil, "it did not run");
    s.lose_next_reply(Loss::AfterRun);
    assert_eq!(s.call(&["SET", "k", "1"]), Err(MemoryFault::ReplyLost));
    assert_eq!(call(&s, &["GET", "k"]), bulk("1"), "it ran");
    let f: redlease_core::TransportFailure = MemoryFault::ReplyLost.into();
    assert_eq!(f.kind, redlease_core::FailureKind::NoReply);

    s.pause();
    assert_eq!(s.call(&["SET", "k", "2"]), Err(MemoryFault::Paused));
    s.resume();
    assert_eq!(call(&s, &["GET", "k"]), bulk("1"));

    let snap = s.snapshot();
    call(&s, &["SET", "k", "2"]);
    call(&s, &["SET", "j", "3", "PX", "100"]);
    s.restart_from(&snap);
    assert_eq!(call(&s, &["GET", "k"]), bulk("1"));
    assert_eq!(call(&s, &["GET", "j"]), Reply::Nil);
    // A snapshot keeps absolute expiry times.
    call(&s, &["SET", "j", "3", "PX", "100"]);
    let snap = s.snapshot();
    s.clock().advance(Duration::from_millis(200));
    s.restart_from(&snap);
    assert_eq!(call(&s, &["GET", "j"]), Reply::Nil);
    let sub = s.subscriber();
    s.refuse_connections(true);
    assert_eq!(s.call(&["SET", "k", "3"]), Err(MemoryFault::Refused));
    assert!(!sub.is_connected(), "refusing cuts subscribers");
    let f: redlease_core::TransportFailure = MemoryFault::Refused.into();
    assert_eq!(f.kind, redlease_core::FailureKind::NotSent);
    s.refuse_connections(false);
    assert_eq!(
        call(&s, &["GET", "k"]),
        bulk("1"),
        "the refused SET did not run"
    );
    s.pause();
    s.restart_empty();
    assert!(!s.is_paused());
    assert!(s.keys().is_empty());
    call(&s, &["SET", "k", "1"]);
    assert!(s.evict("k"));
    assert!(!s.evict("k"));
    assert_eq!(call(&s, &["GET", "k"]), Reply::Nil);
}

#[test]
fn g17_formats_like_c() {
    assert_eq!(format_g17(1767225600000.0), "1767225600000");
    assert_eq!(format_g17(280375465082881.0), "280375465082881");
    assert_eq!(format_g17(0.1), "0.10000000000000001");
    assert_eq!(format_g17(1e17), "1e+17");
    assert_eq!(format_g17(1.5e-5), "1.5e-05");
    assert_eq!(format_g17(-2.0), "-2");
    assert_eq!(format_g17(f64::INFINITY), "inf");
}

#[test]
fn script_errors_read_as_redis_7_0_writes_them() {
    let s = MemoryServer::new();
    let sha = |src: &str| sha1_hex(src.as_bytes());
    let src = "return 1 +";
    assert_eq!(
        eval(&s, src, &[], &[]),
        Reply::Error(redlease_core::ErrorReply::parse(
            "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"
        ))
    );
    let src = "error({err='MY y'})";
    assert_eq!(
        eval(&s, src, &[], &[]),
        Reply::Error(redlease_core::ErrorReply::parse(&format!(
            "MY y script: {}, on @user_script:1.",
            sha(src)
        )))
    );
    let src = "error('x')";
    assert_eq!(
        eval(&s, src, &[], &[]),
        Reply::Error(redlease_core::ErrorReply::parse(&format!(
            "ERR user_script:1: x script: {}, on @user_script:1.",
            sha(src)
        )))
    );
    let src = "return redis.call('GET')";
    assert_eq!(
        eval(&s, src, &[], &[]),
        Reply::Error(redlease_core::ErrorReply::parse(&format!(
            "ERR Wrong number of args calling Redis command from script script: {}, on @user_script:1.",
            sha(src)
        )))
    );
    let src = "return redis.call({})";
    assert_eq!(
        eval(&s, src, &[], &[]),
        Reply::Error(redlease_core::ErrorReply::parse(&format!(
            "ERR Lua redis lib command arguments must be strings or integers script: {}, on @user_script:1.",
            sha(src)
        )))
    );
}

#[test]
fn handles_cross_threads() {
    fn shareable<T: Send + Sync + Clone>() {}
    shareable::<MemoryServer>();
    shareable::<MemoryClock>();
    fn sendable<T: Send>() {}
    sendable::<Subscriber>();
    sendable::<Snapshot>();
    // Two threads share one server and one clock.
    let s = MemoryServer::new();
    let t = {
        let s = s.clone();
        std::thread::spawn(move || call(&s, &["INCR", "n"]))
    };
    call(&s, &["INCR", "n"]);
    t.join().unwrap();
    assert_eq!(call(&s, &["GET", "n"]), bulk("2"));
}

#[test]
fn a_script_touches_only_the_keys_it_declares_unless_it_says_otherwise() {
    let s = MemoryServer::new();
    let touch = "redis.call('SET', KEYS[1], 'a'); return redis.call('SET', 'other', 'b')";
    let refused = eval(&s, touch, &["mine"], &[]);
    assert_eq!(code(&refused), "ERR", "{refused:?}");
    assert!(
        format!("{refused:?}").contains("undeclared key"),
        "{refused:?}"
    );
    // Declared, it runs; with Dragonfly's flag as its first line, it runs too.
    assert_eq!(
        eval(&s, touch, &["mine", "other"], &[]),
        Reply::Status("OK".into())
    );
    let flagged = format!("{}{touch}", redlease_core::script::prelude::UNDECLARED_KEYS);
    assert_eq!(
        eval(&s, &flagged, &["mine"], &[]),
        Reply::Status("OK".into())
    );
    // Keyless commands and multi-key ones are judged by their keys.
    let multi = "return redis.call('DEL', KEYS[1], 'elsewhere')";
    assert_eq!(code(&eval(&s, multi, &["mine"], &[])), "ERR");
    assert_eq!(
        eval(&s, "return redis.call('TIME')[1] ~= nil", &[], &[]),
        Reply::Int(1)
    );
    // Off, as Redis and Valkey run scripts.
    s.strict_keys(false);
    assert_eq!(eval(&s, touch, &["mine"], &[]), Reply::Status("OK".into()));
}
