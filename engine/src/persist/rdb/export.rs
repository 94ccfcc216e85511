//! Writing the keyspace as an RDB file (version 10, Redis 7.0's) that Redis 7.0 and later
//! load: strings (integer-encoded where Redis would, LZF-compressed from 16 KiB where that
//! saves space), lists, sets, sorted sets (binary scores) and
//! hashes in their plain encodings (Redis converts small ones to its compact encodings as it
//! loads them), expiries in milliseconds, `SELECTDB` and `RESIZEDB` per non-empty database,
//! and the CRC-64 trailer.
//!
//! The scan is the snapshot's: one shard lock at a time, no fork, writes keep flowing, so
//! each key is written as it stood at some moment during the scan. A counter is written as
//! its value, as `GET` shows it. Keys already expired are left out.

use super::{CRC64, EXPORT_VERSION};
use crate::db::{Store, Value, SHARDS_PER_DB};

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const OP_AUX: u8 = 250;
const OP_RESIZEDB: u8 = 251;
const OP_EXPIRETIME_MS: u8 = 252;
const OP_SELECTDB: u8 = 254;
const OP_EOF: u8 = 255;

/// Redis compresses every string over 20 bytes; `lzf::compress` zeroes a 512 KiB table per
/// call, which for 100-byte values made an export of 1M keys take 40 s instead of well under
/// one. From 16 KiB the table costs less than the compression saves in transfer.
const COMPRESS_FROM: usize = 16 * 1024;

/// What an export wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Export {
    pub keys: u64,
    pub bytes: u64,
}

/// Appends the whole keyspace to `out` as an RDB file; `engine_version` goes into an AUX field.
pub fn export(store: &Store, engine_version: &str, out: &mut Vec<u8>) -> Export {
    let written = export_chunked(store, engine_version, usize::MAX, &mut |chunk| {
        out.extend_from_slice(chunk);
        true
    });
    written.unwrap_or_default()
}

/// Writes the whole keyspace as an RDB file in chunks of about `chunk` bytes (at least one
/// shard's keys each; the last holds the EOF opcode and the checksum), handing each to `sink`
/// as it is filled, outside any shard lock. `sink` returns false to stop the export (the
/// reader went away): then `None`. Memory stays at one chunk plus one shard's keys, whatever
/// the keyspace's size.
pub fn export_chunked(store: &Store, engine_version: &str, chunk: usize, sink: &mut dyn FnMut(&[u8]) -> bool) -> Option<Export> {
    let mut out = Vec::with_capacity(chunk.min(1 << 20));
    let mut digest = CRC64.digest();
    let mut bytes = 0u64;
    let mut hand_over = |out: &mut Vec<u8>, digest: &mut crc::Digest<'_, u64>| {
        digest.update(out);
        bytes += out.len() as u64;
        let more = sink(out);
        out.clear();
        more
    };
    let now_ms = store.hlc.wall_ms();
    out.extend_from_slice(format!("REDIS{EXPORT_VERSION:04}").as_bytes());
    aux(&mut out, b"redis-bits", b"64");
    aux(&mut out, b"ctime", (now_ms / 1000).to_string().as_bytes());
    aux(&mut out, b"keymesh-ver", engine_version.as_bytes());
    let mut keys = 0u64;
    for db in 0..store.databases() {
        let size = store.dbsize(db) as u64;
        if size == 0 {
            continue;
        }
        out.push(OP_SELECTDB);
        length(&mut out, db as u64);
        out.push(OP_RESIZEDB);
        length(&mut out, size);
        length(&mut out, 0);
        for s in 0..SHARDS_PER_DB {
            {
                let shard = store.lock_shard(db, s);
                for (key, entry) in shard.iter() {
                    if entry.is_expired(now_ms) {
                        continue;
                    }
                    if let Some(at) = entry.deadline() {
                        out.push(OP_EXPIRETIME_MS);
                        out.extend_from_slice(&at.to_le_bytes());
                    }
                    value(&mut out, key, &entry.value);
                    keys += 1;
                }
            }
            if out.len() >= chunk && !hand_over(&mut out, &mut digest) {
                return None;
            }
        }
    }
    out.push(OP_EOF);
    digest.update(&out);
    let sum = digest.finalize();
    out.extend_from_slice(&sum.to_le_bytes());
    bytes += out.len() as u64;
    sink(&out).then_some(Export { keys, bytes })
}

fn aux(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(OP_AUX);
    string(out, name);
    string(out, value);
}

/// The type byte, the key and the value.
fn value(out: &mut Vec<u8>, key: &[u8], value: &Value) {
    out.push(type_of(value));
    string(out, key);
    object(out, value);
}

/// The RDB type a value is written as.
pub(super) fn type_of(value: &Value) -> u8 {
    match value {
        Value::Str(_) | Value::Int(_) | Value::Counter(_) => TYPE_STRING,
        Value::List(_) => TYPE_LIST,
        Value::Set(_) => TYPE_SET,
        Value::Hash(_) => TYPE_HASH,
        Value::ZSet(_) => TYPE_ZSET_2,
    }
}

/// A value without its type byte (`rdbSaveObject`): what follows the key in a file, and the
/// type byte in a `DUMP` payload.
pub(super) fn object(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Str(s) => string(out, s),
        Value::Int(n) => integer(out, *n),
        Value::Counter(c) => integer(out, c.value().unwrap_or(0)),
        Value::List(items) => {
            length(out, items.len() as u64);
            items.iter().for_each(|item| string(out, item));
        }
        Value::Set(members) => {
            length(out, members.len() as u64);
            members.keys().for_each(|m| string(out, m));
        }
        Value::Hash(fields) => {
            length(out, fields.len() as u64);
            for (name, field) in fields.iter() {
                string(out, name);
                string(out, &field.value);
            }
        }
        Value::ZSet(z) => {
            length(out, z.len() as u64);
            for (member, score) in z.iter() {
                string(out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
    }
}

/// A length: 6 bits, 14 bits, or a marker byte and 32 or 64 bits big-endian.
fn length(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if let Ok(n) = u32::try_from(n) {
        out.push(0x80);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A string: integer-encoded when it is a canonical decimal integer that fits 32 bits,
/// LZF-compressed from `COMPRESS_FROM` bytes when that saves space, plain otherwise.
pub(super) fn string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(n) = std::str::from_utf8(s).ok().and_then(|t| t.parse::<i64>().ok()).filter(|n| itoa::Buffer::new().format(*n).as_bytes() == s) {
            if i32::try_from(n).is_ok() {
                return integer(out, n);
            }
        }
    }
    if s.len() >= COMPRESS_FROM {
        if let Ok(packed) = lzf::compress(s) {
            if packed.len() < s.len() {
                out.push(0xc3);
                length(out, packed.len() as u64);
                length(out, s.len() as u64);
                out.extend_from_slice(&packed);
                return;
            }
        }
    }
    length(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// An integer: in 1, 2 or 4 bytes where it fits, else as its decimal text.
fn integer(out: &mut Vec<u8>, n: i64) {
    if let Ok(n) = i8::try_from(n) {
        out.extend_from_slice(&[0xc0, n as u8]);
    } else if let Ok(n) = i16::try_from(n) {
        out.push(0xc1);
        out.extend_from_slice(&n.to_le_bytes());
    } else if let Ok(n) = i32::try_from(n) {
        out.push(0xc2);
        out.extend_from_slice(&n.to_le_bytes());
    } else {
        let text = itoa::Buffer::new().format(n).as_bytes().to_vec();
        length(out, text.len() as u64);
        out.extend_from_slice(&text);
    }
}
