//! The process's only tracing subscriber: an `EnvFilter` built from the configured filter
//! (`RUST_LOG` when set, else `--log-level`; read by [`crate::config`]), writing human-readable
//! text or one JSON object per line to stderr. `main` installs it once; tests may call
//! [`init`] too, since it uses `try_init` and leaves an existing subscriber in place. Text logs
//! are coloured only on a terminal and never with `NO_COLOR` set (read here, at install time).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

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
}

/// Installs the global subscriber. Returns `Ok(false)` when one was already installed (tests).
pub fn init(filter: &str, format: LogFormat) -> Result<bool, TelemetryError> {
    let env_filter = EnvFilter::try_new(filter)
        .map_err(|error| TelemetryError::InvalidFilter {
            filter: filter.to_owned(),
            message: error.to_string(),
        })?
        .add_directive(SILENCE_URL_PARAMETER_VALUES.parse().map_err(|error| {
            TelemetryError::InvalidFilter {
                filter: SILENCE_URL_PARAMETER_VALUES.to_owned(),
                message: format!("{error}"),
            }
        })?);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_span_events(FmtSpan::NONE);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(use_color(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    Ok(installed.is_ok())
}

/// Whether text logs are coloured: only on a terminal, and never when `NO_COLOR` is set to a
/// non-empty value (<https://no-color.org>). Clap's help and errors honour `NO_COLOR` too.
pub fn use_color(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::use_color;

    #[test]
    fn no_color_turns_colour_off_and_pipes_never_get_it() {
        assert!(use_color(true, None));
        assert!(use_color(true, Some(OsStr::new(""))));
        assert!(!use_color(true, Some(OsStr::new("1"))));
        assert!(!use_color(false, None));
    }
}
