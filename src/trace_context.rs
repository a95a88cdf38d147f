//! The OpenTelemetry side of the actors' trace port ([`keel_actors::trace::TraceContext`]):
//! reads the W3C `traceparent` of a `tracing` span and makes a span the child of one, through
//! the tracing-opentelemetry layer that `telemetry` installs. Given to the kernel only when an
//! OTLP endpoint is configured.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// W3C trace context header (and push field).
pub const TRACEPARENT: &str = "traceparent";

/// W3C trace context for the actors, through the OpenTelemetry layer.
#[derive(Debug, Default)]
pub struct OtelTraceContext;

impl keel_actors::trace::TraceContext for OtelTraceContext {
    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = Carrier(None);
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier.0
    }

    fn set_parent(&self, span: &tracing::Span, traceparent: &str) {
        let parent = TraceContextPropagator::new().extract(&Carrier(Some(traceparent.to_owned())));
        if parent.span().span_context().is_valid() {
            // Fails only for a span already started or not seen by the layer: it stays a root.
            let _ = span.set_parent(parent);
        }
    }
}

/// Holds the one `traceparent` value being read or written.
struct Carrier(Option<String>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT).then_some(self.0.as_deref()).flatten()
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}
