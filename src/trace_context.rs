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

#[cfg(test)]
mod tests {
    use keel_actors::trace::TraceContext as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::OtelTraceContext;
    use crate::config::LogFormat;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_span_continues_a_recorded_traceparent_and_ignores_a_malformed_one() {
        let provider = SdkTracerProvider::builder().build();
        let dispatch = crate::telemetry::subscriber("info", LogFormat::Text, Some(&provider))
            .expect("subscriber");
        tracing::dispatcher::with_default(&dispatch, || {
            let traces = OtelTraceContext;
            let child = tracing::info_span!(target: keel_actors::trace::TARGET, "child");
            traces.set_parent(&child, PARENT);
            let continued = traces.traceparent(&child).expect("a context");
            assert!(
                continued.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
                "{continued}"
            );
            assert!(continued.ends_with("-01"), "{continued}");
            assert!(!continued.contains("b7ad6b7169203331"), "a span of its own");

            for malformed in [
                "",
                "garbage",
                "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            ] {
                let root = tracing::info_span!(target: keel_actors::trace::TARGET, "root");
                traces.set_parent(&root, malformed);
                let own = traces.traceparent(&root).expect("a context");
                assert!(
                    !own.contains("0af7651916cd43dd8448eb211c80319c"),
                    "{malformed:?}: {own}"
                );
            }

            let untraced = tracing::Span::none();
            assert_eq!(traces.traceparent(&untraced), None);
        });
    }
}
