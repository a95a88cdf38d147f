//! Trace spans of the actor tree (docs/tracing.md). Actors open ordinary `tracing` spans with
//! target [`TARGET`]; the `keel` crate exports them through its OpenTelemetry layer when an
//! OTLP endpoint is configured, and filters that target out otherwise, so a disabled span costs
//! one cached callsite check and no allocation.
//!
//! An execution's trace outlives the request that created it: its W3C `traceparent` is recorded
//! in `execution.created` and every later span of the execution is made a child of it through
//! [`TraceContext`], the port the `keel` crate implements with the OpenTelemetry API (this crate
//! does not depend on it).

/// Target of every span the actors open for traces.
pub const TARGET: &str = "keel::trace";

/// Target of the spans that only give log lines their context (an execution actor's
/// `execution` span, open as long as the actor): never exported as traces.
pub const LOG_TARGET: &str = "keel::log";

/// Translates between `tracing` spans and W3C trace context. Present in the kernel's
/// configuration only when traces are exported.
pub trait TraceContext: Send + Sync {
    /// Returns the W3C `traceparent` of `span`, or `None` when it has no valid trace context.
    fn traceparent(&self, span: &tracing::Span) -> Option<String>;

    /// Makes `span`, not yet entered, a child of the span `traceparent` names (ignored when it
    /// does not parse).
    fn set_parent(&self, span: &tracing::Span, traceparent: &str);
}

/// Adds the additive `traceparent` field to a push's `data` (ignored by the rebuno SDK).
pub fn stamp(push: &mut crate::push::Push, traceparent: Option<&str>) {
    if let (Some(traceparent), Some(data)) = (traceparent, push.data.as_object_mut()) {
        data.insert(
            "traceparent".to_owned(),
            serde_json::Value::String(traceparent.to_owned()),
        );
    }
}
