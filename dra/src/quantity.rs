//! Kubernetes resource quantities (`8Gi`, `512Mi`, `1.5G`, `1e9`) as whole
//! bytes, for `consumedCapacity["memory"]`.
//!
//! The grammar is apimachinery's (`resource.Quantity`): an optional sign,
//! digits with an optional fraction, then one suffix: binary SI
//! (`Ki Mi Gi Ti Pi Ei`), decimal SI (`n u m` `""` `k M G T P E`) or a
//! decimal exponent (`e`/`E` and a signed integer). A quantity that is
//! negative, not a whole number of bytes, or above `u64::MAX` is refused:
//! the ledger counts bytes, and rounding a grant is not ours to do.
//! Bounded work: at most 64 characters are looked at.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity (e.g. 8Gi, 512Mi, 1G)")]
    Syntax(String),
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{0:?} is not a whole number of bytes")]
    Fraction(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

const MAX_LEN: usize = 64;

/// The multiplier of a suffix: (power of 1024, power of 10).
fn suffix(s: &str) -> Option<(u32, i32)> {
    Some(match s {
        "" => (0, 0),
        "Ki" => (1, 0),
        "Mi" => (2, 0),
        "Gi" => (3, 0),
        "Ti" => (4, 0),
        "Pi" => (5, 0),
        "Ei" => (6, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => {
            // decimal exponent: e/E and a signed integer ("E" alone is exa)
            let rest = s.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            (0, rest.parse().ok()?)
        }
    })
}

/// `q` as a whole number of bytes.
pub fn bytes(q: &str) -> Result<u64, QuantityError> {
    let syntax = || QuantityError::Syntax(q.chars().take(MAX_LEN).collect());
    if q.len() > MAX_LEN {
        return Err(syntax());
    }
    let (negative, rest) = match q.as_bytes().first() {
        Some(b'-') => (true, &q[1..]),
        Some(b'+') => (false, &q[1..]),
        _ => (false, q),
    };
    let num_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (num, suf) = rest.split_at(num_len);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(syntax());
    }
    let (pow2, pow10) = suffix(suf).ok_or_else(syntax)?;
    // the digits as one integer `n`, and the power of ten it is scaled by
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    let mut exp = pow10 - frac.len() as i32 + (digits.len() - trimmed.len()) as i32;
    if trimmed.is_empty() {
        return Ok(0); // zero, whatever its sign and suffix
    }
    if negative {
        return Err(QuantityError::Negative(q.into()));
    }
    let too_large = || QuantityError::TooLarge(q.into());
    if trimmed.len() > 38 {
        return Err(too_large());
    }
    let mut n: u128 = trimmed.parse().map_err(|_| syntax())?;
    n = n.checked_mul(1u128 << (10 * pow2)).ok_or_else(too_large)?;
    while exp > 0 {
        n = n.checked_mul(10).ok_or_else(too_large)?;
        exp -= 1;
    }
    while exp < 0 {
        if !n.is_multiple_of(10) {
            return Err(QuantityError::Fraction(q.into()));
        }
        n /= 10;
        exp += 1;
    }
    u64::try_from(n).map_err(|_| too_large())
}

/// Bytes as a quantity string: the largest binary suffix that divides it.
pub fn format(b: u64) -> String {
    for (s, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if b != 0 && b.is_multiple_of(1u64 << shift) {
            return format!("{}{s}", b >> shift);
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KI: u64 = 1 << 10;
    const MI: u64 = 1 << 20;
    const GI: u64 = 1 << 30;
    const TI: u64 = 1 << 40;

    #[test]
    fn table() {
        for (q, want) in [
            ("0", 0),
            ("-0", 0),
            ("0Gi", 0),
            ("0.000m", 0),
            ("1", 1),
            ("+7", 7),
            ("1Ki", KI),
            ("256Mi", 256 * MI),
            ("8Gi", 8 * GI),
            ("2Ti", 2 * TI),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("0.5Gi", 512 * MI),
            ("1.25Gi", 1280 * MI),
            (".5Ki", 512),
            ("1k", 1000),
            ("1M", 1_000_000),
            ("8G", 8_000_000_000),
            ("1.5G", 1_500_000_000),
            ("1T", 1_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1000m", 1),
            ("5000000000n", 5),
            ("1e9", 1_000_000_000),
            ("1E9", 1_000_000_000),
            ("12e+3", 12_000),
            ("1000e-3", 1),
            ("8589934592", 8 * GI),
            ("0008Gi", 8 * GI),
            ("8.000Gi", 8 * GI),
            ("18446744073709551615", u64::MAX),
            ("15Ei", 15 << 60),
        ] {
            assert_eq!(bytes(q), Ok(want), "{q}");
        }
    }

    #[test]
    fn refusals() {
        for q in [
            "", "Gi", "-", ".", "1..2", "1.2.3", "8GB", "8gi", "8 Gi", " 8Gi", "8Gi ", "1e", "1e+",
            "1ee3", "1e99999", "0x10", "1_000", "Mi8", "8Ki8", "∞", "1K",
        ] {
            assert!(
                matches!(bytes(q), Err(QuantityError::Syntax(_))),
                "{q}: {:?}",
                bytes(q)
            );
        }
        for q in ["-1", "-8Gi", "-1e3"] {
            assert_eq!(bytes(q), Err(QuantityError::Negative(q.into())), "{q}");
        }
        for q in ["100m", "1.5", "0.1Ki", "1e-1", "1n", "0.3", "1500e-3"] {
            assert_eq!(bytes(q), Err(QuantityError::Fraction(q.into())), "{q}");
        }
        for q in [
            "16Ei",
            "18446744073709551616",
            "1e20",
            "99999999999999999999999999999999999999999",
        ] {
            assert_eq!(bytes(q), Err(QuantityError::TooLarge(q.into())), "{q}");
        }
        // bounded work: a long string is refused without being read
        let long = "1".repeat(10_000);
        assert!(matches!(bytes(&long), Err(QuantityError::Syntax(s)) if s.len() == MAX_LEN));
    }

    #[test]
    fn format_round_trips() {
        for b in [
            0,
            1,
            1000,
            KI,
            3 * KI + 512,
            256 * MI,
            8 * GI,
            139 * GI,
            3 * TI,
            u64::MAX,
        ] {
            assert_eq!(bytes(&format(b)), Ok(b), "{b}");
        }
        assert_eq!(format(256 * MI), "256Mi");
        assert_eq!(format(8 * GI), "8Gi");
        assert_eq!(format(1536 * MI), "1536Mi");
    }
}
