//! Configuration of the `keel` binary: the flags of `keel dev` and `keel serve` ([`Config`]) and
//! of the client commands ([`ClientConfig`]), each with a `KEEL_*` environment equivalent.
//!
//! Layers, lowest first: built-in defaults → environment (`KEEL_*`) → command-line flags. `dev`
//! and `serve` share one [`Config`]; the few defaults that differ (`--bind`,
//! `--log-format`) are set per subcommand where the command tree is built (`cli::args`), so
//! `--help` prints the right one. [`Config::validate`] turns the raw values into typed
//! [`Settings`] once; nothing else in the binary reads the environment.

mod bytes;
mod client;
mod debug;
mod dump;
mod durations;
mod exposure;
mod otel;
pub(crate) mod redact;
mod validate;
mod values;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, ValueEnum};
use serde::Serialize;

pub use bytes::{format_byte_size, parse_byte_size};
pub use client::{ClientConfig, DEFAULT_KERNEL_URL};
pub use durations::{format_duration, parse_duration};
pub use exposure::{ExposureArgs, ExposureSettings};
pub use otel::OtelArgs;
pub use validate::{ClusterSettings, ConfigError, Settings};
pub use values::{DbUrl, Secret};

/// Which command runs the kernel; decides the defaults that differ between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// `keel dev`: local, permissive policy without `--policy`, no auth without a token.
    #[default]
    Dev,
    /// `keel serve`: production defaults, secure-default policy without `--policy`.
    Serve,
}

impl Mode {
    /// Returns the subcommand name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dev => "dev",
            Self::Serve => "serve",
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output format of client commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    /// Human-readable text.
    Text,
    /// JSON (one document, or one object per line for event listings).
    Json,
}

/// Flags of `keel dev` and `keel serve`. Defaults shown are `serve`'s; `dev` overrides a few.
#[derive(Clone, Args)]
pub struct Config {
    /// Which command this configuration is for (set by the command, not a flag).
    #[arg(skip)]
    pub mode: Mode,

    /// IP address to listen on.
    #[arg(long, env = "KEEL_BIND", value_name = "IP", default_value = "0.0.0.0")]
    pub bind: String,

    /// TCP port to listen on (0 picks a free port; the chosen address is logged).
    #[arg(long, env = "KEEL_PORT", value_name = "PORT", default_value = "8080")]
    pub port: u16,

    /// Directory of the embedded SQLite database (`<data-dir>/keel.db`); created if missing.
    #[arg(
        long,
        env = "KEEL_DATA_DIR",
        value_name = "DIR",
        default_value = "./.keel"
    )]
    pub data_dir: PathBuf,

    // Help text for `--help`: its <placeholders> are not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// Database URL: `sqlite://PATH` or `postgres://USER:PASSWORD@HOST/DB`
    /// [default: sqlite://<data-dir>/keel.db].
    #[arg(long, env = "KEEL_DB_URL", value_name = "URL", hide_env_values = true)]
    pub db_url: Option<String>,

    /// Read connections of the database pool.
    #[arg(long, env = "KEEL_DB_MAX_CONNS", value_name = "N", default_value = "4")]
    pub db_max_conns: u32,

    /// Run as one of several kernels sharing a PostgreSQL database (docs/deploying.md,
    /// "Running several kernels"); needs --node-id and --advertise-url. Every kernel of a
    /// database runs in the same mode: the other mode is refused at start.
    #[arg(long, env = "KEEL_CLUSTER", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub cluster: bool,

    /// This kernel's id in the cluster: unique among the kernels, stable across its restarts
    /// (e.g. the host or pod name; letters, digits, `.`, `_`, `-`).
    #[arg(long, env = "KEEL_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,

    /// URL at which the other kernels of the cluster reach this one (e.g.
    /// `http://10.0.0.5:8080`).
    #[arg(long, env = "KEEL_ADVERTISE_URL", value_name = "URL")]
    pub advertise_url: Option<String>,

    /// Partitions executions are spread over in cluster mode; fixed by the first cluster
    /// kernel on a database, and every later kernel must be started with the same count.
    #[arg(long, env = "KEEL_PARTITIONS", value_name = "N", default_value = "64")]
    pub partitions: u32,

    /// Cluster mode: no PostgreSQL LISTEN/NOTIFY wake-ups between kernels; feed readers,
    /// webhooks and partition hand-overs then rely on polling alone (every 250 ms and 1 s).
    #[arg(long, env = "KEEL_NO_NOTIFY", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub no_notify: bool,

    /// Policy file or directory of YAML files [default: `dev` allows every tool, `serve`
    /// applies the secure default].
    #[arg(long, env = "KEEL_POLICY", value_name = "PATH")]
    pub policy: Option<PathBuf>,

    /// Webhook subscriptions file (YAML, reloaded when it changes; docs/events.md).
    #[arg(long, env = "KEEL_WEBHOOKS", value_name = "PATH")]
    pub webhooks: Option<PathBuf>,

    /// LLM gateway configuration file (YAML: providers, their base URLs and keys; docs/llm.md)
    /// [default: none, the gateway is off].
    #[arg(long, env = "KEEL_LLM_CONFIG", value_name = "PATH")]
    pub llm_config: Option<PathBuf>,

    /// Cassette of recorded model calls (`keel llm export EXECUTION > FILE`): the LLM gateway
    /// answers from it instead of calling any provider, and refuses any call it does not hold.
    #[arg(long, env = "KEEL_LLM_CASSETTE", value_name = "PATH")]
    pub llm_cassette: Option<PathBuf>,

    /// Token every request except health and readiness must present as
    /// `Authorization: Bearer <token>` [default: none, no authentication].
    #[arg(
        long,
        env = "KEEL_BEARER_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub bearer_token: Option<String>,

    /// `REBUNO_BEARER_TOKEN`, rebuno's name of the server token: an alias used when
    /// `--bearer-token`/`KEEL_BEARER_TOKEN` are unset.
    #[arg(
        long = "rebuno-bearer-token",
        env = "REBUNO_BEARER_TOKEN",
        hide = true,
        hide_env_values = true
    )]
    pub rebuno_bearer_token: Option<String>,

    /// Refuse to start unless `--bearer-token`, `--policy` and `--db-url` are all set.
    #[arg(long, env = "KEEL_PRODUCTION", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub production: bool,

    /// Allowed CORS origins, comma-separated; `*` allows any [default: none: only the
    /// kernel's own origin (its console) may call it from a browser].
    #[arg(
        long,
        env = "KEEL_CORS_ORIGINS",
        value_name = "ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,

    /// Default deadline of a tool step (policy rules may set their own).
    #[arg(long, env = "KEEL_STEP_TIMEOUT", value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub step_timeout: Duration,

    /// Maximum lifetime of an execution, from its creation.
    #[arg(long, env = "KEEL_EXECUTION_TIMEOUT", value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub execution_timeout: Duration,

    /// Grace period of a disconnected agent: its sessions wait this long for it to reconnect
    /// before its running executions are reset and reassigned (0 = at once; tests only).
    #[arg(long, env = "KEEL_AGENT_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub agent_timeout: Duration,

    /// Grace period of a disconnected runner: a job it holds is re-queued (or failed when no
    /// attempt is left) only if it has not reconnected within this time.
    #[arg(long, env = "KEEL_RUNNER_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub runner_timeout: Duration,

    /// Delay before the second attempt of a retried remote step (doubles per attempt).
    #[arg(long, env = "KEEL_RETRY_BASE_DELAY", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub retry_base_delay: Duration,

    /// Cap of any retry delay.
    #[arg(long, env = "KEEL_RETRY_MAX_DELAY", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub retry_max_delay: Duration,

    /// A `running` execution with no intent for this long is reported as stalled (warn log,
    /// `keel_stalls_total`, one `execution.stalled` event); 0 turns the check off.
    #[arg(long, env = "KEEL_STALL_AFTER", value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub stall_after: Duration,

    /// A remote job dispatched but not started by a runner within this time is reported as
    /// stalled; 0 turns the check off.
    #[arg(long, env = "KEEL_JOB_START_TIMEOUT", value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub job_start_timeout: Duration,

    /// An execution that only waits (pending with no consumer taking it, or blocked on a signal
    /// or an approval with no tool step in flight) for this long gives its actor back: it is
    /// then a row in the store plus a wake-up entry, rebuilt by the next message concerning it.
    #[arg(long, env = "KEEL_PASSIVATE_AFTER", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub passivate_after: Duration,

    /// Terminal executions not updated for this long are deleted (0 keeps them forever).
    #[arg(long, env = "KEEL_RETENTION_PERIOD", value_name = "DURATION", default_value = "168h", value_parser = parse_duration)]
    pub retention_period: Duration,

    /// How often the retention clean-up runs.
    #[arg(long, env = "KEEL_CLEANUP_INTERVAL", value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub cleanup_interval: Duration,

    /// Deadline of the whole graceful shutdown (drain HTTP, stop the actor tree).
    #[arg(long, env = "KEEL_SHUTDOWN_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Largest request body of ordinary routes (`512KiB`, `1MiB`, bytes without a unit).
    #[arg(long, env = "KEEL_BODY_LIMIT", value_name = "SIZE", default_value = "1MiB", value_parser = parse_byte_size)]
    pub body_limit: usize,

    /// Largest request body of intents, step results and runner results.
    #[arg(long, env = "KEEL_LARGE_BODY_LIMIT", value_name = "SIZE", default_value = "16MiB", value_parser = parse_byte_size)]
    pub large_body_limit: usize,

    /// Most `pending` executions of one agent id; a creation beyond it is answered 429 with
    /// `Retry-After` (0: unbounded).
    #[arg(
        long,
        env = "KEEL_MAX_PENDING_PER_AGENT",
        value_name = "N",
        default_value_t = 0
    )]
    pub max_pending_per_agent: u64,

    /// Refuse creations for an agent id that no policy file names, no consumer has connected
    /// as since the kernel started, and no stored execution has.
    #[arg(long, env = "KEEL_STRICT_AGENTS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub strict_agents: bool,

    /// Most `pending` executions kernel-wide; a creation beyond it is answered 429 with
    /// `Retry-After` (0: unbounded).
    #[arg(long, env = "KEEL_MAX_PENDING", value_name = "N", default_value_t = 0)]
    pub max_pending: u64,

    /// Most distinct agent and tool ids (and runner ids) shown as label values in `/metrics`;
    /// ids seen past it are counted under the label value `other`.
    #[arg(long, env = "KEEL_METRICS_MAX_IDS", value_name = "N", default_value_t = keel_actors::metrics::labels::DEFAULT_MAX_IDS)]
    pub metrics_max_ids: usize,

    /// Most labels one execution may be created with.
    #[arg(long, env = "KEEL_MAX_LABELS", value_name = "N", default_value_t = crate::http::text::DEFAULT_MAX_LABELS)]
    pub max_labels: usize,

    /// Largest label value (`1KiB`, bytes without a unit).
    #[arg(long, env = "KEEL_MAX_LABEL_VALUE_BYTES", value_name = "SIZE", default_value = "1KiB", value_parser = parse_byte_size)]
    pub max_label_value_bytes: usize,

    /// `Retry-After` of a creation refused because a backlog is full (whole seconds, at least 1).
    #[arg(long, env = "KEEL_BACKLOG_RETRY_AFTER", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub backlog_retry_after: Duration,

    /// A request's head (request line and headers) must arrive within this time of its first
    /// byte, or the connection is closed (slow clients cannot hold connections).
    #[arg(long, env = "KEEL_HEADER_READ_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,

    /// A request's body must arrive within this time, or the request fails with 400.
    #[arg(long, env = "KEEL_BODY_READ_TIMEOUT", value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,

    /// A connection waiting this long for its next request is closed (SSE streams are never
    /// idle: they are answering a request).
    #[arg(long, env = "KEEL_IDLE_TIMEOUT", value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Log filter: a level (`trace`, `debug`, `info`, `warn`, `error`) or `tracing` directives
    /// such as `info,keel=debug`; `RUST_LOG`, when set, wins.
    #[arg(
        long,
        env = "KEEL_LOG_LEVEL",
        value_name = "FILTER",
        default_value = "info"
    )]
    pub log_level: String,

    /// Log format.
    #[arg(
        long,
        env = "KEEL_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "json"
    )]
    pub log_format: LogFormat,

    /// Print the effective configuration (secrets redacted) as JSON and exit.
    #[arg(long, env = "KEEL_DUMP_CONFIG", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub dump_config: bool,

    /// `RUST_LOG`, read here so that no other module reads the environment.
    #[arg(long = "rust-log", env = "RUST_LOG", hide = true)]
    pub rust_log: Option<String>,

    /// Trace export.
    #[command(flatten)]
    pub otel: OtelArgs,

    /// Host names, unauthenticated listening, connection limits.
    #[command(flatten)]
    pub exposure: ExposureArgs,
}

impl Config {
    /// Returns this configuration marked as being for `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Returns the configuration of a throwaway `keel dev` kernel on 127.0.0.1 with a free port
    /// and its database in `data_dir` (`keel bench --embedded`). Timeouts and limits follow the
    /// `KEEL_*` variables as usual; address, database, token, policy and production mode are
    /// set here, so that variables meant for another kernel do not leak in.
    pub fn embedded(data_dir: &Path) -> Result<Self, clap::Error> {
        /// A parser for the flags alone, to get their defaults and the environment.
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            config: Config,
        }
        let mut config = Flags::try_parse_from(["keel-embedded"])?.config;
        config.mode = Mode::Dev;
        config.bind = "127.0.0.1".to_owned();
        config.port = 0;
        config.data_dir = data_dir.to_path_buf();
        config.db_url = None;
        config.cluster = false;
        config.node_id = None;
        config.advertise_url = None;
        config.policy = None;
        config.bearer_token = None;
        config.rebuno_bearer_token = None;
        config.production = false;
        config.dump_config = false;
        config.cors_origins = Vec::new();
        config.log_format = LogFormat::Text;
        config.otel = OtelArgs::default();
        Ok(config)
    }

    /// Returns the database URL used: `--db-url`, else the SQLite file in the data directory.
    pub fn effective_db_url(&self) -> String {
        match &self.db_url {
            Some(url) if !url.trim().is_empty() => url.trim().to_owned(),
            _ => format!("sqlite://{}", self.data_dir.join("keel.db").display()),
        }
    }

    /// Returns the log filter in force: `RUST_LOG` when set, else `--log-level`.
    pub fn log_filter(&self) -> &str {
        match &self.rust_log {
            Some(filter) if !filter.trim().is_empty() => filter,
            _ => &self.log_level,
        }
    }
}
