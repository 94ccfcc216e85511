//! The dense encoding: 16384 registers of 6 bits packed little-end first (register 0 in the
//! low bits of byte 0, as Redis's HLL_DENSE_GET/SET_REGISTER).

use super::REGISTERS;

const MAX: u16 = 63;

pub fn get(registers: &[u8], index: usize) -> u8 {
    let byte = index * 6 / 8;
    let first_bit = (index * 6) & 7;
    let b0 = registers[byte] as u16;
    // The last register's bits all sit in the last byte (Redis reads the string's NUL here).
    let b1 = registers.get(byte + 1).copied().unwrap_or(0) as u16;
    (((b0 >> first_bit) | (b1 << (8 - first_bit))) & MAX) as u8
}

pub fn set(registers: &mut [u8], index: usize, value: u8) {
    let byte = index * 6 / 8;
    let first_bit = (index * 6) & 7;
    let value = value as u16;
    registers[byte] &= !((MAX << first_bit) as u8);
    registers[byte] |= (value << first_bit) as u8;
    if let Some(next) = registers.get_mut(byte + 1) {
        *next &= !((MAX >> (8 - first_bit)) as u8);
        *next |= (value >> (8 - first_bit)) as u8;
    }
}

/// Sets the register to `count` if that is higher; returns whether it did.
pub fn raise(registers: &mut [u8], index: usize, count: u8) -> bool {
    if count > get(registers, index) {
        set(registers, index, count);
        true
    } else {
        false
    }
}

pub fn max_into(registers: &[u8], max: &mut [u8; REGISTERS]) {
    for (i, m) in max.iter_mut().enumerate() {
        *m = (*m).max(get(registers, i));
    }
}

pub fn histogram(registers: &[u8], histogram: &mut [u32; 64]) {
    // 4 registers in every 3 bytes.
    for chunk in registers.chunks_exact(3) {
        let word = chunk[0] as u32 | (chunk[1] as u32) << 8 | (chunk[2] as u32) << 16;
        for shift in [0, 6, 12, 18] {
            histogram[((word >> shift) & 63) as usize] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_keep_their_values_and_leave_neighbours_alone() {
        // Redis's PFSELFTEST test 1: random values in, the same values out.
        let mut regs = vec![0u8; (REGISTERS * 6).div_ceil(8)];
        let mut expected = vec![0u8; REGISTERS];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20 {
            for (i, e) in expected.iter_mut().enumerate() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *e = (seed & 63) as u8;
                set(&mut regs, i, *e);
            }
            for (i, e) in expected.iter().enumerate() {
                assert_eq!(get(&regs, i), *e, "round {round} register {i}");
            }
            let mut h = [0u32; 64];
            histogram(&regs, &mut h);
            let mut want = [0u32; 64];
            expected.iter().for_each(|&e| want[e as usize] += 1);
            assert_eq!(h, want);
        }
    }
}
