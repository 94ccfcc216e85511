//! The compact blobs Redis stores inside RDB strings: ziplist (`ziplist.c`), listpack
//! (`listpack.c`), intset (`intset.c`) and zipmap (`zipmap.c`). Every element comes out as
//! bytes; integers in their decimal form, as Redis hands them out. Every read is bounds-checked:
//! a malformed blob is an error, never a panic or a read past its end.

use super::read::decimal;
use super::RdbError;

/// A blob that does not decode; `at` places it in the file.
#[derive(Debug)]
pub struct Malformed(pub String);

impl Malformed {
    pub fn at(self, offset: usize) -> RdbError {
        RdbError::Corrupt { offset, what: self.0 }
    }
}

type Result<T> = std::result::Result<T, Malformed>;

/// A bounds-checked cursor over one blob.
struct Blob<'a> {
    kind: &'static str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Blob<'a> {
    fn new(kind: &'static str, buf: &'a [u8], header: usize) -> Result<Blob<'a>> {
        let mut b = Blob { kind, buf, pos: 0 };
        b.take(header)?;
        Ok(b)
    }

    fn malformed(&self, what: &str) -> Malformed {
        Malformed(format!("{} blob: {what} at offset {}", self.kind, self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| self.malformed("an entry runs past the end"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn le(&mut self, n: usize) -> Result<u64> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
    }

    fn be(&mut self, n: usize) -> Result<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
    }

    /// A little-endian signed integer of `n` bytes.
    fn signed(&mut self, n: usize) -> Result<i64> {
        let shift = 64 - 8 * n as u32;
        Ok(((self.le(n)? << shift) as i64) >> shift)
    }

    fn bytes(&mut self, n: u64) -> Result<Vec<u8>> {
        Ok(self.take(usize::try_from(n).unwrap_or(usize::MAX))?.to_vec())
    }
}

/// A ziplist: `zlbytes` (4), `zltail` (4), `zllen` (2), entries, `0xff`. Each entry: the
/// previous entry's length (1 byte, or `0xfe` and 4), an encoding, the data.
pub fn ziplist(buf: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut b = Blob::new("ziplist", buf, 10)?;
    let mut out = Vec::new();
    loop {
        if b.buf.get(b.pos) == Some(&0xff) {
            return Ok(out);
        }
        if b.byte()? == 0xfe {
            b.take(4)?;
        }
        let enc = b.byte()?;
        let item = match enc >> 6 {
            0 => b.bytes(u64::from(enc & 0x3f))?,
            1 => {
                let n = u64::from(enc & 0x3f) << 8 | u64::from(b.byte()?);
                b.bytes(n)?
            }
            2 => {
                let n = b.be(4)?;
                b.bytes(n)?
            }
            _ => decimal(match enc {
                0xc0 => b.signed(2)?,
                0xd0 => b.signed(4)?,
                0xe0 => b.signed(8)?,
                0xf0 => b.signed(3)?,
                0xfe => b.signed(1)?,
                0xf1..=0xfd => i64::from(enc & 0x0f) - 1,
                _ => return Err(b.malformed(&format!("encoding {enc:#04x}"))),
            }),
        };
        out.push(item);
    }
}

/// A listpack: total bytes (4), element count (2), entries, `0xff`. Each entry: an encoding,
/// the data, then its own length backwards (1 to 5 bytes).
pub fn listpack(buf: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut b = Blob::new("listpack", buf, 6)?;
    let mut out = Vec::new();
    loop {
        let start = b.pos;
        let enc = b.byte()?;
        let item = if enc & 0x80 == 0 {
            decimal(i64::from(enc))
        } else if enc & 0xc0 == 0x80 {
            b.bytes(u64::from(enc & 0x3f))?
        } else if enc & 0xe0 == 0xc0 {
            // 13 bits, two's complement.
            let raw = i64::from(enc & 0x1f) << 8 | i64::from(b.byte()?);
            decimal(if raw >= 1 << 12 { raw - (1 << 13) } else { raw })
        } else if enc & 0xf0 == 0xe0 {
            let n = u64::from(enc & 0x0f) << 8 | u64::from(b.byte()?);
            b.bytes(n)?
        } else {
            match enc {
                0xf0 => {
                    let n = b.le(4)?;
                    b.bytes(n)?
                }
                0xf1 => decimal(b.signed(2)?),
                0xf2 => decimal(b.signed(3)?),
                0xf3 => decimal(b.signed(4)?),
                0xf4 => decimal(b.signed(8)?),
                0xff => return Ok(out),
                _ => return Err(b.malformed(&format!("encoding {enc:#04x}"))),
            }
        };
        b.take(backlen_size(b.pos - start))?;
        out.push(item);
    }
}

/// How many bytes the backwards length of an entry of `len` bytes takes (`lpEncodeBacklen`).
fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// An intset: the width of its integers (2, 4 or 8 bytes), their count (4), the integers.
pub fn intset(buf: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut b = Blob::new("intset", buf, 0)?;
    let width = b.le(4)? as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(b.malformed(&format!("integer width {width}")));
    }
    let count = b.le(4)?;
    if count.saturating_mul(width as u64) != (buf.len() - 8) as u64 {
        return Err(b.malformed(&format!("{count} integers of {width} bytes in {} bytes", buf.len() - 8)));
    }
    (0..count).map(|_| Ok(decimal(b.signed(width)?))).collect()
}

/// A zipmap (hashes in RDB files before Redis 2.6): a count byte, then entries of key length,
/// key, value length, free byte count, value, free bytes; `0xff` ends it. A length is one
/// byte below 254, or `0xfe` and 4 bytes.
pub fn zipmap(buf: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut b = Blob::new("zipmap", buf, 1)?;
    let mut out = Vec::new();
    loop {
        let Some(key_len) = zipmap_len(&mut b)? else { return Ok(out) };
        let key = b.bytes(key_len)?;
        let value_len = zipmap_len(&mut b)?.ok_or_else(|| b.malformed("a key without a value"))?;
        let free = b.byte()?;
        let value = b.bytes(value_len)?;
        b.take(usize::from(free))?;
        out.push((key, value));
    }
}

fn zipmap_len(b: &mut Blob) -> Result<Option<u64>> {
    match b.byte()? {
        0xff => Ok(None),
        0xfe => Ok(Some(b.le(4)?)),
        n => Ok(Some(u64::from(n))),
    }
}
