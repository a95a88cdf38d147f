//! A provider's `fallback:` (docs/llm.md, "Fallback models"): per model (`*`: any other), the
//! `provider/model` that answers instead while it fails.

use std::collections::BTreeMap;

use super::Format;

/// Reads a provider's `fallback:` (`model: provider/model`): each names a configured provider
/// of the same wire format.
pub(super) fn fallbacks(
    name: &str,
    format: Format,
    written: BTreeMap<String, String>,
    formats: &BTreeMap<String, Format>,
) -> Result<BTreeMap<String, (String, String)>, String> {
    let mut fallbacks = BTreeMap::new();
    for (model, target) in written {
        let Some((backup, backup_model)) = target
            .split_once('/')
            .filter(|(backup, backup_model)| !backup.is_empty() && !backup_model.is_empty())
        else {
            return Err(format!(
                "provider {name}: fallback of {model}: write provider/model, not {target:?}"
            ));
        };
        match formats.get(backup) {
            None => {
                return Err(format!(
                    "provider {name}: fallback of {model}: no provider named {backup:?}"
                ));
            }
            Some(other) if *other != format => {
                return Err(format!(
                    "provider {name}: fallback of {model}: {backup} speaks {}, not {}",
                    other.as_str(),
                    format.as_str()
                ));
            }
            Some(_) => {}
        }
        if backup == name && backup_model == model {
            return Err(format!(
                "provider {name}: {model} cannot be its own fallback"
            ));
        }
        fallbacks.insert(model, (backup.to_owned(), backup_model.to_owned()));
    }
    Ok(fallbacks)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::GatewayConfig;

    fn parse(fallback: &str) -> Result<GatewayConfig, String> {
        GatewayConfig::parse(
            &format!(
                "providers:\n  a:\n    format: openai\n    base_url: http://x/v1\n    fallback: {fallback}\n  b:\n    format: openai\n    base_url: http://y/v1\n  c:\n    format: anthropic\n    base_url: http://z/v1\n"
            ),
            Path::new("."),
            |_| None,
        )
    }

    #[test]
    fn a_fallback_names_a_provider_of_the_same_format() {
        let config = parse("{m1: b/m2, \"*\": a/m3}").expect("valid");
        let a = &config.providers["a"];
        let (backup, model) = config.fallback(a, "m1").expect("m1 falls back");
        assert_eq!((backup.name.as_str(), model.as_str()), ("b", "m2"));
        let (backup, model) = config.fallback(a, "other").expect("any other model");
        assert_eq!((backup.name.as_str(), model.as_str()), ("a", "m3"));
        assert!(config.fallback(&config.providers["b"], "m1").is_none());
        for (written, reason) in [
            ("{m1: nobody/m2}", "no provider named"),
            ("{m1: c/m2}", "speaks anthropic"),
            ("{m1: m2}", "provider/model"),
            ("{m1: a/m1}", "its own fallback"),
        ] {
            let error = parse(written).expect_err(written);
            assert!(error.contains(reason), "{written}: {error}");
        }
    }
}
