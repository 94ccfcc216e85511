//! The one RESP client KeyMesh's tests use (engine black-box tests, e2e scenarios, the
//! operator's wiring test): blocking, one command and one reply at a time, RESP2 and RESP3.
//!
//! Tests want a client that shows exactly what the server sent (a status is not a bulk, a push
//! is not an array), dials from whatever socket the test opened (inside a network namespace, over
//! TLS), and never hangs a test: every read is bounded by the stream's timeout, and malformed or
//! oversized replies are errors, not allocations. Client crates do none of that.
//!
//! Two ways to call: [`Conn::call`] returns a `Result` (for code that expects partitions and dead
//! nodes), [`Conn::cmd`] panics on a broken connection (for tests where that is a failure).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Refuse replies larger than this: Redis's own `proto-max-bulk-len` default.
const MAX_BULK: usize = 512 << 20;
/// Deepest nesting accepted: deeper than any reply a server makes on purpose (a script's
/// self-referencing table is cut off by the server well before it), shallow enough that the
/// recursive reader stays far from the end of a test thread's stack.
const MAX_DEPTH: usize = 1024;

/// A reply, as a test reads it: RESP2's types plus RESP3's map, double, boolean and push. A
/// RESP3 set reads as an `Array`, a verbatim string as a `Bulk` without its format prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Double(String),
    Bool(bool),
    Push(Vec<Reply>),
}

impl Reply {
    /// The reply as text: a string's contents, an integer's digits, anything else its `Debug`.
    pub fn text(&self) -> String {
        match self {
            Reply::Status(s) | Reply::Error(s) | Reply::Double(s) => s.clone(),
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Int(n) => n.to_string(),
            other => format!("{other:?}"),
        }
    }

    /// The `text` of each element of an array or push; panics on anything else.
    pub fn texts(&self) -> Vec<String> {
        match self {
            Reply::Array(items) | Reply::Push(items) => items.iter().map(Reply::text).collect(),
            other => panic!("expected an array, got {other:?}"),
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a bulk or status string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            Reply::Status(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// A failure to exchange a command and its reply (an error *reply* is `Ok(Reply::Error)`).
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed reply: {0}")]
    Protocol(String),
}

/// A command as RESP: an array of bulk strings.
pub fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One client connection, over a TCP socket or any other stream (a TLS one).
pub struct Conn<S: Read + Write = TcpStream> {
    stream: BufReader<S>,
}

impl Conn {
    /// Connects to `127.0.0.1:port`, with reads bounded by 10 seconds; panics if it cannot.
    pub fn connect(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        Conn::new(stream, Duration::from_secs(10)).unwrap_or_else(|e| panic!("set up the connection to 127.0.0.1:{port}: {e}"))
    }

    /// Wraps a connected socket; `timeout` bounds every read and write.
    pub fn new(stream: TcpStream, timeout: Duration) -> std::io::Result<Conn> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Conn::over(stream))
    }

    /// Changes the read timeout (a test that waits on a blocking command).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.stream.get_ref().set_read_timeout(Some(timeout)).unwrap_or_else(|e| panic!("set the read timeout: {e}"));
    }
}

impl<S: Read + Write> Conn<S> {
    /// A connection over an already connected stream, which keeps its own timeouts.
    pub fn over(stream: S) -> Conn<S> {
        Conn { stream: BufReader::new(stream) }
    }

    pub fn stream(&self) -> &S {
        self.stream.get_ref()
    }

    /// Writes bytes as they are (a pipeline, an inline command, a malformed request).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stream = self.stream.get_mut();
        stream.write_all(bytes)?;
        stream.flush()
    }

    /// Sends one command without reading its reply; panics if the write fails.
    pub fn send(&mut self, args: &[&str]) {
        self.send_raw(&encode(args)).unwrap_or_else(|e| panic!("send {args:?}: {e}"));
    }

    /// Sends one command and reads its reply; panics if the connection breaks.
    pub fn cmd(&mut self, args: &[&str]) -> Reply {
        self.send(args);
        self.read().unwrap_or_else(|| panic!("no reply to {args:?}: the connection closed or timed out"))
    }

    /// Sends one command and reads its reply.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, RespError> {
        self.send_raw(&encode(args))?;
        self.read_reply()
    }

    /// Reads one reply; `None` once the connection is closed (end of file, a reset: any
    /// failure of the stream but a timeout). Panics when the read times out, so that a test
    /// expecting the server to close a connection cannot pass because it merely stayed silent
    /// (it did, for as long as the timeout, when a timeout read as `None` too). Panics on a
    /// malformed reply (a server bug the test should show, not a closed connection).
    pub fn read(&mut self) -> Option<Reply> {
        match self.read_reply() {
            Ok(reply) => Some(reply),
            Err(RespError::Io(e)) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("no reply within the read timeout: the connection is open and silent ({e})")
            }
            Err(RespError::Io(_)) => None,
            Err(RespError::Protocol(e)) => panic!("malformed reply: {e}"),
        }
    }

    /// Reads one reply.
    pub fn read_reply(&mut self) -> Result<Reply, RespError> {
        self.read_nested(0)
    }

    fn read_nested(&mut self, depth: usize) -> Result<Reply, RespError> {
        if depth > MAX_DEPTH {
            return Err(RespError::Protocol("nested too deeply".into()));
        }
        let line = self.read_line()?;
        let (tag, rest) = line.split_at(1);
        Ok(match tag {
            "+" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Int(parse_int(rest)?),
            "," => Reply::Double(rest.to_owned()),
            "#" => match rest {
                "t" => Reply::Bool(true),
                "f" => Reply::Bool(false),
                _ => return Err(RespError::Protocol(format!("bad boolean {line:?}"))),
            },
            "_" => Reply::Nil,
            "$" | "=" => {
                let Some(len) = parse_len(rest)? else { return Ok(Reply::Nil) };
                let mut body = vec![0; len + 2];
                self.stream.read_exact(&mut body)?;
                if !body.ends_with(b"\r\n") {
                    return Err(RespError::Protocol("bulk string not followed by CRLF".into()));
                }
                body.truncate(len);
                if tag == "=" {
                    // A verbatim string: `txt:` or `mkd:` before the text.
                    body.drain(..4.min(body.len()));
                }
                Reply::Bulk(body)
            }
            "*" | "~" | ">" => {
                let Some(len) = parse_len(rest)? else { return Ok(Reply::Nil) };
                let items = (0..len).map(|_| self.read_nested(depth + 1)).collect::<Result<Vec<_>, _>>()?;
                if tag == ">" {
                    Reply::Push(items)
                } else {
                    Reply::Array(items)
                }
            }
            "%" => {
                let Some(len) = parse_len(rest)? else { return Ok(Reply::Nil) };
                let mut pairs = Vec::with_capacity(len.min(1024));
                for _ in 0..len {
                    pairs.push((self.read_nested(depth + 1)?, self.read_nested(depth + 1)?));
                }
                Reply::Map(pairs)
            }
            _ => return Err(RespError::Protocol(format!("unexpected reply type in {line:?}"))),
        })
    }

    fn read_line(&mut self) -> Result<String, RespError> {
        let mut line = Vec::new();
        (&mut self.stream).take(MAX_BULK as u64).read_until(b'\n', &mut line)?;
        if line.is_empty() {
            return Err(RespError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if !line.ends_with(b"\r\n") || line.len() < 3 {
            return Err(RespError::Protocol(format!("bad line {:?}", String::from_utf8_lossy(&line))));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|e| RespError::Protocol(format!("non-UTF-8 line: {e}")))
    }
}

fn parse_int(s: &str) -> Result<i64, RespError> {
    s.parse().map_err(|_| RespError::Protocol(format!("bad integer {s:?}")))
}

/// A length, or `None` for -1 (RESP2's nil bulk and nil array).
fn parse_len(s: &str) -> Result<Option<usize>, RespError> {
    match parse_int(s)? {
        -1 => Ok(None),
        n if n >= 0 && (n as usize) <= MAX_BULK => Ok(Some(n as usize)),
        n => Err(RespError::Protocol(format!("bad length {n}"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A stream that reads `input` and swallows writes.
    struct Canned(Cursor<Vec<u8>>);

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn read_all(input: &[u8]) -> Vec<Result<Reply, String>> {
        let mut conn = Conn::over(Canned(Cursor::new(input.to_vec())));
        let mut out = Vec::new();
        loop {
            match conn.read_reply() {
                Err(RespError::Io(_)) => return out,
                r => out.push(r.map_err(|e| e.to_string())),
            }
        }
    }

    #[test]
    fn reads_every_resp2_and_resp3_type() {
        let input = b"+OK\r\n-ERR no\r\n:-7\r\n$3\r\na\r\n\r\n$-1\r\n*-1\r\n_\r\n,1.5\r\n#t\r\n#f\r\n=8\r\ntxt:text\r\n\
            *2\r\n:1\r\n*1\r\n+x\r\n~1\r\n:2\r\n%1\r\n+k\r\n:3\r\n>2\r\n$10\r\ninvalidate\r\n*0\r\n";
        let replies: Vec<Reply> = read_all(input).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            replies,
            vec![
                Reply::Status("OK".into()),
                Reply::Error("ERR no".into()),
                Reply::Int(-7),
                Reply::Bulk(b"a\r\n".to_vec()),
                Reply::Nil,
                Reply::Nil,
                Reply::Nil,
                Reply::Double("1.5".into()),
                Reply::Bool(true),
                Reply::Bool(false),
                Reply::Bulk(b"text".to_vec()),
                Reply::Array(vec![Reply::Int(1), Reply::Array(vec![Reply::Status("x".into())])]),
                Reply::Array(vec![Reply::Int(2)]),
                Reply::Map(vec![(Reply::Status("k".into()), Reply::Int(3))]),
                Reply::Push(vec![Reply::Bulk(b"invalidate".to_vec()), Reply::Array(vec![])]),
            ]
        );
    }

    #[test]
    fn malformed_replies_are_errors_not_panics_or_allocations() {
        for bad in [&b"?x\r\n"[..], b":12a\r\n", b"$3\r\nabcd\r\n", b"$99999999999\r\n", b"*-2\r\n", b"+no newline\n", b"#x\r\n"] {
            let replies = read_all(bad);
            assert!(matches!(replies.first(), Some(Err(_))), "{:?} read as {replies:?}", String::from_utf8_lossy(bad));
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2) + ":1\r\n";
        assert!(matches!(read_all(deep.as_bytes()).first(), Some(Err(_))));
    }

    #[test]
    fn a_closed_connection_reads_as_none() {
        let mut conn = Conn::over(Canned(Cursor::new(b"+OK\r\n".to_vec())));
        assert_eq!(conn.read(), Some(Reply::Status("OK".into())));
        assert_eq!(conn.read(), None);
    }

    /// A stream that is open and has nothing to say: every read times out.
    struct Silent;

    impl Read for Silent {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::WouldBlock.into())
        }
    }

    impl Write for Silent {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    #[should_panic(expected = "no reply within the read timeout")]
    fn a_silent_open_connection_is_not_read_as_closed() {
        Conn::over(Silent).read();
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        assert_eq!(encode(&["SET", "k", ""]), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}
