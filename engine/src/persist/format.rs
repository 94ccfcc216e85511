//! The snapshot file: `MAGIC`, then frames of `[length u32 LE][crc32 u32 LE][payload]`, each
//! payload one protobuf `SnapshotFrame`: a header first, then batches of full-sync effects,
//! then an end frame that counts what came before it.
//!
//! The effects are the mesh's full-sync encoding (`repl::snapshot`), not a second format: a
//! snapshot is a full sync written to disk, and loading one is merging it, exactly as a node
//! merges a peer's full sync. Every frame is checksummed (CRC-32, `crc32fast`), so a flipped
//! bit is found; the end frame must be present and agree with the frames counted, so a file cut
//! short is found too. Either way the whole file is refused (`FormatError`).

use std::io::{Read, Write};

use keymesh_proto as pb;
use prost::Message;

/// The first bytes of a KeyMesh snapshot (a Redis RDB file starts with `REDIS`).
pub const MAGIC: &[u8; 16] = b"KEYMESH-SNAP\r\n\x1a\n";

/// The frame layout version written in the header.
pub const FORMAT_VERSION: u32 = 1;

/// A frame larger than this is a corrupt length, not data: nothing is allocated for it. Batches
/// hold one shard's keys, far below it.
pub const MAX_FRAME_BYTES: usize = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("failed to read the snapshot: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a KeyMesh snapshot (the file does not start with its magic bytes)")]
    NotASnapshot,
    #[error("snapshot truncated at byte {offset}: {what}")]
    Truncated { offset: u64, what: &'static str },
    #[error("snapshot corrupt at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    #[error("snapshot format version {0} is newer than this engine reads ({FORMAT_VERSION})")]
    Version(u32),
}

/// Writes frames, counting the bytes written.
pub struct FrameWriter<W: Write> {
    out: W,
    pub bytes: u64,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<FrameWriter<W>> {
        out.write_all(MAGIC)?;
        Ok(FrameWriter { out, bytes: MAGIC.len() as u64 })
    }

    pub fn write(&mut self, frame: &pb::SnapshotFrame) -> std::io::Result<()> {
        let payload = frame.encode_to_vec();
        let len = u32::try_from(payload.len()).ok().filter(|n| (*n as usize) <= MAX_FRAME_BYTES);
        let len = len.ok_or_else(|| std::io::Error::other(format!("a snapshot frame of {} bytes is too large", payload.len())))?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&crc32fast::hash(&payload).to_le_bytes())?;
        self.out.write_all(&payload)?;
        self.bytes += 8 + payload.len() as u64;
        Ok(())
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads and checks frames. `next` returns `Ok(None)` only after a valid end frame.
pub struct FrameReader<R: Read> {
    input: R,
    pub offset: u64,
    batches: u64,
    ops: u64,
    done: bool,
}

impl<R: Read> FrameReader<R> {
    /// Checks the magic bytes and reads the header.
    pub fn open(mut input: R) -> Result<(FrameReader<R>, pb::SnapshotHeader), FormatError> {
        let mut magic = [0u8; 16];
        if read_full(&mut input, &mut magic)? < magic.len() || &magic != MAGIC {
            return Err(FormatError::NotASnapshot);
        }
        let mut reader = FrameReader { input, offset: MAGIC.len() as u64, batches: 0, ops: 0, done: false };
        let header = match reader.frame()?.body {
            Some(pb::snapshot_frame::Body::Header(h)) => h,
            _ => return Err(FormatError::Corrupt { offset: MAGIC.len() as u64, what: "the first frame is not a header".into() }),
        };
        if header.format_version > FORMAT_VERSION {
            return Err(FormatError::Version(header.format_version));
        }
        Ok((reader, header))
    }

    /// The next batch of effects; `None` once the end frame was read and agreed with the
    /// batches counted.
    pub fn next_batch(&mut self) -> Result<Option<pb::Batch>, FormatError> {
        if self.done {
            return Ok(None);
        }
        let at = self.offset;
        match self.frame()?.body {
            Some(pb::snapshot_frame::Body::Batch(batch)) => {
                self.batches += 1;
                self.ops += batch.ops.len() as u64;
                Ok(Some(batch))
            }
            Some(pb::snapshot_frame::Body::End(end)) => {
                if end.batches != self.batches || end.ops != self.ops {
                    let what = format!("the end frame counts {} batches and {} ops, the file holds {} and {}", end.batches, end.ops, self.batches, self.ops);
                    return Err(FormatError::Corrupt { offset: at, what });
                }
                let mut extra = [0u8; 1];
                if read_full(&mut self.input, &mut extra)? > 0 {
                    return Err(FormatError::Corrupt { offset: self.offset, what: "bytes after the end frame".into() });
                }
                self.done = true;
                Ok(None)
            }
            _ => Err(FormatError::Corrupt { offset: at, what: "a second header".into() }),
        }
    }

    fn frame(&mut self) -> Result<pb::SnapshotFrame, FormatError> {
        let at = self.offset;
        let mut head = [0u8; 8];
        let got = read_full(&mut self.input, &mut head)?;
        if got < head.len() {
            return Err(FormatError::Truncated { offset: at + got as u64, what: "the file ends before its end frame" });
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if len > MAX_FRAME_BYTES {
            return Err(FormatError::Corrupt { offset: at, what: format!("a frame length of {len} bytes") });
        }
        let mut payload = vec![0u8; len];
        let got = read_full(&mut self.input, &mut payload)?;
        if got < len {
            return Err(FormatError::Truncated { offset: at + 8 + got as u64, what: "the file ends inside a frame" });
        }
        if crc32fast::hash(&payload) != crc {
            return Err(FormatError::Corrupt { offset: at, what: "checksum mismatch".into() });
        }
        self.offset += 8 + len as u64;
        pb::SnapshotFrame::decode(payload.as_slice()).map_err(|e| FormatError::Corrupt { offset: at, what: format!("undecodable frame: {e}") })
    }
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(batches: usize) -> Vec<u8> {
        let mut w = FrameWriter::new(Vec::new()).unwrap();
        w.write(&pb::SnapshotFrame { body: Some(pb::snapshot_frame::Body::Header(pb::SnapshotHeader { format_version: 1, ..Default::default() })) }).unwrap();
        for i in 0..batches {
            let op = pb::Op { db: 0, key: format!("k{i}").into_bytes().into(), effect: None };
            w.write(&pb::SnapshotFrame { body: Some(pb::snapshot_frame::Body::Batch(pb::Batch { first_seq: 0, ops: vec![op], hlc: 1 })) }).unwrap();
        }
        let end = pb::SnapshotEnd { keys: batches as u64, ops: batches as u64, batches: batches as u64, finished_unix_ms: 0 };
        w.write(&pb::SnapshotFrame { body: Some(pb::snapshot_frame::Body::End(end)) }).unwrap();
        w.into_inner()
    }

    fn read_all(bytes: &[u8]) -> Result<usize, FormatError> {
        let (mut r, _) = FrameReader::open(bytes)?;
        let mut n = 0;
        while r.next_batch()?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    #[test]
    fn a_whole_file_reads_back() {
        assert_eq!(read_all(&file(3)).unwrap(), 3);
    }

    #[test]
    fn every_truncation_is_refused() {
        // Proves that a file cut at any byte is found, never read as a shorter snapshot.
        let bytes = file(3);
        for cut in 0..bytes.len() {
            assert!(read_all(&bytes[..cut]).is_err(), "a file cut at byte {cut} of {} was accepted", bytes.len());
        }
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        // Proves the checksums and the end frame cover every byte of the file.
        let bytes = file(3);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(read_all(&bad).is_err(), "a flipped byte at {at} was accepted");
        }
    }

    #[test]
    fn an_rdb_file_is_not_a_snapshot() {
        assert!(matches!(read_all(b"REDIS0011\xfa\x09redis-ver"), Err(FormatError::NotASnapshot)));
    }
}
