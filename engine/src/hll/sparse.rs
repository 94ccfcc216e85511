//! The sparse encoding: run-length opcodes after the header, exactly Redis's.
//!
//! - `ZERO`  `00xxxxxx`: 1..64 zero registers;
//! - `XZERO` `01xxxxxx yyyyyyyy`: 1..16384 zero registers;
//! - `VAL`   `1vvvvvxx`: 1..4 registers of value 1..32.
//!
//! `raise` is Redis's `hllSparseSet` step for step (split the covering opcode, then merge
//! equal neighbours), so the bytes match redis-server's for the same additions.

use super::{HllError, HEADER_LEN, REGISTERS};

const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;

fn is_zero(op: u8) -> bool {
    op & 0xc0 == 0
}

fn is_xzero(op: u8) -> bool {
    op & 0xc0 == 0x40
}

fn is_val(op: u8) -> bool {
    op & 0x80 != 0
}

fn val_value(op: u8) -> u8 {
    ((op >> 2) & 0x1f) + 1
}

fn val_len(op: u8) -> usize {
    (op & 3) as usize + 1
}

fn val(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len as u8 - 1)
}

/// The opcode at `p`: (registers it covers, bytes it takes). An `XZERO` cut off at the end
/// reads its missing byte as 0, as Redis does (it reads the string's NUL).
fn opcode(ops: &[u8], p: usize) -> (usize, usize) {
    let op = ops[p];
    if is_zero(op) {
        ((op & 0x3f) as usize + 1, 1)
    } else if is_val(op) {
        (val_len(op), 1)
    } else {
        let low = ops.get(p + 1).copied().unwrap_or(0) as usize;
        ((((op & 0x3f) as usize) << 8 | low) + 1, 2)
    }
}

fn push_zero_run(out: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        out.extend_from_slice(&[(l >> 8) as u8 | 0x40, (l & 0xff) as u8]);
    } else {
        out.push(len as u8 - 1);
    }
}

/// Appends `XZERO` opcodes covering `count` registers (a new HLL).
pub fn push_zeros(out: &mut Vec<u8>, mut count: usize) {
    while count > 0 {
        let run = count.min(XZERO_MAX_LEN);
        let l = run - 1;
        out.extend_from_slice(&[(l >> 8) as u8 | 0x40, (l & 0xff) as u8]);
        count -= run;
    }
}

pub enum Raised {
    Unchanged,
    Updated,
    /// The value does not fit a `VAL` opcode, or the string would outgrow the limit.
    NeedsDense,
}

/// Raises register `index` to `count` in the sparse HLL `hll` (header included).
pub fn raise(hll: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<Raised, HllError> {
    if count > VAL_MAX_VALUE {
        return Ok(Raised::NeedsDense);
    }
    // Step 1: find the opcode covering `index`, the one before it, and its first register.
    let end = hll.len();
    let (mut p, mut first, mut span, mut prev) = (HEADER_LEN, 0usize, 0usize, None);
    while p < end {
        let (len, op_bytes) = opcode(hll, p);
        span = len;
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += op_bytes;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(HllError::Corrupted);
    }
    let op = hll[p];
    // Step 2: the cases that update the opcode in place.
    if is_val(op) {
        if val_value(op) >= count {
            return Ok(Raised::Unchanged);
        }
        if span == 1 {
            hll[p] = val(count, 1);
            merge_neighbours(hll, prev.unwrap_or(HEADER_LEN));
            return Ok(Raised::Updated);
        }
    }
    if is_zero(op) && span == 1 {
        hll[p] = val(count, 1);
        merge_neighbours(hll, prev.unwrap_or(HEADER_LEN));
        return Ok(Raised::Updated);
    }
    // The general case: split the opcode into up to three (at most 5 bytes).
    let last = first + span - 1;
    let mut seq = Vec::with_capacity(5);
    if is_val(op) {
        let current = val_value(op);
        if index != first {
            seq.push(val(current, index - first));
        }
        seq.push(val(count, 1));
        if index != last {
            seq.push(val(current, last - index));
        }
    } else {
        if index != first {
            push_zero_run(&mut seq, index - first);
        }
        seq.push(val(count, 1));
        if index != last {
            push_zero_run(&mut seq, last - index);
        }
    }
    // Step 3: put it in place of the old opcode, unless that makes the string too long.
    let old_bytes = if is_xzero(op) { 2 } else { 1 };
    if seq.len() > old_bytes && hll.len() + seq.len() - old_bytes > max_bytes {
        return Ok(Raised::NeedsDense);
    }
    hll.splice(p..(p + old_bytes).min(end), seq);
    merge_neighbours(hll, prev.unwrap_or(HEADER_LEN));
    Ok(Raised::Updated)
}

/// Step 4 of Redis's update: merges adjacent `VAL`s of equal value, scanning up to five
/// opcodes from `p`.
fn merge_neighbours(hll: &mut Vec<u8>, mut p: usize) {
    let mut scan = 5;
    while p < hll.len() && scan > 0 {
        scan -= 1;
        let op = hll[p];
        if is_xzero(op) {
            p += 2;
            continue;
        }
        if is_zero(op) {
            p += 1;
            continue;
        }
        if p + 1 < hll.len() && is_val(hll[p + 1]) && val_value(op) == val_value(hll[p + 1]) {
            let len = val_len(op) + val_len(hll[p + 1]);
            if len <= VAL_MAX_LEN {
                hll[p + 1] = val(val_value(op), len);
                hll.remove(p);
                continue;
            }
        }
        p += 1;
    }
}

/// Raises `max`'s registers to the sparse ones (`ops`: the bytes after the header).
pub fn max_into(ops: &[u8], max: &mut [u8; REGISTERS]) -> Result<(), HllError> {
    let (mut p, mut i) = (0, 0usize);
    while p < ops.len() {
        let (len, op_bytes) = opcode(ops, p);
        if is_val(ops[p]) {
            if i + len > REGISTERS {
                return Err(HllError::Corrupted);
            }
            let value = val_value(ops[p]);
            for m in &mut max[i..i + len] {
                *m = (*m).max(value);
            }
        }
        i += len;
        p += op_bytes;
    }
    if i == REGISTERS {
        Ok(())
    } else {
        Err(HllError::Corrupted)
    }
}

pub fn histogram(ops: &[u8], histogram: &mut [u32; 64]) -> Result<(), HllError> {
    let (mut p, mut i) = (0, 0usize);
    while p < ops.len() {
        let (len, op_bytes) = opcode(ops, p);
        let value = if is_val(ops[p]) { val_value(ops[p]) } else { 0 };
        histogram[value as usize] += len as u32;
        i += len;
        p += op_bytes;
    }
    if i == REGISTERS {
        Ok(())
    } else {
        Err(HllError::Corrupted)
    }
}

/// `PFDEBUG DECODE`: `z:len` (ZERO), `Z:len` (XZERO), `v:value,len` (VAL).
pub fn describe(ops: &[u8]) -> String {
    let mut parts = Vec::new();
    let mut p = 0;
    while p < ops.len() {
        let (len, op_bytes) = opcode(ops, p);
        let op = ops[p];
        parts.push(if is_zero(op) {
            format!("z:{len}")
        } else if is_xzero(op) {
            format!("Z:{len}")
        } else {
            format!("v:{},{len}", val_value(op))
        });
        p += op_bytes;
    }
    parts.join(" ")
}
