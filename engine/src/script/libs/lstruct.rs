//! `struct`: Roberto Ierusalimschy's struct library as Redis vendors it
//! (`deps/lua/src/lua_struct.c`), ported to Rust with its formats, sizes, alignment rules and
//! messages on x86-64 (native order little-endian, `long`/`size_t` 8 bytes, `int` 4, maximum
//! alignment 8).
//!
//! Formats: `>` `<` byte order, `!n` maximum alignment, `x` a zero byte, `b B h H l L T i[n]
//! I[n]` integers (lowercase signed, `n` up to 32 bytes), `f` `d` floats, `s` a zero-terminated
//! string, `c[n]` `n` characters (`c0`: the whole string when packing, the length unpacked just
//! before when unpacking), spaces ignored.

use mlua::{Lua, MultiValue, Table, Value};

const MAX_INT_SIZE: usize = 32;
const MAX_ALIGN: usize = 8;

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

const DEFAULTS: Header = Header { little: true, align: 1 };

fn arg_error(arg: usize, function: &str, msg: &str) -> mlua::Error {
    mlua::Error::runtime(format!("bad argument #{arg} to '{function}' ({msg})"))
}

/// Reads the digits at `fmt[*i..]`, or returns `default`.
fn getnum(fmt: &[u8], i: &mut usize, default: usize) -> mlua::Result<usize> {
    if !fmt.get(*i).is_some_and(u8::is_ascii_digit) {
        return Ok(default);
    }
    let mut a: usize = 0;
    while let Some(d) = fmt.get(*i).filter(|c| c.is_ascii_digit()) {
        a = a
            .checked_mul(10)
            .and_then(|a| a.checked_add((d - b'0') as usize))
            .filter(|&a| a <= i32::MAX as usize)
            .ok_or_else(|| mlua::Error::runtime("integral size overflow"))?;
        *i += 1;
    }
    Ok(a)
}

fn optsize(opt: u8, fmt: &[u8], i: &mut usize) -> mlua::Result<usize> {
    Ok(match opt {
        b'B' | b'b' => 1,
        b'H' | b'h' => 2,
        b'L' | b'l' | b'T' | b'd' => 8,
        b'f' => 4,
        b'x' => 1,
        b'c' => getnum(fmt, i, 1)?,
        b'i' | b'I' => {
            let size = getnum(fmt, i, 4)?;
            if size > MAX_INT_SIZE {
                return Err(mlua::Error::runtime(format!("integral size {size} is larger than limit of {MAX_INT_SIZE}")));
            }
            size
        }
        _ => 0,
    })
}

fn gettoalign(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size - (len & (size - 1))) & (size - 1)
}

fn controloptions(opt: u8, fmt: &[u8], i: &mut usize, h: &mut Header, function: &str) -> mlua::Result<()> {
    match opt {
        b' ' => {}
        b'>' => h.little = false,
        b'<' => h.little = true,
        b'!' => {
            let a = getnum(fmt, i, MAX_ALIGN)?;
            if !a.is_power_of_two() {
                return Err(mlua::Error::runtime(format!("alignment {a} is not a power of 2")));
            }
            h.align = a;
        }
        _ => return Err(arg_error(1, function, &format!("invalid format option '{}'", opt as char))),
    }
    Ok(())
}

fn number(args: &[Value], arg: usize, function: &str) -> mlua::Result<f64> {
    match args.get(arg - 1) {
        Some(Value::Integer(n)) => Ok(*n as f64),
        Some(Value::Number(n)) => Ok(*n),
        Some(Value::String(s)) => s.to_str().ok().and_then(|s| s.trim().parse().ok()).ok_or_else(|| arg_error(arg, function, "number expected, got string")),
        Some(other) => Err(arg_error(arg, function, &format!("number expected, got {}", other.type_name()))),
        None => Err(arg_error(arg, function, "number expected, got no value")),
    }
}

fn string(args: &[Value], arg: usize, function: &str) -> mlua::Result<Vec<u8>> {
    match args.get(arg - 1) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(n)) => Ok(n.to_string().into_bytes()),
        Some(Value::Number(n)) => Ok(super::format_g(*n, 14).into_bytes()),
        Some(other) => Err(arg_error(arg, function, &format!("string expected, got {}", other.type_name()))),
        None => Err(arg_error(arg, function, "string expected, got no value")),
    }
}

fn put_integer(out: &mut Vec<u8>, n: f64, little: bool, size: usize) {
    let mut value: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
    let mut bytes = vec![0u8; size];
    for b in bytes.iter_mut() {
        *b = (value & 0xff) as u8;
        value = value.checked_shr(8).unwrap_or(0);
    }
    if !little {
        bytes.reverse();
    }
    out.extend_from_slice(&bytes);
}

fn get_integer(data: &[u8], little: bool, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut push = |b: u8| l = (l << 8) | b as u64;
    if little {
        data.iter().rev().for_each(|&b| push(b));
    } else {
        data.iter().for_each(|&b| push(b));
    }
    if !signed {
        return l as f64;
    }
    // As the C code on x86-64: the shift count wraps at 64 bits.
    let mask = u64::MAX.wrapping_shl((data.len() * 8 - 1) as u32);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn pack(args: &[Value]) -> mlua::Result<Vec<u8>> {
    let fmt = string(args, 1, "pack")?;
    let mut h = DEFAULTS;
    let mut arg = 2;
    let mut out = Vec::new();
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let mut size = optsize(opt, &fmt, &mut i)?;
        let toalign = gettoalign(out.len(), &h, opt, size);
        out.resize(out.len() + toalign, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                put_integer(&mut out, number(args, arg, "pack")?, h.little, size);
                arg += 1;
            }
            b'x' => out.push(0),
            b'f' => {
                let f = number(args, arg, "pack")? as f32;
                arg += 1;
                out.extend_from_slice(&if h.little { f.to_le_bytes() } else { f.to_be_bytes() });
            }
            b'd' => {
                let d = number(args, arg, "pack")?;
                arg += 1;
                out.extend_from_slice(&if h.little { d.to_le_bytes() } else { d.to_be_bytes() });
            }
            b'c' | b's' => {
                let s = string(args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // Redis's copy names the next argument here.
                    return Err(arg_error(arg, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => controloptions(opt, &fmt, &mut i, &mut h, "pack")?,
        }
    }
    Ok(out)
}

fn unpack(lua: &Lua, args: &[Value]) -> mlua::Result<MultiValue> {
    let fmt = string(args, 1, "unpack")?;
    let data = string(args, 2, "unpack")?;
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        Some(_) => number(args, 3, "unpack")?,
    };
    if start < 1.0 {
        return Err(arg_error(3, "unpack", "offset must be 1 or greater"));
    }
    let mut pos = start as usize - 1;
    let mut h = DEFAULTS;
    let mut results: Vec<Value> = Vec::new();
    let too_short = || arg_error(2, "unpack", "data string too short");
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let mut size = optsize(opt, &fmt, &mut i)?;
        pos += gettoalign(pos, &h, opt, size);
        if size > data.len() || pos > data.len() - size {
            return Err(too_short());
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                results.push(Value::Number(get_integer(&data[pos..pos + size], h.little, opt.is_ascii_lowercase())));
            }
            b'x' => {}
            b'f' => {
                let bytes: [u8; 4] = data[pos..pos + 4].try_into().map_err(|_| too_short())?;
                results.push(Value::Number(if h.little { f32::from_le_bytes(bytes) } else { f32::from_be_bytes(bytes) } as f64));
            }
            b'd' => {
                let bytes: [u8; 8] = data[pos..pos + 8].try_into().map_err(|_| too_short())?;
                results.push(Value::Number(if h.little { f64::from_le_bytes(bytes) } else { f64::from_be_bytes(bytes) }));
            }
            b'c' => {
                if size == 0 {
                    let Some(previous) = results.pop().and_then(|v| v.as_number().or(v.as_integer().map(|n| n as f64))) else {
                        return Err(mlua::Error::runtime("format 'c0' needs a previous size"));
                    };
                    size = previous as usize;
                    if size > data.len() || pos > data.len() - size {
                        return Err(too_short());
                    }
                }
                results.push(Value::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&c| c == 0) else {
                    return Err(mlua::Error::runtime("unfinished string in data"));
                };
                results.push(Value::String(lua.create_string(&data[pos..pos + end])?));
                size = end + 1;
            }
            _ => controloptions(opt, &fmt, &mut i, &mut h, "unpack")?,
        }
        pos += size;
    }
    results.push(Value::Integer(pos as i64 + 1));
    Ok(results.into_iter().collect())
}

fn size(args: &[Value]) -> mlua::Result<usize> {
    let fmt = string(args, 1, "size")?;
    let mut h = DEFAULTS;
    let mut pos = 0;
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let size = optsize(opt, &fmt, &mut i)?;
        pos += gettoalign(pos, &h, opt, size);
        if opt == b's' {
            return Err(arg_error(1, "size", "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(arg_error(1, "size", "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            controloptions(opt, &fmt, &mut i, &mut h, "size")?;
        }
        pos += size;
    }
    Ok(pos)
}

pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            lua.create_string(pack(&args)?)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            unpack(lua, &args)
        })?,
    )?;
    t.raw_set(
        "size",
        lua.create_function(|_, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            size(&args)
        })?,
    )?;
    Ok(t)
}
