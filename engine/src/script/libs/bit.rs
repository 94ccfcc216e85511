//! `bit`: LuaBitOp 1.0's functions on 32-bit integers, as Redis exposes them.

use mlua::{Function, Lua, MultiValue, Table, Value};

/// LuaBitOp's `tobit`: the number rounded to an integer, wrapped to a signed 32-bit value.
pub fn tobit(x: f64) -> i32 {
    // LuaBitOp adds 2^52 + 2^51 and keeps the low 32 bits of the mantissa: round half to even,
    // modulo 2^32.
    let r = x.round_ties_even();
    if !r.is_finite() {
        return 0;
    }
    (r.rem_euclid(4294967296.0) as u64 as u32) as i32
}

/// Argument `i` (1-based) of `function` as a number, with Lua's own error when it is not one.
fn arg(args: &[Value], i: usize, function: &str) -> mlua::Result<f64> {
    match args.get(i - 1) {
        Some(Value::Integer(n)) => Ok(*n as f64),
        Some(Value::Number(n)) => Ok(*n),
        Some(Value::String(s)) if s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok()).is_some() => {
            Ok(s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok()).unwrap_or_default())
        }
        other => {
            let got = other.map_or("no value", |v| v.type_name());
            Err(mlua::Error::runtime(format!("bad argument #{i} to '{function}' (number expected, got {got})")))
        }
    }
}

/// A `bit` function of one argument.
fn unary(lua: &Lua, name: &'static str, f: fn(i32) -> i32) -> mlua::Result<Function> {
    lua.create_function(move |_, args: MultiValue| {
        let args: Vec<Value> = args.into_iter().collect();
        Ok(f(tobit(arg(&args, 1, name)?)))
    })
}

/// A `bit` function folding its arguments (`band`, `bor`, `bxor`).
fn fold(lua: &Lua, name: &'static str, f: fn(i32, i32) -> i32) -> mlua::Result<Function> {
    lua.create_function(move |_, args: MultiValue| {
        let args: Vec<Value> = args.into_iter().collect();
        let mut acc = tobit(arg(&args, 1, name)?);
        for i in 2..=args.len() {
            acc = f(acc, tobit(arg(&args, i, name)?));
        }
        Ok(acc)
    })
}

/// A shift or rotation: `x` by `n` (mod 32).
fn shift(lua: &Lua, name: &'static str, f: fn(i32, u32) -> i32) -> mlua::Result<Function> {
    lua.create_function(move |_, args: MultiValue| {
        let args: Vec<Value> = args.into_iter().collect();
        let x = tobit(arg(&args, 1, name)?);
        let n = tobit(arg(&args, 2, name)?) & 31;
        Ok(f(x, n as u32))
    })
}

pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("tobit", unary(lua, "tobit", |x| x)?)?;
    t.raw_set("bnot", unary(lua, "bnot", |x| !x)?)?;
    t.raw_set("bswap", unary(lua, "bswap", |x| (x as u32).swap_bytes() as i32)?)?;
    t.raw_set("band", fold(lua, "band", |a, b| a & b)?)?;
    t.raw_set("bor", fold(lua, "bor", |a, b| a | b)?)?;
    t.raw_set("bxor", fold(lua, "bxor", |a, b| a ^ b)?)?;
    t.raw_set("lshift", shift(lua, "lshift", |x, n| ((x as u32) << n) as i32)?)?;
    t.raw_set("rshift", shift(lua, "rshift", |x, n| ((x as u32) >> n) as i32)?)?;
    t.raw_set("arshift", shift(lua, "arshift", |x, n| x >> n)?)?;
    t.raw_set("rol", shift(lua, "rol", |x, n| (x as u32).rotate_left(n) as i32)?)?;
    t.raw_set("ror", shift(lua, "ror", |x, n| (x as u32).rotate_right(n) as i32)?)?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, args: MultiValue| {
            let args: Vec<Value> = args.into_iter().collect();
            let x = tobit(arg(&args, 1, "tohex")?);
            let n = if matches!(args.get(1), None | Some(Value::Nil)) { 8 } else { tobit(arg(&args, 2, "tohex")?) };
            Ok(tohex(x, n))
        })?,
    )?;
    Ok(t)
}

/// `bit.tohex(x, n)`: the low `|n|` hex digits, uppercase when `n` is negative.
fn tohex(x: i32, n: i32) -> String {
    let upper = n < 0;
    let digits = n.unsigned_abs().min(8) as usize;
    let text = if upper { format!("{:08X}", x as u32) } else { format!("{:08x}", x as u32) };
    text[8 - digits..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tobit_wraps_like_luabitop() {
        assert_eq!(tobit(1.0), 1);
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(2147483648.0), -2147483648);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tohex(255, 8), "000000ff");
        assert_eq!(tohex(-1, -4), "FFFF");
    }
}
