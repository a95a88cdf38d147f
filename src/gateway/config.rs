//! The gateway's configuration file (`--llm-config`, docs/llm.md): providers with their wire
//! format, base URL, key (from an environment variable or a file, never shown), prices,
//! limits and fallbacks, checked as a whole when it is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ApiKey, Format, Price, Provider, fallback, limits};

/// What went wrong reading a gateway configuration.
#[derive(Debug, thiserror::Error)]
pub enum GatewayConfigError {
    /// The file could not be read.
    #[error("cannot read LLM gateway configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("invalid LLM gateway configuration {path}: {detail}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the LLM gateway's HTTP client: {0}")]
    Client(String),
}

/// A provider as written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderFile {
    format: Format,
    base_url: String,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    api_key_file: Option<PathBuf>,
    #[serde(default)]
    prices: BTreeMap<String, Price>,
    #[serde(default = "stored")]
    store_bodies: bool,
    #[serde(default)]
    limits: Option<LimitsFile>,
    #[serde(default)]
    fallback: BTreeMap<String, String>,
}

/// `limits:` of a provider.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    #[serde(default)]
    rpm: Option<u32>,
    #[serde(default)]
    tpm: Option<u64>,
    #[serde(default)]
    max_wait: Option<String>,
    #[serde(default)]
    breaker_failures: Option<u32>,
    #[serde(default)]
    breaker_cool_down: Option<String>,
}

impl LimitsFile {
    fn settings(self, name: &str) -> Result<limits::LimitSettings, String> {
        let defaults = limits::LimitSettings::default();
        let duration = |text: Option<String>, default, field: &str| match text {
            None => Ok(default),
            Some(text) => keel_actors::policy::rules::parse_duration(&text)
                .map_err(|error| format!("provider {name}: limits.{field}: {error}")),
        };
        if self.rpm == Some(0) || self.tpm == Some(0) {
            return Err(format!(
                "provider {name}: limits.rpm and limits.tpm must be greater than zero"
            ));
        }
        Ok(limits::LimitSettings {
            rpm: self.rpm,
            tpm: self.tpm,
            max_wait: duration(self.max_wait, defaults.max_wait, "max_wait")?,
            breaker_failures: self.breaker_failures.unwrap_or(defaults.breaker_failures),
            breaker_cool_down: duration(
                self.breaker_cool_down,
                defaults.breaker_cool_down,
                "breaker_cool_down",
            )?,
        })
    }
}

fn stored() -> bool {
    true
}

/// The file: `providers: {name: {format, base_url, api_key_env | api_key_file}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayFile {
    providers: BTreeMap<String, ProviderFile>,
}

/// The gateway's configuration: its providers by name.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Providers by route name.
    pub providers: BTreeMap<String, Provider>,
}

impl GatewayConfig {
    /// Reads `path` (YAML), resolving each provider's key from its environment variable or
    /// file (a key file relative to the configuration's directory).
    pub fn load(path: &Path) -> Result<Self, GatewayConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| GatewayConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        Self::parse(&text, base, |name| std::env::var(name).ok()).map_err(|detail| {
            GatewayConfigError::Invalid {
                path: path.to_owned(),
                detail,
            }
        })
    }

    /// Parses a configuration's text; `env` resolves environment variables.
    pub fn parse(
        text: &str,
        base: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let file: GatewayFile = yaml_serde::from_str(text).map_err(|error| error.to_string())?;
        let mut providers = BTreeMap::new();
        let formats: BTreeMap<String, Format> = file
            .providers
            .iter()
            .map(|(name, provider)| (name.clone(), provider.format))
            .collect();
        for (name, provider) in file.providers {
            let fallback =
                fallback::fallbacks(&name, provider.format, provider.fallback, &formats)?;
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
            {
                return Err(format!(
                    "provider name {name:?}: use letters, digits, '-' and '_'"
                ));
            }
            let url = reqwest::Url::parse(&provider.base_url)
                .map_err(|error| format!("provider {name}: base_url: {error}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!("provider {name}: base_url must be http or https"));
            }
            let api_key = match (provider.api_key_env, provider.api_key_file) {
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "provider {name}: give api_key_env or api_key_file, not both"
                    ));
                }
                (Some(variable), None) => Some(ApiKey(env(&variable).ok_or_else(|| {
                    format!("provider {name}: environment variable {variable} is not set")
                })?)),
                (None, Some(file)) => {
                    let file = base.join(file);
                    let key = std::fs::read_to_string(&file).map_err(|error| {
                        format!(
                            "provider {name}: cannot read api_key_file {}: {error}",
                            file.display()
                        )
                    })?;
                    Some(ApiKey(key.trim().to_owned()))
                }
                (None, None) => None,
            };
            for (model, price) in &provider.prices {
                let prices = [Some(price.input), Some(price.output), price.cached_input];
                if prices
                    .into_iter()
                    .flatten()
                    .any(|p| !p.is_finite() || p < 0.0)
                {
                    return Err(format!(
                        "provider {name}: prices of {model}: use numbers >= 0 (dollars per million tokens)"
                    ));
                }
            }
            let limits = match provider.limits {
                Some(limits) => limits.settings(&name)?,
                None => limits::LimitSettings::default(),
            };
            providers.insert(
                name.clone(),
                Provider {
                    gate: std::sync::Arc::new(limits::Gate::new(limits)),
                    name,
                    format: provider.format,
                    base_url: provider.base_url.trim_end_matches('/').to_owned(),
                    api_key,
                    prices: provider.prices,
                    store_bodies: provider.store_bodies,
                    fallback,
                },
            );
        }
        Ok(Self { providers })
    }

    /// The provider and model that answer instead of `provider`'s `model` while it fails.
    pub fn fallback(&self, provider: &Provider, model: &str) -> Option<(&Provider, String)> {
        let (name, model) = provider
            .fallback
            .get(model)
            .or_else(|| provider.fallback.get("*"))?;
        Some((self.providers.get(name)?, model.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_environment_and_never_show_in_debug() {
        let config = GatewayConfig::parse(
            "providers:\n  openai:\n    format: openai\n    base_url: http://127.0.0.1:9/v1/\n    api_key_env: K\n",
            Path::new("."),
            |name| (name == "K").then(|| "sk-secret-123".to_owned()),
        )
        .expect("valid");
        let provider = &config.providers["openai"];
        assert_eq!(provider.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(
            provider.api_key.as_ref().map(ApiKey::expose),
            Some("sk-secret-123")
        );
        assert!(!format!("{config:?}").contains("sk-secret"));
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        let missing = GatewayConfig::parse(
            "providers:\n  p:\n    format: openai\n    base_url: http://x/v1\n    api_key_env: NOPE\n",
            Path::new("."),
            |_| None,
        );
        assert!(missing.unwrap_err().contains("NOPE is not set"));
        let scheme = GatewayConfig::parse(
            "providers:\n  p:\n    format: openai\n    base_url: ftp://x/v1\n",
            Path::new("."),
            |_| None,
        );
        assert!(scheme.unwrap_err().contains("http or https"));
        let unknown = GatewayConfig::parse(
            "providers:\n  p:\n    format: openai\n    base_url: http://x\n    key: k\n",
            Path::new("."),
            |_| None,
        );
        assert!(unknown.is_err());
        let name = GatewayConfig::parse(
            "providers:\n  \"a/b\":\n    format: openai\n    base_url: http://x\n",
            Path::new("."),
            |_| None,
        );
        assert!(name.unwrap_err().contains("provider name"));
    }
}
