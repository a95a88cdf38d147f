//! Duration flags: parsed in Go's `time.ParseDuration` grammar (as policy files spell them) and
//! formatted back the way the flags accept them (`--dump-config`).

use std::time::Duration;

/// Parses a duration flag in Go's `time.ParseDuration` grammar, the one policy files use too
/// (`500ms`, `30s`, `1m30s`, `1.5h`, `168h`; `0` needs no unit); negative values are refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    keel_actors::policy::rules::parse_non_negative_duration(text.trim())
}

/// Formats a duration the way flags accept it: `168h`, `1h30m`, `1m500ms`, `0s`.
pub fn format_duration(duration: Duration) -> String {
    let total_seconds = duration.as_secs();
    let parts = [
        (total_seconds / 3600, "h"),
        (total_seconds / 60 % 60, "m"),
        (total_seconds % 60, "s"),
        (u64::from(duration.subsec_millis()), "ms"),
    ];
    let text: String = parts
        .iter()
        .filter(|(value, _)| *value > 0)
        .map(|(value, unit)| format!("{value}{unit}"))
        .collect();
    if text.is_empty() {
        "0s".to_owned()
    } else {
        text
    }
}
