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
    /// The call's reservation against its execution's budget, released when it is recorded.
    pub(super) reservation: Option<u64>,
    /// The call's trace span, ended when the call is recorded (disabled when traces are off).
    pub(super) span: tracing::Span,
    /// The model the answer names (`gen_ai.response.model`).
    pub(super) response_model: Option<String>,
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
        recorded_answer(stream, answer)
    }

    /// Hands the call to `backup`'s `model` (its fallback): recorded on the call, priced and
    /// counted against `backup`'s limits.
    pub(super) fn fall_back(&mut self, backup: &Provider, model: &str) {
        self.provider = backup.clone();
        if let Some(call) = self.call.as_mut() {
            call.fallback = Some(format!("{}/{model}", backup.name));
        }
    }

    /// Notes the model an answer (or a stream event) names.
    pub(super) fn answered_by(&mut self, answer: &Value) {
        if self.span.is_none() || self.response_model.is_some() {
            return;
        }
        self.response_model = answer
            .get("model")
            .or_else(|| answer.pointer("/message/model"))
            .and_then(Value::as_str)
            .map(str::to_owned);
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
            // A fallback's answer is priced as the model that gave it.
            let answered = call
                .fallback
                .as_deref()
                .and_then(|fallback| fallback.split_once('/'))
                .map_or(call.model.as_str(), |(_, model)| model);
            call.cost = usage::cost(Some(&usage), self.provider.price(answered));
        }
        super::span::close(
            &self.span,
            outcome,
            self.usage.as_ref(),
            self.response_model.as_deref(),
            call.fallback.as_deref(),
        );
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
            record(
                &self.kernel,
                &self.execution_id,
                call,
                self.reservation.take(),
            )
            .await;
        }
    }

    /// Ends a call that never reached the provider (refused by its limits): nothing is
    /// recorded, its reservation is released.
    pub(super) async fn abandon(&mut self) {
        self.call = None;
        self.span.record("keel.llm.outcome", "refused");
        if let Some(reservation) = self.reservation.take() {
            release(&self.kernel, &self.execution_id, reservation).await;
        }
    }
}

/// A recorded answer as the caller gets it: a stream's events as `text/event-stream`, else
/// the JSON body.
pub(super) fn recorded_answer(stream: bool, answer: Value) -> Response {
    match answer {
        Value::String(events) if stream => {
            ([(header::CONTENT_TYPE, "text/event-stream")], events).into_response()
        }
        answer => axum::Json(answer).into_response(),
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let call = self.take("client_disconnected", None, None);
        let reservation = self.reservation.take();
        if call.is_none() && reservation.is_none() {
            return;
        }
        let kernel = self.kernel.clone();
        let execution_id = self.execution_id.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match call {
                    Some(call) => record(&kernel, &execution_id, call, reservation).await,
                    None => {
                        if let Some(reservation) = reservation {
                            release(&kernel, &execution_id, reservation).await;
                        }
                    }
                }
            });
        }
    }
}

async fn release(kernel: &Kernel, execution_id: &ExecutionId, reservation: u64) {
    if let Err(error) = kernel
        .record_llm_call(execution_id, None, Some(reservation))
        .await
    {
        warn!(execution_id = %execution_id, error = %error,
              "LLM gateway: releasing a model call's reservation failed");
    }
}

async fn record(
    kernel: &Kernel,
    execution_id: &ExecutionId,
    call: LlmCall,
    reservation: Option<u64>,
) {
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
    if let Err(error) = kernel
        .record_llm_call(execution_id, Some(call), reservation)
        .await
    {
        // The execution ended while the call ran: its terminal event stays the last one.
        warn!(execution_id = %execution_id, provider = %provider, model = %model,
              outcome = %outcome, error = %error, "LLM gateway: the model call could not be recorded");
    }
}
