//! Client text the kernel stores or looks up (issue 38, item 8): no NUL in ids, keys, paths
//! and queries (PostgreSQL cannot hold one in text, so it would answer 500 there and 200 on
//! SQLite), and labels bounded in number, key alphabet and size. Free-form JSON (`input`,
//! `arguments`, `output`, `data`, `payload`) may hold NUL: it is data, stored as JSON text.

use std::collections::BTreeMap;

use axum::http::Uri;
use serde_json::Value;

use super::error::ApiError;

/// Default most labels on one execution (`--max-labels`).
pub const DEFAULT_MAX_LABELS: usize = 64;
/// Default largest label value, in bytes (`--max-label-value-bytes`).
pub const DEFAULT_MAX_LABEL_VALUE_BYTES: usize = 1024;
/// Largest label key, in bytes.
pub const MAX_LABEL_KEY_BYTES: usize = 128;

/// Bounds of the labels of one creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelLimits {
    /// Most labels.
    pub max_count: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
}

impl Default for LabelLimits {
    fn default() -> Self {
        Self {
            max_count: DEFAULT_MAX_LABELS,
            max_value_bytes: DEFAULT_MAX_LABEL_VALUE_BYTES,
        }
    }
}

/// A 400 when `value` holds a NUL.
pub fn refuse_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        return Err(ApiError::validation(format_args!(
            "{field} must not contain NUL"
        )));
    }
    Ok(())
}

/// A 400 when any of the named optional fields holds a NUL.
pub fn refuse_nul_in(fields: &[(&str, Option<&str>)]) -> Result<(), ApiError> {
    for (field, value) in fields {
        if let Some(value) = value {
            refuse_nul(field, value)?;
        }
    }
    Ok(())
}

/// A 400 when the path or the query of `uri` encodes a NUL (`%00`; hyper refuses a raw one).
pub fn refuse_nul_in_uri(uri: &Uri) -> Result<(), ApiError> {
    let encoded = |part: &str| part.contains("%00");
    if encoded(uri.path()) || uri.query().is_some_and(encoded) {
        return Err(ApiError::validation(
            "the request's path and query must not contain NUL (%00)",
        ));
    }
    Ok(())
}

/// Whether `key` is a label key: 1 to [`MAX_LABEL_KEY_BYTES`] ASCII letters, digits, `_`,
/// `-`, `.` and `/`.
fn is_label_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_LABEL_KEY_BYTES
        && key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b'/'))
}

/// Accepts labels only as an object of string values (Corrections item 3) within `limits`.
pub fn parse_labels(
    labels: Option<Value>,
    limits: LabelLimits,
) -> Result<Option<BTreeMap<String, String>>, ApiError> {
    let Some(labels) = labels else {
        return Ok(None);
    };
    let Value::Object(map) = labels else {
        return Err(ApiError::validation(
            "labels must be an object of string values",
        ));
    };
    if map.len() > limits.max_count {
        return Err(ApiError::validation(format_args!(
            "at most {} labels are allowed, got {}",
            limits.max_count,
            map.len()
        )));
    }
    let mut parsed = BTreeMap::new();
    for (key, value) in map {
        if !is_label_key(&key) {
            return Err(ApiError::validation(format_args!(
                "label key {key:?} must be 1 to {MAX_LABEL_KEY_BYTES} ASCII letters, digits, '_', '-', '.' or '/'"
            )));
        }
        let Value::String(value) = value else {
            return Err(ApiError::validation(format_args!(
                "label {key:?} must be a string"
            )));
        };
        if value.len() > limits.max_value_bytes {
            return Err(ApiError::validation(format_args!(
                "label {key:?} exceeds {} bytes",
                limits.max_value_bytes
            )));
        }
        refuse_nul(&format!("label {key:?}"), &value)?;
        parsed.insert(key, value);
    }
    Ok(Some(parsed))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(result: Result<Option<BTreeMap<String, String>>, ApiError>) -> String {
        match result {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn labels_must_be_an_object_of_strings() {
        let limits = LabelLimits::default();
        assert_eq!(parse_labels(None, limits).unwrap(), None);
        let parsed = parse_labels(Some(json!({"team": "ops"})), limits)
            .unwrap()
            .unwrap();
        assert_eq!(parsed.get("team").map(String::as_str), Some("ops"));
        for bad in [
            json!({"n": 1}),
            json!(["a"]),
            json!("x"),
            json!({"a": null}),
        ] {
            assert!(matches!(
                parse_labels(Some(bad), limits),
                Err(ApiError::BadRequest(_))
            ));
        }
    }

    #[test]
    fn label_keys_have_a_small_alphabet_and_values_a_size() {
        let limits = LabelLimits {
            max_count: 3,
            max_value_bytes: 8,
        };
        let ok = parse_labels(Some(json!({"team": "ops", "a.b/c_d-1": ""})), limits);
        assert_eq!(ok.unwrap().map(|labels| labels.len()), Some(2));
        for key in ["", "a:b", "a=b", "a b", "é", "a\u{0}"] {
            let text = message(parse_labels(Some(json!({ key: "v" })), limits));
            assert!(text.contains("label key"), "{key:?}: {text}");
        }
        let long_key = "k".repeat(MAX_LABEL_KEY_BYTES + 1);
        assert!(
            message(parse_labels(Some(json!({ long_key: "v" })), limits)).contains("label key")
        );
        assert!(
            message(parse_labels(Some(json!({"k": "123456789"})), limits))
                .contains("exceeds 8 bytes")
        );
        assert!(message(parse_labels(Some(json!({"k": "a\u{0}"})), limits)).contains("NUL"));
        let four = json!({"a": "1", "b": "2", "c": "3", "d": "4"});
        assert!(message(parse_labels(Some(four), limits)).contains("at most 3 labels"));
    }

    #[test]
    fn an_encoded_nul_anywhere_in_the_uri_is_refused() {
        for uri in [
            "/v0/executions/a%00",
            "/v0/executions?agent_id=%00",
            "/x?a=b&c=%00d",
        ] {
            let uri: Uri = uri.parse().unwrap();
            assert!(refuse_nul_in_uri(&uri).is_err(), "{uri}");
        }
        let fine: Uri = "/v0/executions?agent_id=a%20b&x=%01".parse().unwrap();
        assert!(refuse_nul_in_uri(&fine).is_ok());
    }
}
