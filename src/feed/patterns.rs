//! Event type patterns of the feed and of webhook subscriptions.
//!
//! A pattern is dotted segments like the types it matches (`step.created`). A segment that is
//! exactly `*` matches one segment, except as the last segment, where it matches the rest (one
//! or more segments): `step.*` matches `step.created`, `*.failed` matches `step.failed` and
//! `execution.failed`, and `*` alone matches every type. A list (`step.*,execution.failed`)
//! matches a type when any of its patterns does; an empty list matches every type. Segments
//! are otherwise literal; `*` inside a segment (`step.crea*`) is refused.

use std::fmt;

/// One parsed pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pattern {
    segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Star,
}

/// A parsed list of type patterns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypePatterns {
    patterns: Vec<Pattern>,
    text: Vec<String>,
}

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternError(String);

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PatternError {}

impl TypePatterns {
    /// Parses a comma-separated list (`step.*,execution.failed`); blanks around commas are
    /// ignored and an empty text is the empty list.
    pub fn parse_list(text: &str) -> Result<Self, PatternError> {
        let items: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .collect();
        Self::parse(&items)
    }

    /// Parses each of `items` as one pattern.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, PatternError> {
        let mut patterns = Vec::with_capacity(items.len());
        let mut text = Vec::with_capacity(items.len());
        for item in items {
            let item = item.as_ref();
            patterns.push(parse_one(item)?);
            text.push(item.to_owned());
        }
        Ok(Self { patterns, text })
    }

    /// Returns whether `event_type` matches (always, for the empty list).
    pub fn matches(&self, event_type: &str) -> bool {
        self.patterns.is_empty()
            || self
                .patterns
                .iter()
                .any(|pattern| pattern.matches(event_type))
    }

    /// Returns whether the list is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Returns the patterns as given.
    pub fn as_strings(&self) -> &[String] {
        &self.text
    }
}

fn parse_one(item: &str) -> Result<Pattern, PatternError> {
    if item.is_empty() {
        return Err(PatternError("an event type pattern is empty".to_owned()));
    }
    let mut segments = Vec::new();
    for segment in item.split('.') {
        if segment == "*" {
            segments.push(Segment::Star);
            continue;
        }
        if segment.is_empty() {
            return Err(PatternError(format!(
                "event type pattern {item:?} has an empty segment"
            )));
        }
        if segment.contains('*') {
            return Err(PatternError(format!(
                "event type pattern {item:?}: `*` must be a whole segment (like step.*)"
            )));
        }
        if !segment
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
        {
            return Err(PatternError(format!(
                "event type pattern {item:?} may only hold letters, digits, `_`, `-`, `.` and `*`"
            )));
        }
        segments.push(Segment::Literal(segment.to_owned()));
    }
    Ok(Pattern { segments })
}

impl Pattern {
    fn matches(&self, event_type: &str) -> bool {
        let parts: Vec<&str> = event_type.split('.').collect();
        let last = self.segments.len() - 1;
        for (index, segment) in self.segments.iter().enumerate() {
            let Some(part) = parts.get(index) else {
                return false;
            };
            match segment {
                Segment::Star if index == last => return true,
                Segment::Star => {}
                Segment::Literal(literal) if literal == part => {}
                Segment::Literal(_) => return false,
            }
        }
        parts.len() == self.segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_table() {
        // (patterns, type, matches)
        let table: &[(&str, &str, bool)] = &[
            ("", "step.created", true),
            ("*", "step.created", true),
            ("*", "execution.failed", true),
            ("*", "a.b.c", true),
            ("step.*", "step.created", true),
            ("step.*", "step.approval_required", true),
            ("step.*", "step", false),
            ("step.*", "stepx.created", false),
            ("step.*", "execution.created", false),
            ("step.*", "step.a.b", true),
            ("*.failed", "execution.failed", true),
            ("*.failed", "step.failed", true),
            ("*.failed", "step.failed.more", false),
            ("*.failed", "failed", false),
            ("execution.failed", "execution.failed", true),
            ("execution.failed", "execution.failed2", false),
            ("execution.failed", "execution", false),
            ("a.*.c", "a.b.c", true),
            ("a.*.c", "a.b.d", false),
            ("a.*.c", "a.b", false),
            ("step.*,execution.failed", "execution.failed", true),
            ("step.*,execution.failed", "step.completed", true),
            ("step.*,execution.failed", "execution.completed", false),
            (" step.created , hook.* ", "hook.decided", true),
            ("hook.decided", "hook.decided", true),
        ];
        for (patterns, event_type, expected) in table {
            let parsed = TypePatterns::parse_list(patterns).expect("valid pattern");
            assert_eq!(
                parsed.matches(event_type),
                *expected,
                "{patterns:?} against {event_type:?}"
            );
        }
    }

    #[test]
    fn malformed_patterns_are_refused_with_a_reason() {
        for bad in [
            "step.crea*",
            "step..created",
            ".step",
            "step.",
            "st ep",
            "step.$",
        ] {
            let error = TypePatterns::parse_list(bad).expect_err(bad);
            assert!(error.to_string().contains("pattern"), "{bad}: {error}");
        }
        assert!(TypePatterns::parse(&[""]).is_err());
    }
}
