//! Redis RDB files: importing a `dump.rdb` written by Redis (or KeyDB) into the keyspace, and
//! writing the keyspace as an RDB file Redis loads (`SYNC`, as `redis-cli --rdb` asks for it).
//!
//! The decoder is our own (`read`, `compact`): the `rdb` crate (0.3) mis-decoded listpack
//! integers of 13 and 24 bits and carried one key's expiry over to the next. It reads every
//! encoding Redis 2.6 to 7.4 writes (RDB versions 1 to 12; KeyDB 6.3 writes 9): plain strings,
//! integer-encoded strings, LZF-compressed strings (`lzf` crate), lists, sets, sorted sets and
//! hashes in their plain encodings and in zipmap, ziplist, intset, listpack, quicklist and
//! quicklist 2; expiries in seconds and milliseconds; `SELECTDB`, `RESIZEDB`, `AUX`, `IDLE`,
//! `FREQ`. The trailing CRC-64 (Redis's Jones polynomial, `crc`'s `CRC_64_REDIS`) is checked
//! before anything is imported, so a corrupt file is refused whole. What KeyMesh has no type
//! for (streams, module values, hashes with field expiries, KeyDB cron jobs and member
//! expiries, function libraries, module auxiliary data) is parsed past (`skip`) and, as
//! `rdb-import-unsupported` says, refuses the file with an error naming the key and its type
//! (`refuse`, the default) or is left out and reported key by key (`skip`). KeyDB 6.3's
//! additions (RDB version 9 with `mvcc-tstamp` and `keydb-subexpire-*` AUX fields, the cron
//! type 64) are read as KeyDB's `rdb.cpp` writes them.
//!
//! `DUMP`/`RESTORE` payloads (`dump`) are one value, or function libraries, in the same
//! encodings, with Redis's version and checksum trailer.
//!
//! An import is a set of writes by this node, stamped when they are merged (`import`): they
//! replicate and merge with the mesh like any other writes.

mod compact;
mod dump;
mod export;
mod import;
mod read;
mod skip;
mod sync;

pub use dump::{dump_libraries, dump_value, restore_libraries, restore_value, PayloadError};
pub use export::{export, export_chunked, Export};
pub use import::{import, import_with, RdbImport};
pub use read::{parse, Entry, RdbValue, Record, Section, Unsupported};
pub use sync::send as send_sync;

/// What an import does with a key or section KeyMesh has no type for
/// (`rdb-import-unsupported`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnUnsupported {
    /// Refuse the whole file, naming the first such key (the default: nothing is lost silently).
    #[default]
    Refuse,
    /// Leave it out, report it by name, type and database, and import everything else.
    Skip,
}

/// The RDB version `export` writes (Redis 7.0's).
pub const EXPORT_VERSION: u32 = 10;
/// The newest RDB version `import` reads (Redis 7.4); its hash-field-expiry types are parsed
/// past and refused or skipped (`OnUnsupported`).
pub const MAX_VERSION: u32 = 12;

/// Redis's CRC-64 (Jones polynomial, reflected), as `crc64.c` computes it.
pub const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

#[derive(Debug, thiserror::Error)]
pub enum RdbError {
    #[error("not an RDB file (no REDIS header)")]
    NotRdb,
    #[error("RDB version {0} is not supported (versions 1 to {MAX_VERSION}: Redis up to 7.4, KeyDB 6.3)")]
    Version(String),
    #[error("RDB file truncated: {0}")]
    Truncated(String),
    #[error("RDB checksum mismatch: the file says {expected:016x}, its content gives {actual:016x}")]
    Checksum { expected: u64, actual: u64 },
    #[error("corrupt RDB at byte {offset}: {what}")]
    Corrupt { offset: usize, what: String },
    #[error("key {key:?} in database {db} is a {kind}, which KeyMesh has no type for; delete it (or move it elsewhere) in Redis and save again, or set rdb-import-unsupported skip to import the other keys")]
    Unsupported { kind: String, db: usize, key: String },
    #[error("the RDB holds {what}, which an import does not load ({hint}); remove it in Redis and save again, or set rdb-import-unsupported skip to import the keys without it")]
    UnsupportedSection { what: String, hint: &'static str },
    #[error("key {key:?} in database {db} is a module value in Redis 4.0's pre-release format (RDB type 6), which has no framing to parse past, so it cannot be skipped either; delete it in Redis and save again")]
    Unskippable { db: usize, key: String },
    #[error("the RDB selects database {db}, but this node has {databases} (raise 'databases')")]
    Database { db: u64, databases: usize },
}

#[cfg(test)]
mod builder;
#[cfg(test)]
mod skip_tests;
#[cfg(test)]
mod tests;
