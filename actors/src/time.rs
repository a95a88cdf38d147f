//! Wall-clock helpers. Timestamps on the wire are RFC 3339 with at most six fractional digits
//! and an explicit offset (older pydantic rejects nanoseconds), so every stored time is
//! truncated to microseconds when it is taken.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// A point in time as the kernel stores and sends it (UTC, microsecond precision).
pub type Timestamp = DateTime<Utc>;

/// Returns the current time truncated to microseconds.
pub fn now() -> Timestamp {
    Utc::now().trunc_subsecs(6)
}

/// Formats a timestamp the way every payload carries it: `2026-05-21T14:20:38.123456Z`.
pub fn format(ts: &Timestamp) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Serde adapter writing timestamps with [`format`].
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
    pub fn serialize<S: Serializer>(ts: &Option<Timestamp>, serializer: S) -> Result<S::Ok, S::Error> {
        match ts {
            Some(ts) => serializer.serialize_str(&super::format(ts)),
            None => serializer.serialize_none(),
        }
    }

    /// Parses an optional RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Timestamp>, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?;
        match text {
            None => Ok(None),
            Some(text) => chrono::DateTime::parse_from_rfc3339(&text)
                .map(|t| Some(t.with_timezone(&chrono::Utc)))
                .map_err(serde::de::Error::custom),
        }
    }
}
