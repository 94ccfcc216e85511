//! Hashing an element to (register, run length) and estimating the cardinality from the
//! register histogram, as Redis does: MurmurHash64A with Redis's seed, and Otmar Ertl's
//! estimator ("New cardinality estimation algorithms for HyperLogLog sketches",
//! arXiv:1702.01284), so counts equal redis-server's for the same registers.
//!
//! MurmurHash64A is written out here: the registers must be exactly Redis's (an HLL moves
//! between KeyMesh and redis-server as a string), and the hash is a dozen lines.

use super::REGISTERS;

const P: u32 = 14;
/// Bits of the hash left for the run length.
const Q: u32 = 64 - P;
const SEED: u64 = 0xadc8_3b19;
/// 0.5 / ln 2.
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// Redis's MurmurHash64A (endian-neutral: 8-byte blocks read little endian).
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut blocks = key.chunks_exact(8);
    for block in &mut blocks {
        let mut k = u64::from_le_bytes(block.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element falls in and the length of its hash's `0...01` pattern (1..=51).
pub fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    // A sentinel bit past the Q used bits bounds the count at Q + 1.
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

/// The estimate from a histogram of register values (`histogram[v]`: registers holding v).
pub fn cardinality(histogram: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - histogram[Q as usize + 1] as f64) / m);
    for j in (1..=Q as usize).rev() {
        z += histogram[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histogram[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// The estimate for plain registers (a union computed by `PFCOUNT k1 k2 ...`).
pub fn cardinality_of(registers: &[u8; REGISTERS]) -> u64 {
    let mut histogram = [0u32; 64];
    for &r in registers.iter() {
        histogram[r as usize & 63] += 1;
    }
    cardinality(&histogram)
}
