//! A minimal blocking RESP2 client: send one command, read one reply.
//!
//! Enough for tests to drive a server over a socket that was opened inside a network namespace
//! (client crates want to dial themselves, and would dial from the wrong namespace). Every read
//! and write is bounded by the timeout given at construction, so a partitioned server turns into
//! an error, never a hung test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Refuse replies larger than this (the tests never store anything near it).
const MAX_BULK: usize = 64 << 20;
const MAX_DEPTH: usize = 8;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

impl Reply {
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            Reply::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// A failure to exchange a command and its reply.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed reply: {0}")]
    Protocol(String),
}

/// One client connection.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    /// Wraps a connected socket; `timeout` bounds every read and write.
    pub fn new(stream: TcpStream, timeout: Duration) -> std::io::Result<Self> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection { writer: stream.try_clone()?, reader: BufReader::new(stream) })
    }

    /// Sends one command and reads its reply (an error reply is `Ok(Reply::Error)`).
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, RespError> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            let arg = arg.as_ref();
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out)?;
        self.read_reply(0)
    }

    fn read_reply(&mut self, depth: usize) -> Result<Reply, RespError> {
        if depth > MAX_DEPTH {
            return Err(RespError::Protocol("nested too deeply".into()));
        }
        let line = self.read_line()?;
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Ok(Reply::Simple(rest.to_owned())),
            "-" => Ok(Reply::Error(rest.to_owned())),
            ":" => Ok(Reply::Int(parse_int(rest)?)),
            "$" => {
                let Some(len) = parse_len(rest)? else { return Ok(Reply::Nil) };
                let mut body = vec![0; len + 2];
                self.reader.read_exact(&mut body)?;
                if !body.ends_with(b"\r\n") {
                    return Err(RespError::Protocol("bulk string not followed by CRLF".into()));
                }
                body.truncate(len);
                Ok(Reply::Bulk(body))
            }
            "*" => {
                let Some(len) = parse_len(rest)? else { return Ok(Reply::Nil) };
                (0..len).map(|_| self.read_reply(depth + 1)).collect::<Result<_, _>>().map(Reply::Array)
            }
            _ => Err(RespError::Protocol(format!("unexpected reply type in {line:?}"))),
        }
    }

    fn read_line(&mut self) -> Result<String, RespError> {
        let mut line = Vec::new();
        self.reader.by_ref().take(MAX_BULK as u64).read_until(b'\n', &mut line)?;
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

/// A length, or `None` for -1 (nil).
fn parse_len(s: &str) -> Result<Option<usize>, RespError> {
    match parse_int(s)? {
        -1 => Ok(None),
        n if n >= 0 && (n as usize) <= MAX_BULK => Ok(Some(n as usize)),
        n => Err(RespError::Protocol(format!("bad length {n}"))),
    }
}
