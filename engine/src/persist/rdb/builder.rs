//! RDB bytes for tests, written the way Redis's `rdb.c` writes them: opcodes, lengths
//! (`rdbSaveLen`), strings, millisecond times, AUX fields, and a whole file's header, `EOF`
//! opcode and CRC-64 trailer. One builder for the decoder's unit tests (`persist::rdb::tests`,
//! `skip_tests`) and the black-box tests (`tests/persistence_rdb.rs`, which includes this file
//! by path): it is compiled into tests only, never into the product. Each test adds the
//! layouts it needs (a stream, a KeyDB key) as methods of its own.

#![allow(dead_code)]

/// RDB bytes: a body, or a whole file from `header` to `finish`.
#[derive(Default)]
pub struct RdbBytes(pub Vec<u8>);

impl RdbBytes {
    /// A file's start: `REDIS` and the four-digit format version.
    pub fn header(version: u32) -> RdbBytes {
        RdbBytes(format!("REDIS{version:04}").into_bytes())
    }

    pub fn op(&mut self, b: u8) -> &mut Self {
        self.0.push(b);
        self
    }

    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    /// `rdbSaveLen`: 6 bits, 14 bits, or 0x80/0x81 and 32/64 bits big-endian.
    pub fn len(&mut self, n: u64) -> &mut Self {
        if n < 1 << 6 {
            self.0.push(n as u8);
        } else if n < 1 << 14 {
            self.0.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
        } else if let Ok(n) = u32::try_from(n) {
            self.0.push(0x80);
            self.0.extend_from_slice(&n.to_be_bytes());
        } else {
            self.0.push(0x81);
            self.0.extend_from_slice(&n.to_be_bytes());
        }
        self
    }

    /// A length-prefixed string (`rdbSaveRawString`, uncompressed).
    pub fn s(&mut self, s: &[u8]) -> &mut Self {
        self.len(s.len() as u64).raw(s)
    }

    /// `rdbSaveMillisecondTime`: 8 bytes, little-endian.
    pub fn ms(&mut self, t: u64) -> &mut Self {
        self.raw(&t.to_le_bytes())
    }

    /// An AUX field (opcode 250): name and value.
    pub fn aux(&mut self, name: &str, value: &str) -> &mut Self {
        self.op(250).s(name.as_bytes()).s(value.as_bytes())
    }

    /// Ends a file: the `EOF` opcode, then the CRC-64 (Redis's, `crc64_jones`) of everything
    /// before it, little-endian.
    pub fn finish(mut self) -> Vec<u8> {
        self.0.push(0xff);
        let sum = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(&self.0);
        self.0.extend_from_slice(&sum.to_le_bytes());
        self.0
    }
}

/// A whole file of format `version` around `body`.
pub fn file(body: &[u8], version: u32) -> Vec<u8> {
    let mut f = RdbBytes::header(version);
    f.raw(body);
    f.finish()
}
