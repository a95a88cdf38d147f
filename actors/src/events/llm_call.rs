//! The payload of `llm.called`: one model call through the LLM gateway.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One model call through the LLM gateway, as `llm.called` records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmCall {
    /// Provider name from the gateway configuration.
    pub provider: String,
    /// Model the request named (`""` when it named none).
    pub model: String,
    /// Whether the answer was streamed.
    pub stream: bool,
    /// `ok`, `provider_error` (the provider answered an error status), `unreachable`,
    /// `client_disconnected` (the caller went away before the answer ended) or `refused`.
    pub outcome: String,
    /// HTTP status the provider answered (absent when it was not reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Time from forwarding the request to the end of the answer, in milliseconds.
    pub latency_ms: u64,
    /// SHA-256 of the request body as received, hex.
    pub request_digest: String,
    /// Prompt tokens the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Cost per unit: `tokens` (input + output) and, with a price for the model, `usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<BTreeMap<String, f64>>,
    /// Why the call failed, when it did (never a key or a provider address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The request body, when the gateway stores bodies and it is within the size limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The answer: its JSON body, or a stream's server-sent events as text, under the same
    /// conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
    /// Sequence of the earlier run's `llm.called` whose answer this call of a re-run was given
    /// instead of calling the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<i64>,
    /// `provider/model` that answered instead of the one called (its configured fallback, when
    /// the called one's breaker was open, it answered 5xx or could not be reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}
