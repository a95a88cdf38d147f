//! The trace span of one model call (docs/tracing.md): a child of its execution's trace, named
//! and attributed after the OpenTelemetry GenAI conventions (`chat gpt-4o`,
//! `gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`, …). It ends
//! when the call is recorded. Nothing is built when traces are off.

use keel_actors::trace::{TARGET, TraceContext as _};
use tracing::Span;
use tracing::field::Empty;

use super::Route;
use crate::gateway::Format;
use crate::gateway::usage::Usage;

/// Opens the span of a call of `model` through `provider` for execution `execution_id`, under
/// the execution's `traceparent`.
pub(super) fn open(
    route: Route,
    provider: &str,
    model: &str,
    execution_id: &str,
    traceparent: Option<&str>,
) -> Span {
    if !tracing::enabled!(target: TARGET, tracing::Level::INFO) {
        return Span::none();
    }
    let operation = match route {
        Route::Embeddings => "embeddings",
        Route::Chat | Route::Messages => "chat",
    };
    let system = match route.format() {
        Format::Openai => "openai",
        Format::Anthropic => "anthropic",
    };
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "model call",
        otel.name = %format_args!("{operation} {model}"),
        otel.kind = "client",
        gen_ai.operation.name = operation,
        gen_ai.system = system,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        keel.llm.provider = provider,
        keel.llm.outcome = Empty,
        keel.llm.fallback = Empty,
        execution.id = execution_id,
        error.type = Empty,
    );
    if let Some(traceparent) = traceparent {
        crate::trace_context::OtelTraceContext.set_parent(&span, traceparent);
    }
    span
}

/// Records how the call ended on its span.
pub(super) fn close(
    span: &Span,
    outcome: &str,
    usage: Option<&Usage>,
    response_model: Option<&str>,
    fallback: Option<&str>,
) {
    if span.is_none() {
        return;
    }
    span.record("keel.llm.outcome", outcome);
    if outcome != "ok" {
        span.record("error.type", outcome);
    }
    if let Some(model) = response_model {
        span.record("gen_ai.response.model", model);
    }
    if let Some(fallback) = fallback {
        span.record("keel.llm.fallback", fallback);
    }
    if let Some(usage) = usage {
        if let Some(input) = usage.input {
            span.record("gen_ai.usage.input_tokens", input);
        }
        if let Some(output) = usage.output {
            span.record("gen_ai.usage.output_tokens", output);
        }
    }
}
