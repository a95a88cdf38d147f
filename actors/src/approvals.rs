//! What binds an approval to one call: the digest of its exact arguments. A retry with other
//! arguments is a new step whose digest differs, so it asks again (docs/security.md).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Returns `sha256:<hex>` of the arguments' canonical JSON (object keys sorted, no spaces):
/// equal arguments give equal digests whatever the order their keys were sent in.
pub fn arguments_digest(arguments: &Value) -> String {
    let mut hasher = Sha256::new();
    // serde_json's map is ordered by key (no `preserve_order`), so this is canonical.
    hasher.update(arguments.to_string().as_bytes());
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_digest_is_of_the_arguments_not_of_their_spelling() {
        let parsed: Value =
            serde_json::from_str(r#"{"b": 2, "a": {"y": 1, "x": [1, 2]}}"#).expect("json");
        let same = json!({"a": {"x": [1, 2], "y": 1}, "b": 2});
        assert_eq!(arguments_digest(&parsed), arguments_digest(&same));
        let other = json!({"a": {"x": [2, 1], "y": 1}, "b": 2});
        assert_ne!(arguments_digest(&parsed), arguments_digest(&other));
        // Known value: the SHA-256 of `null`.
        assert_eq!(
            arguments_digest(&Value::Null),
            "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
        );
    }
}
