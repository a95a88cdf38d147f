//! Parses the durations policy files use for rate-limit windows and retry delays: one or more
//! `<integer><unit>` parts with units `h`, `m`, `s`, `ms`, largest first, each at most once
//! (`30s`, `1m`, `1h30m`, `500ms`, `2m30s250ms`). Empty, zero, fractional, negative or unknown
//! inputs are rejected with a message saying why.

use std::time::Duration;

/// Units in the order they must appear, with their length in milliseconds.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a policy duration such as `1h30m`; returns a lowercase message on bad input.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("duration is empty; write e.g. `30s`, `1m`, `1h30m` or `500ms`".to_owned());
    }
    let mut total_ms: u64 = 0;
    let mut next_allowed_unit = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(format!(
                "bad duration `{text}`: expected a whole number before each unit (h, m, s, ms)"
            ));
        }
        let (digits, after_digits) = rest.split_at(digits_end);
        let unit_end = after_digits
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after_digits.len());
        let (unit, after_unit) = after_digits.split_at(unit_end);
        let Some(unit_position) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(if unit.starts_with('.') {
                format!("bad duration `{text}`: fractions are not supported (write e.g. `1h30m`)")
            } else if unit.is_empty() {
                format!("bad duration `{text}`: `{digits}` has no unit (h, m, s, ms)")
            } else {
                format!("bad duration `{text}`: unknown unit `{unit}` (use h, m, s or ms)")
            });
        };
        if unit_position < next_allowed_unit {
            return Err(format!(
                "bad duration `{text}`: units must appear once each, largest first (h, m, s, ms)"
            ));
        }
        next_allowed_unit = unit_position + 1;
        let amount: u64 = digits
            .parse()
            .map_err(|_| format!("bad duration `{text}`: `{digits}` is too large"))?;
        let part_ms = amount
            .checked_mul(UNITS[unit_position].1)
            .and_then(|part| total_ms.checked_add(part))
            .ok_or_else(|| format!("bad duration `{text}`: too large"))?;
        total_ms = part_ms;
        rest = after_unit;
    }
    if total_ms == 0 {
        return Err(format!("bad duration `{text}`: must be greater than zero"));
    }
    Ok(Duration::from_millis(total_ms))
}
