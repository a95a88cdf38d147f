//! `models:` — which models an agent may call through the LLM gateway (docs/llm.md): an
//! allow-list of globs over `provider/model`. A file without it allows any model; an agent file's
//! list replaces the `_global` one.

use super::glob::Glob;

/// A compiled `models.allow` list.
#[derive(Clone, Debug)]
pub struct ModelAllowList {
    patterns: Vec<Glob>,
    text: Vec<String>,
}

impl ModelAllowList {
    /// Compiles `patterns`; the first one that is not a valid glob is the error.
    pub fn new(patterns: &[String]) -> Result<Self, String> {
        let compiled = patterns
            .iter()
            .map(|pattern| {
                Glob::new(pattern).map_err(|error| format!("models.allow {pattern:?}: {error}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            patterns: compiled,
            text: patterns.to_vec(),
        })
    }

    /// Whether `provider/model` is allowed.
    pub fn allows(&self, model_id: &str) -> bool {
        self.patterns.iter().any(|glob| glob.is_match(model_id))
    }

    /// The refusal of `model_id`, naming the list, when it is not allowed.
    pub fn refusal(&self, model_id: &str) -> Option<String> {
        (!self.allows(model_id)).then(|| {
            format!(
                "model {model_id} is not allowed by the policy (models.allow: {})",
                self.text.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_over_provider_and_model() {
        let list = ModelAllowList::new(&["openai/gpt-4o-mini".to_owned(), "local/*".to_owned()])
            .expect("valid");
        assert!(list.allows("openai/gpt-4o-mini"));
        assert!(list.allows("local/llama-3"));
        assert!(!list.allows("openai/gpt-4o"));
        let refusal = list.refusal("openai/o3").expect("refused");
        assert!(
            refusal.contains("openai/o3") && refusal.contains("local/*"),
            "{refusal}"
        );
        assert!(ModelAllowList::new(&["[".to_owned()]).is_err());
    }
}
