//! Size parsing and formatting.
//!
//! Accepted forms (case-insensitive units, optional spaces before the unit):
//! * binary, Docker-style: `8g`, `8G`, `8Gi`, `8GiB`, `512m`, `8192MiB`, `1.5g`
//! * decimal: `8GB` = 8×10^9, `500MB`
//! * bytes: `1073741824`, `1073741824b`
//! * percentages `25%`, `12.5%` of the chosen GPU's memory (requests only).

/// What the `vram` value accepts, for error messages.
pub const SIZE_FORMS: &str =
    "a size like 8g, 8GiB, 512m, 8192MiB, 1.5g (binary), 8GB (decimal), or a percentage like 25%";

/// Longest value we look at; anything longer is refused as absurd.
pub const MAX_VALUE_LEN: usize = 64;

/// A parsed size: absolute bytes, or parts-per-million of a GPU's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    /// Parts per million of the GPU's total memory (1..=1_000_000).
    Ppm(u32),
}

impl Size {
    /// Resolve against a GPU of `total` bytes.
    pub fn resolve(self, total: u64) -> u64 {
        match self {
            Size::Bytes(b) => b,
            Size::Ppm(p) => ((total as u128 * p as u128) / 1_000_000) as u64,
        }
    }
}

/// Why a size string was refused (the caller adds key and value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty value")]
    Empty,
    #[error("value longer than {MAX_VALUE_LEN} characters")]
    TooLong,
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("negative sizes are not allowed")]
    Negative,
    #[error("not a number")]
    NotANumber,
    #[error("unknown unit {0:?}")]
    UnknownUnit(String),
    #[error("size is zero")]
    Zero,
    #[error("size does not fit in 64 bits")]
    Overflow,
    #[error("percentage must be greater than 0 and at most 100")]
    PercentRange,
}

fn unit_multiplier(unit: &str) -> Option<u64> {
    const K: u64 = 1024;
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => K,
        "m" | "mi" | "mib" => K * K,
        "g" | "gi" | "gib" => K * K * K,
        "t" | "ti" | "tib" => K * K * K * K,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

/// Split `"12.5"` into integer and fraction digit strings; refuses anything
/// but ASCII digits with at most one dot and at least one digit.
fn split_number(num: &str) -> Result<(&str, &str), SizeError> {
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return Err(SizeError::NotANumber);
    }
    Ok((int, frac))
}

/// `int.frac × mult`, floored, exactly (no floating point).
fn scale(int: &str, frac: &str, mult: u128) -> Result<u128, SizeError> {
    let mut v: u128 = 0;
    for b in int.bytes() {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add((b - b'0') as u128))
            .ok_or(SizeError::Overflow)?;
        if v > u64::MAX as u128 {
            return Err(SizeError::Overflow);
        }
    }
    let mut whole = v.checked_mul(mult).ok_or(SizeError::Overflow)?;
    // Fraction: at most 18 digits are significant for u64 byte counts.
    let frac = &frac[..frac.len().min(18)];
    if !frac.is_empty() {
        let f: u128 = frac.parse().map_err(|_| SizeError::NotANumber)?;
        let denom = 10u128.pow(frac.len() as u32);
        whole = whole
            .checked_add(f * mult / denom)
            .ok_or(SizeError::Overflow)?;
    }
    Ok(whole)
}

/// Parse raw bytes (annotation or env value) as a size.
pub fn parse_size_bytes(raw: &[u8]) -> Result<Size, SizeError> {
    if raw.len() > MAX_VALUE_LEN {
        return Err(SizeError::TooLong);
    }
    let s = std::str::from_utf8(raw).map_err(|_| SizeError::NotUtf8)?;
    parse_size(s)
}

/// Parse a size string; see the module docs for the forms.
pub fn parse_size(s: &str) -> Result<Size, SizeError> {
    if s.len() > MAX_VALUE_LEN {
        return Err(SizeError::TooLong);
    }
    let s = s.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    if s.starts_with('-') {
        return Err(SizeError::Negative);
    }
    if let Some(p) = s.strip_suffix('%') {
        let (int, frac) = split_number(p.trim_end())?;
        let ppm = scale(int, frac, 10_000)?;
        if ppm == 0 || ppm > 1_000_000 {
            return Err(SizeError::PercentRange);
        }
        return Ok(Size::Ppm(ppm as u32));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = unit.trim_start();
    let mult = unit_multiplier(unit).ok_or_else(|| {
        if num.is_empty() {
            SizeError::NotANumber
        } else {
            SizeError::UnknownUnit(unit.to_string())
        }
    })?;
    let (int, frac) = split_number(num)?;
    let v = scale(int, frac, mult as u128)?;
    if v > u64::MAX as u128 {
        return Err(SizeError::Overflow);
    }
    if v == 0 {
        return Err(SizeError::Zero);
    }
    Ok(Size::Bytes(v as u64))
}

/// Human-readable binary size: `8.00 GiB`, `512.00 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;

    #[test]
    fn accepted_forms() {
        let cases: &[(&str, Size)] = &[
            ("8g", Size::Bytes(8 * G)),
            ("8G", Size::Bytes(8 * G)),
            ("8Gi", Size::Bytes(8 * G)),
            ("8GiB", Size::Bytes(8 * G)),
            ("8 GiB", Size::Bytes(8 * G)),
            ("512m", Size::Bytes(512 << 20)),
            ("8192MiB", Size::Bytes(8 * G)),
            ("8GB", Size::Bytes(8_000_000_000)),
            ("8gb", Size::Bytes(8_000_000_000)),
            ("1.5g", Size::Bytes(3 * G / 2)),
            (".5g", Size::Bytes(G / 2)),
            ("1048576", Size::Bytes(1 << 20)),
            ("1048576b", Size::Bytes(1 << 20)),
            ("1t", Size::Bytes(1 << 40)),
            ("25%", Size::Ppm(250_000)),
            ("12.5%", Size::Ppm(125_000)),
            ("100%", Size::Ppm(1_000_000)),
        ];
        for (s, want) in cases {
            assert_eq!(parse_size(s).as_ref(), Ok(want), "{s}");
        }
    }

    #[test]
    fn refused_forms() {
        let cases: &[(&[u8], SizeError)] = &[
            (b"", SizeError::Empty),
            (b"   ", SizeError::Empty),
            (b"0", SizeError::Zero),
            (b"0g", SizeError::Zero),
            (b"0.0000000000000000001g", SizeError::Zero),
            (b"-1g", SizeError::Negative),
            (b"NaN", SizeError::NotANumber),
            (b"nan", SizeError::NotANumber),
            (b"inf", SizeError::NotANumber),
            (b"1e9", SizeError::UnknownUnit("e9".into())),
            (b"8x", SizeError::UnknownUnit("x".into())),
            (b"8 gigs", SizeError::UnknownUnit("gigs".into())),
            (b"1.2.3g", SizeError::NotANumber),
            (b"g", SizeError::NotANumber),
            (b".g", SizeError::NotANumber),
            (b"17179869184g", SizeError::Overflow),
            (b"99999999999999999999", SizeError::Overflow),
            (b"0%", SizeError::PercentRange),
            (b"101%", SizeError::PercentRange),
            (b"-5%", SizeError::Negative),
            (b"%", SizeError::NotANumber),
            (b"\xff\xfeg", SizeError::NotUtf8),
        ];
        for (raw, want) in cases {
            assert_eq!(
                parse_size_bytes(raw).as_ref(),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        let long = "1".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(parse_size(&long), Err(SizeError::TooLong));
    }

    #[test]
    fn resolve_percent() {
        assert_eq!(Size::Ppm(250_000).resolve(16 * G), 4 * G);
        assert_eq!(Size::Bytes(5).resolve(16 * G), 5);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(8 * G), "8.00 GiB");
        assert_eq!(human(512), "512 B");
    }

    proptest::proptest! {
        /// The parser never panics and only ever returns non-zero sizes or
        /// in-range percentages.
        #[test]
        fn never_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            match parse_size_bytes(&raw) {
                Ok(Size::Bytes(b)) => proptest::prop_assert!(b > 0),
                Ok(Size::Ppm(p)) => proptest::prop_assert!(p > 0 && p <= 1_000_000),
                Err(_) => {}
            }
        }

        /// Round trip: N<unit> always equals N × multiplier.
        #[test]
        fn binary_units_exact(n in 1u64..1_000_000, u in 0usize..4) {
            let (suffix, mult) = [("k", 1u64 << 10), ("m", 1 << 20), ("g", 1 << 30), ("GiB", 1 << 30)][u];
            proptest::prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(Size::Bytes(n * mult)));
        }

        #[test]
        fn decimal_units_exact(n in 1u64..1_000_000) {
            proptest::prop_assert_eq!(parse_size(&format!("{n}GB")), Ok(Size::Bytes(n * 1_000_000_000)));
        }
    }
}
