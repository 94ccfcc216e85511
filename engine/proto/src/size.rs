//! Byte sizes as the engine reads them in its config file, flags and `CONFIG SET`
//! (`maxmemory 1gb`, `proto-max-bulk-len 512mb`, `4096`): digits, then an optional unit among
//! `b k kb m mb g gb`, case-insensitive, where `k` is 1000 and `kb` is 1024, as Redis reads
//! them. The operator validates a spec's engine settings with the same function, so a size it
//! accepts is one the engine accepts.

/// Parses a size as a number of bytes; `None` for anything else or a size above `u64::MAX`.
pub fn parse_bytes(size: &str) -> Option<u64> {
    let lower = size.to_ascii_lowercase();
    let split = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_as_redis_reads_them() {
        let cases = [
            ("100", Some(100)),
            ("0", Some(0)),
            ("7b", Some(7)),
            ("1k", Some(1000)),
            ("1kb", Some(1024)),
            ("5MB", Some(5 << 20)),
            ("3m", Some(3_000_000)),
            ("2gb", Some(2 << 30)),
            ("4G", Some(4_000_000_000)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551615kb", None),
            ("1Gi", None),
            ("gb", None),
            ("", None),
            ("-1", None),
            (" 1", None),
            ("1.5gb", None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_bytes(input), expected, "size {input:?}");
        }
    }
}
