//! Where traces go: `--otel-endpoint` (`KEEL_OTEL_ENDPOINT`), else the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`; nothing is exported when neither is set.

use clap::Args;

/// Trace export flags of `dev` and `serve`.
#[derive(Clone, Debug, Default, Args)]
pub struct OtelArgs {
    /// OTLP/HTTP (protobuf) base URL traces are exported to, e.g. `http://127.0.0.1:4318`
    /// (`/v1/traces` is appended) [env: KEEL_OTEL_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT]
    /// [default: none, no traces exported].
    #[arg(
        long = "otel-endpoint",
        env = "KEEL_OTEL_ENDPOINT",
        value_name = "URL",
        hide_env = true
    )]
    pub endpoint: Option<String>,

    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, the OpenTelemetry SDKs' standard variable.
    #[arg(
        long = "otel-exporter-otlp-endpoint",
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        hide = true
    )]
    pub standard_endpoint: Option<String>,
}

impl OtelArgs {
    /// Returns the endpoint in force, if any (blank values count as unset).
    pub fn endpoint(&self) -> Option<&str> {
        [&self.endpoint, &self.standard_endpoint]
            .into_iter()
            .filter_map(Option::as_deref)
            .map(str::trim)
            .find(|value| !value.is_empty())
    }

    /// Checks the endpoint: an `http://` URL (the exporter speaks OTLP/HTTP without TLS; run a
    /// collector next to the kernel for anything further).
    pub fn validate(&self) -> Result<Option<String>, String> {
        match self.endpoint() {
            None => Ok(None),
            Some(url) if url.starts_with("http://") && url.len() > "http://".len() => {
                Ok(Some(url.trim_end_matches('/').to_owned()))
            }
            Some(url) => Err(format!(
                "--otel-endpoint {url:?} must be an http:// URL (OTLP/HTTP without TLS: run a collector beside the kernel)"
            )),
        }
    }
}
