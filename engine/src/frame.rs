//! Reply frames and their RESP2/RESP3 encodings.
//!
//! Commands build `Frame`s without knowing the client's protocol; the connection encodes them
//! with the protocol the client chose with `HELLO`. RESP3-only types (maps, sets, doubles,
//! booleans, pushes, nulls) degrade to their RESP2 spellings exactly as Redis does, because
//! client libraries parse those spellings.

use bytes::{BufMut, Bytes, BytesMut};

/// A reply value.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Simple(&'static str),
    /// A status reply with text made at run time (a script's `{ok=...}`).
    Status(Bytes),
    Error(String),
    Integer(i64),
    Bulk(Bytes),
    /// `$-1` in RESP2, `_` in RESP3.
    Null,
    /// `*-1` in RESP2, `_` in RESP3.
    NullArray,
    Array(Vec<Frame>),
    /// A flat array of key/value pairs in RESP2.
    Map(Vec<(Frame, Frame)>),
    /// A plain array in RESP2.
    Set(Vec<Frame>),
    /// A bulk string with `%.17g` in RESP2, as Redis 7.0.
    Double(f64),
    /// `:1`/`:0` in RESP2.
    Boolean(bool),
    /// An out-of-band message; an array in RESP2.
    Push(Vec<Frame>),
    /// Several replies to one command, written back to back (`SUBSCRIBE a b`).
    Sequence(Vec<Frame>),
    /// `=` verbatim text in RESP3 (`INFO`, `CLIENT LIST`), a bulk string in RESP2.
    Verbatim(Bytes),
    /// `(` big number in RESP3 (scripts' `big_number` replies), a bulk string in RESP2.
    BigNumber(Bytes),
}

pub const OK: Frame = Frame::Simple("OK");

impl Frame {
    pub fn error(msg: impl Into<String>) -> Frame {
        Frame::Error(msg.into())
    }

    pub fn bulk(data: impl AsRef<[u8]>) -> Frame {
        Frame::Bulk(Bytes::copy_from_slice(data.as_ref()))
    }

    pub fn bulk_opt(data: Option<impl AsRef<[u8]>>) -> Frame {
        data.map_or(Frame::Null, Frame::bulk)
    }

    pub fn bulk_i64(n: i64) -> Frame {
        Frame::Bulk(Bytes::copy_from_slice(itoa::Buffer::new().format(n).as_bytes()))
    }

    pub fn bulk_f64(n: f64) -> Frame {
        Frame::Bulk(Bytes::from(format_double_g17(n)))
    }

    pub fn array_of_bulks<I, B>(items: I) -> Frame
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        Frame::Array(items.into_iter().map(Frame::bulk).collect())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_))
    }

    /// Appends this frame's encoding for protocol `resp` (2 or 3) to `out`.
    pub fn encode(&self, resp: u8, out: &mut BytesMut) {
        match self {
            Frame::Simple(s) => simple(out, b'+', s.as_bytes()),
            Frame::Status(s) => simple(out, b'+', s),
            Frame::Error(s) => simple(out, b'-', s.as_bytes()),
            Frame::Integer(n) => header(out, b':', *n),
            Frame::Bulk(b) => bulk(out, b),
            Frame::Null if resp >= 3 => out.put_slice(b"_\r\n"),
            Frame::Null => out.put_slice(b"$-1\r\n"),
            Frame::NullArray if resp >= 3 => out.put_slice(b"_\r\n"),
            Frame::NullArray => out.put_slice(b"*-1\r\n"),
            Frame::Array(items) => aggregate(out, b'*', items, resp),
            Frame::Set(items) => aggregate(out, if resp >= 3 { b'~' } else { b'*' }, items, resp),
            Frame::Push(items) => aggregate(out, if resp >= 3 { b'>' } else { b'*' }, items, resp),
            Frame::Map(pairs) => {
                if resp >= 3 {
                    header(out, b'%', pairs.len() as i64);
                } else {
                    header(out, b'*', 2 * pairs.len() as i64);
                }
                for (k, v) in pairs {
                    k.encode(resp, out);
                    v.encode(resp, out);
                }
            }
            Frame::Double(d) => {
                let text = format_double_g17(*d);
                if resp >= 3 {
                    simple(out, b',', text.as_bytes());
                } else {
                    bulk(out, text.as_bytes());
                }
            }
            Frame::Boolean(b) if resp >= 3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Frame::Boolean(b) => out.put_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
            Frame::Verbatim(text) if resp >= 3 => {
                header(out, b'=', text.len() as i64 + 4);
                out.put_slice(b"txt:");
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
            Frame::Verbatim(text) => bulk(out, text),
            Frame::BigNumber(n) if resp >= 3 => simple(out, b'(', n),
            Frame::BigNumber(n) => bulk(out, n),
            Frame::Sequence(frames) => {
                for f in frames {
                    f.encode(resp, out);
                }
            }
        }
    }
}

fn simple(out: &mut BytesMut, tag: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(tag);
    // A simple string cannot carry CR or LF; Redis replaces them with spaces.
    for &c in text {
        out.put_u8(if c == b'\r' || c == b'\n' { b' ' } else { c });
    }
    out.put_slice(b"\r\n");
}

fn header(out: &mut BytesMut, tag: u8, n: i64) {
    out.put_u8(tag);
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

fn bulk(out: &mut BytesMut, data: &[u8]) {
    out.reserve(data.len() + 16);
    header(out, b'$', data.len() as i64);
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

fn aggregate(out: &mut BytesMut, tag: u8, items: &[Frame], resp: u8) {
    header(out, tag, items.len() as i64);
    for item in items {
        item.encode(resp, out);
    }
}

/// Formats like C's `printf("%.17g")`, which Redis 7.0 uses for scores and doubles.
pub fn format_double_g17(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // An integral value of at most 17 digits prints as that integer (every digit is
    // significant and exact): scores are often whole numbers, and the exact path below costs
    // a big-number expansion (ZSCORE -P 16 of an integral score: 8% of the server's time).
    if d.fract() == 0.0 && d.abs() < 1e17 {
        return itoa::Buffer::new().format(d as i64).to_owned();
    }
    format_double_g17_digits(d)
}

/// `format_double_g17` of a finite, non-zero `d`, from its 17 significant digits.
fn format_double_g17_digits(d: f64) -> String {
    // 17 significant digits in scientific form: "d.dddddddddddddddde<exp>".
    let sci = format!("{:.16e}", d);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if (-4..17).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            out.push_str(&digits[..int_len]);
            let frac = digits[int_len..].trim_end_matches('0');
            if !frac.is_empty() {
                out.push('.');
                out.push_str(frac);
            }
        } else {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(digits.trim_end_matches('0'));
        }
    } else {
        out.push_str(&digits[..1]);
        let frac = digits[1..].trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    }
    out
}

/// Formats a double the way `INCRBYFLOAT`/`HINCRBYFLOAT` reply: plain decimal, no exponent,
/// no trailing zeros (Redis uses `%.17Lf` then trims; the shortest round-trip form matches it
/// for every value a double can hold exactly).
pub fn format_double_human(d: f64) -> String {
    if d == 0.0 {
        return "0".into();
    }
    let s = format!("{}", d);
    if let Some(stripped) = s.strip_suffix(".0") {
        stripped.to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: &Frame, resp: u8) -> Vec<u8> {
        let mut out = BytesMut::new();
        f.encode(resp, &mut out);
        out.to_vec()
    }

    #[test]
    fn resp3_types_degrade_to_resp2_spellings() {
        let map = Frame::Map(vec![(Frame::bulk("a"), Frame::Integer(1))]);
        assert_eq!(enc(&map, 2), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&map, 3), b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&Frame::Null, 2), b"$-1\r\n");
        assert_eq!(enc(&Frame::NullArray, 2), b"*-1\r\n");
        assert_eq!(enc(&Frame::Null, 3), b"_\r\n");
        assert_eq!(enc(&Frame::Double(1.5), 2), b"$3\r\n1.5\r\n");
        assert_eq!(enc(&Frame::Double(1.5), 3), b",1.5\r\n");
        assert_eq!(enc(&Frame::Boolean(true), 2), b":1\r\n");
        assert_eq!(enc(&Frame::Push(vec![]), 3), b">0\r\n");
    }

    #[test]
    fn g17_matches_printf() {
        assert_eq!(format_double_g17(1.1), "1.1000000000000001");
        assert_eq!(format_double_g17(10.0), "10");
        assert_eq!(format_double_g17(-2.5), "-2.5");
        assert_eq!(format_double_g17(1e20), "1e+20");
        assert_eq!(format_double_g17(0.0001), "0.0001");
        assert_eq!(format_double_g17(1.5e-5), "1.5e-05");
        assert_eq!(format_double_g17(123456789.0), "123456789");
        assert_eq!(format_double_g17(f64::INFINITY), "inf");
        assert_eq!(format_double_g17(-7.0), "-7");
        assert_eq!(format_double_g17(99_999_999_999_999_984.0), "99999999999999984");
        assert_eq!(format_double_g17(1e17), "1e+17");
        assert_eq!(format_double_g17(-1e17), "-1e+17");
    }

    proptest::proptest! {
        #[test]
        fn whole_numbers_print_as_their_17_digits(d in -1e17f64..1e17) {
            let d = d.trunc();
            proptest::prop_assume!(d != 0.0);
            proptest::prop_assert_eq!(format_double_g17(d), format_double_g17_digits(d));
        }

        #[test]
        fn small_whole_numbers_print_as_their_digits(i in -1_000_000i64..1_000_000) {
            proptest::prop_assume!(i != 0);
            proptest::prop_assert_eq!(format_double_g17(i as f64), format_double_g17_digits(i as f64));
        }
    }

    #[test]
    fn human_doubles_have_no_trailing_zeros() {
        assert_eq!(format_double_human(10.5 + 0.1), "10.6");
        assert_eq!(format_double_human(3.0), "3");
        assert_eq!(format_double_human(5.0e3), "5000");
    }
}
