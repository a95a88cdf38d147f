//! Cassettes (docs/llm.md, "Cassettes"): the answers an execution's model calls got, written by
//! `keel llm export EXECUTION` and served by a kernel started with `--llm-cassette FILE`
//! instead of any provider. A call is found by provider, model, streaming and the digest of its
//! request body; the n-th identical call gets the n-th recorded answer (the last one again once
//! they are used up). A call the cassette does not hold is refused.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::GatewayConfigError;

/// Version written in, and required of, a cassette file.
pub const CASSETTE_VERSION: u64 = 1;

/// One recorded call and its answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CassetteCall {
    /// Provider name (the route's `{provider}`).
    pub provider: String,
    /// Model the request named.
    pub model: String,
    /// Whether the answer was streamed.
    pub stream: bool,
    /// SHA-256 (hex) of the request body.
    pub request_digest: String,
    /// The request, for the reader (not used to match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The answer: a JSON body, or a stream's server-sent events as text.
    pub response: Value,
    /// Tokens the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Tokens the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Cached input tokens the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// The file: `{"keel_cassette": 1, "execution_id": …, "calls": […]}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CassetteFile {
    /// [`CASSETTE_VERSION`].
    pub keel_cassette: u64,
    /// The execution the calls were recorded on.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// The calls, in the order they were made.
    pub calls: Vec<CassetteCall>,
}

impl CassetteFile {
    /// The cassette of an execution's events (as the events API answers them): its
    /// `llm.called` that completed with a stored answer and were not themselves replays.
    /// Returns it and the number of completed calls left out for want of a stored answer.
    pub fn from_events(execution_id: &str, events: &[Value]) -> (Self, usize) {
        let mut calls = Vec::new();
        let mut skipped = 0;
        for event in events {
            if event.get("type").and_then(Value::as_str) != Some("llm.called") {
                continue;
            }
            let payload = &event["payload"];
            if payload.get("outcome").and_then(Value::as_str) != Some("ok")
                || payload
                    .get("replay_of")
                    .is_some_and(|value| !value.is_null())
            {
                continue;
            }
            let text = |key: &str| payload.get(key).and_then(Value::as_str).map(str::to_owned);
            let count = |key: &str| payload.get(key).and_then(Value::as_u64);
            match (
                text("provider"),
                text("model"),
                text("request_digest"),
                payload.get("response").filter(|value| !value.is_null()),
            ) {
                (Some(provider), Some(model), Some(request_digest), Some(response)) => {
                    calls.push(CassetteCall {
                        provider,
                        model,
                        stream: payload.get("stream").and_then(Value::as_bool) == Some(true),
                        request_digest,
                        request: payload
                            .get("request")
                            .filter(|value| !value.is_null())
                            .cloned(),
                        response: response.clone(),
                        input_tokens: count("input_tokens"),
                        output_tokens: count("output_tokens"),
                        cached_tokens: count("cached_tokens"),
                    });
                }
                _ => skipped += 1,
            }
        }
        let file = Self {
            keel_cassette: CASSETTE_VERSION,
            execution_id: Some(execution_id.to_owned()),
            calls,
        };
        (file, skipped)
    }
}

/// Which recorded calls answer a call: provider, model, streamed, request digest.
type Key = (String, String, bool, String);

/// A loaded cassette and how many times each call was served.
#[derive(Debug)]
pub struct Cassette {
    path: PathBuf,
    calls: HashMap<Key, Vec<CassetteCall>>,
    providers: BTreeMap<String, usize>,
    served: Mutex<HashMap<Key, usize>>,
}

impl Cassette {
    /// Reads a cassette file written by `keel llm export`.
    pub fn load(path: &Path) -> Result<Self, GatewayConfigError> {
        let invalid = |detail: String| GatewayConfigError::Invalid {
            path: path.to_owned(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|source| GatewayConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file: CassetteFile = serde_json::from_str(&text)
            .map_err(|error| invalid(format!("not a cassette: {error}")))?;
        if file.keel_cassette != CASSETTE_VERSION {
            return Err(invalid(format!(
                "cassette version {} (this kernel reads version {CASSETTE_VERSION})",
                file.keel_cassette
            )));
        }
        Ok(Self::new(path, file.calls))
    }

    /// A cassette of `calls`, named `path` in messages.
    pub fn new(path: &Path, calls: Vec<CassetteCall>) -> Self {
        let mut by_key: HashMap<Key, Vec<CassetteCall>> = HashMap::new();
        let mut providers = BTreeMap::new();
        for call in calls {
            *providers.entry(call.provider.clone()).or_default() += 1;
            let key = (
                call.provider.clone(),
                call.model.clone(),
                call.stream,
                call.request_digest.clone(),
            );
            by_key.entry(key).or_default().push(call);
        }
        Self {
            path: path.to_owned(),
            calls: by_key,
            providers,
            served: Mutex::default(),
        }
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls recorded per provider.
    pub fn providers(&self) -> &BTreeMap<String, usize> {
        &self.providers
    }

    /// The answer for the next call with this key: the n-th recorded for the n-th call, the
    /// last one again once they are used up; `None` when the cassette holds no such call.
    pub fn answer(
        &self,
        provider: &str,
        model: &str,
        stream: bool,
        request_digest: &str,
    ) -> Option<CassetteCall> {
        let key = (
            provider.to_owned(),
            model.to_owned(),
            stream,
            request_digest.to_owned(),
        );
        let recorded = self.calls.get(&key)?;
        let mut served = self
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = served.entry(key).or_default();
        let answer = recorded.get(*count).or_else(|| recorded.last()).cloned();
        *count += 1;
        answer
    }

    /// Calls recorded for `provider` and `model`, whatever their request.
    pub fn recorded_for(&self, provider: &str, model: &str) -> usize {
        self.calls
            .iter()
            .filter(|((p, m, _, _), _)| p == provider && m == model)
            .map(|(_, calls)| calls.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(payload: Value) -> Value {
        json!({"type": "llm.called", "payload": payload})
    }

    #[test]
    fn export_keeps_completed_calls_with_answers_and_serving_follows_their_order() {
        let call = |digest: &str, answer: &str| {
            event(
                json!({"provider": "openai", "model": "m", "stream": false, "outcome": "ok",
                "request_digest": digest, "response": {"text": answer}, "input_tokens": 3}),
            )
        };
        let events = vec![
            call("d1", "first"),
            call("d1", "second"),
            event(json!({"provider": "openai", "model": "m", "stream": false,
                "outcome": "provider_error", "request_digest": "d2"})),
            event(
                json!({"provider": "openai", "model": "m", "stream": false, "outcome": "ok",
                "request_digest": "d3"}),
            ),
            event(
                json!({"provider": "openai", "model": "m", "stream": false, "outcome": "ok",
                "request_digest": "d1", "replay_of": 4}),
            ),
            json!({"type": "execution.started", "payload": {}}),
        ];
        let (file, skipped) = CassetteFile::from_events("e1", &events);
        assert_eq!(skipped, 1, "the ok call without a stored answer");
        assert_eq!(file.calls.len(), 2);
        let text = serde_json::to_string(&file).expect("JSON");
        let path = std::env::temp_dir().join(format!("cassette-{}.json", std::process::id()));
        std::fs::write(&path, text).expect("written");
        let cassette = Cassette::load(&path).expect("loads");
        std::fs::remove_file(&path).ok();
        let answer = |digest: &str| {
            cassette
                .answer("openai", "m", false, digest)
                .map(|call| call.response["text"].clone())
        };
        assert_eq!(answer("d1"), Some(json!("first")));
        assert_eq!(answer("d1"), Some(json!("second")));
        assert_eq!(answer("d1"), Some(json!("second")), "the last again");
        assert_eq!(answer("d3"), None);
        assert_eq!(cassette.answer("openai", "m", true, "d1"), None);
        assert_eq!(cassette.recorded_for("openai", "m"), 2);
    }

    #[test]
    fn a_file_that_is_not_a_cassette_is_refused_with_the_reason() {
        let path = std::env::temp_dir().join(format!("not-cassette-{}.json", std::process::id()));
        std::fs::write(&path, r#"{"keel_cassette": 9, "calls": []}"#).expect("written");
        let error = Cassette::load(&path).expect_err("refused").to_string();
        std::fs::remove_file(&path).ok();
        assert!(error.contains("version 9"), "{error}");
    }
}
