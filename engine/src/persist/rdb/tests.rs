//! The decoder against byte layouts taken from Redis's sources (`listpack.c`, `ziplist.c`,
//! `intset.c`, `zipmap.c`, `rdb.c`), and export → parse round trips through a store.
//! Files written by a real `redis-server` are tested in `tests/persistence_rdb.rs`.

use std::sync::Arc;

use super::compact::{intset, listpack, ziplist, zipmap};
use super::import::ops;
use super::read::{parse, Entry, RdbValue, Record};
use super::{export, RdbError};
use crate::db::Store;
use crate::hlc::{Hlc, SystemClock, Version};
use crate::repl::merge::apply_op;

fn texts(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// A listpack blob from raw entries (encoding and data, without the back length).
fn lp(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Vec::new();
    for e in entries {
        body.extend_from_slice(e);
        let n = e.len();
        // lpEncodeBacklen, for the sizes these tests use.
        if n <= 127 {
            body.push(n as u8);
        } else {
            assert!(n < 16383);
            body.extend_from_slice(&[(n >> 7) as u8, (n & 127) as u8 | 128]);
        }
    }
    let mut out = ((body.len() + 7) as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&body);
    out.push(0xff);
    out
}

#[test]
fn listpack_integers_of_every_width_and_sign_decode() {
    let long = vec![b'x'; 200];
    let mut twelve_bit = vec![0xe0 | (200 >> 8) as u8, 200u8];
    twelve_bit.extend_from_slice(&long);
    let blob = lp(&[
        vec![0x05],                         // 7-bit: 5
        vec![0x7f],                         // 7-bit: 127
        vec![0xc0 | 0x1f, 0xfe],            // 13-bit: -2 (0x1ffe)
        vec![0xc0 | 0x10, 0x00],            // 13-bit: -4096
        vec![0xc0 | 0x0f, 0xff],            // 13-bit: 4095
        vec![0xf1, 0x00, 0x80],             // 16-bit: -32768
        vec![0xf1, 0xff, 0x7f],             // 16-bit: 32767
        vec![0xf2, 0xff, 0xff, 0xff],       // 24-bit: -1
        vec![0xf2, 0x00, 0x00, 0x80],       // 24-bit: -8388608
        vec![0xf2, 0xff, 0xff, 0x7f],       // 24-bit: 8388607
        vec![0xf3, 0x00, 0x00, 0x00, 0x80], // 32-bit: i32::MIN
        [vec![0xf4], i64::MIN.to_le_bytes().to_vec()].concat(),
        [vec![0xf4], i64::MAX.to_le_bytes().to_vec()].concat(),
        [vec![0x80 | 3], b"abc".to_vec()].concat(), // 6-bit string
        twelve_bit,
        [vec![0xf0], 3u32.to_le_bytes().to_vec(), b"xyz".to_vec()].concat(), // 32-bit string length
    ]);
    let want = [
        "5",
        "127",
        "-2",
        "-4096",
        "4095",
        "-32768",
        "32767",
        "-1",
        "-8388608",
        "8388607",
        "-2147483648",
        "-9223372036854775808",
        "9223372036854775807",
        "abc",
    ];
    let mut want = texts(&want);
    want.push(long);
    want.push(b"xyz".to_vec());
    assert_eq!(listpack(&blob).unwrap(), want);
}

#[test]
fn ziplist_entries_of_every_encoding_decode() {
    let mut body = Vec::new();
    let mut push = |enc: &[u8]| {
        body.push(0); // previous length (ignored by the decoder)
        body.extend_from_slice(enc);
    };
    push(&[0x03, b'a', b'b', b'c']); // 6-bit string
    push(&[0x40, 0x02, b'h', b'i']); // 14-bit string length
    push(&[0x80, 0, 0, 0, 1, b'z']); // 32-bit string length
    push(&[0xc0, 0x00, 0x80]); // int16 -32768
    push(&[0xd0, 0xff, 0xff, 0xff, 0x7f]); // int32 i32::MAX
    push(&[[0xe0].as_slice(), &(-5_000_000_000i64).to_le_bytes()].concat());
    push(&[0xf0, 0xfe, 0xff, 0xff]); // int24 -2
    push(&[0xfe, 0x80]); // int8 -128
    push(&[0xf1]); // immediate 0
    push(&[0xfd]); // immediate 12
    let mut blob = vec![0u8; 8];
    blob.extend_from_slice(&10u16.to_le_bytes());
    blob.extend_from_slice(&body);
    blob.push(0xff);
    let want = texts(&["abc", "hi", "z", "-32768", "2147483647", "-5000000000", "-2", "-128", "0", "12"]);
    assert_eq!(ziplist(&blob).unwrap(), want);
    // A long previous-entry length (0xfe and 4 bytes) is skipped too.
    let mut blob = vec![0u8; 10];
    blob.extend_from_slice(&[0xfe, 0, 1, 0, 0, 0x01, b'q', 0xff]);
    assert_eq!(ziplist(&blob).unwrap(), texts(&["q"]));
}

#[test]
fn intsets_of_every_width_and_zipmaps_decode() {
    for (width, values) in [(2usize, vec![-3i64, 7]), (4, vec![-70000, 70000]), (8, vec![i64::MIN, 1 << 40])] {
        let mut blob = (width as u32).to_le_bytes().to_vec();
        blob.extend_from_slice(&(values.len() as u32).to_le_bytes());
        for v in &values {
            blob.extend_from_slice(&v.to_le_bytes()[..width]);
        }
        let want: Vec<Vec<u8>> = values.iter().map(|v| v.to_string().into_bytes()).collect();
        assert_eq!(intset(&blob).unwrap(), want, "width {width}");
    }
    assert!(intset(&[3, 0, 0, 0, 1, 0, 0, 0, 1, 2, 3]).is_err(), "width 3 does not exist");
    assert!(intset(&[2, 0, 0, 0, 9, 0, 0, 0, 1, 2]).is_err(), "nine integers do not fit in two bytes");
    // zipmap.c's example: "foo" => "bar", "hello" => "world" (with one free byte).
    let blob = b"\x02\x03foo\x03\x00bar\x05hello\x05\x01world\x00\xff";
    assert_eq!(zipmap(blob).unwrap(), vec![(b"foo".to_vec(), b"bar".to_vec()), (b"hello".to_vec(), b"world".to_vec())]);
}

#[test]
fn malformed_blobs_are_errors_not_panics() {
    let good = lp(&[vec![0xf4, 1, 2, 3, 4, 5, 6, 7, 8], [vec![0x80 | 2], b"ab".to_vec()].concat()]);
    for cut in 0..good.len() {
        assert!(listpack(&good[..cut]).is_err(), "a listpack cut at {cut}");
    }
    assert!(listpack(&[0, 0, 0, 0, 0, 0, 0xf5, 0xff]).is_err(), "0xf5 is no listpack encoding");
    assert!(ziplist(&[0; 10]).is_err(), "a ziplist without its end marker");
}

/// A whole RDB file around `body` (the shared test builder, `super::builder`).
pub(super) use super::builder::file as rdb;

pub(super) fn entries(file: &[u8]) -> Result<Vec<Entry>, RdbError> {
    let mut out = Vec::new();
    parse(file, &mut |e| {
        out.push(e);
        Ok(())
    })?;
    Ok(out)
}

/// The keys of `file`; anything else in it is an error.
pub(super) fn records(file: &[u8]) -> Result<Vec<Record>, RdbError> {
    entries(file)?
        .into_iter()
        .map(|e| match e {
            Entry::Key(r) => Ok(r),
            other => panic!("not a key: {other:?}"),
        })
        .collect()
}

#[test]
fn headers_versions_checksums_and_truncation_are_checked_before_any_key() {
    assert!(matches!(records(b"KEYMESH"), Err(RdbError::NotRdb)));
    assert!(matches!(records(b"REDIS0013\xff12345678"), Err(RdbError::Version(_))));
    assert!(matches!(records(b"REDISxx11"), Err(RdbError::Version(_))));
    assert!(matches!(records(b"REDIS0011\xfa\x09redis-ver"), Err(RdbError::Truncated(_))));
    let file = rdb(b"\x00\x01k\x01v", 10);
    assert_eq!(records(&file).unwrap().len(), 1);
    let mut bad = file.clone();
    bad[10] ^= 1;
    assert!(matches!(records(&bad), Err(RdbError::Checksum { .. })));
    // A checksum of 0: saved with `rdbchecksum no`.
    let mut unchecked = file[..file.len() - 8].to_vec();
    unchecked.extend_from_slice(&[0; 8]);
    assert_eq!(records(&unchecked).unwrap().len(), 1);
}

#[test]
fn opcodes_expiries_and_plain_types_decode() {
    let mut body = Vec::new();
    body.extend_from_slice(b"\xfa\x09redis-ver\x067.0.15"); // AUX
    body.extend_from_slice(b"\xfe\x02\xfb\x02\x01"); // SELECTDB 2, RESIZEDB 2 1
    body.extend_from_slice(b"\xfd\x10\x27\x00\x00"); // expiry 10000 s
    body.extend_from_slice(b"\xf8\x05\xf9\x03"); // IDLE, FREQ
    body.extend_from_slice(b"\x00\x01a\xc1\x39\x30"); // "a" => int16 12345
    body.extend_from_slice(b"\x00\x01b\xc2\x00\x00\x00\x80"); // "b" => int32 i32::MIN, no expiry
    body.extend_from_slice(b"\xfc\x88\x13\x00\x00\x00\x00\x00\x00"); // expiry 5000 ms
    body.extend_from_slice(b"\x03\x01z\x02\x01m\x03\x31\x2e\x35\x01n\xff"); // zset v1: m 1.5, n -inf
    let got = records(&rdb(&body, 9)).unwrap();
    assert_eq!(
        got,
        vec![
            rec(2, "a", Some(10_000_000), RdbValue::Str(b"12345".to_vec())),
            rec(2, "b", None, RdbValue::Str(b"-2147483648".to_vec())),
            rec(2, "z", Some(5000), RdbValue::ZSet(vec![(b"m".to_vec(), 1.5), (b"n".to_vec(), f64::NEG_INFINITY)])),
        ]
    );
}

pub(super) fn store() -> Store {
    let s = Store::new(4, Hlc::new(Arc::new(SystemClock), 500), 7);
    s.enable_replication();
    s
}

/// Every value type, integers of every width, a long compressible string, expiries, databases.
fn sample() -> Vec<Record> {
    let far = crate::persist::unix_ms() + 3_600_000;
    let mut out = vec![
        rec(0, "plain", None, RdbValue::Str(b"hello".to_vec())),
        rec(0, "long", Some(far), RdbValue::Str("abcdef".repeat(3000).into_bytes())),
        rec(0, "empty-string", None, RdbValue::Str(Vec::new())),
        rec(3, "list", None, RdbValue::List(texts(&["a", "-1", "", "300000"]))),
        rec(1, "set", Some(far + 1), RdbValue::Set(texts(&["m1"]))),
        rec(1, "hash", None, RdbValue::Hash(vec![(b"f".to_vec(), b"9223372036854775807".to_vec())])),
        rec(1, "zset", None, RdbValue::ZSet(vec![(b"lo".to_vec(), f64::NEG_INFINITY), (b"mid".to_vec(), -2.5), (b"hi".to_vec(), 1e300)])),
    ];
    for n in [0i64, -1, 127, -128, 128, 32767, -32769, 2147483647, -2147483648, 2147483648, i64::MIN, i64::MAX] {
        out.push(rec(2, &format!("int{n}"), None, RdbValue::Str(n.to_string().into_bytes())));
    }
    out.push(rec(2, "not-canonical", None, RdbValue::Str(b"007".to_vec())));
    out
}

pub(super) fn rec(db: usize, key: &str, expire_ms: Option<u64>, value: RdbValue) -> Record {
    Record { db, key: key.as_bytes().to_vec(), expire_ms, value, member_expiries: Vec::new() }
}

fn sorted(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_by(|a, b| (a.db, &a.key).cmp(&(b.db, &b.key)));
    records
}

#[test]
fn an_export_parses_back_to_what_was_imported() {
    // One sample: its expiries are read from the clock.
    let sample = sample();
    let s = store();
    for (i, r) in sample.iter().enumerate() {
        for op in ops(r, Version { hlc: 1000 + i as u64, node: 7 }) {
            apply_op(&s, &op);
        }
    }
    let mut file = Vec::new();
    let written = export(&s, "test", &mut file);
    assert_eq!(written.keys, sample.len() as u64);
    assert_eq!(written.bytes, file.len() as u64);
    assert!(file.len() < 3000, "the long string is LZF-compressed: {} bytes", file.len());
    assert_eq!(sorted(records(&file).unwrap()), sorted(sample));
    // Cut anywhere, the file is refused, never half-read or a panic.
    for cut in 0..file.len() {
        assert!(records(&file[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn an_import_skips_expired_and_empty_keys_and_refuses_missing_databases() {
    let s = store();
    let mut body = Vec::new();
    body.extend_from_slice(b"\xfc\x01\x00\x00\x00\x00\x00\x00\x00\x00\x04gone\x01v"); // expired in 1970
    body.extend_from_slice(b"\x02\x05empty\x00"); // an empty set
    body.extend_from_slice(b"\x00\x04kept\x01v");
    let imported = super::import(&s, &rdb(&body, 10)).unwrap();
    assert_eq!((imported.keys, imported.expired, imported.empty, imported.version), (1, 1, 1, 10));
    assert_eq!(s.dbsize(0), 1);
    let err = super::import(&store(), &rdb(b"\xfe\x09\x00\x01k\x01v", 10)).unwrap_err();
    assert!(matches!(err, RdbError::Database { db: 9, databases: 4 }), "{err}");
}

#[test]
fn a_chunked_export_is_the_same_file_and_stops_when_the_reader_goes() {
    let s = store();
    for (i, r) in sample().iter().enumerate() {
        for op in ops(r, Version { hlc: 1000 + i as u64, node: 7 }) {
            apply_op(&s, &op);
        }
    }
    let mut whole = Vec::new();
    export(&s, "test", &mut whole);
    // With a 1-byte chunk size every shard that wrote anything is handed over on its own.
    let (mut joined, mut chunks) = (Vec::new(), 0);
    let written = super::export_chunked(&s, "test", 1, &mut |chunk| {
        joined.extend_from_slice(chunk);
        chunks += 1;
        true
    })
    .unwrap();
    assert_eq!(written.bytes, whole.len() as u64);
    assert!(chunks > sample().len() / 2, "{chunks} chunks");
    // The clock moved between the two exports: compare past the `ctime` AUX field.
    assert_eq!(records(&joined).unwrap(), records(&whole).unwrap());
    let mut calls = 0;
    assert!(super::export_chunked(&s, "test", 1, &mut |_| {
        calls += 1;
        false
    })
    .is_none());
    assert_eq!(calls, 1, "nothing is exported after the reader went away");
}
