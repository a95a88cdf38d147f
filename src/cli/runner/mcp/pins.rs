//! Pinning of MCP tool definitions (docs/mcp.md, "Pinning"): the digest of each tool's
//! definition (name, description, input schema) is recorded when it is first published. A
//! later listing (after a restart, or a `list_changed` notification) whose definition differs,
//! or that brings a tool never pinned, withdraws that tool until the change is accepted.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Returns the digest of a tool's definition: SHA-256 over the canonical JSON (keys sorted)
/// of its name, description and input schema, as `sha256:<hex>`.
pub fn digest(tool: &Value) -> String {
    let definition = json!({
        "name": tool.get("name").cloned().unwrap_or(Value::Null),
        "description": tool.get("description").cloned().unwrap_or(Value::Null),
        "inputSchema": tool.get("inputSchema").cloned().unwrap_or(Value::Null),
    });
    let text = canonical(&definition).to_string();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The value with every object's keys sorted.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let sorted: BTreeMap<&String, Value> = fields
                .iter()
                .map(|(key, value)| (key, canonical(value)))
                .collect();
            let mut map = Map::new();
            for (key, value) in sorted {
                map.insert(key.clone(), value);
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The pinned digests, by MCP tool name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pins(pub HashMap<String, String>);

/// Why a listed tool is not published.
#[derive(Clone, Debug, PartialEq)]
pub struct Withdrawn {
    /// MCP tool name.
    pub name: String,
    /// The pinned digest (`None` for a tool never pinned).
    pub pinned: Option<String>,
    /// The digest of the definition listed now.
    pub listed: String,
}

impl Withdrawn {
    /// `definition changed (sha256:… → sha256:…)` or `new tool (sha256:…)`.
    pub fn describe(&self) -> String {
        match &self.pinned {
            Some(pinned) => format!("definition changed ({pinned} → {})", self.listed),
            None => format!("new tool, never pinned ({})", self.listed),
        }
    }
}

impl Pins {
    /// Checks a listing (name, digest) against the pins. With no pins yet, everything is
    /// pinned. With `accept`, changes and new tools are pinned as listed. Returns the names
    /// that may be published, the tools withdrawn, and whether the pins changed.
    pub fn check(
        &mut self,
        listed: &[(String, String)],
        accept: bool,
    ) -> (Vec<String>, Vec<Withdrawn>, bool) {
        let first = self.0.is_empty();
        let mut allowed = Vec::new();
        let mut withdrawn = Vec::new();
        let mut changed = false;
        for (name, listed_digest) in listed {
            match self.0.get(name) {
                Some(pinned) if pinned == listed_digest => allowed.push(name.clone()),
                pinned if first || accept => {
                    if let Some(pinned) = pinned {
                        tracing::warn!(
                            tool = name,
                            pinned,
                            listed = listed_digest,
                            "MCP tool definition changed: accepted"
                        );
                    }
                    self.0.insert(name.clone(), listed_digest.clone());
                    changed = true;
                    allowed.push(name.clone());
                }
                pinned => withdrawn.push(Withdrawn {
                    name: name.clone(),
                    pinned: pinned.cloned(),
                    listed: listed_digest.clone(),
                }),
            }
        }
        (allowed, withdrawn, changed)
    }

    /// Reads a pin file (`{"tools": {"name": "sha256:…"}}`); a missing file is no pins.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let value: Value = serde_json::from_str(&text)
            .map_err(|error| format!("{} is not JSON: {error}", path.display()))?;
        let tools = value
            .get("tools")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("{} has no \"tools\" object", path.display()))?;
        let mut pins = HashMap::new();
        for (name, digest) in tools {
            let digest = digest.as_str().ok_or_else(|| {
                format!("{}: the pin of {name:?} is not a string", path.display())
            })?;
            pins.insert(name.clone(), digest.to_owned());
        }
        Ok(Self(pins))
    }

    /// Writes the pin file (through a temporary file, then a rename).
    pub fn save(&self, path: &std::path::Path) -> Result<(), String> {
        let sorted: BTreeMap<&String, &String> = self.0.iter().collect();
        let text = serde_json::to_string_pretty(&json!({ "tools": sorted }))
            .map_err(|error| error.to_string())?;
        let temporary = path.with_extension("tmp");
        std::fs::write(&temporary, text + "\n")
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(name, digest)| ((*name).to_owned(), (*digest).to_owned()))
            .collect()
    }

    #[test]
    fn the_digest_covers_name_description_and_schema_not_key_order() {
        let one = json!({ "name": "t", "description": "d", "inputSchema": { "a": 1, "b": 2 } });
        let same = json!({ "inputSchema": { "b": 2, "a": 1 }, "description": "d", "name": "t", "title": "x" });
        assert_eq!(digest(&one), digest(&same));
        let described =
            json!({ "name": "t", "description": "D", "inputSchema": { "a": 1, "b": 2 } });
        assert_ne!(digest(&one), digest(&described));
        let schema = json!({ "name": "t", "description": "d", "inputSchema": { "a": 1 } });
        assert_ne!(digest(&one), digest(&schema));
        assert!(digest(&one).starts_with("sha256:"));
    }

    #[test]
    fn the_first_listing_is_pinned_and_a_change_is_withdrawn_until_accepted() {
        let mut pins = Pins::default();
        let (allowed, withdrawn, changed) = pins.check(&listed(&[("a", "1"), ("b", "2")]), false);
        assert_eq!(allowed, ["a", "b"]);
        assert!(withdrawn.is_empty() && changed);

        let now = listed(&[("a", "1"), ("b", "3"), ("c", "4")]);
        let (allowed, withdrawn, changed) = pins.check(&now, false);
        assert_eq!(allowed, ["a"]);
        assert!(!changed);
        assert_eq!(withdrawn.len(), 2);
        assert_eq!(withdrawn[0].describe(), "definition changed (2 → 3)");
        assert_eq!(withdrawn[1].describe(), "new tool, never pinned (4)");

        let (allowed, withdrawn, changed) = pins.check(&now, true);
        assert_eq!(allowed, ["a", "b", "c"]);
        assert!(withdrawn.is_empty() && changed);
        assert_eq!(pins.0.get("b").map(String::as_str), Some("3"));
    }

    #[test]
    fn pins_survive_a_file_round_trip() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let path = dir.path().join("pins.json");
        assert_eq!(Pins::load(&path), Ok(Pins::default()));
        let mut pins = Pins::default();
        pins.check(&listed(&[("a", "sha256:1")]), false);
        pins.save(&path).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(Pins::load(&path), Ok(pins));
        std::fs::write(&path, "[]").unwrap_or_else(|error| panic!("{error}"));
        assert!(Pins::load(&path).is_err());
    }
}
