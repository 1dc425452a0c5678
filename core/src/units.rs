//! Size parsing (the grammar is gpuquota_formats::size, shared with the
//! interceptor; see docs/config.md) and formatting.
//!
//! Accepted forms (case-insensitive units, optional spaces before the unit):
//! * binary, Docker-style: `8g`, `8G`, `8Gi`, `8GiB`, `512m`, `8192MiB`, `1.5g`
//! * decimal: `8GB` = 8×10^9, `500MB`
//! * bytes: `1073741824`, `1073741824b`
//! * percentages `25%`, `12.5%` of the chosen GPU's memory (requests only).
//!
//! [`parse_size`] refuses a zero size ([`SizeError::Zero`]): a request or an
//! inventory figure of zero bytes means nothing. Settings where `"0"` means
//! "none" map that error to 0.
use gpuquota_formats::size as grammar;

pub use grammar::{Size, MAX_VALUE_LEN, SIZE_FORMS};

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

impl SizeError {
    fn of(e: grammar::SizeError, raw: &[u8]) -> Self {
        use grammar::SizeError as G;
        match e {
            G::Empty => SizeError::Empty,
            G::TooLong => SizeError::TooLong,
            G::NotUtf8 => SizeError::NotUtf8,
            G::Negative => SizeError::Negative,
            G::NotANumber => SizeError::NotANumber,
            G::UnknownUnit { start, end } => SizeError::UnknownUnit(
                String::from_utf8_lossy(raw.get(start..end).unwrap_or_default()).into_owned(),
            ),
            G::Overflow => SizeError::Overflow,
            G::PercentRange => SizeError::PercentRange,
        }
    }
}

/// Parse raw bytes (annotation or env value) as a non-zero size.
pub fn parse_size_bytes(raw: &[u8]) -> Result<Size, SizeError> {
    match grammar::parse_size(raw) {
        Ok(Size::Bytes(0)) => Err(SizeError::Zero),
        Ok(s) => Ok(s),
        Err(e) => Err(SizeError::of(e, raw)),
    }
}

/// Parse a non-zero size; see the module docs for the forms.
pub fn parse_size(s: &str) -> Result<Size, SizeError> {
    parse_size_bytes(s.as_bytes())
}

/// Human-readable binary size: `8.00 GiB`, `512.00 MiB` (the
/// interceptor's messages spell sizes the same way: [`grammar::Human`]).
pub fn human(bytes: u64) -> String {
    grammar::Human(bytes).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;

    /// The grammar's own table lives with the grammar (formats/src/size.rs);
    /// here only that the host wrapper passes its answers through.
    #[test]
    fn accepted_forms_are_the_grammars() {
        for s in ["8g", "8 GiB", "0.1GB", "1048576b", "12.5%"] {
            assert_eq!(
                parse_size(s).ok(),
                grammar::parse_size(s.as_bytes()).ok(),
                "{s}"
            );
        }
        assert_eq!(parse_size("1.5g"), Ok(Size::Bytes(3 * G / 2)));
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
