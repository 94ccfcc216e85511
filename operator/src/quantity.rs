//! Byte sizes in the two syntaxes the operator meets: Kubernetes quantities (`512Mi`, `1.5G`,
//! `1e9`) for container memory limits, and the engine's sizes (`100mb`, `1gb`, where `k` is
//! 1000 and `kb` is 1024, as Redis reads them: the engine's own parser, tested where it lives,
//! in keymesh-proto). Pure parsing, exact integer arithmetic.

/// Parses a Kubernetes quantity as a number of bytes, rounding a fractional byte up. `None`
/// for anything that is not a well-formed, non-negative quantity.
pub fn quantity_bytes(quantity: &str) -> Option<u64> {
    let s = quantity.trim();
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() || !frac_part.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // value = digits / 10^scale * multiplier / divisor
    let digits: u128 = format!("{int_part}{frac_part}").parse().ok()?;
    let mut denominator: u128 = 10u128.checked_pow(u32::try_from(frac_part.len()).ok()?)?;
    let mut multiplier: u128 = 1;
    match suffix {
        "" => {}
        "m" => denominator = denominator.checked_mul(1000)?,
        "k" => multiplier = 1000,
        "M" => multiplier = 1000u128.pow(2),
        "G" => multiplier = 1000u128.pow(3),
        "T" => multiplier = 1000u128.pow(4),
        "P" => multiplier = 1000u128.pow(5),
        "E" => multiplier = 1000u128.pow(6),
        "Ki" => multiplier = 1 << 10,
        "Mi" => multiplier = 1 << 20,
        "Gi" => multiplier = 1 << 30,
        "Ti" => multiplier = 1 << 40,
        "Pi" => multiplier = 1 << 50,
        "Ei" => multiplier = 1 << 60,
        exponent => {
            let exponent = exponent.strip_prefix('e').or_else(|| exponent.strip_prefix('E'))?;
            let exponent: i32 = exponent.parse().ok()?;
            let power = 10u128.checked_pow(exponent.unsigned_abs())?;
            if exponent >= 0 {
                multiplier = power;
            } else {
                denominator = denominator.checked_mul(power)?;
            }
        }
    }
    let numerator = digits.checked_mul(multiplier)?;
    u64::try_from(numerator.div_ceil(denominator)).ok()
}

/// Parses a size as the engine does (`100mb`, `1gb`; `k` is 1000 and `kb` is 1024): the
/// engine's own parser, from the contract crate, so the two cannot disagree.
pub use keymesh_proto::size::parse_bytes as engine_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_quantities_in_every_form() {
        let cases = [
            ("1Gi", Some(1 << 30)),
            ("512Mi", Some(512 << 20)),
            ("1.5Gi", Some(3 << 29)),
            ("1G", Some(1_000_000_000)),
            ("1e9", Some(1_000_000_000)),
            ("2E3", Some(2000)),
            ("1500m", Some(2)),
            ("128974848", Some(128_974_848)),
            ("129e6", Some(129_000_000)),
            ("123Mi", Some(123 << 20)),
            ("", None),
            ("abc", None),
            ("1Zi", None),
            ("-1Gi", None),
            ("1.2.3", None),
        ];
        for (input, expected) in cases {
            assert_eq!(quantity_bytes(input), expected, "quantity {input:?}");
        }
    }
}
