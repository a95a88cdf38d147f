//! Durations in the grammar of Go's `time.ParseDuration`, the one grammar Keel uses everywhere a
//! duration is written: policy files (`rate_limit.window`, `retry.base_delay`/`max_delay`) and
//! the command-line flags (`--step-timeout 1m30s`). A duration is an optional sign, then one or
//! more decimal numbers, each with an optional fraction and a unit: `ns`, `us` (or `µs`/`μs`),
//! `ms`, `s`, `m`, `h` (`300ms`, `1.5h`, `2h45m`, `10.5s4m`). Units may repeat and come in any
//! order; `0` alone needs no unit; there are no days and no spaces. The value must fit in a
//! signed 64-bit count of nanoseconds (about 292 years), as in Go.
//!
//! Written here rather than taken from a crate: the crates that parse "Go-like" durations
//! (`humantime` and others) accept a different language (spaces, `min`, `days`), and the point
//! is that a file written for the reference kernel means the same thing here.

use std::time::Duration;

/// Nanoseconds per unit, for every unit Go accepts.
const UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// The units as the error messages list them.
const UNIT_LIST: &str = "ns, us, ms, s, m, h";

/// 2^63: one past the largest positive duration, the magnitude of the most negative one.
const LIMIT: u64 = 1 << 63;

/// Parses a duration exactly as Go's `time.ParseDuration` does; returns signed nanoseconds,
/// or a lowercase message saying why the text is not a duration.
pub fn parse_go_duration(text: &str) -> Result<i64, String> {
    let invalid = || format!("bad duration `{text}`: {}", grammar_hint());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let first = rest.as_bytes()[0];
        if first != b'.' && !first.is_ascii_digit() {
            return Err(invalid());
        }
        let (whole, after_whole) = leading_int(rest).ok_or_else(|| too_large(text))?;
        let had_whole = after_whole.len() != rest.len();
        rest = after_whole;
        let mut fraction = (0_u64, 1.0_f64);
        let mut had_fraction = false;
        if let Some(after_dot) = rest.strip_prefix('.') {
            let (digits, scale, after_fraction) = leading_fraction(after_dot);
            had_fraction = after_fraction.len() != after_dot.len();
            fraction = (digits, scale);
            rest = after_fraction;
        }
        if !had_whole && !had_fraction {
            return Err(invalid());
        }
        let unit_end = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_end == 0 {
            return Err(format!(
                "bad duration `{text}`: a number has no unit (use {UNIT_LIST})"
            ));
        }
        let (unit, after_unit) = rest.split_at(unit_end);
        rest = after_unit;
        let Some(&(_, per_unit)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(format!(
                "bad duration `{text}`: unknown unit `{unit}` (use {UNIT_LIST}; there are no days)"
            ));
        };
        if whole > LIMIT / per_unit {
            return Err(too_large(text));
        }
        let mut part = whole * per_unit;
        let (digits, scale) = fraction;
        if digits > 0 {
            // Same float arithmetic as Go, so fractions round identically.
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "mirrors Go's conversion; the product is at most 3.6e12"
            )]
            let fraction_ns = (digits as f64 * (per_unit as f64 / scale)) as u64;
            part += fraction_ns;
            if part > LIMIT {
                return Err(too_large(text));
            }
        }
        total += part;
        if total > LIMIT {
            return Err(too_large(text));
        }
    }
    if negative {
        // `total` is at most 2^63 here, so its negation fits in an i64.
        return Ok(0_i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| too_large(text))
}

/// Parses a duration that must be greater than zero (policy windows and retry delays).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let nanos = parse_go_duration(text)?;
    match u64::try_from(nanos) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos)),
        _ => Err(format!("bad duration `{text}`: must be greater than zero")),
    }
}

/// Parses a duration that may be zero but not negative (command-line flags; a flag that needs
/// a positive value says so itself).
pub fn parse_non_negative_duration(text: &str) -> Result<Duration, String> {
    let nanos = parse_go_duration(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("bad duration `{text}`: must not be negative"))
}

/// Describes the grammar in one line for error messages.
fn grammar_hint() -> String {
    format!(
        "expected numbers with units, e.g. `30s`, `1m30s`, `1.5h` or `300ms` (units {UNIT_LIST})"
    )
}

/// The message for a duration beyond Go's range.
fn too_large(text: &str) -> String {
    format!("bad duration `{text}`: too large (at most about 292 years)")
}

/// Consumes leading decimal digits; `None` when the number does not fit below 2^63 + 1.
fn leading_int(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let mut value: u64 = 0;
    for digit in text.bytes().take(digits) {
        if value > LIMIT / 10 {
            return None;
        }
        value = value * 10 + u64::from(digit - b'0');
        if value > LIMIT {
            return None;
        }
    }
    Some((value, &text[digits..]))
}

/// Consumes the digits after a decimal point; returns them as an integer with its scale
/// (`.25` is `(25, 100.0)`). Digits past what fits are consumed and ignored, as in Go.
fn leading_fraction(text: &str) -> (u64, f64, &str) {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let mut value: u64 = 0;
    let mut scale = 1.0_f64;
    let mut overflow = false;
    for digit in text.bytes().take(digits) {
        if overflow {
            continue;
        }
        if value > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let next = value * 10 + u64::from(digit - b'0');
        if next > LIMIT {
            overflow = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, &text[digits..])
}
