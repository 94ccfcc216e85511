//! `DUMP`/`RESTORE` and `FUNCTION DUMP`/`FUNCTION RESTORE` payloads, as Redis writes and
//! checks them (`createDumpPayload` and `verifyDumpPayload` in cluster.c, `functionDumpCommand`
//! in functions.c): a value in its RDB encoding (its type byte, then the value as a file holds
//! it after the key), or function libraries (each a `FUNCTION2` opcode and its code), then the
//! RDB version in 2 bytes and the CRC-64 of everything before it in 8, both little-endian.
//!
//! Values are written as `export` writes them into a file (plain encodings, version 10), so a
//! payload from here restores into Redis 7.0 and later (6.2 refuses versions above its 9); a
//! payload from Redis (any encoding `read` knows, RDB versions up to `MAX_VERSION`) restores
//! here.

use bytes::Bytes;

use super::export::{object, string, type_of};
use super::read::{library_code, typed_value, RdbValue};
use super::{CRC64, EXPORT_VERSION, MAX_VERSION};
use crate::db::entry::{Collection, Field, ListValue, Name};
use crate::db::zset::SortedSet;
use crate::db::Value;
use crate::hlc::Version;

const OP_FUNCTION2: u8 = 245;
/// Redis 7.0 release candidates' libraries, which Redis 7.0 refuses in a payload too.
const OP_FUNCTION_PRE_GA: u8 = 246;

/// Why a payload was refused, in Redis's words where Redis has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Too short, from a newer RDB version than `MAX_VERSION`, or not matching its checksum
    /// (Redis 7.0 says "DUMP payload" for `FUNCTION RESTORE` too).
    #[error("DUMP payload version or checksum are wrong")]
    VersionOrChecksum,
    /// Not one well-formed value (or library list) of the length the payload says.
    #[error("Bad data format")]
    BadFormat,
    /// A well-formed value of a type KeyMesh has no value for ("stream (3 entries, ...)").
    #[error("the payload holds a {0}, which KeyMesh has no type for")]
    Unsupported(String),
    /// Something other than a library in a `FUNCTION RESTORE` payload (Redis's words).
    #[error("{0}")]
    NotLibraries(&'static str),
}

/// `DUMP`'s payload for `value`.
pub fn dump_value(value: &Value) -> Vec<u8> {
    let mut out = vec![type_of(value)];
    object(&mut out, value);
    seal(out)
}

/// `FUNCTION DUMP`'s payload for the libraries with this code (each the whole `FUNCTION LOAD`
/// payload, shebang included).
pub fn dump_libraries<'a>(codes: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OP_FUNCTION2);
        string(&mut out, code);
    }
    seal(out)
}

/// Appends the version and the checksum.
fn seal(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&(EXPORT_VERSION as u16).to_le_bytes());
    let sum = CRC64.checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The body of a payload whose version and checksum check out.
fn body(payload: &[u8]) -> Result<&[u8], PayloadError> {
    if payload.len() < 10 {
        return Err(PayloadError::VersionOrChecksum);
    }
    let (content, sum) = payload.split_at(payload.len() - 8);
    let (body, version) = content.split_at(content.len() - 2);
    let version = u16::from_le_bytes([version[0], version[1]]);
    let sum = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
    if u32::from(version) > MAX_VERSION || CRC64.checksum(content) != sum {
        return Err(PayloadError::VersionOrChecksum);
    }
    Ok(body)
}

/// The value in a `RESTORE` payload, checked: nothing after it, no empty collection, no
/// repeated member or field, no NaN score (Redis refuses all of these as "Bad data format").
pub fn restore_value(payload: &[u8]) -> Result<Value, PayloadError> {
    let body = body(payload)?;
    let (value, used) = typed_value(body).map_err(|_| PayloadError::BadFormat)?;
    if used != body.len() {
        return Err(PayloadError::BadFormat);
    }
    let value = value.map_err(PayloadError::Unsupported)?;
    if value.is_empty() {
        return Err(PayloadError::BadFormat);
    }
    into_value(value).ok_or(PayloadError::BadFormat)
}

/// The libraries' code in a `FUNCTION RESTORE` payload, in payload order.
pub fn restore_libraries(payload: &[u8]) -> Result<Vec<Bytes>, PayloadError> {
    let mut body = body(payload)?;
    let mut codes = Vec::new();
    while let Some((&kind, rest)) = body.split_first() {
        match kind {
            OP_FUNCTION2 => {}
            OP_FUNCTION_PRE_GA => return Err(PayloadError::NotLibraries("Pre-GA function format not supported")),
            _ => return Err(PayloadError::NotLibraries("given type is not a function")),
        }
        let (code, used) = library_code(rest).map_err(|_| PayloadError::NotLibraries("failed loading the given functions payload"))?;
        codes.push(Bytes::from(code));
        body = &rest[used..];
    }
    Ok(codes)
}

/// A keyspace value holding what `value` holds, every element at `Version::ZERO` (a whole-value
/// write stamps them all, `Ctx::put`); `None` if a member or field repeats or a score is NaN.
fn into_value(value: RdbValue) -> Option<Value> {
    let bytes = |b: Vec<u8>| Bytes::from(b);
    Some(match value {
        RdbValue::Str(s) => Value::string(&s),
        RdbValue::List(items) => Value::List(Box::new(ListValue::new(items.iter().map(|item| Name::from(&item[..])).collect()))),
        // A repeated name would be collected once: the length tells.
        RdbValue::Set(members) => {
            let n = members.len();
            let set: Collection<Version> = members.into_iter().map(|m| (bytes(m), Version::ZERO)).collect();
            (set.len() == n).then_some(Value::Set(Box::new(set)))?
        }
        RdbValue::Hash(fields) => {
            let n = fields.len();
            let hash: Collection<Field> = fields.into_iter().map(|(name, value)| (bytes(name), Field::new(&value, Version::ZERO))).collect();
            (hash.len() == n).then_some(Value::Hash(Box::new(hash)))?
        }
        RdbValue::ZSet(members) => {
            let mut z = SortedSet::default();
            for (m, score) in members {
                (!score.is_nan() && z.insert(bytes(m), score, Version::ZERO).is_none()).then_some(())?;
            }
            Value::ZSet(Box::new(z))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::rdb::builder::RdbBytes;

    /// A payload of `body` with a version and a checksum, as Redis seals one.
    fn sealed(body: &[u8], version: u16) -> Vec<u8> {
        let mut out = body.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        let sum = CRC64.checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// What a value holds, in one comparable form.
    fn render(value: &Value) -> String {
        match value {
            Value::Str(s) => format!("str {:?}", &s[..]),
            Value::Int(n) => format!("str {n}"),
            Value::Counter(c) => format!("str {:?}", c.value()),
            Value::List(items) => format!("list {:?}", items.iter().collect::<Vec<_>>()),
            Value::Set(members) => {
                let mut m: Vec<_> = members.keys().collect();
                m.sort();
                format!("set {m:?}")
            }
            Value::Hash(fields) => {
                let mut f: Vec<_> = fields.iter().map(|(n, f)| (n.clone(), f.value.clone())).collect();
                f.sort();
                format!("hash {f:?}")
            }
            Value::ZSet(z) => format!("zset {:?}", z.iter().collect::<Vec<_>>()),
        }
    }

    fn values() -> Vec<Value> {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let mut z = SortedSet::default();
        z.insert(b("lo"), f64::NEG_INFINITY, Version::ZERO);
        z.insert(b("a"), 1.5, Version::ZERO);
        z.insert(b("hi"), f64::INFINITY, Version::ZERO);
        vec![
            Value::string(b"hello"),
            Value::string(b"-42"),
            Value::string(b"9223372036854775807"),
            Value::string(&b"x".repeat(20_000)),
            Value::List(Box::new(ListValue::new(["a", "", "7", "b"].into_iter().map(|s| Name::from(s.as_bytes())).collect()))),
            Value::Set(Box::new(["x", "1", "-5"].into_iter().map(|m| (b(m), Version::ZERO)).collect())),
            Value::Hash(Box::new([("f", "v"), ("n", "12")].into_iter().map(|(n, v)| (b(n), Field::new(v.as_bytes(), Version::ZERO))).collect())),
            Value::ZSet(Box::new(z)),
        ]
    }

    #[test]
    fn every_type_restores_from_its_own_dump() {
        for value in values() {
            let payload = dump_value(&value);
            assert_eq!(&payload[payload.len() - 10..payload.len() - 8], &10u16.to_le_bytes(), "version 10, Redis 7.0's");
            let restored = restore_value(&payload).unwrap_or_else(|e| panic!("{}: {e}", render(&value)));
            assert_eq!(render(&restored), render(&value));
        }
    }

    #[test]
    fn a_damaged_or_newer_payload_is_refused_by_its_trailer() {
        let payload = dump_value(&Value::string(b"hello"));
        for cut in 0..payload.len() {
            assert!(restore_value(&payload[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..payload.len() {
            let mut flipped = payload.clone();
            flipped[at] ^= 0x20;
            assert_eq!(restore_value(&flipped).err(), Some(PayloadError::VersionOrChecksum), "byte {at} flipped");
        }
        let body = &payload[..payload.len() - 10];
        assert!(restore_value(&sealed(body, 12)).is_ok(), "Redis 7.4's version reads");
        assert_eq!(restore_value(&sealed(body, 13)).err(), Some(PayloadError::VersionOrChecksum));
    }

    #[test]
    fn malformed_values_are_bad_data_format() {
        let string = |s: &str| {
            let mut b = RdbBytes::default();
            b.op(0).s(s.as_bytes());
            b.0
        };
        // Bytes after the value, an unknown type, an empty set, a repeated member or field,
        // a NaN score: Redis refuses each as "Bad data format".
        let mut trailing = string("v");
        trailing.push(0);
        let mut empty_set = RdbBytes::default();
        empty_set.op(2).len(0);
        let mut repeated_member = RdbBytes::default();
        repeated_member.op(2).len(2).s(b"m").s(b"m");
        let mut repeated_field = RdbBytes::default();
        repeated_field.op(4).len(2).s(b"f").s(b"1").s(b"f").s(b"2");
        let mut nan = RdbBytes::default();
        nan.op(5).len(1).s(b"m").raw(&f64::NAN.to_le_bytes());
        for body in [trailing, vec![99, 1, b'x'], empty_set.0, repeated_member.0, repeated_field.0, nan.0] {
            assert_eq!(restore_value(&sealed(&body, 10)).err(), Some(PayloadError::BadFormat), "{body:?}");
        }
        assert!(restore_value(&sealed(&string("v"), 10)).is_ok());
    }

    #[test]
    fn a_stream_is_refused_by_name() {
        // A stream of RDB type 15: no nodes, no entries, its last id, no groups (`rdbSaveObject`).
        let mut stream = RdbBytes::default();
        stream.op(15).len(0).len(0).len(0).len(0).len(0);
        match restore_value(&sealed(&stream.0, 10)) {
            Err(PayloadError::Unsupported(what)) => assert!(what.starts_with("stream"), "{what}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn libraries_round_trip_and_anything_else_is_not_a_function() {
        let codes: Vec<&[u8]> = vec![b"#!lua name=a\nredis.register_function('f', function() return 1 end)", b"#!lua name=b\n"];
        let payload = dump_libraries(codes.iter().copied());
        let restored = restore_libraries(&payload).unwrap();
        assert_eq!(restored.iter().map(|c| &c[..]).collect::<Vec<_>>(), codes);
        assert_eq!(restore_libraries(&dump_libraries([])).unwrap(), Vec::<Bytes>::new());
        let key = dump_value(&Value::string(b"v"));
        assert_eq!(restore_libraries(&key).err(), Some(PayloadError::NotLibraries("given type is not a function")));
        let mut pre_ga = RdbBytes::default();
        pre_ga.op(246).s(b"lib");
        assert_eq!(restore_libraries(&sealed(&pre_ga.0, 10)).err(), Some(PayloadError::NotLibraries("Pre-GA function format not supported")));
        let mut cut = RdbBytes::default();
        cut.op(245).len(50).raw(b"short");
        assert!(matches!(restore_libraries(&sealed(&cut.0, 10)), Err(PayloadError::NotLibraries(_))));
    }
}
