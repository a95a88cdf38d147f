//! Label values from outside the kernel: escaped per the exposition format, and bounded in
//! number. Agent, tool and runner ids (and model names) come from clients, so `prometheus-client`
//! writing label values verbatim let a `"` or a newline in an id forge metric lines or make the
//! whole page unparsable, and every new id created new series. Every such value goes through
//! [`escape`]; ids go through an [`IdLabels`] bound, past which they are counted under
//! [`OTHER`].

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Label value of every id past the bound.
pub const OTHER: &str = "other";

/// Default of the bound on distinct ids per family group (`--metrics-max-ids`).
pub const DEFAULT_MAX_IDS: usize = 1000;

/// `value` escaped for a label value of the text exposition: `\` as `\\`, `"` as `\"` and a
/// line feed as `\n` (the only escapes the format has; every other character is written as it
/// is, which the format allows).
pub fn escape(value: &str) -> String {
    // A byte scan: the three are ASCII, and this runs for every counted intent and step.
    if !value
        .bytes()
        .any(|byte| matches!(byte, b'\\' | b'"' | b'\n'))
    {
        return value.to_owned();
    }
    let mut escaped = String::with_capacity(value.len() + 8);
    for character in value.chars() {
        match character {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// The ids seen as label values, up to a limit: an id seen before, or one that still fits, is
/// its own (escaped) label value; any other is [`OTHER`]. The set keeps the first ids seen
/// since the kernel started.
#[derive(Debug)]
pub struct IdLabels {
    limit: AtomicUsize,
    seen: Mutex<HashSet<String>>,
}

impl Default for IdLabels {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_IDS)
    }
}

impl IdLabels {
    /// A bound of `limit` distinct ids.
    pub fn new(limit: usize) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            seen: Mutex::default(),
        }
    }

    /// Changes the limit (ids already seen keep their series).
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The label value of `id`.
    pub fn label(&self, id: &str) -> String {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains(id) {
            return escape(id);
        }
        if seen.len() < self.limit.load(Ordering::Relaxed) {
            seen.insert(id.to_owned());
            return escape(id);
        }
        OTHER.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_writes_the_three_escapes_of_the_format() {
        assert_eq!(escape("plain-id_1.x"), "plain-id_1.x");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape("tab\tand\u{202e}"), "tab\tand\u{202e}");
    }

    #[test]
    fn ids_past_the_limit_share_the_other_label() {
        let ids = IdLabels::new(2);
        assert_eq!(ids.label("a"), "a");
        assert_eq!(ids.label("b\""), "b\\\"");
        assert_eq!(ids.label("c"), OTHER);
        assert_eq!(ids.label("a"), "a", "an id seen before keeps its label");
        ids.set_limit(3);
        assert_eq!(ids.label("c"), "c");
    }
}
