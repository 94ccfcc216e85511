//! A bounds-checked cursor over protobuf bytes, for the hand-written decoders of the two
//! messages a mesh stream carries most: a batch (`codec`) and a string's op (the engine's
//! `repl::wire`). Each reads only the canonical form prost writes and returns `None` for
//! anything else, which the caller then hands to prost; every read is checked against the
//! buffer, so no input makes a read go past it.

/// The cursor over `buf`: `at` is where the next read starts. A slice it returns (`slice`)
/// borrows `buf`, so it cannot be of another buffer.
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader::starting_at(buf, 0)
    }

    /// A cursor whose next read starts at `at` (a position an earlier cursor reached).
    #[inline(always)]
    pub fn starting_at(buf: &'a [u8], at: usize) -> Reader<'a> {
        Reader { buf, at }
    }

    /// Where the next read starts.
    #[inline(always)]
    pub fn at(&self) -> usize {
        self.at
    }

    /// A field's key (0 is none: prost refuses it, so a hand-written decoder leaves it to
    /// prost).
    #[inline(always)]
    pub fn tag(&mut self) -> Option<u64> {
        self.varint().filter(|&t| t != 0)
    }

    /// A varint, as prost reads it. Tags, lengths and the database take one or two bytes; a
    /// longer one (an HLC takes nine bytes, a node id up to five) is read by `long_varint`,
    /// eight bytes at a time: a loop over their bytes cost ~140 and ~85 instructions
    /// (callgrind, docs/benchmarks.md, "Sixth pass"). All of it inline, in the engine's
    /// decoder too: as calls, `long_varint` and `varint_from` cost ~90 instructions more per
    /// string op merged (saving and restoring registers, returning through memory).
    #[inline(always)]
    pub fn varint(&mut self) -> Option<u64> {
        let &first = self.buf.get(self.at)?;
        if first < 0x80 {
            self.at += 1;
            return Some(u64::from(first));
        }
        // Two bytes: the length of an op of 128 bytes to 16 KiB.
        if let Some(&second) = self.buf.get(self.at + 1).filter(|&&b| b < 0x80) {
            self.at += 2;
            return Some(u64::from(first & 0x7f) | u64::from(second) << 7);
        }
        self.long_varint()
    }

    #[inline(always)]
    fn long_varint(&mut self) -> Option<u64> {
        let rest = &self.buf[self.at..];
        let (value, len) = match rest.split_first_chunk::<8>() {
            Some((eight, after)) => varint_from(u64::from_le_bytes(*eight), after)?,
            None => {
                // Fewer than eight bytes left: zeros after them end any varint, so one that
                // ends in the padding ran past the buffer.
                let mut eight = [0u8; 8];
                eight[..rest.len()].copy_from_slice(rest);
                let (value, len) = varint_from(u64::from_le_bytes(eight), &[])?;
                (len <= rest.len()).then_some((value, len))?
            }
        };
        self.at += len;
        Some(value)
    }

    /// A length prefix: the end of the field it announces (within the buffer).
    #[inline(always)]
    pub fn field_end(&mut self) -> Option<usize> {
        let len = usize::try_from(self.varint()?).ok()?;
        let end = self.at.checked_add(len)?;
        (end <= self.buf.len()).then_some(end)
    }

    /// Moves to `end`, the end of a field `field_end` read.
    #[inline(always)]
    pub fn skip_to(&mut self, end: usize) {
        debug_assert!(end >= self.at && end <= self.buf.len());
        self.at = end;
    }

    /// Moves past the next byte if it is `byte` (a field's one-byte key, where a decoder
    /// expects one field and no other): `None` otherwise, the cursor unmoved.
    #[inline(always)]
    pub fn expect(&mut self, byte: u8) -> Option<()> {
        (*self.buf.get(self.at)? == byte).then(|| self.at += 1)
    }

    /// A fixed 64-bit field's eight bytes, little-endian (a `double`'s bits).
    #[inline(always)]
    pub fn fixed64(&mut self) -> Option<u64> {
        let &eight = self.buf.get(self.at..)?.first_chunk::<8>()?;
        self.at += 8;
        Some(u64::from_le_bytes(eight))
    }

    /// A length-delimited field's bytes, borrowed (no copy, and no `Bytes` handle with its
    /// reference count: a caller that keeps them slices its `Bytes` with `Bytes::slice_ref`).
    #[inline(always)]
    pub fn slice(&mut self) -> Option<&'a [u8]> {
        let end = self.field_end()?;
        let out = &self.buf[self.at..end];
        self.at = end;
        Some(out)
    }
}

/// The varint that starts with the eight bytes of `word` (little-endian; `after` holds the
/// bytes after them) and its length: the first byte whose top bit is clear ends it, and the
/// seven-bit groups before it are packed by `seven_bit_groups`. `None` when it runs past the
/// bytes given or past ten bytes, or when its tenth byte carries more than the one bit a
/// `u64` has left (prost refuses those too).
#[inline(always)]
fn varint_from(word: u64, after: &[u8]) -> Option<(u64, usize)> {
    let ends = !word & 0x8080_8080_8080_8080;
    if ends != 0 {
        let len = (ends.trailing_zeros() / 8 + 1) as usize;
        let mine = if len == 8 { u64::MAX } else { (1 << (8 * len)) - 1 };
        return Some((seven_bit_groups(word & mine), len));
    }
    let low = seven_bit_groups(word);
    let &ninth = after.first()?;
    if ninth < 0x80 {
        return Some((low | u64::from(ninth) << 56, 9));
    }
    let &tenth = after.get(1)?;
    (tenth <= 1).then_some((low | u64::from(ninth & 0x7f) << 56 | u64::from(tenth) << 63, 10))
}

/// The low seven bits of each of `word`'s eight bytes, packed (byte `i`'s at bit `7 * i`):
/// neighbours joined in pairs, then pairs of pairs, then the two halves.
#[inline(always)]
fn seven_bit_groups(word: u64) -> u64 {
    let x = word & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | (x & 0x7f00_7f00_7f00_7f00) >> 1;
    let x = (x & 0x0000_3fff_0000_3fff) | (x & 0x3fff_0000_3fff_0000) >> 2;
    (x & 0x0000_0000_0fff_ffff) | (x & 0x0fff_ffff_0000_0000) >> 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Reader::varint` against prost's decoder: every length from one to ten bytes,
    /// at the end of the buffer and with bytes after it, cut short at every byte, non-canonical
    /// (zero groups at the end), and ten-byte ones whose last byte carries one bit too many.
    #[test]
    fn varints_read_as_prost_reads_them() {
        let read = |bytes: &[u8]| {
            let mut r = Reader::new(bytes);
            r.varint().map(|v| (v, r.at()))
        };
        let prost_read = |bytes: &[u8]| {
            let mut buf = bytes;
            prost::encoding::decode_varint(&mut buf).ok().map(|v| (v, bytes.len() - buf.len()))
        };
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for bits in 0..64 {
            for value in [1u64 << bits, (1u64 << bits) - 1, (1u64 << bits) | 0x55, u64::MAX >> bits] {
                let mut bytes = Vec::new();
                prost::encoding::encode_varint(value, &mut bytes);
                cases.push(bytes);
            }
        }
        for len in 1..=10 {
            let mut padded = vec![0x80u8; len - 1];
            padded.push(0);
            cases.push(padded);
        }
        for last in [0u8, 1, 2, 0x7f, 0x80] {
            let mut ten = vec![0xffu8; 9];
            ten.push(last);
            cases.push(ten);
        }
        cases.push(vec![0xff; 11]);
        for case in cases {
            for tail in [&[][..], &[0x05, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0, 0][..]] {
                let whole = [&case[..], tail].concat();
                assert_eq!(read(&whole), prost_read(&whole), "{whole:02x?}");
                for cut in 0..case.len() {
                    assert_eq!(read(&case[..cut]), prost_read(&case[..cut]), "{:02x?}", &case[..cut]);
                }
            }
        }
    }
}
