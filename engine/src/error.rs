//! Command errors: a small enum whose messages are exactly Redis's, because client libraries
//! match on the prefixes (`WRONGTYPE`, `NOAUTH`, `OOM`, ...).

use crate::frame::Frame;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CmdError {
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR index out of range")]
    IndexOutOfRange,
    #[error("ERR no such key")]
    NoSuchKey,
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(String),
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    Oom,
    #[error("ERR {0}")]
    Err(String),
    /// A message with its own prefix (`NOAUTH ...`, `WRONGPASS ...`).
    #[error("{0}")]
    Raw(String),
}

impl CmdError {
    pub fn err(msg: impl Into<String>) -> CmdError {
        CmdError::Err(msg.into())
    }
}

impl From<CmdError> for Frame {
    fn from(e: CmdError) -> Frame {
        Frame::Error(e.to_string())
    }
}

/// What a command returns.
pub type Reply = Result<Frame, CmdError>;
