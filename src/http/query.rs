//! Query-string helpers. Query strings are decoded as form data (`+` is a space, then
//! percent-decoding; Corrections item 19), and repeated keys are kept, which axum's `Query`
//! extractor cannot do well. As in the reference kernel, a single-valued parameter takes its
//! first occurrence and an empty value counts as absent.

/// The decoded pairs of one query string.
#[derive(Debug, Default)]
pub struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    /// Decodes a raw query string (`None` when the URI had none).
    pub fn parse(raw: Option<&str>) -> Self {
        let pairs = raw
            .map(|raw| {
                form_urlencoded::parse(raw.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        Self { pairs }
    }

    /// Returns the first non-empty value of `key`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plus_is_a_space_and_percent_escapes_are_decoded() {
        let query = QueryParams::parse(Some("label=team%3Aops+east&label=a:b&agent_id=x%2By"));
        assert_eq!(query.all("label"), vec!["team:ops east", "a:b"]);
        assert_eq!(query.get("agent_id"), Some("x+y"));
    }

    #[test]
    fn empty_values_are_absent_and_bad_numbers_fall_back() {
        let query = QueryParams::parse(Some("status=&limit=-3&after=abc&n=7"));
        assert_eq!(query.get("status"), None);
        assert_eq!(query.non_negative("limit", 50), 50);
        assert_eq!(query.non_negative("after", 0), 0);
        assert_eq!(query.non_negative("n", 0), 7);
        assert_eq!(QueryParams::parse(None).get("x"), None);
    }
}
