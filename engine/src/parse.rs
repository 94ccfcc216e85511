//! The request parser: RESP arrays of bulk strings, and inline commands (`PING\r\n`), as Redis
//! accepts them.
//!
//! The parser never allocates in proportion to what a client claims: lengths are checked
//! against limits before anything is reserved, and "not enough bytes yet" is the normal
//! `Ok(None)` outcome, so a command split across reads at any byte parses the same.
//! Requests are flat: a nested aggregate is a protocol error, as in Redis.

use std::ops::Range;

use smallvec::SmallVec;

/// Where a request's arguments lie in the buffer: inline up to four, the common commands'
/// count (`GET k`, `SET k v`, `HSET k f v`), so parsing them allocates nothing.
pub type ArgRanges = SmallVec<[Range<usize>; 4]>;

/// Longest inline request or length line Redis accepts (`PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE_LEN: usize = 64 * 1024;

/// Limits that bound what one request may claim.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `proto-max-bulk-len`.
    pub max_bulk_len: usize,
    /// Most arguments in one request.
    pub max_multibulk_len: usize,
}

impl Limits {
    /// The limits `settings` set for client requests.
    pub fn of(settings: &crate::config::settings::Settings) -> Limits {
        Limits { max_bulk_len: settings.proto_max_bulk_len, max_multibulk_len: 1024 * 1024 }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bulk_len: 512 * 1024 * 1024, max_multibulk_len: 1024 * 1024 }
    }
}

/// A request the parser rejected. The connection replies with the message and closes,
/// because it cannot know where the next request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkLine,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkLine,
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
}

/// One parsed request: where each argument lies in the buffer, and how many bytes it used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Arguments are ranges into the buffer (zero copy).
    Multibulk { args: ArgRanges, len: usize },
    /// Inline arguments may contain escapes, so they are owned.
    Inline { args: Vec<Vec<u8>>, len: usize },
}

impl Request {
    /// Bytes of the buffer this request used.
    pub fn consumed(&self) -> usize {
        match self {
            Request::Multibulk { len, .. } | Request::Inline { len, .. } => *len,
        }
    }
}

/// Parses the first request in `buf`. `Ok(None)` means more bytes are needed.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits),
        Some(_) => parse_inline(buf),
    }
}

fn parse_multibulk(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    let Some((count, mut pos)) = read_length_line(buf, 1, ProtocolError::TooBigMultibulkLine)? else {
        return Ok(None);
    };
    let count = count.ok_or(ProtocolError::InvalidMultibulkLength)?;
    if count > limits.max_multibulk_len as i64 {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    if count <= 0 {
        // `*0` and `*-1` are empty requests; Redis skips them.
        return Ok(Some(Request::Multibulk { args: ArgRanges::new(), len: pos }));
    }
    let count = count as usize;
    let mut args = ArgRanges::with_capacity(count.min(1024));
    for _ in 0..count {
        let Some(&tag) = buf.get(pos) else {
            return Ok(None);
        };
        if tag != b'$' {
            return Err(ProtocolError::ExpectedBulk(tag));
        }
        let Some((len, next)) = read_length_line(buf, pos + 1, ProtocolError::TooBigBulkLine)? else {
            return Ok(None);
        };
        let len = match len {
            Some(n) if n >= 0 && n as u64 <= limits.max_bulk_len as u64 => n as usize,
            _ => return Err(ProtocolError::InvalidBulkLength),
        };
        let end = next + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError::InvalidBulkLength);
        }
        args.push(next..end);
        pos = end + 2;
    }
    Ok(Some(Request::Multibulk { args, len: pos }))
}

/// Reads a decimal length from `start` up to CRLF. Returns the value (`None` if it is not a
/// number) and the position after the CRLF, or `Ok(None)` if the line is incomplete.
#[inline(always)]
fn read_length_line(buf: &[u8], start: usize, too_long: ProtocolError) -> Result<Option<(Option<i64>, usize)>, ProtocolError> {
    if let Some(line) = read_usual_length_line(buf, start) {
        return Ok(Some(line));
    }
    read_length_line_searching(buf, start, too_long)
}

/// Most digits `read_usual_length_line` takes: 18 cannot overflow an `i64`.
const USUAL_LENGTH_DIGITS: usize = 18;

/// A length line in the form nearly every request's lines take, read byte by byte: a number
/// without a sign or a leading zero (or a lone `0`) of at most 18 digits, then a CR with a
/// byte after it. `None` for anything else (a sign, another byte, a longer number, a line not
/// all in `buf` yet), which `read_length_line_searching` reads instead, so both give the same
/// answer on every input (`tests::the_usual_length_line_reads_as_the_search_reads_it`). A
/// search for the CR costs more than reading the two or three digits of a usual line: memchr's
/// setup was ~70 instructions a call, and a `SET` has four such lines (issue 16).
#[inline]
fn read_usual_length_line(buf: &[u8], start: usize) -> Option<(Option<i64>, usize)> {
    let rest = buf.get(start..)?;
    let first = *rest.first()?;
    if first == b'0' {
        return (rest.get(1) == Some(&b'\r') && rest.len() >= 3).then_some((Some(0), start + 3));
    }
    if !first.is_ascii_digit() {
        return None;
    }
    let mut value = i64::from(first - b'0');
    let mut at = 1;
    while let Some(&c) = rest.get(at) {
        if c == b'\r' {
            return (rest.len() >= at + 2).then_some((Some(value), start + at + 2));
        }
        if !c.is_ascii_digit() || at == USUAL_LENGTH_DIGITS {
            return None;
        }
        value = value * 10 + i64::from(c - b'0');
        at += 1;
    }
    None
}

/// `read_length_line` by a search for the CR: any line, and the limit on its length. Out of
/// line, so that the usual reader inlines into the loop over a request's lines alone.
#[inline(never)]
fn read_length_line_searching(buf: &[u8], start: usize, too_long: ProtocolError) -> Result<Option<(Option<i64>, usize)>, ProtocolError> {
    let rest = &buf[start.min(buf.len())..];
    let Some(cr) = memchr::memchr(b'\r', rest) else {
        if rest.len() > MAX_INLINE_LEN {
            return Err(too_long);
        }
        return Ok(None);
    };
    if cr > MAX_INLINE_LEN {
        return Err(too_long);
    }
    if rest.len() < cr + 2 {
        return Ok(None);
    }
    let value = parse_i64(&rest[..cr]);
    Ok(Some((value, start + cr + 2)))
}

/// Parses a strict decimal integer (no spaces, no `+`, no leading zeros besides "0").
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (negative, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || negative)) {
        return None;
    }
    let mut value: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        let d = (c - b'0') as i64;
        value = if negative { value.checked_mul(10)?.checked_sub(d)? } else { value.checked_mul(10)?.checked_add(d)? };
    }
    Some(value)
}

fn parse_inline(buf: &[u8]) -> Result<Option<Request>, ProtocolError> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_INLINE_LEN {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(None);
    };
    if nl > MAX_INLINE_LEN {
        return Err(ProtocolError::TooBigInline);
    }
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let args = split_args(line).ok_or(ProtocolError::UnbalancedQuotes)?;
    Ok(Some(Request::Inline { args, len: nl + 1 }))
}

/// Splits a line like Redis's `sdssplitargs`: whitespace separates, double quotes allow
/// `\n \r \t \b \a \xHH \\ \"` escapes, single quotes allow `\'`. `None` on bad quoting.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            if in_double {
                let c = *line.get(i)?;
                if c == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' {
                    let hex = std::str::from_utf8(&line[i + 2..i + 4]).ok();
                    if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        current.push(v);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    i += 1;
                    current.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    // A closing quote must be followed by a space or the end.
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    in_double = false;
                    i += 1;
                    break;
                } else {
                    current.push(c);
                }
            } else if in_single {
                let c = *line.get(i)?;
                if c == b'\\' && line.get(i + 1) == Some(&b'\'') {
                    i += 1;
                    current.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    in_single = false;
                    i += 1;
                    break;
                } else {
                    current.push(c);
                }
            } else {
                match line.get(i) {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(&c) => current.push(c),
                }
            }
            i += 1;
        }
        if in_double || in_single {
            return None;
        }
        args.push(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args_of(buf: &[u8], req: &Request) -> Vec<Vec<u8>> {
        match req {
            Request::Multibulk { args, .. } => args.iter().map(|r| buf[r.clone()].to_vec()).collect(),
            Request::Inline { args, .. } => args.clone(),
        }
    }

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    #[test]
    fn parses_multibulk_and_inline() {
        let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let req = parse_request(buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(req.consumed(), buf.len());
        assert_eq!(args_of(buf, &req), vec![b"GET".to_vec(), b"k".to_vec()]);

        let buf = b"set k \"a b\\x41\"\r\n";
        let req = parse_request(buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(args_of(buf, &req), vec![b"set".to_vec(), b"k".to_vec(), b"a bA".to_vec()]);
    }

    #[test]
    fn rejects_bad_lengths_and_nesting() {
        let l = Limits::default();
        assert_eq!(parse_request(b"*-10\r\n", &l), Ok(Some(Request::Multibulk { args: ArgRanges::new(), len: 6 })));
        assert_eq!(parse_request(b"*abc\r\n", &l), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(parse_request(b"*3000000000\r\n", &l), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(parse_request(b"*1\r\n$-1\r\n", &l), Err(ProtocolError::InvalidBulkLength));
        assert_eq!(parse_request(b"*1\r\n$99999999999\r\n", &l), Err(ProtocolError::InvalidBulkLength));
        assert_eq!(parse_request(b"*1\r\n*1\r\n$1\r\na\r\n", &l), Err(ProtocolError::ExpectedBulk(b'*')));
        assert_eq!(parse_request(b"*1\r\n$1\r\nab\r\n", &l), Err(ProtocolError::InvalidBulkLength));
        assert_eq!(parse_request(b"set \"a\r\n", &l), Err(ProtocolError::UnbalancedQuotes));
        let long = vec![b'a'; MAX_INLINE_LEN + 10];
        assert_eq!(parse_request(&long, &l), Err(ProtocolError::TooBigInline));
    }

    #[test]
    fn the_usual_length_lines_are_read_without_a_search() {
        assert_eq!(read_usual_length_line(b"$100\r\nvalue", 1), Some((Some(100), 6)));
        assert_eq!(read_usual_length_line(b"*3\r\n", 1), Some((Some(3), 4)));
        assert_eq!(read_usual_length_line(b"$0\r\n", 1), Some((Some(0), 4)));
        let most = format!("${}\r\n", "9".repeat(USUAL_LENGTH_DIGITS));
        assert_eq!(read_usual_length_line(most.as_bytes(), 1), Some((Some(999_999_999_999_999_999), most.len())));
        // The rest are the search's: one digit more than the usual reader takes, a sign, a
        // leading zero, a line not all in yet.
        let longer = format!("$1{}\r\n", "0".repeat(USUAL_LENGTH_DIGITS));
        for line in [longer.as_bytes(), b"$-1\r\n", b"$01\r\n", b"$12\r", b"$12", b"$"] {
            assert_eq!(read_usual_length_line(line, 1), None, "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(read_length_line(longer.as_bytes(), 1, ProtocolError::TooBigBulkLine), Ok(Some((Some(1_000_000_000_000_000_000), longer.len()))));
    }

    #[test]
    fn huge_claimed_bulk_is_incomplete_without_allocation() {
        let l = Limits { max_bulk_len: 1 << 30, max_multibulk_len: 1 << 20 };
        assert_eq!(parse_request(b"*1\r\n$1000000000\r\nabc", &l), Ok(None));
    }

    proptest! {
        /// Any request split at any byte is incomplete until its last byte arrives, then
        /// parses to the same arguments.
        #[test]
        fn split_reads_parse_identically(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..6)) {
            let buf = encode(&args);
            let limits = Limits::default();
            for cut in 0..buf.len() {
                prop_assert_eq!(parse_request(&buf[..cut], &limits), Ok(None));
            }
            let req = parse_request(&buf, &limits).unwrap().unwrap();
            prop_assert_eq!(req.consumed(), buf.len());
            prop_assert_eq!(args_of(&buf, &req), args);
        }

        /// Lines made of runs of digits (leading zeros, 19 or 20 of them), signs, CRs, LFs
        /// and other bytes read the same through the usual line's reader as through the
        /// search, from any start.
        #[test]
        fn the_usual_length_line_reads_as_the_search_reads_it(
            pieces in proptest::collection::vec(
                prop_oneof!["[0-9]{1,20}", Just("-".to_string()), Just("+".to_string()), Just("\r".to_string()), Just("\n".to_string()), Just("\r\n".to_string()), Just("a".to_string())],
                0..5,
            ),
            start in 0usize..3,
        ) {
            let buf = format!("{}{}", "$".repeat(start), pieces.concat()).into_bytes();
            let e = ProtocolError::TooBigBulkLine;
            prop_assert_eq!(read_length_line(&buf, start, e), read_length_line_searching(&buf, start, e));
            prop_assert_eq!(read_length_line(&buf, start + 1, e), read_length_line_searching(&buf, start + 1, e));
        }

        /// Arbitrary bytes never panic and never claim more than the buffer holds.
        #[test]
        fn garbage_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(Some(req)) = parse_request(&buf, &Limits::default()) {
                prop_assert!(req.consumed() <= buf.len());
            }
        }
    }
}
