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
pub fn format(ts: &Timestamp) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Micros, true)
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
