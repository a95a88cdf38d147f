//! [`Config::validate`]: checks every flag once and turns the raw values into typed
//! [`Settings`] (socket address, durations, database URL), collecting every problem so an
//! operator fixes them in one go. The typed secret and database URL are in `super::values`,
//! the redacted dump printed by `--dump-config` in `super::dump`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::bytes::format_byte_size;
use super::redact::redact_url;
use super::values::{DbUrl, Secret};
use super::{Config, LogFormat, Mode, format_duration};

/// Why a configuration was refused; lists every problem found.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct ConfigError {
    /// One line per problem.
    pub problems: Vec<String>,
}

/// Cluster mode's settings (`--cluster`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `--node-id`.
    pub node_id: String,
    /// `--advertise-url`, without a trailing `/`.
    pub advertise_url: String,
    /// `--partitions`.
    pub partitions: u32,
    /// LISTEN/NOTIFY wake-ups between kernels (off with `--no-notify`).
    pub notify: bool,
}

/// Most partitions `--partitions` accepts.
const MAX_PARTITIONS: u32 = 4096;

/// A validated configuration: every value typed and checked.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `dev` or `serve`.
    pub mode: Mode,
    /// Address the HTTP server listens on.
    pub listen: SocketAddr,
    /// Data directory (holds the default SQLite file).
    pub data_dir: PathBuf,
    /// Database in use.
    pub db: DbUrl,
    /// Read connections of the pool.
    pub db_max_conns: u32,
    /// Cluster mode; `None`: the one-kernel mode.
    pub cluster: Option<ClusterSettings>,
    /// Policy file or directory; `None` picks the mode's built-in engine.
    pub policy: Option<PathBuf>,
    /// Webhook subscriptions file, if any.
    pub webhooks: Option<PathBuf>,
    /// LLM gateway configuration file, if any.
    pub llm_config: Option<PathBuf>,
    /// Cassette the LLM gateway answers from, if any.
    pub llm_cassette: Option<PathBuf>,
    /// Bearer token; `None` disables authentication.
    pub bearer_token: Option<Secret>,
    /// Whether `--production` was given.
    pub production: bool,
    /// Allowed CORS origins; empty disables CORS.
    pub cors_origins: Vec<String>,
    /// Default step deadline.
    pub step_timeout: Duration,
    /// Maximum execution lifetime.
    pub execution_timeout: Duration,
    /// Disconnect grace of agent consumers.
    pub agent_timeout: Duration,
    /// Disconnect grace of runner connections holding a job.
    pub runner_timeout: Duration,
    /// First retry delay.
    pub retry_base_delay: Duration,
    /// Cap of retry delays.
    pub retry_max_delay: Duration,
    /// Idle time after which a running execution is reported as stalled (zero: off).
    pub stall_after: Duration,
    /// Time a dispatched job may wait to be started before it is reported (zero: off).
    pub job_start_timeout: Duration,
    /// Idle time after which a waiting execution's actor is passivated.
    pub passivate_after: Duration,
    /// Age after which terminal executions are deleted; `None` keeps them forever.
    pub retention_period: Option<Duration>,
    /// Period of the retention clean-up.
    pub cleanup_interval: Duration,
    /// Deadline of the graceful shutdown.
    pub shutdown_timeout: Duration,
    /// Body limit of ordinary routes, in bytes.
    pub body_limit: usize,
    /// Body limit of intents and results, in bytes.
    pub large_body_limit: usize,
    /// Most pending executions of one agent (0: unbounded).
    pub max_pending_per_agent: u64,
    /// Refuse creations for agent ids nothing names (`--strict-agents`).
    pub strict_agents: bool,
    /// Most pending executions kernel-wide (0: unbounded).
    pub max_pending: u64,
    /// Most distinct ids shown as label values in `/metrics`.
    pub metrics_max_ids: usize,
    /// Most labels of one creation.
    pub max_labels: usize,
    /// Largest label value, in bytes.
    pub max_label_value_bytes: usize,
    /// `Retry-After` of a refused creation.
    pub backlog_retry_after: Duration,
    /// Time allowed for a request head, from its first byte.
    pub header_read_timeout: Duration,
    /// Time allowed for a request body.
    pub body_read_timeout: Duration,
    /// Time an idle connection is kept.
    pub idle_timeout: Duration,
    /// Log filter directives (`RUST_LOG` or `--log-level`).
    pub log_filter: String,
    /// Log format.
    pub log_format: LogFormat,
    /// OTLP/HTTP base URL traces are exported to, if any.
    pub otel_endpoint: Option<String>,
    /// Allowed hosts, unauthenticated listening, connection limits.
    pub exposure: super::ExposureSettings,
}

impl Config {
    /// Checks every flag and returns typed settings, or every problem found.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let mut problems = Vec::new();
        let listen = match parse_ip(&self.bind) {
            Ok(ip) => SocketAddr::new(ip, self.port),
            Err(problem) => {
                problems.push(problem);
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port)
            }
        };
        let explicit_db_url = self
            .db_url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty());
        let db = match DbUrl::parse(&self.effective_db_url()) {
            Ok(db) => db,
            Err(problem) => {
                problems.push(problem);
                DbUrl::Sqlite(self.data_dir.join("keel.db"))
            }
        };
        let bearer_token = [&self.bearer_token, &self.rebuno_bearer_token]
            .into_iter()
            .filter_map(Option::as_deref)
            .find(|token| !token.is_empty())
            .map(Secret::new);
        let policy = self
            .policy
            .clone()
            .filter(|path| !path.as_os_str().is_empty());
        let cors_origins: Vec<String> = self
            .cors_origins
            .iter()
            .map(|origin| origin.trim().to_owned())
            .filter(|origin| !origin.is_empty())
            .collect();

        if self.mode == Mode::Dev && self.production {
            problems.push(
                "--production is a `keel serve` flag; `keel dev` is for local use".to_owned(),
            );
        }
        if self.production {
            let mut missing = Vec::new();
            if bearer_token.is_none() {
                missing.push("--bearer-token (KEEL_BEARER_TOKEN)");
            }
            if policy.is_none() {
                missing.push("--policy (KEEL_POLICY)");
            }
            if explicit_db_url.is_none() {
                missing.push("--db-url (KEEL_DB_URL)");
            }
            if !missing.is_empty() {
                problems.push(format!(
                    "refusing to start in --production mode without {}; production needs \
                     authentication, an explicit policy and an explicit database",
                    missing.join(", ")
                ));
            }
        }
        let cluster = self.validate_cluster(&db, &mut problems);
        if self.db_max_conns == 0 {
            problems.push("--db-max-conns must be at least 1".to_owned());
        }
        check_positive(&mut problems, "--step-timeout", self.step_timeout);
        check_positive(&mut problems, "--execution-timeout", self.execution_timeout);
        check_positive(&mut problems, "--cleanup-interval", self.cleanup_interval);
        check_positive(&mut problems, "--shutdown-timeout", self.shutdown_timeout);
        check_positive(
            &mut problems,
            "--header-read-timeout",
            self.header_read_timeout,
        );
        check_positive(&mut problems, "--body-read-timeout", self.body_read_timeout);
        check_positive(&mut problems, "--idle-timeout", self.idle_timeout);
        check_positive(
            &mut problems,
            "--backlog-retry-after",
            self.backlog_retry_after,
        );
        if self.retry_base_delay > self.retry_max_delay {
            problems.push(format!(
                "--retry-base-delay ({}) must not exceed --retry-max-delay ({})",
                format_duration(self.retry_base_delay),
                format_duration(self.retry_max_delay)
            ));
        }
        if self.body_limit == 0 {
            problems.push("--body-limit must be at least 1 byte".to_owned());
        }
        if self.large_body_limit < self.body_limit {
            problems.push(format!(
                "--large-body-limit ({}) must be at least --body-limit ({})",
                format_byte_size(self.large_body_limit),
                format_byte_size(self.body_limit)
            ));
        }
        let log_filter = self.log_filter().trim().to_owned();
        if let Err(error) = tracing_subscriber::EnvFilter::try_new(&log_filter) {
            problems.push(format!(
                "invalid log filter {log_filter:?} (--log-level or RUST_LOG): {error}"
            ));
        }

        let exposure = self.exposure.validate(&mut problems);
        let otel_endpoint = self.otel.validate().unwrap_or_else(|problem| {
            problems.push(problem);
            None
        });
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Settings {
            mode: self.mode,
            listen,
            data_dir: self.data_dir.clone(),
            db,
            db_max_conns: self.db_max_conns,
            cluster,
            policy,
            webhooks: self.webhooks.clone(),
            llm_config: self.llm_config.clone(),
            llm_cassette: self.llm_cassette.clone(),
            bearer_token,
            production: self.production,
            cors_origins,
            step_timeout: self.step_timeout,
            execution_timeout: self.execution_timeout,
            agent_timeout: self.agent_timeout,
            runner_timeout: self.runner_timeout,
            retry_base_delay: self.retry_base_delay,
            retry_max_delay: self.retry_max_delay,
            stall_after: self.stall_after,
            job_start_timeout: self.job_start_timeout,
            passivate_after: self.passivate_after,
            retention_period: (!self.retention_period.is_zero()).then_some(self.retention_period),
            cleanup_interval: self.cleanup_interval,
            shutdown_timeout: self.shutdown_timeout,
            body_limit: self.body_limit,
            large_body_limit: self.large_body_limit,
            max_pending_per_agent: self.max_pending_per_agent,
            strict_agents: self.strict_agents,
            max_pending: self.max_pending,
            metrics_max_ids: self.metrics_max_ids,
            max_labels: self.max_labels,
            max_label_value_bytes: self.max_label_value_bytes,
            backlog_retry_after: self.backlog_retry_after,
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            log_filter,
            log_format: self.log_format,
            otel_endpoint,
            exposure,
        })
    }
}

impl Config {
    /// Checks the cluster flags: `--cluster` needs PostgreSQL, a node id and an advertised
    /// URL; the other flags need `--cluster`.
    fn validate_cluster(&self, db: &DbUrl, problems: &mut Vec<String>) -> Option<ClusterSettings> {
        let node_id = self
            .node_id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty());
        let advertise_url = self
            .advertise_url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty());
        if !self.cluster {
            if node_id.is_some() || advertise_url.is_some() {
                problems.push(
                    "--node-id and --advertise-url are cluster settings: add --cluster (KEEL_CLUSTER=true)"
                        .to_owned(),
                );
            }
            return None;
        }
        let before = problems.len();
        if !matches!(db, DbUrl::Postgres(_)) {
            problems.push(
                "--cluster needs a PostgreSQL --db-url (postgres://...); SQLite serves one kernel"
                    .to_owned(),
            );
        }
        match node_id {
            None => problems.push("--cluster needs --node-id NAME (KEEL_NODE_ID)".to_owned()),
            Some(id)
                if id.len() > 63
                    || !id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) =>
            {
                problems.push(format!(
                    "--node-id {id:?} must be 1 to 63 letters, digits, '.', '_' or '-'"
                ));
            }
            Some(_) => {}
        }
        match advertise_url {
            None => problems.push(
                "--cluster needs --advertise-url URL (KEEL_ADVERTISE_URL), where the other kernels reach this one"
                    .to_owned(),
            ),
            Some(url) => match url::Url::parse(url) {
                Ok(parsed)
                    if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {}
                _ => problems.push(format!(
                    "--advertise-url {:?} must be an http:// or https:// URL with a host",
                    redact_url(url)
                )),
            },
        }
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            problems.push(format!(
                "--partitions must be between 1 and {MAX_PARTITIONS}"
            ));
        }
        if problems.len() > before {
            return None;
        }
        Some(ClusterSettings {
            node_id: node_id?.to_owned(),
            advertise_url: advertise_url?.trim_end_matches('/').to_owned(),
            partitions: self.partitions,
            notify: !self.no_notify,
        })
    }
}

/// Parses the `--bind` address: an IPv4 or IPv6 address, or `localhost`.
fn parse_ip(text: &str) -> Result<IpAddr, String> {
    let trimmed = text.trim().trim_start_matches('[').trim_end_matches(']');
    if trimmed.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    trimmed
        .parse()
        .map_err(|_| format!("--bind {text:?} is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::)"))
}

/// Records a problem when a duration flag that must be positive is zero.
fn check_positive(problems: &mut Vec<String>, flag: &str, value: Duration) {
    if value.is_zero() {
        problems.push(format!("{flag} must be greater than zero"));
    }
}
