//! `PFSELFTEST`: Redis's self test of the register code and the estimator, run on this
//! implementation.

use super::{add, check, count, dense, new_empty, to_dense, Encoding, DEFAULT_SPARSE_MAX_BYTES, REGISTERS};

/// Redis runs 1000 rounds of the register test and 10 million additions.
const REGISTER_ROUNDS: usize = 1000;
const ELEMENTS: u64 = 10_000_000;

/// Returns what failed, in Redis's words.
pub fn self_test() -> Result<(), String> {
    registers_round_trip()?;
    estimates_within_error()
}

/// Random values in, the same values out, neighbours untouched.
fn registers_round_trip() -> Result<(), String> {
    let mut packed = vec![0u8; (REGISTERS * 6).div_ceil(8)];
    let mut expected = vec![0u8; REGISTERS];
    for _ in 0..REGISTER_ROUNDS {
        for (i, e) in expected.iter_mut().enumerate() {
            *e = rand::random::<u8>() & 63;
            dense::set(&mut packed, i, *e);
        }
        for (i, &e) in expected.iter().enumerate() {
            let got = dense::get(&packed, i);
            if got != e {
                return Err(format!("Register {i} should be {e} but is {got}"));
            }
        }
    }
    Ok(())
}

/// The same elements in a sparse and a dense HLL: equal estimates, small errors.
fn estimates_within_error() -> Result<(), String> {
    let mut dense_hll = new_empty();
    to_dense(&mut dense_hll).map_err(|e| e.to_string())?;
    let mut sparse_hll = new_empty();
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let seed: u64 = rand::random();
    let mut checkpoint = 1u64;
    for j in 1..=ELEMENTS {
        let element = (j ^ seed).to_le_bytes();
        add(&mut dense_hll, &element, DEFAULT_SPARSE_MAX_BYTES).map_err(|e| e.to_string())?;
        add(&mut sparse_hll, &element, DEFAULT_SPARSE_MAX_BYTES).map_err(|e| e.to_string())?;
        if j != checkpoint {
            continue;
        }
        if j < DEFAULT_SPARSE_MAX_BYTES as u64 / 2 && check(&sparse_hll) != Ok(Encoding::Sparse) {
            return Err("sparse encoding not used".into());
        }
        let estimate = count(&dense_hll).map_err(|e| e.to_string())?;
        if count(&sparse_hll).map_err(|e| e.to_string())? != estimate {
            return Err("dense/sparse disagree".into());
        }
        // Cardinality 10 collides now and then: Redis allows an error of 1 there.
        let max_err = if j == 10 { 1 } else { (relerr * 6.0 * j as f64).ceil() as u64 };
        let abs_err = estimate.abs_diff(j);
        if abs_err > max_err {
            return Err(format!("Too big error. card:{j} abserr:{abs_err}"));
        }
        checkpoint *= 10;
    }
    Ok(())
}
