//! The libraries Redis gives scripts beyond Lua's own: `bit` (LuaBitOp), `cjson`, `cmsgpack`
//! and `struct`, reimplemented in Rust with the original libraries' behaviour and messages
//! (Redis vendors C versions of them, the source of several of its CVEs).

pub mod bit;
pub mod cjson;
pub mod cmsgpack;
pub mod lstruct;

use mlua::{Function, Lua, Table, Value};

/// Installs the libraries into `globals`, each a frozen table whose functions go through
/// `wrap` (errors positioned as the C libraries' are).
pub fn install(lua: &Lua, globals: &Table, wrap: &Function) -> mlua::Result<()> {
    for (name, table) in [("bit", bit::create(lua)?), ("cjson", cjson::create(lua)?), ("cmsgpack", cmsgpack::create(lua)?), ("struct", lstruct::create(lua)?)] {
        let functions: Vec<(Value, Function)> = table
            .pairs::<Value, Value>()
            .filter_map(|pair| match pair {
                Ok((k, Value::Function(f))) => Some(Ok((k, f))),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<mlua::Result<_>>()?;
        for (key, f) in functions {
            table.raw_set(key, wrap.call::<Function>(f)?)?;
        }
        table.set_readonly(true);
        globals.raw_set(name, table)?;
    }
    Ok(())
}

/// `printf("%.<precision>g")`.
pub fn format_g(d: f64, precision: usize) -> String {
    if d.is_nan() {
        return if d.is_sign_negative() { "-nan".into() } else { "nan".into() };
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let p = precision.max(1);
    let sci = format!("{:.*e}", p - 1, d);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let mantissa = trim_zeros(mantissa);
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, d)).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::format_g;

    #[test]
    fn format_g_matches_printf() {
        assert_eq!(format_g(0.1, 14), "0.1");
        assert_eq!(format_g(100.0, 14), "100");
        assert_eq!(format_g(1.0 / 3.0, 14), "0.33333333333333");
        assert_eq!(format_g(1e20, 14), "1e+20");
        assert_eq!(format_g(-5e3, 14), "-5000");
        assert_eq!(format_g(0.0003, 14), "0.0003");
        assert_eq!(format_g(1.5e-5, 14), "1.5e-05");
        assert_eq!(format_g(123456789012345.0, 14), "1.2345678901234e+14");
    }
}
