//! `cjson`: Lua CJSON 2.1's `encode`/`decode` and settings, as Redis exposes them.
//!
//! Encoding follows CJSON: numbers with `%.14g`, `/` escaped as `\/`, a table whose keys are
//! all positive integers is an array (an excessively sparse one is an error), any other
//! table an object with string or number keys, `cjson.null` is `null`.

use std::cell::Cell;
use std::rc::Rc;

use mlua::{LightUserData, Lua, Table, Value};

struct Settings {
    encode_max_depth: Cell<usize>,
    decode_max_depth: Cell<usize>,
    encode_invalid_numbers: Cell<bool>,
    decode_invalid_numbers: Cell<bool>,
    keep_buffer: Cell<bool>,
    precision: Cell<usize>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            encode_max_depth: Cell::new(1000),
            decode_max_depth: Cell::new(1000),
            encode_invalid_numbers: Cell::new(false),
            decode_invalid_numbers: Cell::new(true),
            keep_buffer: Cell::new(true),
            precision: Cell::new(14),
        }
    }
}

pub fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let settings = Rc::new(Settings::default());
    let t = lua.create_table()?;
    let s = settings.clone();
    t.raw_set(
        "encode",
        lua.create_function(move |_, value: Value| {
            let mut out = Vec::new();
            encode(&value, &s, 0, &mut out).map_err(mlua::Error::runtime)?;
            Ok(mlua::BString::from(out))
        })?,
    )?;
    let s = settings.clone();
    t.raw_set(
        "decode",
        lua.create_function(move |lua, text: mlua::LuaString| {
            let json: serde_json::Value =
                serde_json::from_slice(&text.as_bytes()).map_err(|e| mlua::Error::runtime(format!("Expected value but found invalid token: {e}")))?;
            if depth(&json) > s.decode_max_depth.get() {
                return Err(mlua::Error::runtime(format!("Found too many nested data structures ({}) at character 1", s.decode_max_depth.get() + 1)));
            }
            to_lua(lua, &json)
        })?,
    )?;
    let s = settings.clone();
    t.raw_set("encode_max_depth", lua.create_function(move |_, n: Option<usize>| Ok(set_usize(&s.encode_max_depth, n)))?)?;
    let s = settings.clone();
    t.raw_set("decode_max_depth", lua.create_function(move |_, n: Option<usize>| Ok(set_usize(&s.decode_max_depth, n)))?)?;
    let s = settings.clone();
    t.raw_set("encode_number_precision", lua.create_function(move |_, n: Option<usize>| Ok(set_usize(&s.precision, n.map(|n| n.clamp(1, 14)))))?)?;
    let s = settings.clone();
    t.raw_set("encode_invalid_numbers", lua.create_function(move |_, v: Option<Value>| Ok(set_bool(&s.encode_invalid_numbers, v)))?)?;
    let s = settings.clone();
    t.raw_set("decode_invalid_numbers", lua.create_function(move |_, v: Option<Value>| Ok(set_bool(&s.decode_invalid_numbers, v)))?)?;
    let s = settings;
    t.raw_set("encode_keep_buffer", lua.create_function(move |_, v: Option<Value>| Ok(set_bool(&s.keep_buffer, v)))?)?;
    t.raw_set("null", null())?;
    Ok(t)
}

fn set_usize(cell: &Cell<usize>, n: Option<usize>) -> usize {
    if let Some(n) = n {
        cell.set(n.max(1));
    }
    cell.get()
}

fn set_bool(cell: &Cell<bool>, v: Option<Value>) -> bool {
    match v {
        Some(Value::Boolean(b)) => cell.set(b),
        Some(Value::String(s)) => cell.set(matches!(&*s.as_bytes(), b"on" | b"null")),
        _ => {}
    }
    cell.get()
}

fn encode(value: &Value, s: &Settings, level: usize, out: &mut Vec<u8>) -> Result<(), String> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Number(n) => {
            if !n.is_finite() && !s.encode_invalid_numbers.get() {
                return Err("Cannot serialise number: must not be NaN or Inf".into());
            }
            out.extend_from_slice(super::format_g(*n, s.precision.get()).as_bytes());
        }
        Value::String(text) => string(&text.as_bytes(), out),
        Value::Table(t) => table(t, s, level + 1, out)?,
        other => return Err(format!("Cannot serialise {}: type not supported", other.type_name())),
    }
    Ok(())
}

fn string(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in text {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn table(t: &Table, s: &Settings, level: usize, out: &mut Vec<u8>) -> Result<(), String> {
    if level > s.encode_max_depth.get() {
        return Err(format!("Cannot serialise, excessive nesting ({level})"));
    }
    let pairs: Vec<(Value, Value)> = t.pairs::<Value, Value>().collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    match array_length(&pairs)? {
        Some(len) => {
            out.push(b'[');
            for i in 1..=len {
                if i > 1 {
                    out.push(b',');
                }
                let v = t.raw_get::<Value>(i).map_err(|e| e.to_string())?;
                encode(&v, s, level, out)?;
            }
            out.push(b']');
        }
        None => {
            out.push(b'{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match k {
                    Value::String(text) => string(&text.as_bytes(), out),
                    Value::Integer(n) => string(n.to_string().as_bytes(), out),
                    Value::Number(n) => string(super::format_g(*n, s.precision.get()).as_bytes(), out),
                    _ => return Err("Cannot serialise table: table key must be a number or string".into()),
                }
                out.push(b':');
                encode(v, s, level, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// CJSON's array test: every key a positive integer; `Some(max)` for an array (sparse ones
/// with `max > 10` and `max > 2 * count` are an error), `None` for an object. An empty table is
/// an object (`{}`).
fn array_length(pairs: &[(Value, Value)]) -> Result<Option<usize>, String> {
    let mut max = 0usize;
    for (k, _) in pairs {
        let n = match k {
            Value::Integer(n) if *n >= 1 => *n as usize,
            Value::Number(n) if *n >= 1.0 && n.fract() == 0.0 => *n as usize,
            _ => return Ok(None),
        };
        max = max.max(n);
    }
    if pairs.is_empty() {
        return Ok(None);
    }
    if max > 10 && max > 2 * pairs.len() {
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok(Some(max))
}

fn depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn to_lua(lua: &Lua, v: &serde_json::Value) -> mlua::Result<Value> {
    Ok(match v {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(k.as_str(), to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}
