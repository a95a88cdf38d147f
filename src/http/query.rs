//! Query-string helpers. Query strings are decoded as form data (`+` is a space, then
//! percent-decoding; Corrections item 19). A query that is ambiguous or not text is refused
//! with a 400 before any handler logic runs: a key or value that does not decode to UTF-8
//! (`%FF`), or a key given twice unless the route lists it as repeatable (`label`). An empty
//! value counts as absent.

use std::borrow::Cow;
use std::collections::HashSet;

use percent_encoding::percent_decode;

use super::error::ApiError;

/// The decoded pairs of one query string.
#[derive(Debug, Default)]
pub struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    /// Decodes a raw query string (`None` when the URI had none) of a route whose only
    /// repeatable keys are `repeatable`.
    pub fn parse(raw: Option<&str>, repeatable: &[&str]) -> Result<Self, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for piece in raw.unwrap_or_default().split('&') {
            if piece.is_empty() {
                continue;
            }
            let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
            let key = decode_component(key)
                .ok_or_else(|| ApiError::validation("query parameter names must be UTF-8"))?;
            let value = decode_component(value).ok_or_else(|| {
                ApiError::validation(format_args!("query parameter {key} must be UTF-8"))
            })?;
            pairs.push((key, value));
        }
        let mut seen = HashSet::with_capacity(pairs.len());
        for (key, _) in &pairs {
            if !seen.insert(key.as_str()) && !repeatable.contains(&key.as_str()) {
                return Err(ApiError::validation(format_args!(
                    "query parameter {key} is given more than once"
                )));
            }
        }
        Ok(Self { pairs })
    }

    /// Returns the non-empty value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
            .filter(|value| !value.is_empty())
    }

    /// Returns every value of `key`, in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// Returns `key` as an integer, or `default` when absent, unparsable or negative.
    pub fn non_negative(&self, key: &str, default: i64) -> i64 {
        match self.get(key).map(str::parse::<i64>) {
            Some(Ok(value)) if value >= 0 => value,
            _ => default,
        }
    }
}

/// Decodes one form-encoded component (`+` is a space); `None` unless the bytes are UTF-8.
fn decode_component(raw: &str) -> Option<String> {
    let spaced: Cow<'_, str> = if raw.contains('+') {
        Cow::Owned(raw.replace('+', " "))
    } else {
        Cow::Borrowed(raw)
    };
    percent_decode(spaced.as_bytes())
        .decode_utf8()
        .ok()
        .map(Cow::into_owned)
}

/// Parses a label filter: `key=value`, or rebuno's `key:value` (what its SDK sends). The
/// first `=` or `:` ends the key, so a value may hold either; the key may not be empty.
pub fn label_filter(text: &str) -> Result<(String, String), super::error::ApiError> {
    match text.find(['=', ':']) {
        Some(at) if at > 0 => Ok((text[..at].to_owned(), text[at + 1..].to_owned())),
        _ => Err(super::error::ApiError::validation(format_args!(
            "invalid label filter {text:?}, expected key=value"
        ))),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn label_filters_take_key_equals_value_and_rebunos_colon() {
        let parse = |text| super::label_filter(text).map_err(|error| error.to_string());
        assert_eq!(parse("team=ops"), Ok(("team".into(), "ops".into())));
        assert_eq!(parse("team:ops"), Ok(("team".into(), "ops".into())));
        // The first separator ends the key: values keep the other one.
        assert_eq!(parse("url=http://x"), Ok(("url".into(), "http://x".into())));
        assert_eq!(parse("expr:a=b"), Ok(("expr".into(), "a=b".into())));
        assert_eq!(parse("team="), Ok(("team".into(), String::new())));
        for bad in ["team", "=ops", ":ops", ""] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains("expected key=value"), "{bad}: {error}");
        }
    }
    use super::*;

    fn parse(raw: &str) -> QueryParams {
        QueryParams::parse(Some(raw), &["label"]).unwrap()
    }

    #[test]
    fn plus_is_a_space_and_percent_escapes_are_decoded() {
        let query = parse("label=team%3Aops+east&label=a:b&agent_id=x%2By&k%C3%A9y=%C3%A9");
        assert_eq!(query.all("label"), vec!["team:ops east", "a:b"]);
        assert_eq!(query.get("agent_id"), Some("x+y"));
        assert_eq!(query.get("kéy"), Some("é"));
    }

    #[test]
    fn empty_values_are_absent_and_bad_numbers_fall_back() {
        let query = parse("status=&limit=-3&after=abc&n=7&&flag");
        assert_eq!(query.get("status"), None);
        assert_eq!(query.get("flag"), None);
        assert_eq!(query.non_negative("limit", 50), 50);
        assert_eq!(query.non_negative("after", 0), 0);
        assert_eq!(query.non_negative("n", 0), 7);
        assert_eq!(QueryParams::parse(None, &[]).unwrap().get("x"), None);
    }

    #[test]
    fn invalid_utf8_and_repeated_keys_are_refused() {
        for (raw, message) in [
            (
                "agent_id=%FF",
                "validation error: query parameter agent_id must be UTF-8",
            ),
            (
                "a%C3=1",
                "validation error: query parameter names must be UTF-8",
            ),
            (
                "agent_id=a&agent_id=b",
                "validation error: query parameter agent_id is given more than once",
            ),
            (
                "agent_id=&agent_id=b",
                "validation error: query parameter agent_id is given more than once",
            ),
            (
                "agent%5Fid=a&agent_id=a",
                "validation error: query parameter agent_id is given more than once",
            ),
        ] {
            let error = QueryParams::parse(Some(raw), &["label"]).unwrap_err();
            assert_eq!(error.to_string(), message, "{raw}");
        }
    }
}
