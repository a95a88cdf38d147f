//! The opaque page cursor of `GET /v0/executions` (WIRE.md §7.2): standard base64 of
//! `<created_at RFC 3339 micros>|<id>` of the last row of a page.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use keel_actors::time::{self, Timestamp};

/// Returns the cursor that continues after the row `(created_at, id)`.
pub fn encode(created_at: &Timestamp, id: &str) -> String {
    STANDARD.encode(format!("{}|{}", time::format(created_at), id))
}

/// Returns the `(created_at, id)` key a cursor continues after, or `None` when it is malformed.
pub fn decode(cursor: &str) -> Option<(Timestamp, String)> {
    let bytes = STANDARD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (created_at, id) = text.split_once('|')?;
    if id.is_empty() {
        return None;
    }
    let created_at = chrono::DateTime::parse_from_rfc3339(created_at)
        .ok()?
        .with_timezone(&chrono::Utc);
    Some((created_at, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_standard_padded_base64_of_time_and_id() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05.123456Z")
            .map(|time| time.with_timezone(&chrono::Utc))
            .unwrap();
        // "2026-01-02T03:04:05.123456Z|e" is 29 bytes: one `=` of padding.
        assert_eq!(
            encode(&now, "e"),
            "MjAyNi0wMS0wMlQwMzowNDowNS4xMjM0NTZafGU="
        );
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_rejected() {
        let now = time::now();
        let cursor = encode(&now, "0196-abc");
        assert_eq!(decode(&cursor), Some((now, "0196-abc".to_owned())));
        for bad in [
            "",
            "!!!!",
            "Zg=",
            "Zm9v",
            &STANDARD.encode(b"2020-01-01T00:00:00Z|"),
            &STANDARD.encode(b"nope|id"),
        ] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
