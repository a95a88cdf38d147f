//! The record of one model call: `llm.called` on the execution, and the gateway's metrics.

use std::time::Instant;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use keel_actors::events::LlmCall;
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::Kernel;
use serde_json::Value;
use tracing::warn;

use crate::gateway::Provider;
use crate::gateway::usage::{self, Usage};

/// A model call being made: recorded once, when it ends ([`Recorder::finish`]), or as
/// `client_disconnected` if it is dropped before (the caller went away mid-stream).
pub(super) struct Recorder {
    pub(super) kernel: Kernel,
    pub(super) execution_id: ExecutionId,
    pub(super) started: Instant,
    pub(super) provider: Provider,
    pub(super) call: Option<LlmCall>,
    /// Usage reported so far (a stream may report it in more than one event).
    pub(super) usage: Option<Usage>,
}

impl Recorder {
    pub(super) fn usage(&mut self, usage: Option<Usage>) {
        if let Some(usage) = usage {
            self.usage.get_or_insert_default().merge(usage);
        }
    }

    /// Answers with an earlier run's recorded answer and records the call as its replay.
    pub(super) async fn replay(mut self, sequence: i64, answer: Value) -> Response {
        let stream = self.call.as_ref().is_some_and(|call| call.stream);
        if let Some(call) = self.call.as_mut() {
            call.replay_of = Some(sequence);
            call.request = None;
        }
        self.finish("ok", Some(StatusCode::OK), None).await;
        match answer {
            Value::String(events) if stream => {
                ([(header::CONTENT_TYPE, "text/event-stream")], events).into_response()
            }
            answer => axum::Json(answer).into_response(),
        }
    }

    pub(super) fn response(&mut self, response: Value) {
        if let Some(call) = self.call.as_mut() {
            call.response = Some(response);
        }
    }

    fn take(
        &mut self,
        outcome: &str,
        status: Option<StatusCode>,
        error: Option<String>,
    ) -> Option<LlmCall> {
        let mut call = self.call.take()?;
        if let Some(usage) = self.usage {
            self.provider.gate.used(usage.total().unwrap_or(0));
            call.input_tokens = usage.input;
            call.output_tokens = usage.output;
            call.cached_tokens = usage.cached;
            call.cost = usage::cost(Some(&usage), self.provider.price(&call.model));
        }
        call.outcome = outcome.to_owned();
        call.status = status.map(|status| status.as_u16());
        call.error = error;
        call.latency_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some(call)
    }

    /// Records the call with its outcome (once).
    pub(super) async fn finish(
        &mut self,
        outcome: &str,
        status: Option<StatusCode>,
        error: Option<String>,
    ) {
        if let Some(call) = self.take(outcome, status, error) {
            record(&self.kernel, &self.execution_id, call).await;
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(call) = self.take("client_disconnected", None, None) {
            let kernel = self.kernel.clone();
            let execution_id = self.execution_id.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { record(&kernel, &execution_id, call).await });
            }
        }
    }
}

async fn record(kernel: &Kernel, execution_id: &ExecutionId, call: LlmCall) {
    kernel.metrics().llm.call(
        &call.provider,
        &call.model,
        &call.outcome,
        call.latency_ms as f64 / 1000.0,
        [
            ("input", call.input_tokens),
            ("output", call.output_tokens),
            ("cached", call.cached_tokens),
        ],
        call.cost.as_ref().and_then(|cost| cost.get("usd").copied()),
    );
    let (provider, model, outcome) = (
        call.provider.clone(),
        call.model.clone(),
        call.outcome.clone(),
    );
    if let Err(error) = kernel.record_llm_call(execution_id, call).await {
        // The execution ended while the call ran: its terminal event stays the last one.
        warn!(execution_id = %execution_id, provider = %provider, model = %model,
              outcome = %outcome, error = %error, "LLM gateway: the model call could not be recorded");
    }
}
