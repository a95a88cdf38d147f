//! The LLM gateway (docs/llm.md): OpenAI-compatible chat completions forwarded to a configured
//! provider on behalf of one execution. The request and response bodies pass through unchanged
//! (never round-tripped through typed structs); the kernel replaces the caller's credentials
//! (its kernel token) with the provider's key, which never reaches a log or a response.
//!
//! Off unless `--llm-config FILE` names a gateway configuration ([`GatewayConfig::load`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

pub mod cassette;
mod config;
mod fallback;
pub mod limits;
pub mod usage;

pub use config::{GatewayConfig, GatewayConfigError};
pub use usage::Price;

/// Largest request or answer body stored on `llm.called` (bigger ones are recorded by digest).
pub const MAX_STORED_BODY_BYTES: usize = 64 * 1024;

/// Time allowed to connect to a provider.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence tolerated while reading a provider's answer (a stream's chunks included).
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// Wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// OpenAI's `/v1/chat/completions` and `/v1/embeddings`.
    Openai,
    /// Anthropic's `/v1/messages`.
    Anthropic,
}

impl Format {
    /// The name used in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

/// A provider's key; its `Debug` never shows it.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Returns the key, for the one place that sends it upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One configured provider.
#[derive(Clone, Debug)]
pub struct Provider {
    /// Name used in the route (`/v0/executions/{id}/llm/{name}/v1/...`).
    pub name: String,
    /// Wire format.
    pub format: Format,
    /// Base URL the provider's paths are appended to (e.g. `https://api.openai.com/v1`).
    pub base_url: String,
    /// Key sent as `Authorization: Bearer <key>`; `None` sends none.
    pub api_key: Option<ApiKey>,
    /// Prices per model (`*` for any other model), in dollars per million tokens.
    pub prices: BTreeMap<String, Price>,
    /// Whether request and answer bodies are stored on `llm.called` (else digests only).
    pub store_bodies: bool,
    /// Limits shared by every call to this provider (requests and tokens per minute, 429
    /// parking, breaker).
    pub gate: std::sync::Arc<limits::Gate>,
    /// Per model (`*`: any other), the provider and model that answer instead while it fails.
    pub fallback: BTreeMap<String, (String, String)>,
}

impl Provider {
    /// A provider known only from a cassette: it is never called, and speaks whichever format
    /// its route does.
    pub fn offline(name: &str, format: Format) -> Self {
        Self {
            name: name.to_owned(),
            format,
            base_url: String::new(),
            api_key: None,
            prices: BTreeMap::new(),
            store_bodies: true,
            gate: std::sync::Arc::new(limits::Gate::new(limits::LimitSettings::default())),
            fallback: BTreeMap::new(),
        }
    }

    /// The price of `model`: its own, else the `*` entry's.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model).or_else(|| self.prices.get("*"))
    }
}

/// The running gateway: its configuration and the HTTP client shared by every call.
#[derive(Debug)]
pub struct Gateway {
    /// Providers by name.
    pub config: GatewayConfig,
    /// Client for the providers.
    pub client: reqwest::Client,
    /// Recorded answers served instead of calling any provider (`--llm-cassette`).
    pub cassette: Option<std::sync::Arc<cassette::Cassette>>,
}

impl Gateway {
    /// Builds the gateway for `config`.
    pub fn new(config: GatewayConfig) -> Result<Self, GatewayConfigError> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|error| GatewayConfigError::Client(error.to_string()))?;
        Ok(Self {
            config,
            client,
            cassette: None,
        })
    }

    /// The gateway serving `cassette`'s answers instead of calling its providers.
    pub fn with_cassette(mut self, cassette: cassette::Cassette) -> Self {
        self.cassette = Some(std::sync::Arc::new(cassette));
        self
    }
}
