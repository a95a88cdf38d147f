//! Wall-clock helpers. Timestamps on the wire are RFC 3339 with at most six fractional digits
//! and an explicit offset (older pydantic rejects nanoseconds), so every stored time is
//! truncated to microseconds when it is taken.

use chrono::{DateTime, Datelike, SecondsFormat, SubsecRound, Timelike, Utc};

/// A point in time as the kernel stores and sends it (UTC, microsecond precision).
pub type Timestamp = DateTime<Utc>;

/// Returns the current time truncated to microseconds.
pub fn now() -> Timestamp {
    // Whole microseconds since the epoch, as `Utc::now().trunc_subsecs(6)` gives, without its
    // rounding arithmetic (taken about 50 times per execution of the K=5 job).
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_micros())
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .unwrap_or_else(|| Utc::now().trunc_subsecs(6))
}

/// Where the actors read "now" from. The system clock in production; in tests a clock that
/// advances with tokio's timer (`tokio::time::pause`/`advance`), so that timers armed with
/// `send_after` and deadline checks against wall time agree under paused time.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// The system's wall clock.
    #[default]
    System,
    /// `wall + (tokio::time::Instant::now() - start)`: wall time anchored once, advanced by the
    /// tokio clock (which a paused test runtime moves only when told or when idle).
    Tokio {
        /// Wall time at the anchor.
        wall: Timestamp,
        /// Tokio instant at the anchor.
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// Returns a clock anchored at the current wall time that advances with tokio's clock.
    pub fn tokio() -> Self {
        Self::Tokio {
            wall: now(),
            start: tokio::time::Instant::now(),
        }
    }

    /// Returns the current time of this clock, truncated to microseconds.
    pub fn now(&self) -> Timestamp {
        match self {
            Self::System => now(),
            Self::Tokio { wall, start } => {
                let elapsed =
                    chrono::Duration::from_std(start.elapsed()).unwrap_or(chrono::Duration::MAX);
                wall.checked_add_signed(elapsed)
                    .unwrap_or(*wall)
                    .trunc_subsecs(6)
            }
        }
    }
}

/// Formats a timestamp the way every payload carries it: `2026-05-21T14:20:38.123456Z`.
/// The fixed layout of a year 0–9999 is written digit by digit: `to_rfc3339_opts` goes through
/// chrono's general formatter, about 700 instructions a call, 26 calls per execution of the
/// K=5 job. Anything else (a year of five digits, a leap second) is left to chrono, which is
/// also what the tests compare this with.
pub fn format(ts: &Timestamp) -> String {
    let (date, time) = (ts.date_naive(), ts.time());
    let micros = time.nanosecond() / 1_000;
    if !(0..=9999).contains(&date.year()) || micros >= 1_000_000 {
        return ts.to_rfc3339_opts(SecondsFormat::Micros, true);
    }
    let mut text = [0u8; 27];
    let fields: [(u32, usize, usize); 7] = [
        (date.year().unsigned_abs(), 0, 4),
        (date.month(), 5, 2),
        (date.day(), 8, 2),
        (time.hour(), 11, 2),
        (time.minute(), 14, 2),
        (time.second(), 17, 2),
        (micros, 20, 6),
    ];
    for (mut value, start, width) in fields {
        for digit in text[start..start + width].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    for (at, separator) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ] {
        text[at] = separator;
    }
    text[26] = b'Z';
    text.iter().map(|&byte| char::from(byte)).collect()
}

/// Serde adapter writing timestamps with [`format()`].
pub mod serde_micros {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Timestamp;

    /// Serializes a timestamp as RFC 3339 with microseconds.
    pub fn serialize<S: Serializer>(ts: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format(ts))
    }

    /// Parses any RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        chrono::DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(serde::de::Error::custom)
    }
}

/// Serde adapter for optional timestamps.
pub mod serde_micros_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Timestamp;

    /// Serializes `Some` as RFC 3339 with microseconds and `None` as null.
    pub fn serialize<S: Serializer>(
        ts: &Option<Timestamp>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match ts {
            Some(ts) => serializer.serialize_str(&super::format(ts)),
            None => serializer.serialize_none(),
        }
    }

    /// Parses an optional RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Timestamp>, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?;
        match text {
            None => Ok(None),
            Some(text) => chrono::DateTime::parse_from_rfc3339(&text)
                .map(|t| Some(t.with_timezone(&chrono::Utc)))
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Returns `at + duration`, or `at` when the sum does not fit (a duration of centuries).
pub fn add(at: Timestamp, duration: std::time::Duration) -> Timestamp {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_add_signed(delta))
        .unwrap_or(at)
}

/// The pending timers (`send_after`, `send_interval` tasks) of an actor, aborted when it stops
/// so that none outlives it (the leak check counts the runtime's tasks). Finished ones are
/// dropped as new ones are kept, so the set stays as small as what is pending.
#[derive(Debug, Default)]
pub struct PendingTimers(Vec<tokio::task::AbortHandle>);

impl PendingTimers {
    /// Keeps the timer of `handle`.
    pub fn keep<T>(&mut self, handle: &tokio::task::JoinHandle<T>) {
        self.0.retain(|timer| !timer.is_finished());
        self.0.push(handle.abort_handle());
    }

    /// Aborts every timer still pending.
    pub fn abort_all(&mut self) {
        for timer in self.0.drain(..) {
            timer.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDate, TimeZone};
    use proptest::prelude::*;

    use super::*;

    fn chrono_format(ts: &Timestamp) -> String {
        ts.to_rfc3339_opts(SecondsFormat::Micros, true)
    }

    proptest! {
        #[test]
        fn formats_every_microsecond_as_chrono_does(
            // From before year 0 to past year 9999, so both sides of the fast layout are hit.
            micros in -63_000_000_000_000_000i64..=260_000_000_000_000_000i64,
        ) {
            let ts = DateTime::from_timestamp_micros(micros).expect("in chrono's range");
            prop_assert_eq!(format(&ts), chrono_format(&ts));
        }
    }

    #[test]
    fn the_edges_of_the_fast_layout_and_a_leap_second_match_chrono() {
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|date| date.and_hms_micro_opt(23, 59, 59, 1_500_000))
            .expect("a leap second");
        for ts in [
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap()
                + chrono::Duration::microseconds(999_999),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 12, 31, 23, 59, 59).unwrap(),
            Utc.from_utc_datetime(&leap),
        ] {
            assert_eq!(format(&ts), chrono_format(&ts), "{ts:?}");
        }
        assert_eq!(
            format(&Utc.with_ymd_and_hms(2026, 5, 21, 14, 20, 38).unwrap()),
            "2026-05-21T14:20:38.000000Z"
        );
    }

    #[test]
    fn now_is_whole_microseconds_of_the_system_clock() {
        let before = Utc::now().trunc_subsecs(6);
        let taken = now();
        let after = Utc::now();
        assert_eq!(taken.timestamp_subsec_nanos() % 1_000, 0);
        assert!(
            before <= taken && taken <= after,
            "{before} <= {taken} <= {after}"
        );
    }
}
