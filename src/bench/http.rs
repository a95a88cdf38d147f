//! The bench's own HTTP client for the hot path: typed request bodies serialised straight to
//! bytes, answers decoded into the few fields the bench reads, one keep-alive connection pool
//! for calls and another for SSE streams, and the agent wire bodies the scenarios send.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::{CliError, path_segment};

use super::wire::SignalBody;
pub use super::wire::{
    Assigned, CreateBody, Created, ExecutionRef, INTENT_PATH, Intent, IntentAnswer, IntentBody,
    STEP_RESULT_PATH, StepData, StepResultBody,
};

/// Time allowed to open a TCP connection to the kernel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for one call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(35);
/// Longest silence on a stream; the kernel sends a heartbeat every 5 s.
const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// One server-sent event: its name and data.
pub struct Event {
    /// Event name (`execution.assigned`, `signal.received`, …).
    pub event: String,
    /// Event data (JSON text).
    pub data: String,
}

/// A stream of server-sent events; an error ends it.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, String>> + Send>>;

/// HTTP client bound to one kernel.
#[derive(Clone)]
pub struct Http {
    calls: reqwest::Client,
    streams: reqwest::Client,
    base_url: String,
    auth: Option<HeaderValue>,
}

impl Http {
    /// Builds a client for `base_url` (`http://host:port`) with an optional bearer token.
    pub fn new(base_url: &str, token: Option<&str>) -> Result<Self, CliError> {
        let failed = |error: reqwest::Error| {
            CliError::Failed(format!("cannot build the HTTP client: {error}"))
        };
        let calls = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .map_err(failed)?;
        let streams = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(STREAM_READ_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .map_err(failed)?;
        let auth = match token.filter(|token| !token.is_empty()) {
            Some(token) => Some(HeaderValue::from_str(&format!("Bearer {token}")).map_err(
                |_| CliError::InvalidArgument {
                    what: "--token",
                    message: "is not a valid header value".to_owned(),
                },
            )?),
            None => None,
        };
        Ok(Self {
            calls,
            streams,
            base_url: base_url.trim_end_matches('/').to_owned(),
            auth,
        })
    }

    /// Opens (lazily) a connection of its own for one closed loop.
    pub fn conn(&self) -> Result<super::conn::Conn, String> {
        super::conn::Conn::new(&self.base_url, self.auth.clone())
    }

    /// Returns the kernel's base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// POSTs `body` as JSON to `path` and decodes the answer into `R`; a transport error or a
    /// non-2xx answer is an error message.
    pub async fn post<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, String> {
        let bytes = serde_json::to_vec(body).map_err(|error| error.to_string())?;
        let mut request = self
            .calls
            .post(format!("{}{path}", self.base_url))
            .header(CONTENT_TYPE, "application/json")
            .body(bytes);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("POST {path}: {}", crate::cli::client::chain(&error)))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|error| format!("POST {path}: {}", crate::cli::client::chain(&error)))?;
        if !status.is_success() {
            return Err(format!(
                "POST {path}: {} {}",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            ));
        }
        serde_json::from_slice(&body).map_err(|error| format!("POST {path}: bad answer: {error}"))
    }

    /// GETs `path` and returns whether it answered 2xx (`false` on any transport error).
    pub async fn ok(&self, path: &str) -> bool {
        let mut request = self.calls.get(format!("{}{path}", self.base_url));
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        request
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|response| response.status().is_success())
    }

    /// Opens `/v0/agents/stream` for `agent_id` as consumer `consumer_id`.
    pub async fn agent_stream(
        &self,
        agent_id: &str,
        consumer_id: &str,
    ) -> Result<EventStream, String> {
        let mut request = self
            .streams
            .get(format!("{}/v0/agents/stream", self.base_url))
            .query(&[("agent_id", agent_id), ("consumer_id", consumer_id)])
            .header(ACCEPT, "text/event-stream");
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("agent stream: {}", crate::cli::client::chain(&error)))?;
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            return Err(format!("agent stream: {status} {body}"));
        }
        let events = response.bytes_stream().eventsource().map(|event| {
            event
                .map(|event| Event {
                    event: event.event,
                    data: event.data,
                })
                .map_err(|error| format!("agent stream: {error}"))
        });
        Ok(Box::pin(events))
    }

    /// Creates an execution of `agent_id` and returns its id.
    pub async fn create(&self, agent_id: &str, index: u64) -> Result<String, String> {
        let created: Created = self
            .post("/v0/executions", &CreateBody::new(agent_id, index))
            .await?;
        Ok(created.id)
    }

    /// Sends an intent and fails unless it was accepted; returns the step id, if any.
    pub async fn intent(
        &self,
        execution_id: &str,
        session_id: &str,
        intent: Intent<'_>,
    ) -> Result<Option<String>, String> {
        let body = IntentBody {
            execution_id,
            session_id,
            intent,
        };
        let answer: IntentAnswer = self.post(INTENT_PATH, &body).await?;
        answer.step()
    }

    /// Reports a local step as succeeded.
    pub async fn step_result(
        &self,
        execution_id: &str,
        session_id: &str,
        step_id: &str,
        index: u32,
    ) -> Result<(), String> {
        let body = StepResultBody {
            execution_id,
            session_id,
            step_id,
            success: true,
            data: StepData { index },
        };
        let _: Value = self.post(STEP_RESULT_PATH, &body).await?;
        Ok(())
    }

    /// Sends signal `signal_type` (no payload) to an execution.
    pub async fn signal(&self, execution_id: &str, signal_type: &str) -> Result<(), String> {
        let path = format!("/v0/executions/{}/signal", path_segment(execution_id));
        let _: Value = self.post(&path, &SignalBody { signal_type }).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_serialise_as_the_wire_expects() {
        let invoke = serde_json::to_value(Intent::InvokeTool {
            tool_id: "bench.local",
            arguments: StepData { index: 2 },
            idempotency_key: "e:bench.local:2".to_owned(),
        })
        .ok();
        assert_eq!(
            invoke,
            Some(serde_json::json!({
                "type": "invoke_tool", "tool_id": "bench.local",
                "arguments": { "index": 2 }, "idempotency_key": "e:bench.local:2"
            }))
        );
        let wait = serde_json::to_value(Intent::Wait {
            signal_type: "bench.resume",
        })
        .ok();
        assert_eq!(
            wait,
            Some(serde_json::json!({ "type": "wait", "signal_type": "bench.resume" }))
        );
        let complete = serde_json::to_value(Intent::Complete {
            output: StepData { index: 5 },
        })
        .ok();
        assert_eq!(
            complete,
            Some(serde_json::json!({ "type": "complete", "output": { "index": 5 } }))
        );
    }
}
