//! The process's only tracing subscriber: an `EnvFilter` built from the configured filter
//! (`RUST_LOG` when set, else `--log-level`; read by [`crate::config`]), writing human-readable
//! text or one JSON object per line to stderr. `main` installs it once; tests may call
//! [`init`] too, since it uses `try_init` and leaves an existing subscriber in place. Text logs
//! are coloured only on a terminal and never with `NO_COLOR` set (read here, at install time).

mod escape;

use std::io::IsTerminal;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::LogFormat;

/// sqlx warns about an unrecognized `--db-url` parameter with its value, which may be a
/// secret (`sslpassword=...`): that target is kept to errors whatever the filter says
/// (`keel::app` warns about such parameters by name only).
const SILENCE_URL_PARAMETER_VALUES: &str = "sqlx_postgres::options::parse=error";

/// Why the subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The filter directives do not parse.
    #[error("invalid log filter {filter:?}: {message}")]
    InvalidFilter {
        /// The directives given.
        filter: String,
        /// The parser's complaint.
        message: String,
    },
    /// The trace exporter could not be built.
    #[error("cannot export traces: {0}")]
    Exporter(String),
}

/// Installs the global subscriber. Returns `Ok(false)` when one was already installed (tests).
pub fn init(filter: &str, format: LogFormat) -> Result<bool, TelemetryError> {
    init_with_traces(filter, format, None).map(|(installed, _)| installed)
}

/// The trace pipeline of a kernel; [`Traces::shutdown`] exports what is still buffered.
#[derive(Default)]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Flushes and stops the exporter (at most a few seconds; errors are logged).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown_with_timeout(Duration::from_secs(5))
        {
            tracing::warn!(error = %error, "trace exporter did not shut down cleanly");
        }
    }
}

/// Installs the global subscriber and, with `otel_endpoint` (an OTLP/HTTP base URL), exports
/// the spans at its level and above as OpenTelemetry traces (protobuf over HTTP, batched) and
/// makes W3C trace context the propagation format. Without an endpoint no exporter exists.
pub fn init_with_traces(
    filter: &str,
    format: LogFormat,
    otel_endpoint: Option<&str>,
) -> Result<(bool, Traces), TelemetryError> {
    crate::install_tls_provider();
    let provider = otel_endpoint.map(tracer_provider).transpose()?;
    let installed = subscriber(filter, format, provider.as_ref())?
        .try_init()
        .is_ok();
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    }
    Ok((installed, Traces { provider }))
}

/// Builds the subscriber: log lines filtered by `filter` and, with a provider, spans exported
/// through it. Each layer has a filter of its own: the log lines never see the actors' trace
/// spans (target [`keel_actors::trace::TARGET`]), so without a provider nothing enables them
/// and each costs one cached callsite check; the export never sees the actors' logging spans
/// ([`keel_actors::trace::LOG_TARGET`]), which last as long as an actor. Without a provider
/// the export layer is left out entirely (an absent `Option` layer would enable everything).
pub fn subscriber(
    filter: &str,
    format: LogFormat,
    provider: Option<&SdkTracerProvider>,
) -> Result<tracing::Dispatch, TelemetryError> {
    let fmt_filter = env_filter(filter, &[keel_actors::trace::TARGET])?;
    let fmt_layer = match format {
        LogFormat::Text => text_layer(
            std::io::stderr,
            use_color(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ),
        )
        .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_span_events(FmtSpan::NONE)
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    }
    .with_filter(fmt_filter);
    let logs = tracing_subscriber::registry().with(fmt_layer);
    let Some(provider) = provider else {
        return Ok(tracing::Dispatch::new(logs));
    };
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("keel"))
        .with_filter(env_filter(filter, &NOT_EXPORTED)?);
    Ok(tracing::Dispatch::new(logs.with(otel_layer)))
}

/// The text log layer writing to `writer`: field values with their control characters escaped
/// (`escape.rs`), coloured when `ansi`.
fn text_layer<S, W>(writer: W, ansi: bool) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_span_events(FmtSpan::NONE)
        .with_ansi(ansi)
        .fmt_fields(escape::fields())
}

/// Targets whose spans are never exported: the actors' logging spans and ractor's `Actor`
/// span of every actor, which last as long as the actor and say nothing about a request.
const NOT_EXPORTED: [&str; 2] = [keel_actors::trace::LOG_TARGET, "ractor"];

/// `filter`, with sqlx's URL warnings kept to errors and the `excluded` targets off.
fn env_filter(filter: &str, excluded: &[&str]) -> Result<EnvFilter, TelemetryError> {
    let invalid = |filter: &str, error: &dyn std::fmt::Display| TelemetryError::InvalidFilter {
        filter: filter.to_owned(),
        message: error.to_string(),
    };
    let mut env_filter = EnvFilter::try_new(filter)
        .map_err(|error| invalid(filter, &error))?
        .add_directive(
            SILENCE_URL_PARAMETER_VALUES
                .parse()
                .map_err(|error| invalid(SILENCE_URL_PARAMETER_VALUES, &error))?,
        );
    for target in excluded {
        let off = format!("{target}=off");
        env_filter = env_filter.add_directive(off.parse().map_err(|error| invalid(&off, &error))?);
    }
    Ok(env_filter)
}

/// Builds the batched OTLP/HTTP exporter of `endpoint` (`/v1/traces` appended).
fn tracer_provider(endpoint: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .build()
        .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("keel").build())
        .build())
}

/// Whether text logs are coloured: only on a terminal, and never when `NO_COLOR` is set to a
/// non-empty value (<https://no-color.org>). Clap's help and errors honour `NO_COLOR` too.
pub fn use_color(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::{LogFormat, subscriber, text_layer, use_color};

    /// A log writer into shared memory.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn ids_with_line_feeds_or_terminal_escapes_cannot_forge_a_text_log_line() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let captured = Captured::default();
        let writer = captured.clone();
        let layer = text_layer(move || writer.clone(), false);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let forged = "a\nWARN keel: forged line\r\u{1b}[2J\u{7}";
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("request", request.id = %forged);
            let _entered = span.enter();
            tracing::warn!(agent.id = %forged, tool.id = forged, "refused {}", forged);
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "one line: {text:?}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(
            text.contains(r"agent.id=a\nWARN keel: forged line\r\u{1b}[2J\u{7}"),
            "{text:?}"
        );
        assert!(
            text.contains(r"request.id=a\n"),
            "span fields too: {text:?}"
        );
        assert!(
            text.contains(r"refused a\nWARN"),
            "the message too: {text:?}"
        );
        assert!(text.contains("WARN"), "{text:?}");
    }

    #[test]
    fn without_an_exporter_the_actors_trace_spans_are_never_built() {
        let plain = subscriber("info", LogFormat::Text, None).unwrap();
        tracing::dispatcher::with_default(&plain, || {
            let span = tracing::info_span!(target: keel_actors::trace::TARGET, "intent", n = 1);
            assert!(span.is_disabled(), "no exporter: the span is not built");
            assert!(!tracing::enabled!(
                target: keel_actors::trace::TARGET,
                tracing::Level::INFO
            ));
            let logged = tracing::info_span!("request");
            assert!(!logged.is_disabled(), "log spans are unaffected");
        });
        let provider = SdkTracerProvider::builder().build();
        let exported = subscriber("info", LogFormat::Text, Some(&provider)).unwrap();
        tracing::dispatcher::with_default(&exported, || {
            let span = tracing::info_span!(target: keel_actors::trace::TARGET, "intent", n = 2);
            assert!(!span.is_disabled(), "with an exporter the span is built");
            let quiet = tracing::debug_span!(target: keel_actors::trace::TARGET, "detail");
            assert!(
                quiet.is_disabled(),
                "below the configured level nothing is built"
            );
        });
    }

    #[test]
    fn no_color_turns_colour_off_and_pipes_never_get_it() {
        assert!(use_color(true, None));
        assert!(use_color(true, Some(OsStr::new(""))));
        assert!(!use_color(true, Some(OsStr::new("1"))));
        assert!(!use_color(false, None));
    }
}
