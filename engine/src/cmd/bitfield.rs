//! `BITFIELD` and `BITFIELD_RO`: signed and unsigned integers of 1 to 64 bits (unsigned up to
//! 63) at any bit offset of a string, with Redis's `GET`, `SET`, `INCRBY`, `OVERFLOW
//! WRAP|SAT|FAIL` and `#N` offsets (N times the width). Bit 0 is the most significant bit of
//! the first byte, as for `SETBIT`. A command that writes replaces the string whole, so it
//! replicates like `SETRANGE`: last write wins on the key.

use bytes::Bytes;

use super::args::eq_ignore_case;
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::notify::class;
use crate::parse::parse_i64;

pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "bitfield",
        arity: -2,
        flags: WRITE | DENYOOM,
        keys: Keys::Range(1, 1, 1),
        run: bitfield,
        group: "bitmap",
        summary: "Performs arbitrary bitfield integer operations on strings.",
    },
    CommandSpec {
        name: "bitfield_ro",
        arity: -2,
        flags: READONLY | FAST,
        keys: Keys::Range(1, 1, 1),
        run: bitfield_ro,
        group: "bitmap",
        summary: "Performs arbitrary read-only bitfield integer operations on strings.",
    },
];

const TYPE_ERROR: &str = "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
const OFFSET_ERROR: &str = "bit offset is not an integer or out of range";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Get,
    Set,
    IncrBy,
}

/// One parsed subcommand.
#[derive(Debug, Clone, Copy)]
struct Op {
    kind: Kind,
    offset: u64,
    bits: u32,
    signed: bool,
    /// The `SET` value or the `INCRBY` increment.
    value: i64,
    overflow: Overflow,
}

fn bitfield(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run(exec, argv, false)
}

fn bitfield_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    run(exec, argv, true)
}

/// `i8`, `u16`, ... as (signed, bits).
fn parse_type(arg: &[u8]) -> Result<(bool, u32), CmdError> {
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(CmdError::err(TYPE_ERROR)),
    };
    match parse_i64(&arg[1..]) {
        Some(bits) if bits >= 1 && bits <= if signed { 64 } else { 63 } => Ok((signed, bits as u32)),
        _ => Err(CmdError::err(TYPE_ERROR)),
    }
}

/// A bit offset, or `#N` for N times the width; below `proto-max-bulk-len` bytes, as Redis.
fn parse_offset(arg: &[u8], bits: u32, max_bytes: u64) -> Result<u64, CmdError> {
    let (digits, times) = match arg.strip_prefix(b"#") {
        Some(rest) => (rest, bits as i64),
        None => (arg, 1),
    };
    match parse_i64(digits).and_then(|n| n.checked_mul(times)) {
        Some(offset) if offset >= 0 && (offset as u64 >> 3) < max_bytes => Ok(offset as u64),
        _ => Err(CmdError::err(OFFSET_ERROR)),
    }
}

fn parse_ops(argv: &[Bytes], max_bytes: u64) -> Result<Vec<Op>, CmdError> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < argv.len() {
        let remaining = argv.len() - j - 1;
        let sub = &argv[j];
        let kind = if eq_ignore_case(sub, "get") && remaining >= 2 {
            Kind::Get
        } else if eq_ignore_case(sub, "set") && remaining >= 3 {
            Kind::Set
        } else if eq_ignore_case(sub, "incrby") && remaining >= 3 {
            Kind::IncrBy
        } else if eq_ignore_case(sub, "overflow") && remaining >= 1 {
            let name = &argv[j + 1];
            overflow = if eq_ignore_case(name, "wrap") {
                Overflow::Wrap
            } else if eq_ignore_case(name, "sat") {
                Overflow::Sat
            } else if eq_ignore_case(name, "fail") {
                Overflow::Fail
            } else {
                return Err(CmdError::err("Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, bits) = parse_type(&argv[j + 1])?;
        let offset = parse_offset(&argv[j + 2], bits, max_bytes)?;
        let value = match kind {
            Kind::Get => 0,
            Kind::Set | Kind::IncrBy => parse_i64(&argv[j + 3]).ok_or(CmdError::NotInteger)?,
        };
        ops.push(Op { kind, offset, bits, signed, value, overflow });
        j += if kind == Kind::Get { 3 } else { 4 };
    }
    Ok(ops)
}

fn run(exec: &mut Exec, argv: &[Bytes], read_only: bool) -> Reply {
    let max_bytes = exec.server.settings().proto_max_bulk_len as u64;
    let ops = parse_ops(argv, max_bytes)?;
    let highest_write = ops.iter().filter(|op| op.kind != Kind::Get).map(|op| op.offset + op.bits as u64 - 1).max();
    if read_only && highest_write.is_some() {
        return Err(CmdError::err("BITFIELD_RO only supports the GET subcommand"));
    }
    let key = &argv[1];
    // Redis looks the key up for writing (no keyspace hit, miss or `keymiss`) when a write
    // op is there.
    let existing = if highest_write.is_some() { exec.ctx.string_for_write(key)? } else { exec.ctx.string(key)? };
    let mut buf = existing.as_deref().map(<[u8]>::to_vec).unwrap_or_default();
    // A write pads the string with zero bytes up to the last bit it touches (creating it).
    let mut grown = false;
    if let Some(last_bit) = highest_write {
        let len = (last_bit >> 3) as usize + 1;
        if existing.is_none() || buf.len() < len {
            grown = true;
            buf.resize(buf.len().max(len), 0);
        }
    }
    let mut replies = Vec::with_capacity(ops.len());
    let mut changed = false;
    for op in &ops {
        let reply = match op.kind {
            Kind::Get => Some(if op.signed { get_signed(&buf, op.offset, op.bits) } else { get_unsigned(&buf, op.offset, op.bits) as i64 }),
            Kind::Set | Kind::IncrBy => {
                let (old, new, reply) = if op.signed { write_signed(&buf, op) } else { write_unsigned(&buf, op) };
                if let Some(new) = new {
                    set_unsigned(&mut buf, op.offset, op.bits, new);
                    changed |= new != old;
                }
                reply
            }
        };
        replies.push(reply.map_or(Frame::Null, Frame::Integer));
    }
    if grown || changed {
        exec.ctx.put(key, Value::string(&buf), true);
        exec.ctx.notify(class::STRING, "setbit", key);
    }
    Ok(Frame::Array(replies))
}

/// A signed `SET`/`INCRBY`: (old bits, new bits unless FAIL refused it, reply).
fn write_signed(buf: &[u8], op: &Op) -> (u64, Option<u64>, Option<i64>) {
    let old = get_signed(buf, op.offset, op.bits);
    let (target, increment, reply_old) = match op.kind {
        Kind::IncrBy => (old, op.value, false),
        _ => (op.value, 0, true),
    };
    let (overflowed, limit) = signed_overflow(target, increment, op.bits, op.overflow);
    let new = if overflowed { limit } else { target.wrapping_add(increment) };
    if overflowed && op.overflow == Overflow::Fail {
        return (old as u64, None, None);
    }
    (old as u64 & mask(op.bits), Some(new as u64 & mask(op.bits)), Some(if reply_old { old } else { new }))
}

fn write_unsigned(buf: &[u8], op: &Op) -> (u64, Option<u64>, Option<i64>) {
    let old = get_unsigned(buf, op.offset, op.bits);
    let (target, increment, reply_old) = match op.kind {
        Kind::IncrBy => (old, op.value, false),
        _ => (op.value as u64, 0, true),
    };
    let (overflowed, limit) = unsigned_overflow(target, increment, op.bits, op.overflow);
    let new = if overflowed { limit } else { target.wrapping_add(increment as u64) };
    if overflowed && op.overflow == Overflow::Fail {
        return (old, None, None);
    }
    (old, Some(new & mask(op.bits)), Some(if reply_old { old } else { new } as i64))
}

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Redis's `checkUnsignedBitfieldOverflow`: whether `value + incr` leaves the type, and the
/// result WRAP or SAT gives then (FAIL: none).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, overflow: Overflow) -> (bool, u64) {
    let max = mask(bits);
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let (over, under) = (value > max || (incr > 0 && incr > max_incr), incr < 0 && incr < min_incr);
    if !over && !under {
        return (false, 0);
    }
    let limit = match overflow {
        Overflow::Wrap => value.wrapping_add(incr as u64) & max,
        Overflow::Sat if over => max,
        Overflow::Sat | Overflow::Fail => 0,
    };
    (true, limit)
}

/// Redis's `checkSignedBitfieldOverflow`.
fn signed_overflow(value: i64, incr: i64, bits: u32, overflow: Overflow) -> (bool, i64) {
    let max = if bits == 64 { i64::MAX } else { (1i64 << (bits - 1)) - 1 };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let over = value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr);
    let under = !over && (value < min || (bits != 64 && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr));
    if !over && !under {
        return (false, 0);
    }
    let limit = match overflow {
        Overflow::Wrap => {
            let mut c = (value as u64).wrapping_add(incr as u64);
            if bits < 64 {
                let high = u64::MAX << bits;
                if c & (1u64 << (bits - 1)) != 0 {
                    c |= high;
                } else {
                    c &= !high;
                }
            }
            c as i64
        }
        Overflow::Sat if over => max,
        Overflow::Sat => min,
        Overflow::Fail => 0,
    };
    (true, limit)
}

/// The unsigned integer of `bits` bits at bit `offset`; bits past the end read as 0.
fn get_unsigned(buf: &[u8], offset: u64, bits: u32) -> u64 {
    (0..bits as u64).fold(0u64, |acc, j| {
        let at = offset + j;
        let byte = buf.get((at >> 3) as usize).copied().unwrap_or(0);
        (acc << 1) | ((byte >> (7 - (at & 7))) & 1) as u64
    })
}

fn get_signed(buf: &[u8], offset: u64, bits: u32) -> i64 {
    let value = get_unsigned(buf, offset, bits);
    if bits < 64 && value & (1u64 << (bits - 1)) != 0 {
        (value | (u64::MAX << bits)) as i64
    } else {
        value as i64
    }
}

/// Writes the low `bits` bits of `value` at bit `offset` (the buffer covers them).
fn set_unsigned(buf: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..bits as u64 {
        let at = offset + j;
        let bit = (value >> (bits as u64 - 1 - j)) & 1;
        let shift = 7 - (at & 7);
        if let Some(byte) = buf.get_mut((at >> 3) as usize) {
            *byte = (*byte & !(1 << shift)) | ((bit as u8) << shift);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_at_unaligned_offsets() {
        let mut buf = vec![0u8; 20];
        set_unsigned(&mut buf, 7, 5, 23);
        assert_eq!(&buf[..2], &[0b0000_0001, 0b0111_0000], "Redis's documented example");
        for bits in 1..=64u32 {
            let value = if bits == 64 { -3i64 } else { -(1i64 << (bits - 1)) };
            set_unsigned(&mut buf, 13, bits, value as u64 & mask(bits));
            assert_eq!(get_signed(&buf, 13, bits), value, "i{bits}");
        }
    }

    #[test]
    fn overflow_wraps_saturates_or_fails_as_redis() {
        // From unit/bitfield: u8 100 + 257 wraps to 101; sat gives 255; i8 0 + 128 wraps to -128.
        assert_eq!(unsigned_overflow(100, 257, 8, Overflow::Wrap), (true, 101));
        assert_eq!(unsigned_overflow(100, 257, 8, Overflow::Sat), (true, 255));
        assert_eq!(unsigned_overflow(100, -255, 8, Overflow::Sat), (true, 0));
        assert_eq!(unsigned_overflow(100, 10, 8, Overflow::Fail), (false, 0));
        assert_eq!(signed_overflow(0, 128, 8, Overflow::Wrap), (true, -128));
        assert_eq!(signed_overflow(0, -129, 8, Overflow::Sat), (true, -128));
        assert_eq!(signed_overflow(i64::MAX, 1, 64, Overflow::Wrap), (true, i64::MIN));
        assert_eq!(signed_overflow(i64::MIN, -1, 64, Overflow::Sat), (true, i64::MIN));
        assert!(signed_overflow(5, 1, 64, Overflow::Fail) == (false, 0));
    }

    #[test]
    fn bad_types_and_offsets_are_refused() {
        assert!(parse_type(b"u64").is_err() && parse_type(b"i65").is_err() && parse_type(b"x8").is_err());
        assert!(parse_type(b"i0").is_err() && parse_type(b"u").is_err());
        assert_eq!(parse_type(b"i64").ok(), Some((true, 64)));
        assert_eq!(parse_offset(b"#3", 8, 1 << 29).ok(), Some(24));
        assert!(parse_offset(b"-1", 8, 1 << 29).is_err());
        assert!(parse_offset(b"#-1", 8, 1 << 29).is_err());
        assert!(parse_offset(&(4u64 << 30).to_string().into_bytes(), 8, 1 << 29).is_err());
        assert!(parse_offset(b"#9223372036854775807", 64, 1 << 29).is_err());
    }
}
