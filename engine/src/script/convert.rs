//! Conversions between command replies and Lua values, both ways, exactly as Redis documents
//! them (<https://redis.io/docs/interact/programmability/lua-api/>, "Data type conversion").
//!
//! Reply → Lua depends on the script's `redis.setresp` (2 by default): in RESP2 a map is a
//! flat array, a double a string, a boolean an integer, a null `false`. Lua → reply depends on
//! the calling client's protocol only for booleans.

use bytes::Bytes;
use mlua::{Lua, Table, Value};

use crate::frame::Frame;

/// Deepest table a script may return; deeper (or self-referencing) tables end in Redis's
/// "reached lua stack limit" error at that depth.
const MAX_DEPTH: usize = 500;

/// A command's reply as the script sees it.
pub fn frame_to_lua(lua: &Lua, frame: &Frame, resp: u8) -> mlua::Result<Value> {
    Ok(match frame {
        Frame::Simple(s) => single(lua, "ok", Value::String(lua.create_string(s)?))?,
        Frame::Status(s) => single(lua, "ok", Value::String(lua.create_string(s)?))?,
        Frame::Error(e) => single(lua, "err", Value::String(lua.create_string(e)?))?,
        Frame::Integer(n) => Value::Number(*n as f64),
        Frame::Bulk(b) => Value::String(lua.create_string(b)?),
        Frame::Null | Frame::NullArray if resp >= 3 => Value::Nil,
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Array(items) | Frame::Push(items) | Frame::Sequence(items) => array(lua, items, resp)?,
        Frame::Set(items) if resp >= 3 => {
            let set = lua.create_table_with_capacity(0, items.len())?;
            for item in items {
                set.raw_set(frame_to_lua(lua, item, resp)?, true)?;
            }
            single(lua, "set", Value::Table(set))?
        }
        Frame::Set(items) => array(lua, items, resp)?,
        Frame::Map(pairs) if resp >= 3 => {
            let map = lua.create_table_with_capacity(0, pairs.len())?;
            for (k, v) in pairs {
                map.raw_set(frame_to_lua(lua, k, resp)?, frame_to_lua(lua, v, resp)?)?;
            }
            single(lua, "map", Value::Table(map))?
        }
        Frame::Map(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, frame_to_lua(lua, k, resp)?)?;
                t.raw_set(2 * i + 2, frame_to_lua(lua, v, resp)?)?;
            }
            Value::Table(t)
        }
        Frame::Double(d) if resp >= 3 => single(lua, "double", Value::Number(*d))?,
        Frame::Double(d) => Value::String(lua.create_string(crate::frame::format_double_g17(*d))?),
        Frame::Boolean(b) if resp >= 3 => Value::Boolean(*b),
        Frame::Boolean(b) => Value::Number(if *b { 1.0 } else { 0.0 }),
        Frame::Verbatim(text) if resp >= 3 => {
            let v = lua.create_table()?;
            v.raw_set("format", "txt")?;
            v.raw_set("string", lua.create_string(text)?)?;
            single(lua, "verbatim_string", Value::Table(v))?
        }
        Frame::Verbatim(text) => Value::String(lua.create_string(text)?),
        Frame::BigNumber(n) if resp >= 3 => single(lua, "big_number", Value::String(lua.create_string(n)?))?,
        Frame::BigNumber(n) => Value::String(lua.create_string(n)?),
    })
}

fn single(lua: &Lua, field: &str, value: Value) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set(field, value)?;
    Ok(Value::Table(t))
}

fn array(lua: &Lua, items: &[Frame], resp: u8) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, frame_to_lua(lua, item, resp)?)?;
    }
    Ok(Value::Table(t))
}

/// A script's return value as the reply to a client speaking `client_resp`.
pub fn lua_to_frame(value: &Value, client_resp: u8) -> Frame {
    to_frame(value, client_resp, 0)
}

fn to_frame(value: &Value, resp: u8, depth: usize) -> Frame {
    if depth > MAX_DEPTH {
        return Frame::error("ERR reached lua stack limit");
    }
    match value {
        Value::String(s) => Frame::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Boolean(b) if resp >= 3 => Frame::Boolean(*b),
        Value::Boolean(true) => Frame::Integer(1),
        Value::Integer(n) => Frame::Integer(*n),
        Value::Number(n) => Frame::Integer(c_cast(*n)),
        Value::Table(t) => table_to_frame(t, resp, depth),
        _ => Frame::Null,
    }
}

fn table_to_frame(t: &Table, resp: u8, depth: usize) -> Frame {
    let field = |name: &str| t.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(err) = field("err") {
        return Frame::Error(error_text(&err.as_bytes()));
    }
    if let Value::String(ok) = field("ok") {
        return Frame::Status(Bytes::copy_from_slice(&ok.as_bytes()));
    }
    if let Some(d) = number(&field("double")) {
        return Frame::Double(d);
    }
    if let Value::String(n) = field("big_number") {
        let text: Vec<u8> = n.as_bytes().iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect();
        return Frame::BigNumber(Bytes::from(text));
    }
    if let Value::Table(v) = field("verbatim_string") {
        if let (Ok(Value::String(_)), Ok(Value::String(s))) = (v.raw_get::<Value>("format"), v.raw_get::<Value>("string")) {
            return Frame::Verbatim(Bytes::copy_from_slice(&s.as_bytes()));
        }
    }
    if let Value::Table(m) = field("map") {
        let mut pairs = Vec::new();
        for (k, v) in m.pairs::<Value, Value>().flatten() {
            pairs.push((to_frame(&k, resp, depth + 1), to_frame(&v, resp, depth + 1)));
        }
        return Frame::Map(pairs);
    }
    if let Value::Table(s) = field("set") {
        let members = s.pairs::<Value, Value>().flatten().map(|(k, _)| to_frame(&k, resp, depth + 1)).collect();
        return Frame::Set(members);
    }
    // An array: elements 1, 2, ... up to the first nil.
    let mut items = Vec::new();
    let mut i = 1;
    loop {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => {
                let frame = to_frame(&v, resp, depth + 1);
                let stop = depth + 1 > MAX_DEPTH;
                items.push(frame);
                if stop {
                    break;
                }
            }
        }
        i += 1;
    }
    Frame::Array(items)
}

/// Redis's `(long long)` cast of a Lua number on x86-64: toward zero, and NaN or a value out
/// of range becomes `i64::MIN` (`math.huge` and `1 % 0` reply `:-9223372036854775808`).
fn c_cast(n: f64) -> i64 {
    let limit = -(i64::MIN as f64); // 2^63, exactly
    if !(-limit..limit).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// An error table's text as a reply: Redis adds no prefix when the text has one, and strips a
/// leading '-'.
pub fn error_text(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.strip_prefix('-').unwrap_or(&text);
    text.trim_end_matches(['\r', '\n']).to_string()
}

#[cfg(test)]
mod tests {
    use super::c_cast;

    #[test]
    fn numbers_convert_as_redis_casts_them() {
        assert_eq!(c_cast(3.99), 3);
        assert_eq!(c_cast(-3.99), -3);
        assert_eq!(c_cast(f64::INFINITY), i64::MIN);
        assert_eq!(c_cast(f64::NAN), i64::MIN);
        assert_eq!(c_cast(i64::MIN as f64), i64::MIN);
        assert_eq!(c_cast(-(i64::MIN as f64)), i64::MIN);
    }
}
