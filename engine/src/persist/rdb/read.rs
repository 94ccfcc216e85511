//! The RDB file's outer layer: the header, the opcodes between keys (`AUX`, `SELECTDB`,
//! `RESIZEDB`, expiries, `IDLE`, `FREQ`, `SLOT_INFO`, `EOF`), length and string encodings
//! (integers, LZF), and each value type, down to the compact blobs `compact` decodes. Values
//! and sections KeyMesh has no type for are parsed past by `skip` and handed out as such; the
//! importer decides whether they refuse the file.

use std::borrow::Cow;

use super::compact;
use super::skip;
use super::{RdbError, CRC64, MAX_VERSION};

// Value types (rdb.h).
const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_MODULE: u8 = 6;
const TYPE_MODULE_2: u8 = 7;
const TYPE_HASH_ZIPMAP: u8 = 9;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_STREAM_LISTPACKS: u8 = 15;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_STREAM_LISTPACKS_2: u8 = 19;
const TYPE_SET_LISTPACK: u8 = 20;
const TYPE_STREAM_LISTPACKS_3: u8 = 21;
const TYPE_HASH_METADATA_PRE_GA: u8 = 22;
const TYPE_HASH_LISTPACK_EX_PRE_GA: u8 = 23;
const TYPE_HASH_METADATA: u8 = 24;
const TYPE_HASH_LISTPACK_EX: u8 = 25;
/// KeyDB's `KEYDB.CRON` jobs (KeyDB 6.3 `src/rdb.h`: `RDB_TYPE_CRON 64`).
const TYPE_KEYDB_CRON: u8 = 64;

// Opcodes (rdb.h).
/// Redis 7.4, cluster mode: a slot's key counts (a sizing hint, ignored as Redis ignores it
/// outside cluster mode).
const OP_SLOT_INFO: u8 = 244;
const OP_FUNCTION2: u8 = 245;
/// Redis 7.0 release candidates' function libraries (`RDB_OPCODE_FUNCTION_PRE_GA`).
const OP_FUNCTION_PRE_GA: u8 = 246;
const OP_MODULE_AUX: u8 = 247;
const OP_IDLE: u8 = 248;
const OP_FREQ: u8 = 249;
const OP_AUX: u8 = 250;
const OP_RESIZEDB: u8 = 251;
const OP_EXPIRETIME_MS: u8 = 252;
const OP_EXPIRETIME: u8 = 253;
const OP_SELECTDB: u8 = 254;
const OP_EOF: u8 = 255;

// Quicklist 2 node containers (quicklist.h).
const CONTAINER_PLAIN: u64 = 1;
const CONTAINER_PACKED: u64 = 2;

/// One key as the file holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub db: usize,
    pub key: Vec<u8>,
    /// Absolute deadline in Unix ms.
    pub expire_ms: Option<u64>,
    pub value: RdbValue,
    /// KeyDB's member expiries (`EXPIREMEMBER`): a member or field name and its absolute
    /// deadline in Unix ms, from the `keydb-subexpire-key`/`keydb-subexpire-when` AUX pairs
    /// KeyDB writes after the key (KeyDB 6.3 `src/rdb.cpp`, `rdbSaveKeyValuePair`).
    pub member_expiries: Vec<(Vec<u8>, i64)>,
}

/// What the file holds, handed out in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Key(Record),
    /// A key whose type KeyMesh has no value for, parsed past.
    Unsupported(Unsupported),
    /// Something that is not a key (a function library, a module's auxiliary data), parsed past.
    Section(Section),
}

/// A key of a type KeyMesh has no value for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub db: usize,
    pub key: Vec<u8>,
    /// Absolute deadline in Unix ms.
    pub expire_ms: Option<u64>,
    /// What it is, for the log and the error ("stream (1200 entries, 2 consumer groups, 3 pending)").
    pub kind: String,
}

/// A part of the file that is neither a key nor file metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// What it is ("function library \"mylib\"").
    pub what: String,
    /// What the user can do instead, for the refusal.
    pub hint: &'static str,
}

/// A value in Redis's terms; integers from compact encodings are in their decimal form.
#[derive(Debug, Clone, PartialEq)]
pub enum RdbValue {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    ZSet(Vec<(Vec<u8>, f64)>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
}

impl RdbValue {
    /// An empty collection (Redis skips such keys when it loads them).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements of a collection; 1 for a string.
    pub fn len(&self) -> usize {
        match self {
            RdbValue::Str(_) => 1,
            RdbValue::List(v) | RdbValue::Set(v) => v.len(),
            RdbValue::ZSet(v) => v.len(),
            RdbValue::Hash(v) => v.len(),
        }
    }
}

/// What the file says about itself.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub version: u32,
    /// The `redis-ver` AUX field, if any.
    pub redis_version: Option<String>,
}

/// Checks `bytes` (a whole RDB file: header, EOF marker, checksum) and hands every key,
/// unsupported key and unsupported section to `sink` in file order. Nothing is handed over
/// from a file whose checksum is wrong.
pub fn parse(bytes: &[u8], sink: &mut dyn FnMut(Entry) -> Result<(), RdbError>) -> Result<Summary, RdbError> {
    let version = check(bytes)?;
    let mut r = Reader { buf: bytes, pos: 9 };
    let mut summary = Summary { version, redis_version: None };
    let (mut db, mut expire_ms) = (0usize, None);
    // The last key, held back while KeyDB's member-expiry AUX pairs that follow it may come.
    let mut pending: Option<Record> = None;
    // A `keydb-subexpire-key` waiting for its `keydb-subexpire-when`.
    let mut subkey: Option<Vec<u8>> = None;
    loop {
        let op = r.byte("an opcode")?;
        if op != OP_AUX {
            if let Some(record) = pending.take() {
                sink(Entry::Key(record))?;
            }
            subkey = None;
        }
        match op {
            OP_EOF => return Ok(summary),
            OP_SELECTDB => db = r.len()? as usize,
            OP_RESIZEDB => {
                r.len()?;
                r.len()?;
            }
            OP_SLOT_INFO => {
                // Slot id, its key count and its count of keys with an expiry.
                for _ in 0..3 {
                    r.len()?;
                }
            }
            OP_AUX => {
                let (name, value) = (r.string()?, r.string()?);
                match &name[..] {
                    b"redis-ver" => summary.redis_version = Some(String::from_utf8_lossy(&value).into_owned()),
                    // KeyDB 6.3 (`rdbLoadRio`): the member named by the `-key` field expires
                    // at the `-when` field's Unix ms; both follow the key they belong to.
                    b"keydb-subexpire-key" => subkey = Some(value.into_owned()),
                    b"keydb-subexpire-when" => {
                        let when = std::str::from_utf8(&value).ok().and_then(|t| t.parse::<i64>().ok());
                        let when = when.ok_or_else(|| r.corrupt(format!("keydb-subexpire-when {:?}", String::from_utf8_lossy(&value))))?;
                        // KeyDB skips a pair with no key before it (its key had expired).
                        if let (Some(record), Some(member)) = (pending.as_mut(), subkey.take()) {
                            record.member_expiries.push((member, when));
                        }
                    }
                    // Everything else is metadata an importer may ignore (rdb.c's AUX
                    // contract): `ctime`, `used-mem`, `aof-base`, `repl-*`, `lua`, and
                    // KeyDB's per-key `mvcc-tstamp` (its replication clock; an import stamps
                    // keys with this node's clock instead, see `import`).
                    _ => {}
                }
            }
            OP_EXPIRETIME_MS => expire_ms = Some(u64::from_le_bytes(r.array("an expiry")?)),
            OP_EXPIRETIME => expire_ms = Some(u64::from(u32::from_le_bytes(r.array("an expiry")?)) * 1000),
            OP_IDLE => drop(r.len()?),
            OP_FREQ => drop(r.byte("an LFU frequency")?),
            OP_MODULE_AUX => sink(Entry::Section(skip::module_aux(&mut r)?))?,
            OP_FUNCTION2 => sink(Entry::Section(skip::function(&mut r)?))?,
            OP_FUNCTION_PRE_GA => sink(Entry::Section(skip::function_pre_ga(&mut r)?))?,
            kind => {
                let key = r.string()?.into_owned();
                let expire_ms = expire_ms.take();
                match value(&mut r, kind, db, &key)? {
                    Parsed::Value(value) => pending = Some(Record { db, key, expire_ms, value, member_expiries: Vec::new() }),
                    Parsed::Unsupported(kind) => sink(Entry::Unsupported(Unsupported { db, key, expire_ms, kind }))?,
                }
            }
        }
    }
}

/// A `DUMP` payload's body (`dump`): a type byte and one value. Returns the value, or what a
/// value KeyMesh has no type for was, and how many bytes the two took.
pub(super) fn typed_value(buf: &[u8]) -> Result<(Result<RdbValue, String>, usize), RdbError> {
    let mut r = Reader { buf, pos: 0 };
    let kind = r.byte("a value type")?;
    let parsed = match value(&mut r, kind, 0, b"")? {
        Parsed::Value(value) => Ok(value),
        Parsed::Unsupported(what) => Err(what),
    };
    Ok((parsed, r.pos))
}

/// A function library's code, the string after a `FUNCTION2` opcode, at the start of `buf`,
/// and how many bytes it took.
pub(super) fn library_code(buf: &[u8]) -> Result<(Vec<u8>, usize), RdbError> {
    let mut r = Reader { buf, pos: 0 };
    let code = r.string()?.into_owned();
    Ok((code, r.pos))
}

/// A value, or what a value KeyMesh has no type for was (it has been parsed past).
enum Parsed {
    Value(RdbValue),
    Unsupported(String),
}

/// The header, version, EOF marker and checksum; returns the version.
fn check(bytes: &[u8]) -> Result<u32, RdbError> {
    if !bytes.starts_with(b"REDIS") {
        return Err(RdbError::NotRdb);
    }
    let digits = bytes.get(5..9).ok_or_else(|| RdbError::Truncated("the header is cut short".into()))?;
    let text = String::from_utf8_lossy(digits).into_owned();
    let version: u32 = text.parse().map_err(|_| RdbError::Version(text.clone()))?;
    if !(1..=MAX_VERSION).contains(&version) {
        return Err(RdbError::Version(text));
    }
    if version < 5 {
        // No checksum before version 5: the file must end with its EOF opcode.
        return if bytes.len() > 9 && bytes.last() == Some(&OP_EOF) { Ok(version) } else { Err(RdbError::Truncated("no EOF marker at the end".into())) };
    }
    if bytes.len() < 9 + 9 || bytes[bytes.len() - 9] != OP_EOF {
        return Err(RdbError::Truncated("no EOF marker before the checksum".into()));
    }
    let (content, sum) = bytes.split_at(bytes.len() - 8);
    let mut expected = [0u8; 8];
    expected.copy_from_slice(sum);
    let expected = u64::from_le_bytes(expected);
    // 0: saved with `rdbchecksum no`.
    if expected != 0 {
        let actual = CRC64.checksum(content);
        if actual != expected {
            return Err(RdbError::Checksum { expected, actual });
        }
    }
    Ok(version)
}

/// One value of type `kind`; `db` and `key` name it in errors.
fn value(r: &mut Reader, kind: u8, db: usize, key: &[u8]) -> Result<Parsed, RdbError> {
    let at = r.pos;
    let value = match kind {
        TYPE_STRING => RdbValue::Str(r.string()?.into_owned()),
        TYPE_LIST => RdbValue::List(r.strings()?),
        TYPE_SET => RdbValue::Set(r.strings()?),
        TYPE_HASH => RdbValue::Hash(pairs(r.strings_n(2)?)),
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = r.len()?;
            let mut members = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                let member = r.string()?.into_owned();
                let score = if kind == TYPE_ZSET { r.text_double()? } else { f64::from_le_bytes(r.array("a score")?) };
                members.push((member, score));
            }
            RdbValue::ZSet(members)
        }
        TYPE_HASH_ZIPMAP => RdbValue::Hash(compact::zipmap(&r.string()?).map_err(|e| e.at(at))?),
        TYPE_LIST_ZIPLIST => RdbValue::List(compact::ziplist(&r.string()?).map_err(|e| e.at(at))?),
        TYPE_SET_INTSET => RdbValue::Set(compact::intset(&r.string()?).map_err(|e| e.at(at))?),
        TYPE_SET_LISTPACK => RdbValue::Set(compact::listpack(&r.string()?).map_err(|e| e.at(at))?),
        TYPE_ZSET_ZIPLIST => RdbValue::ZSet(scored(compact::ziplist(&r.string()?).map_err(|e| e.at(at))?, at)?),
        TYPE_ZSET_LISTPACK => RdbValue::ZSet(scored(compact::listpack(&r.string()?).map_err(|e| e.at(at))?, at)?),
        TYPE_HASH_ZIPLIST => RdbValue::Hash(pairs(compact::ziplist(&r.string()?).map_err(|e| e.at(at))?)),
        TYPE_HASH_LISTPACK => RdbValue::Hash(pairs(compact::listpack(&r.string()?).map_err(|e| e.at(at))?)),
        TYPE_LIST_QUICKLIST => {
            let mut items = Vec::new();
            for _ in 0..r.len()? {
                items.extend(compact::ziplist(&r.string()?).map_err(|e| e.at(at))?);
            }
            RdbValue::List(items)
        }
        TYPE_LIST_QUICKLIST_2 => {
            let mut items = Vec::new();
            for _ in 0..r.len()? {
                match r.len()? {
                    CONTAINER_PLAIN => items.push(r.string()?.into_owned()),
                    CONTAINER_PACKED => items.extend(compact::listpack(&r.string()?).map_err(|e| e.at(at))?),
                    other => return Err(r.corrupt(format!("quicklist node container {other}"))),
                }
            }
            RdbValue::List(items)
        }
        TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 | TYPE_STREAM_LISTPACKS_3 => {
            let revision = match kind {
                TYPE_STREAM_LISTPACKS => 0,
                TYPE_STREAM_LISTPACKS_2 => 1,
                _ => 2,
            };
            return Ok(Parsed::Unsupported(skip::stream(r, revision)?));
        }
        TYPE_MODULE_2 => return Ok(Parsed::Unsupported(skip::module_value(r)?)),
        TYPE_MODULE => return Err(RdbError::Unskippable { db, key: String::from_utf8_lossy(key).into_owned() }),
        TYPE_HASH_METADATA_PRE_GA | TYPE_HASH_METADATA => return Ok(Parsed::Unsupported(skip::hash_metadata(r, kind == TYPE_HASH_METADATA)?)),
        TYPE_HASH_LISTPACK_EX_PRE_GA | TYPE_HASH_LISTPACK_EX => return Ok(Parsed::Unsupported(skip::hash_listpack_ex(r, kind == TYPE_HASH_LISTPACK_EX)?)),
        TYPE_KEYDB_CRON => return Ok(Parsed::Unsupported(skip::keydb_cron(r)?)),
        other => return Err(RdbError::Corrupt { offset: at - 1, what: format!("unknown value type {other} for key {:?}", String::from_utf8_lossy(key)) }),
    };
    Ok(Parsed::Value(value))
}

/// A flat list of alternating names and values.
fn pairs(flat: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    out
}

/// A flat list of alternating members and scores (as text or decimal integers).
fn scored(flat: Vec<Vec<u8>>, at: usize) -> Result<Vec<(Vec<u8>, f64)>, RdbError> {
    if !flat.len().is_multiple_of(2) {
        return Err(RdbError::Corrupt { offset: at, what: "a sorted set with a member but no score".into() });
    }
    pairs(flat)
        .into_iter()
        .map(|(m, s)| Ok((m, parse_score(&s).ok_or_else(|| RdbError::Corrupt { offset: at, what: format!("score {:?}", String::from_utf8_lossy(&s)) })?)))
        .collect()
}

fn parse_score(text: &[u8]) -> Option<f64> {
    let score: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (!score.is_nan()).then_some(score)
}

/// A pre-allocation bounded by what a corrupt length could ask for.
fn capacity(n: u64) -> usize {
    n.min(1 << 16) as usize
}

/// A length, or a special string encoding (the low 6 bits of an `11xxxxxx` byte).
enum Length {
    Len(u64),
    Encoded(u8),
}

/// A cursor over the file.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn corrupt(&self, what: String) -> RdbError {
        RdbError::Corrupt { offset: self.pos, what }
    }

    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], RdbError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| RdbError::Truncated(format!("{what} at byte {} runs past the end", self.pos)))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(super) fn byte(&mut self, what: &str) -> Result<u8, RdbError> {
        Ok(self.take(1, what)?[0])
    }

    pub(super) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], RdbError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn length(&mut self) -> Result<Length, RdbError> {
        let first = self.byte("a length")?;
        Ok(match first >> 6 {
            0 => Length::Len(u64::from(first & 0x3f)),
            1 => Length::Len(u64::from(first & 0x3f) << 8 | u64::from(self.byte("a length")?)),
            3 => Length::Encoded(first & 0x3f),
            _ => match first {
                0x80 => Length::Len(u64::from(u32::from_be_bytes(self.array("a length")?))),
                0x81 => Length::Len(u64::from_be_bytes(self.array("a length")?)),
                other => return Err(self.corrupt(format!("length prefix {other:#04x}"))),
            },
        })
    }

    pub(super) fn len(&mut self) -> Result<u64, RdbError> {
        match self.length()? {
            Length::Len(n) => Ok(n),
            Length::Encoded(_) => Err(self.corrupt("an encoded string where a length belongs".into())),
        }
    }

    pub(super) fn string(&mut self) -> Result<Cow<'a, [u8]>, RdbError> {
        match self.length()? {
            Length::Len(n) => Ok(Cow::Borrowed(self.take(usize::try_from(n).unwrap_or(usize::MAX), "a string")?)),
            Length::Encoded(0) => Ok(Cow::Owned(decimal(i64::from(self.byte("an integer")? as i8)))),
            Length::Encoded(1) => Ok(Cow::Owned(decimal(i64::from(i16::from_le_bytes(self.array("an integer")?))))),
            Length::Encoded(2) => Ok(Cow::Owned(decimal(i64::from(i32::from_le_bytes(self.array("an integer")?))))),
            Length::Encoded(3) => {
                let (compressed, len) = (self.len()?, self.len()?);
                let data = self.take(usize::try_from(compressed).unwrap_or(usize::MAX), "an LZF string")?;
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                match lzf::decompress(data, len) {
                    Ok(out) if out.len() == len => Ok(Cow::Owned(out)),
                    _ => Err(self.corrupt(format!("an LZF string that does not decompress to its {len} bytes"))),
                }
            }
            Length::Encoded(other) => Err(self.corrupt(format!("string encoding {other}"))),
        }
    }

    /// Parses past a string without decoding it (an LZF string stays compressed).
    pub(super) fn skip_string(&mut self, what: &str) -> Result<(), RdbError> {
        match self.length()? {
            Length::Len(n) => drop(self.take(usize::try_from(n).unwrap_or(usize::MAX), what)?),
            Length::Encoded(0) => drop(self.take(1, what)?),
            Length::Encoded(1) => drop(self.take(2, what)?),
            Length::Encoded(2) => drop(self.take(4, what)?),
            Length::Encoded(3) => {
                let compressed = self.len()?;
                self.len()?;
                self.take(usize::try_from(compressed).unwrap_or(usize::MAX), what)?;
            }
            Length::Encoded(other) => return Err(self.corrupt(format!("string encoding {other}"))),
        }
        Ok(())
    }

    fn strings(&mut self) -> Result<Vec<Vec<u8>>, RdbError> {
        self.strings_n(1)
    }

    /// A length, then `per` strings per counted element.
    fn strings_n(&mut self, per: u64) -> Result<Vec<Vec<u8>>, RdbError> {
        let n = self.len()?.saturating_mul(per);
        let mut out = Vec::with_capacity(capacity(n));
        for _ in 0..n {
            out.push(self.string()?.into_owned());
        }
        Ok(out)
    }

    /// A score of the version-1 sorted set: a length byte (253 NaN, 254 +inf, 255 -inf), then text.
    fn text_double(&mut self) -> Result<f64, RdbError> {
        match self.byte("a score")? {
            253 => Err(self.corrupt("a NaN score".into())),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                let text = self.take(usize::from(n), "a score")?;
                parse_score(text).ok_or_else(|| self.corrupt(format!("score {:?}", String::from_utf8_lossy(text))))
            }
        }
    }
}

/// An integer's decimal form, as Redis hands out integer-encoded strings.
pub fn decimal(n: i64) -> Vec<u8> {
    itoa::Buffer::new().format(n).as_bytes().to_vec()
}
