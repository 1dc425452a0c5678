//! The size grammar, one for the host and the container.
//!
//! ```text
//! size    = ws* ( number ws* unit? | number ws* "%" ) ws*
//! number  = digits ( "." digits? )? | "." digits        (ASCII digits only)
//! unit    = "" | "b"                                     bytes
//!         | "k" | "ki" | "kib" | "m" | "mi" | "mib"       binary (2^10, 2^20,
//!         | "g" | "gi" | "gib" | "t" | "ti" | "tib"        2^30, 2^40)
//!         | "kb" | "mb" | "gb" | "tb"                     decimal (10^3 … 10^12)
//! ```
//!
//! Units are case-insensitive; `ws` is Unicode white space (`str::trim`).
//! The whole value is at most [`MAX_VALUE_LEN`] bytes and valid UTF-8. The
//! result is exact and floored (`number × unit`, no floating point; at most
//! 18 fraction digits count) and must fit in a u64. A percentage is kept in
//! parts per million of the GPU's memory and must be greater than 0 and at
//! most 100 (`0.0001%` is the smallest). `0` (any unit) is a size:
//! [`Size::Bytes(0)`]; whether zero means something is the reader's rule (a
//! `vram` request refuses it; `context_overhead = "0"` and the interceptor's
//! `GPU_QUOTA_VRAM=0` mean "none").
use core::fmt;

/// What a size value accepts, for error messages.
pub const SIZE_FORMS: &str =
    "a size like 8g, 8GiB, 512m, 8192MiB, 1.5g (binary), 8GB (decimal), or a percentage like 25%";

/// Longest value looked at (bytes, before trimming); anything longer is
/// refused as absurd.
pub const MAX_VALUE_LEN: usize = 64;

/// Fraction digits that count (enough for any u64 byte count).
pub const MAX_FRACTION_DIGITS: usize = 18;

/// Parts per million in 100%.
pub const PPM_FULL: u32 = 1_000_000;

/// A parsed size: absolute bytes, or parts-per-million of a GPU's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    /// Parts per million of the GPU's total memory (1..=1_000_000).
    Ppm(u32),
}

impl Size {
    /// Resolve against a GPU of `total` bytes (floored).
    pub const fn resolve(self, total: u64) -> u64 {
        match self {
            Size::Bytes(b) => b,
            Size::Ppm(p) => ((total as u128 * p as u128) / PPM_FULL as u128) as u64,
        }
    }
}

/// Why a size was refused. [`SizeError::UnknownUnit`] gives the unit as a
/// byte range of the value passed to [`parse_size`] (no allocation here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    Empty,
    TooLong,
    NotUtf8,
    Negative,
    NotANumber,
    /// `value[start..end]` is the unit that was not understood.
    UnknownUnit {
        start: usize,
        end: usize,
    },
    Overflow,
    PercentRange,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SizeError::Empty => "empty value",
            SizeError::TooLong => "value longer than 64 characters",
            SizeError::NotUtf8 => "not valid UTF-8",
            SizeError::Negative => "negative sizes are not allowed",
            SizeError::NotANumber => "not a number",
            SizeError::UnknownUnit { .. } => "unknown unit",
            SizeError::Overflow => "size does not fit in 64 bits",
            SizeError::PercentRange => "percentage must be greater than 0 and at most 100",
        })
    }
}

const _: () = assert!(MAX_VALUE_LEN == 64, "update the TooLong message");

/// The multiplier of a unit (case-insensitive), None when unknown.
pub fn unit_multiplier(unit: &[u8]) -> Option<u64> {
    const K: u64 = 1024;
    const UNITS: [(&[u8], u64); 18] = [
        (b"", 1),
        (b"b", 1),
        (b"k", K),
        (b"ki", K),
        (b"kib", K),
        (b"m", K * K),
        (b"mi", K * K),
        (b"mib", K * K),
        (b"g", K * K * K),
        (b"gi", K * K * K),
        (b"gib", K * K * K),
        (b"t", K * K * K * K),
        (b"ti", K * K * K * K),
        (b"tib", K * K * K * K),
        (b"kb", 1_000),
        (b"mb", 1_000_000),
        (b"gb", 1_000_000_000),
        (b"tb", 1_000_000_000_000),
    ];
    UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|&(_, m)| m)
}

/// Split `"12.5"` into integer and fraction digits; refuses anything but
/// ASCII digits with at most one dot and at least one digit.
fn split_number(num: &str) -> Result<(&str, &str), SizeError> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
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
        v = v * 10 + (b - b'0') as u128;
        if v > u64::MAX as u128 {
            return Err(SizeError::Overflow);
        }
    }
    // v ≤ 2^64 and mult ≤ 2^40 (or 10^12): no u128 overflow
    let whole = v * mult;
    let frac = &frac.as_bytes()[..frac.len().min(MAX_FRACTION_DIGITS)];
    let mut f: u128 = 0;
    let mut denom: u128 = 1;
    for &b in frac {
        f = f * 10 + (b - b'0') as u128;
        denom *= 10;
    }
    // f < 10^18 and mult ≤ 2^40: f × mult < 2^100
    Ok(whole + f * mult / denom)
}

/// Parse a size (annotation, environment or configuration value); see the
/// module documentation for the grammar.
pub fn parse_size(raw: &[u8]) -> Result<Size, SizeError> {
    if raw.len() > MAX_VALUE_LEN {
        return Err(SizeError::TooLong);
    }
    let s = core::str::from_utf8(raw).map_err(|_| SizeError::NotUtf8)?;
    let base = s.as_ptr() as usize;
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
        if ppm == 0 || ppm > PPM_FULL as u128 {
            return Err(SizeError::PercentRange);
        }
        return Ok(Size::Ppm(ppm as u32));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = unit.trim_start();
    let Some(mult) = unit_multiplier(unit.as_bytes()) else {
        if num.is_empty() {
            return Err(SizeError::NotANumber);
        }
        let start = unit.as_ptr() as usize - base;
        return Err(SizeError::UnknownUnit {
            start,
            end: start + unit.len(),
        });
    };
    let (int, frac) = split_number(num)?;
    let v = scale(int, frac, mult as u128)?;
    if v > u64::MAX as u128 {
        return Err(SizeError::Overflow);
    }
    Ok(Size::Bytes(v as u64))
}

/// A size for people, binary units with two decimals, rounded: `8.00 GiB`,
/// `512.00 MiB`, `17 B`. Integer arithmetic only (the interceptor has no
/// floating point): `(whole, hundredths, unit)`.
pub const fn human_parts(bytes: u64) -> (u64, u8, &'static str) {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    let mut i = 0;
    while i < UNITS.len() {
        let (name, unit) = UNITS[i];
        if bytes >= unit {
            let hundredths = ((bytes as u128 * 100 + unit as u128 / 2) / unit as u128) as u64;
            return (hundredths / 100, (hundredths % 100) as u8, name);
        }
        i += 1;
    }
    (bytes, 0, "B")
}

/// [`human_parts`] as text (`format!("{}", Human(b))`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Human(pub u64);

impl core::fmt::Display for Human {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match human_parts(self.0) {
            (b, _, "B") => write!(f, "{b} B"),
            (w, h, unit) => write!(f, "{w}.{h:02} {unit}"),
        }
    }
}

/// A [`Size`] as the request grammar reads it back: bytes as [`Human`],
/// a share as the shortest exact percentage (`12.5%`, `0.0001%`).
impl core::fmt::Display for Size {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Size::Bytes(b) => Human(b).fmt(f),
            Size::Ppm(p) => {
                let per = PPM_FULL / 100;
                write!(f, "{}", p / per)?;
                let mut frac = p % per;
                if frac != 0 {
                    let mut digits = 4;
                    while frac % 10 == 0 {
                        frac /= 10;
                        digits -= 1;
                    }
                    write!(f, ".{frac:0digits$}")?;
                }
                f.write_str("%")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shown_for_people() {
        use std::string::ToString;
        let cases: &[(u64, &str)] = &[
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.00 KiB"),
            ((1 << 20) - 1, "1024.00 KiB"),
            (512 << 20, "512.00 MiB"),
            (8 << 30, "8.00 GiB"),
            (9 << 27, "1.13 GiB"), // 1.125: half a hundredth rounds up
            ((3 << 40) / 2, "1.50 TiB"),
            (u64::MAX, "16777216.00 TiB"),
        ];
        for (b, want) in cases {
            assert_eq!(Human(*b).to_string(), *want, "{b}");
        }
        for (p, want) in [
            (1, "0.0001%"),
            (125_000, "12.5%"),
            (250_000, "25%"),
            (1_000_000, "100%"),
            (10_100, "1.01%"),
        ] {
            assert_eq!(Size::Ppm(p).to_string(), want);
            assert_eq!(
                parse_size(want.as_bytes()),
                Ok(Size::Ppm(p)),
                "{want} reads back"
            );
        }
        assert_eq!(Size::Bytes(8 << 30).to_string(), "8.00 GiB");
    }

    use super::*;
    const G: u64 = 1 << 30;

    /// Every spelling the host and the interceptor accepted before they
    /// shared this grammar, and what it means.
    #[test]
    fn accepted_forms() {
        let cases: &[(&str, Size)] = &[
            ("8g", Size::Bytes(8 * G)),
            ("8G", Size::Bytes(8 * G)),
            ("8gi", Size::Bytes(8 * G)),
            ("8Gi", Size::Bytes(8 * G)),
            ("8GiB", Size::Bytes(8 * G)),
            ("8 GiB", Size::Bytes(8 * G)),
            ("4 GiB", Size::Bytes(4 * G)),
            (" 12g \n", Size::Bytes(12 * G)),
            ("\u{a0}12g\u{3000}", Size::Bytes(12 * G)),
            ("512m", Size::Bytes(512 << 20)),
            ("8192MiB", Size::Bytes(8 * G)),
            ("8GB", Size::Bytes(8_000_000_000)),
            ("8gb", Size::Bytes(8_000_000_000)),
            ("0.1GB", Size::Bytes(100_000_000)),
            ("500MB", Size::Bytes(500_000_000)),
            ("2kb", Size::Bytes(2_000)),
            ("1tb", Size::Bytes(1_000_000_000_000)),
            ("1.5g", Size::Bytes(3 * G / 2)),
            (".5g", Size::Bytes(G / 2)),
            ("5.g", Size::Bytes(5 * G)),
            ("1048576", Size::Bytes(1 << 20)),
            ("1048576b", Size::Bytes(1 << 20)),
            ("1048576 B", Size::Bytes(1 << 20)),
            ("1k", Size::Bytes(1 << 10)),
            ("1KiB", Size::Bytes(1 << 10)),
            ("1t", Size::Bytes(1 << 40)),
            ("1TiB", Size::Bytes(1 << 40)),
            (
                "16777215.999999999999t",
                Size::Bytes(u64::MAX - (1 << 40) + 1 + 1099511627774),
            ),
            ("18446744073709551615", Size::Bytes(u64::MAX)),
            ("0", Size::Bytes(0)),
            ("0g", Size::Bytes(0)),
            ("0.0000000000000000001g", Size::Bytes(0)),
            ("25%", Size::Ppm(250_000)),
            ("25 %", Size::Ppm(250_000)),
            ("12.5%", Size::Ppm(125_000)),
            ("100%", Size::Ppm(1_000_000)),
            ("100.0000%", Size::Ppm(1_000_000)),
            ("0.0001%", Size::Ppm(1)),
            ("33.33339%", Size::Ppm(333_333)),
        ];
        for (s, want) in cases {
            assert_eq!(parse_size(s.as_bytes()).as_ref(), Ok(want), "{s:?}");
        }
    }

    #[test]
    fn refused_forms() {
        let unit = |start, end| SizeError::UnknownUnit { start, end };
        let cases: &[(&[u8], SizeError)] = &[
            (b"", SizeError::Empty),
            (b"   ", SizeError::Empty),
            (b"-1g", SizeError::Negative),
            (b"-0", SizeError::Negative),
            (b"+1g", SizeError::NotANumber),
            (b"NaN", SizeError::NotANumber),
            (b"nan", SizeError::NotANumber),
            (b"inf", SizeError::NotANumber),
            (b"1e9", unit(1, 3)),
            (b"8x", unit(1, 2)),
            (b" 8 gigs ", unit(3, 7)),
            (b"8 g b", unit(2, 5)),
            (b"1.2.3g", SizeError::NotANumber),
            (b"g", SizeError::NotANumber),
            (b".g", SizeError::NotANumber),
            (b".", SizeError::NotANumber),
            (b"17179869184g", SizeError::Overflow),
            (b"20000000000t", SizeError::Overflow),
            (b"18446744073709551616", SizeError::Overflow),
            (b"99999999999999999999", SizeError::Overflow),
            (b"0%", SizeError::PercentRange),
            (b"0.00001%", SizeError::PercentRange),
            (b"101%", SizeError::PercentRange),
            (b"100.0001%", SizeError::PercentRange),
            (b"99999999999999999999%", SizeError::Overflow),
            (b"-5%", SizeError::Negative),
            (b"%", SizeError::NotANumber),
            (b"5%%", SizeError::NotANumber),
            (b"5g%", SizeError::NotANumber),
            (b"\xff\xfeg", SizeError::NotUtf8),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_size(raw).as_ref(), Err(want), "{:?}", raw);
        }
        let long = [b'1'; MAX_VALUE_LEN + 1];
        assert_eq!(parse_size(&long), Err(SizeError::TooLong));
        let mut padded = [b' '; MAX_VALUE_LEN + 1];
        padded[0] = b'1';
        assert_eq!(
            parse_size(&padded),
            Err(SizeError::TooLong),
            "length counts before trimming"
        );
        assert_eq!(parse_size(&padded[..MAX_VALUE_LEN]), Ok(Size::Bytes(1)));
    }

    #[test]
    fn resolve() {
        assert_eq!(Size::Ppm(250_000).resolve(16 * G), 4 * G);
        assert_eq!(Size::Ppm(1_000_000).resolve(u64::MAX), u64::MAX);
        assert_eq!(Size::Ppm(1).resolve(999_999), 0, "floored");
        assert_eq!(Size::Bytes(5).resolve(16 * G), 5);
    }

    proptest::proptest! {
        /// Never panics; only in-range percentages; an UnknownUnit range
        /// lies inside the value.
        #[test]
        fn never_panics(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            match parse_size(&raw) {
                Ok(Size::Ppm(p)) => proptest::prop_assert!(p > 0 && p <= PPM_FULL),
                Err(SizeError::UnknownUnit { start, end }) => {
                    proptest::prop_assert!(start < end && end <= raw.len())
                }
                _ => {}
            }
        }

        /// N<unit> is exactly N × multiplier.
        #[test]
        fn units_exact(n in 0u64..1_000_000, u in 0usize..8) {
            let (suffix, mult) = [
                ("k", 1u64 << 10), ("m", 1 << 20), ("g", 1 << 30), ("GiB", 1 << 30),
                ("T", 1 << 40), ("KB", 1_000), ("gb", 1_000_000_000), ("", 1),
            ][u];
            let s = std::format!("{n}{suffix}");
            proptest::prop_assert_eq!(parse_size(s.as_bytes()), Ok(Size::Bytes(n * mult)));
        }

        /// N.F<unit> is floor((N + F/10^len(F)) × multiplier), whatever the
        /// number of fraction digits (up to 18).
        #[test]
        fn fractions_exact(n in 0u64..1_000_000, f in 0u64..1_000_000_000_000_000_000, digits in 1usize..=18) {
            let f = f % 10u64.pow(digits as u32);
            let s = std::format!("{n}.{f:0digits$}g");
            let want = (n as u128) * (1 << 30) + (f as u128) * (1 << 30) / 10u128.pow(digits as u32);
            proptest::prop_assert_eq!(parse_size(s.as_bytes()), Ok(Size::Bytes(want as u64)));
        }
    }
}
