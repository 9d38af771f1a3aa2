//! Scripts: the very Lua sources redlease sends, run in Lua 5.1 (the version Redis embeds)
//! with Redis' `redis.*` API and its Lua <-> RESP conversion rules.
//!
//! Lua -> RESP (a script's return value): a number is truncated to an integer, a string is
//! a bulk string, `true` is 1, `false` and `nil` are nil, a table with an `err` field is an
//! error reply, one with an `ok` field a status reply, any other table an array that stops at
//! its first nil. RESP -> Lua (what `redis.call` returns): integers are numbers, bulk strings
//! strings, nil is `false`, a status is `{ok = ...}`, an array a table, an error raised
//! (`redis.call`) or returned as `{err = ...}` (`redis.pcall`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue};
use redlease_core::{ErrorReply, Reply};

use super::commands::{self, Ctx, err, format_g17};

/// Redis' sandbox: no file access, globals read-only, reading an unknown global an error,
/// `redis.error_reply` / `redis.status_reply` and `redis.REDIS_VERSION(_NUM)` as Redis 7.0
/// defines them (scripts may take a path only 7.0+ has: `SET NX GET`).
const PRELUDE: &str = r#"
dofile = nil
loadfile = nil
redis = {}
redis.REDIS_VERSION = '7.0.0'
redis.REDIS_VERSION_NUM = 0x070000
redis.status_reply = function(s)
  return {ok = s}
end
redis.error_reply = function(e)
  if type(e) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  if string.sub(e, 1, 1) == '-' then
    e = string.sub(e, 2)
  end
  if not string.find(e, ' ', 1, true) then
    e = 'ERR ' .. e
  end
  e = string.gsub(e, '[\r\n]+$', '')
  return {err = e}
end
setmetatable(_G, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
  __newindex = function(_, k)
    error('Attempt to modify a readonly table', 2)
  end,
})
"#;

/// An error raised by `redis.call`, carried through Lua to the script's caller.
#[derive(Debug)]
struct Raised {
    line: String,
}

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for Raised {}

/// The interpreter and the compiled scripts (by SHA-1).
pub(crate) struct LuaEngine {
    lua: Lua,
    compiled: HashMap<String, Function>,
}

impl LuaEngine {
    pub(crate) fn new() -> Result<Self, String> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        lua.load(PRELUDE)
            .set_name("=prelude")
            .exec()
            .map_err(|e| e.to_string())?;
        Ok(LuaEngine {
            lua,
            compiled: HashMap::new(),
        })
    }

    /// Runs script `sha` (source `source`) with `keys` and `args` against `ctx`.
    pub(crate) fn eval(
        &mut self,
        sha: &str,
        source: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        ctx: &mut Ctx<'_>,
    ) -> Reply {
        let func = match self.compiled.get(sha) {
            Some(f) => f.clone(),
            None => {
                match self
                    .lua
                    .load(source)
                    .set_name("@user_script")
                    .into_function()
                {
                    Ok(f) => {
                        self.compiled.insert(sha.to_owned(), f.clone());
                        f
                    }
                    Err(e) => {
                        let text = match &e {
                            mlua::Error::SyntaxError { message, .. } => message.clone(),
                            other => other.to_string(),
                        };
                        return err(&format!(
                            "ERR Error compiling script (new function): {}",
                            first_line(&text)
                        ));
                    }
                }
            }
        };
        let funcname = sha.to_owned();
        let lua = &self.lua;
        let cell = RefCell::new(ctx);
        let at = Cell::new(None);
        let result = lua.scope(|scope| {
            let globals = lua.globals();
            globals.raw_set("KEYS", string_table(lua, keys)?)?;
            globals.raw_set("ARGV", string_table(lua, args)?)?;
            let redis: Table = globals.raw_get("redis")?;
            let call = scope
                .create_function(|lua, args: MultiValue| redis_call(lua, &cell, args, true))?;
            let pcall = scope
                .create_function(|lua, args: MultiValue| redis_call(lua, &cell, args, false))?;
            redis.raw_set("call", call)?;
            redis.raw_set("pcall", pcall)?;
            // Redis runs a script under an error handler that notes the script's line where
            // the error arose (in the script itself, or in the redis.call it made).
            let handler = scope.create_function(|lua, e: LuaValue| {
                at.set((1..16).find_map(|level| {
                    lua.inspect_stack(level, |d| {
                        let in_script = d.source().source.as_deref() == Some("@user_script");
                        in_script.then(|| d.current_line()).flatten()
                    })
                    .flatten()
                }));
                Ok(e)
            })?;
            let xpcall: Function = globals.raw_get("xpcall")?;
            let (ok, value): (bool, LuaValue) = xpcall.call((func, handler))?;
            Ok(if ok {
                to_reply(&value)
            } else {
                failure(lua, value, at.get(), &funcname)
            })
        });
        match result {
            Ok(reply) => reply,
            Err(e) => err(&format!("ERR {}", first_line(&e.to_string()))),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.split("\nstack traceback").next().unwrap_or(s).trim_end()
}

fn string_table(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

/// `redis.call` (`raise`) and `redis.pcall`.
fn redis_call(
    lua: &Lua,
    cell: &RefCell<&mut Ctx<'_>>,
    args: MultiValue,
    raise: bool,
) -> mlua::Result<LuaValue> {
    let fail = |line: String| -> mlua::Result<LuaValue> {
        if raise {
            Err(mlua::Error::external(Raised { line }))
        } else {
            error_table(lua, &line)
        }
    };
    if args.is_empty() {
        return fail("ERR Please specify at least one argument for this redis lib call".into());
    }
    let mut argv = Vec::with_capacity(args.len());
    for a in args.iter() {
        match a {
            LuaValue::String(s) => argv.push(s.as_bytes().to_vec()),
            LuaValue::Number(n) => argv.push(format_g17(*n).into_bytes()),
            LuaValue::Integer(i) => argv.push(format_g17(*i as f64).into_bytes()),
            _ => {
                return fail(
                    "ERR Lua redis lib command arguments must be strings or integers".into(),
                );
            }
        }
    }
    let reply = {
        let mut ctx = cell
            .try_borrow_mut()
            .map_err(|_| mlua::Error::RecursiveMutCallback)?;
        ctx.in_script = true;
        let undeclared = ctx.declared.is_some_and(|declared| {
            commands::keys_of(&argv)
                .iter()
                .any(|k| !declared.contains(k))
        });
        if undeclared {
            commands::err("ERR script tried accessing undeclared key")
        } else {
            commands::run(&mut ctx, &argv)
        }
    };
    match reply {
        Reply::Error(e) => fail(error_line(&e)),
        other => to_lua(lua, &other),
    }
}

fn error_line(e: &ErrorReply) -> String {
    if e.message.is_empty() {
        e.code.clone()
    } else {
        format!("{} {}", e.code, e.message)
    }
}

fn error_table(lua: &Lua, line: &str) -> mlua::Result<LuaValue> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(line)?)?;
    Ok(LuaValue::Table(t))
}

/// RESP -> Lua.
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(n) => LuaValue::Number(*n as f64),
        Reply::Bulk(b) => LuaValue::String(lua.create_string(b)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(s)?)?;
            LuaValue::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Reply::Error(e) => error_table(lua, &error_line(e))?,
    })
}

/// Lua -> RESP.
fn to_reply(value: &LuaValue) -> Reply {
    match value {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(i) => Reply::Int(*i),
        // C's (long long) cast truncates toward zero.
        LuaValue::Number(n) => Reply::Int(n.trunc() as i64),
        LuaValue::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Reply::Error(ErrorReply::parse(&e.to_string_lossy()));
            }
            if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
                return Reply::Status(s.to_string_lossy());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(v) => items.push(to_reply(&v)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// The error reply of a script that failed with `error`, in Redis 7.0's form: `<error>
/// script: <sha>, on @user_script:<line>.` An error table keeps its code, a raised string
/// gets `ERR`, an error of `redis.call` is the command's error.
fn failure(lua: &Lua, error: LuaValue, at: Option<usize>, funcname: &str) -> Reply {
    let text = match &error {
        LuaValue::Error(e) => match find_raised(e) {
            Some(raised) => raised.line.clone(),
            None => format!("ERR {}", first_line(&e.to_string())),
        },
        LuaValue::Table(t) => match t.raw_get::<LuaValue>("err") {
            Ok(LuaValue::String(e)) => e.to_string_lossy(),
            _ => "ERR execution failure".into(),
        },
        other => {
            let s = lua
                .coerce_string(other.clone())
                .ok()
                .flatten()
                .map(|s| s.to_string_lossy());
            format!("ERR {}", s.unwrap_or_else(|| other.type_name().into()))
        }
    };
    match at {
        Some(line) => err(&format!(
            "{text} script: {funcname}, on @user_script:{line}."
        )),
        None => err(&text),
    }
}

fn find_raised(e: &mlua::Error) -> Option<&Raised> {
    match e {
        mlua::Error::CallbackError { cause, .. } => find_raised(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<Raised>(),
        _ => None,
    }
}
