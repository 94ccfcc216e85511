//! Redis's HyperLogLog, byte for byte: the same 16-byte header ("HYLL", encoding, cached
//! cardinality), the same sparse and dense register encodings, the same hash (MurmurHash64A,
//! Redis's seed) and the same estimator (Ertl's improved estimator, as Redis >= 5). An HLL is a
//! plain string value: `GET`, `SET`, `DUMP`-style copies, snapshots and persistence carry it
//! unchanged, and an HLL built here reads the same in redis-server and back.
//!
//! The functions work on the string's bytes. Registers only grow (`set_register` keeps the
//! maximum), which is what makes an HLL a lattice: merging two HLLs register by register is
//! commutative, associative and idempotent (`repl::merge` relies on it).
//!
//! Layout: `dense` (6-bit packed registers), `sparse` (run-length opcodes, promoted to dense
//! when a register exceeds 32 or the string outgrows `hll-sparse-max-bytes`), `estimate`
//! (hash, register histogram, cardinality).

mod dense;
pub mod estimate;
mod selftest;
mod sparse;

pub use estimate::pattern;
pub use selftest::self_test;

/// Header: magic (4), encoding (1), unused (3), cached cardinality (8, little endian; the
/// top bit of the last byte set means "stale").
pub const HEADER_LEN: usize = 16;
/// 2^14 registers of 6 bits (Redis's HLL_P = 14).
pub const REGISTERS: usize = 1 << 14;
/// A dense HLL's exact length.
pub const DENSE_LEN: usize = HEADER_LEN + (REGISTERS * 6).div_ceil(8);
/// The largest register value a hash can produce (its run length: 64 - 14 + 1).
pub const MAX_REGISTER: u8 = 51;
/// Redis's default `hll-sparse-max-bytes`.
pub const DEFAULT_SPARSE_MAX_BYTES: usize = 3000;

const MAGIC: &[u8; 4] = b"HYLL";
const DENSE: u8 = 0;
const SPARSE: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HllError {
    /// Not a string that starts like an HLL (Redis checks the header only).
    #[error("WRONGTYPE Key is not a valid HyperLogLog string value.")]
    NotHll,
    /// The header is fine but the registers do not decode.
    #[error("INVALIDOBJ Corrupted HLL object detected")]
    Corrupted,
}

/// The two representations, as `PFDEBUG ENCODING` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Dense,
    Sparse,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Dense => "dense",
            Encoding::Sparse => "sparse",
        }
    }
}

/// A new, empty HLL: sparse, every register zero, cached cardinality 0 (valid).
pub fn new_empty() -> Vec<u8> {
    let mut hll = vec![0u8; HEADER_LEN];
    hll[..4].copy_from_slice(MAGIC);
    hll[4] = SPARSE;
    sparse::push_zeros(&mut hll, REGISTERS);
    hll
}

/// Redis's `isHLLObjectOrReply`: the header says HLL and a dense one has the exact length.
pub fn check(hll: &[u8]) -> Result<Encoding, HllError> {
    if hll.len() < HEADER_LEN || &hll[..4] != MAGIC {
        return Err(HllError::NotHll);
    }
    match hll[4] {
        DENSE if hll.len() == DENSE_LEN => Ok(Encoding::Dense),
        SPARSE => Ok(Encoding::Sparse),
        _ => Err(HllError::NotHll),
    }
}

/// The cached cardinality, if it is valid.
pub fn cached_count(hll: &[u8]) -> Option<u64> {
    let card: [u8; 8] = hll.get(8..HEADER_LEN)?.try_into().ok()?;
    (card[7] & 0x80 == 0).then(|| u64::from_le_bytes(card))
}

pub fn store_count(hll: &mut [u8], count: u64) {
    hll[8..HEADER_LEN].copy_from_slice(&count.to_le_bytes());
}

fn invalidate_count(hll: &mut [u8]) {
    hll[15] |= 0x80;
}

/// Adds an element; returns whether a register grew. `check` must have passed.
pub fn add(hll: &mut Vec<u8>, element: &[u8], sparse_max_bytes: usize) -> Result<bool, HllError> {
    let (index, count) = pattern(element);
    set_register(hll, index, count, sparse_max_bytes)
}

/// Raises register `index` to `count` if it is lower; returns whether it grew (and then the
/// cached cardinality is stale). A sparse HLL becomes dense when the value or the length no
/// longer fits it.
pub fn set_register(hll: &mut Vec<u8>, index: usize, count: u8, sparse_max_bytes: usize) -> Result<bool, HllError> {
    // Raising a register to 0 changes nothing (and the sparse encoding has no opcode for a
    // value of 0: found by the mesh_message fuzz target with a peer's register of value 0).
    if count == 0 {
        return Ok(false);
    }
    let grew = match check(hll)? {
        Encoding::Dense => dense::raise(&mut hll[HEADER_LEN..], index, count),
        Encoding::Sparse => match sparse::raise(hll, index, count, sparse_max_bytes)? {
            sparse::Raised::Unchanged => false,
            sparse::Raised::Updated => true,
            sparse::Raised::NeedsDense => {
                to_dense(hll)?;
                dense::raise(&mut hll[HEADER_LEN..], index, count)
            }
        },
    };
    if grew {
        invalidate_count(hll);
    }
    Ok(grew)
}

/// Converts a sparse HLL to dense in place; returns whether it was sparse.
pub fn to_dense(hll: &mut Vec<u8>) -> Result<bool, HllError> {
    if check(hll)? == Encoding::Dense {
        return Ok(false);
    }
    let mut registers = [0u8; REGISTERS];
    sparse::max_into(&hll[HEADER_LEN..], &mut registers)?;
    let mut out = vec![0u8; DENSE_LEN];
    // The magic and the cached cardinality carry over, as in Redis.
    out[..HEADER_LEN].copy_from_slice(&hll[..HEADER_LEN]);
    out[4] = DENSE;
    for (i, &r) in registers.iter().enumerate() {
        if r != 0 {
            dense::raise(&mut out[HEADER_LEN..], i, r);
        }
    }
    *hll = out;
    Ok(true)
}

/// Raises each of `max`'s registers to the HLL's: the union of what both counted.
pub fn max_into(hll: &[u8], max: &mut [u8; REGISTERS]) -> Result<(), HllError> {
    match check(hll)? {
        Encoding::Dense => {
            dense::max_into(&hll[HEADER_LEN..], max);
            Ok(())
        }
        Encoding::Sparse => sparse::max_into(&hll[HEADER_LEN..], max),
    }
}

/// Every register's value.
pub fn registers(hll: &[u8]) -> Result<Box<[u8; REGISTERS]>, HllError> {
    let mut out = Box::new([0u8; REGISTERS]);
    max_into(hll, &mut out)?;
    Ok(out)
}

/// The estimated cardinality, computed from the registers (the cache is not consulted).
pub fn count(hll: &[u8]) -> Result<u64, HllError> {
    let mut histogram = [0u32; 64];
    match check(hll)? {
        Encoding::Dense => dense::histogram(&hll[HEADER_LEN..], &mut histogram),
        Encoding::Sparse => sparse::histogram(&hll[HEADER_LEN..], &mut histogram)?,
    }
    Ok(estimate::cardinality(&histogram))
}

/// The sparse opcodes in `PFDEBUG DECODE`'s notation (`z:len Z:len v:value,len`).
pub fn decode_sparse(hll: &[u8]) -> Result<String, HllError> {
    match check(hll)? {
        Encoding::Sparse => Ok(sparse::describe(&hll[HEADER_LEN..])),
        Encoding::Dense => Err(HllError::NotHll),
    }
}

#[cfg(test)]
mod tests;
