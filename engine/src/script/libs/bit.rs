//! `bit`: LuaBitOp 1.0's functions on 32-bit integers, as Redis exposes them.

use mlua::{Lua, Table, Variadic};

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

pub fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("tobit", lua.create_function(|_, x: f64| Ok(tobit(x)))?)?;
    t.raw_set("bnot", lua.create_function(|_, x: f64| Ok(!tobit(x)))?)?;
    t.raw_set("band", lua.create_function(|_, (x, rest): (f64, Variadic<f64>)| Ok(rest.iter().fold(tobit(x), |a, &b| a & tobit(b))))?)?;
    t.raw_set("bor", lua.create_function(|_, (x, rest): (f64, Variadic<f64>)| Ok(rest.iter().fold(tobit(x), |a, &b| a | tobit(b))))?)?;
    t.raw_set("bxor", lua.create_function(|_, (x, rest): (f64, Variadic<f64>)| Ok(rest.iter().fold(tobit(x), |a, &b| a ^ tobit(b))))?)?;
    t.raw_set("lshift", lua.create_function(|_, (x, n): (f64, f64)| Ok(((tobit(x) as u32) << (tobit(n) & 31)) as i32))?)?;
    t.raw_set("rshift", lua.create_function(|_, (x, n): (f64, f64)| Ok(((tobit(x) as u32) >> (tobit(n) & 31)) as i32))?)?;
    t.raw_set("arshift", lua.create_function(|_, (x, n): (f64, f64)| Ok(tobit(x) >> (tobit(n) & 31)))?)?;
    t.raw_set("rol", lua.create_function(|_, (x, n): (f64, f64)| Ok((tobit(x) as u32).rotate_left((tobit(n) & 31) as u32) as i32))?)?;
    t.raw_set("ror", lua.create_function(|_, (x, n): (f64, f64)| Ok((tobit(x) as u32).rotate_right((tobit(n) & 31) as u32) as i32))?)?;
    t.raw_set("bswap", lua.create_function(|_, x: f64| Ok((tobit(x) as u32).swap_bytes() as i32))?)?;
    t.raw_set("tohex", lua.create_function(|_, (x, n): (f64, Option<f64>)| Ok(tohex(tobit(x), n.map_or(8, tobit))))?)?;
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
