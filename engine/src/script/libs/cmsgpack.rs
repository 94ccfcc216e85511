//! `cmsgpack`: lua-cmsgpack 0.4's `pack`, `unpack`, `unpack_one` and `unpack_limit`, as
//! Redis exposes them: integers in the smallest encoding, doubles as float32 when exact,
//! tables with keys 1..n as arrays, other tables as maps, nesting past 16 encoded as nil.

use mlua::{Lua, MultiValue, Table, Value, Variadic};

const MAX_NESTING: usize = 16;

pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, values: Variadic<Value>| {
            if values.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for v in values.iter() {
                pack(v, 0, &mut out)?;
            }
            lua.create_string(out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, data: mlua::LuaString| {
            let data = data.as_bytes();
            let (_, values) = unpack_many(lua, &data, 0, 0)?;
            Ok(MultiValue::from_iter(values))
        })?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, (data, offset): (mlua::LuaString, Option<i64>)| {
            let data = data.as_bytes();
            let (next, values) = unpack_many(lua, &data, 1, offset.unwrap_or(0))?;
            Ok(MultiValue::from_iter(std::iter::once(Value::Integer(next)).chain(values)))
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(|lua, (data, limit, offset): (mlua::LuaString, i64, Option<i64>)| {
            let data = data.as_bytes();
            let (next, values) = unpack_many(lua, &data, limit.max(0) as usize, offset.unwrap_or(0))?;
            Ok(MultiValue::from_iter(std::iter::once(Value::Integer(next)).chain(values)))
        })?,
    )?;
    Ok(t)
}

fn pack(v: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => pack_int(*n, out),
        Value::Number(n) => {
            if n.fract() == 0.0 && n.abs() < 9.2e18 {
                pack_int(*n as i64, out);
            } else if (*n as f32) as f64 == *n || n.is_nan() {
                out.push(0xca);
                out.extend_from_slice(&(*n as f32).to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
        Value::String(s) => {
            let s = s.as_bytes();
            let len = s.len();
            if len < 32 {
                out.push(0xa0 | len as u8);
            } else if len <= 0xff {
                out.extend_from_slice(&[0xd9, len as u8]);
            } else if len <= 0xffff {
                out.push(0xda);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            } else {
                out.push(0xdb);
                out.extend_from_slice(&(len as u32).to_be_bytes());
            }
            out.extend_from_slice(&s);
        }
        Value::Table(t) if level < MAX_NESTING => pack_table(t, level + 1, out)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn pack_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2147483648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_table(t: &Table, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    let pairs: Vec<(Value, Value)> = t.pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
    let mut max = 0;
    let array = pairs.iter().all(|(k, _)| match k {
        Value::Integer(n) if *n >= 1 => {
            max = max.max(*n as usize);
            true
        }
        _ => false,
    }) && max == pairs.len();
    let len = pairs.len();
    let (small, mid, big) = if array { (0x90u8, 0xdcu8, 0xddu8) } else { (0x80, 0xde, 0xdf) };
    if len < 16 {
        out.push(small | len as u8);
    } else if len <= 0xffff {
        out.push(mid);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(big);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    if array {
        for i in 1..=len {
            pack(&t.raw_get::<Value>(i)?, level, out)?;
        }
    } else {
        for (k, v) in &pairs {
            pack(k, level, out)?;
            pack(v, level, out)?;
        }
    }
    Ok(())
}

/// Decodes up to `limit` objects (0: all) from `offset`; returns the next offset (-1 at the
/// end) and the objects.
fn unpack_many(lua: &Lua, data: &[u8], limit: usize, offset: i64) -> mlua::Result<(i64, Vec<Value>)> {
    if offset < 0 || offset as usize > data.len() {
        return Err(mlua::Error::runtime("Start offset greater than input length"));
    }
    let mut cursor = Cursor { data, pos: offset as usize };
    let mut values = Vec::new();
    while cursor.pos < data.len() && (limit == 0 || values.len() < limit) {
        values.push(cursor.value(lua)?);
    }
    let next = if cursor.pos >= data.len() { -1 } else { cursor.pos as i64 };
    Ok((next, values))
}

struct Cursor<'d> {
    data: &'d [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> mlua::Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or_else(|| mlua::Error::runtime("Missing bytes in input."))?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn uint(&mut self, n: usize) -> mlua::Result<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    fn value(&mut self, lua: &Lua) -> mlua::Result<Value> {
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Integer(tag as i64),
            0x80..=0x8f => self.map(lua, (tag & 0x0f) as usize)?,
            0x90..=0x9f => self.array(lua, (tag & 0x0f) as usize)?,
            0xa0..=0xbf => self.string(lua, (tag & 0x1f) as usize)?,
            0xc0 => Value::Nil,
            0xc2 => Value::Boolean(false),
            0xc3 => Value::Boolean(true),
            0xc4 | 0xd9 => {
                let n = self.uint(1)? as usize;
                self.string(lua, n)?
            }
            0xc5 | 0xda => {
                let n = self.uint(2)? as usize;
                self.string(lua, n)?
            }
            0xc6 | 0xdb => {
                let n = self.uint(4)? as usize;
                self.string(lua, n)?
            }
            0xca => Value::Number(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Value::Number(f64::from_bits(self.uint(8)?)),
            0xcc => Value::Integer(self.uint(1)? as i64),
            0xcd => Value::Integer(self.uint(2)? as i64),
            0xce => Value::Integer(self.uint(4)? as i64),
            0xcf => Value::Number(self.uint(8)? as f64),
            0xd0 => Value::Integer(self.uint(1)? as u8 as i8 as i64),
            0xd1 => Value::Integer(self.uint(2)? as u16 as i16 as i64),
            0xd2 => Value::Integer(self.uint(4)? as u32 as i32 as i64),
            0xd3 => Value::Integer(self.uint(8)? as i64),
            0xdc => {
                let n = self.uint(2)? as usize;
                self.array(lua, n)?
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.array(lua, n)?
            }
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(lua, n)?
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(lua, n)?
            }
            0xe0..=0xff => Value::Integer(tag as i8 as i64),
            _ => return Err(mlua::Error::runtime("Bad data format in input.")),
        })
    }

    fn string(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        let bytes = self.take(n)?;
        Ok(Value::String(lua.create_string(bytes)?))
    }

    fn array(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        // Never trust a count more than the input could hold.
        let t = lua.create_table_with_capacity(n.min(self.data.len() - self.pos), 0)?;
        for i in 1..=n {
            let v = self.value(lua)?;
            t.raw_set(i, v)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        let t = lua.create_table_with_capacity(0, n.min(self.data.len() - self.pos))?;
        for _ in 0..n {
            let k = self.value(lua)?;
            let v = self.value(lua)?;
            if !k.is_nil() {
                t.raw_set(k, v)?;
            }
        }
        Ok(Value::Table(t))
    }
}
