//! Flags of the client commands that talk to a running kernel (`keel executions`, `keel
//! runner`, `keel bench`, …), with the SDK's variable names as fallbacks.

use std::fmt;

use clap::Args;

use super::{OutputFormat, values};

/// Kernel URL of the client commands when neither `--url`, `KEEL_URL` nor `REBUNO_URL` is set.
pub const DEFAULT_KERNEL_URL: &str = "http://127.0.0.1:8080";

/// Flags shared by the client commands that talk to a running kernel. The SDK's variables
/// `REBUNO_URL` and `REBUNO_API_KEY` are read when `KEEL_URL` / `KEEL_TOKEN` are unset, so a shell
/// set up for rebuno agents needs nothing more; read them through [`ClientConfig::url`] and
/// [`ClientConfig::token`].
#[derive(Clone, Args)]
pub struct ClientConfig {
    /// Base URL of the kernel [env: KEEL_URL, else REBUNO_URL] [default: http://127.0.0.1:8080].
    #[arg(long, env = "KEEL_URL", value_name = "URL", hide_env = true)]
    pub url: Option<String>,

    /// Bearer token sent with every request [env: KEEL_TOKEN, else REBUNO_API_KEY] [default:
    /// none].
    #[arg(
        long,
        env = "KEEL_TOKEN",
        value_name = "TOKEN",
        hide_env = true,
        hide_env_values = true
    )]
    pub token: Option<String>,

    /// `REBUNO_URL`, the SDK's name of the kernel URL; used when `--url`/`KEEL_URL` are unset.
    #[arg(long = "rebuno-url", env = "REBUNO_URL", hide = true)]
    pub rebuno_url: Option<String>,

    /// `REBUNO_API_KEY`, the SDK's name of the token; used when `--token`/`KEEL_TOKEN` are unset.
    #[arg(
        long = "rebuno-api-key",
        env = "REBUNO_API_KEY",
        hide = true,
        hide_env_values = true
    )]
    pub rebuno_api_key: Option<String>,

    /// Output format.
    #[arg(
        long,
        env = "KEEL_OUTPUT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub output: OutputFormat,

    /// `RUST_LOG`, read here so that no other module reads the environment.
    #[arg(long = "rust-log", env = "RUST_LOG", hide = true)]
    pub rust_log: Option<String>,
}

impl ClientConfig {
    /// Returns a configuration for `url` with `token` and text output, nothing from the
    /// environment (tests and `keel bench` build clients this way).
    pub fn new(url: impl Into<String>, token: Option<String>) -> Self {
        Self {
            url: Some(url.into()),
            token,
            rebuno_url: None,
            rebuno_api_key: None,
            output: OutputFormat::Text,
            rust_log: None,
        }
    }

    /// Returns the kernel URL: `--url`/`KEEL_URL`, else `REBUNO_URL`, else
    /// [`DEFAULT_KERNEL_URL`] (empty values count as unset).
    pub fn url(&self) -> &str {
        first_set([&self.url, &self.rebuno_url])
            .unwrap_or(DEFAULT_KERNEL_URL)
            .trim()
    }

    /// Returns the bearer token: `--token`/`KEEL_TOKEN`, else `REBUNO_API_KEY`, else none.
    pub fn token(&self) -> Option<&str> {
        first_set([&self.token, &self.rebuno_api_key])
    }

    /// Returns the log filter of client commands: `RUST_LOG` when set, else warnings only.
    pub fn log_filter(&self) -> &str {
        match &self.rust_log {
            Some(filter) if !filter.trim().is_empty() => filter,
            _ => "warn",
        }
    }
}

/// Returns the first of `values` that is set and not blank.
fn first_set<const N: usize>(values: [&Option<String>; N]) -> Option<&str> {
    values
        .into_iter()
        .filter_map(Option::as_deref)
        .find(|value| !value.trim().is_empty())
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url())
            .field("token", &self.token().map(|_| values::REDACTED))
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}
