//! Flags bounding what the network may do to a kernel (issue 38): which `Host` names it answers,
//! whether `keel serve` may listen beyond loopback without credentials, and the connection
//! limits. Flattened into [`super::Config`]; checked into [`ExposureSettings`].

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args};
use serde_json::{Map, Value, json};

use super::bytes::{format_byte_size, parse_byte_size};
use super::{format_duration, parse_duration};

use crate::http::DEFAULT_MAX_CONNECTIONS;

/// Exposure flags of `dev` and `serve`.
#[derive(Clone, Debug, Args)]
pub struct ExposureArgs {
    /// Host names (besides IP addresses and `localhost`) a request's `Host` header may name,
    /// comma-separated; `*` allows any. Checked on every request of a kernel that needs no
    /// credentials, and on every request once given (DNS rebinding) [default: none, plus
    /// the host of --advertise-url].
    #[arg(
        long,
        env = "KEEL_ALLOWED_HOSTS",
        value_name = "HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,

    /// Let `keel serve` listen on a non-loopback address with no --bearer-token and no API
    /// key: anyone who can reach the address can then use the whole API.
    #[arg(long, env = "KEEL_ALLOW_UNAUTHENTICATED", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub allow_unauthenticated: bool,

    /// A new connection that sends no byte within this time is closed.
    #[arg(long, env = "KEEL_FIRST_BYTE_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub first_byte_timeout: Duration,

    /// Most connections open at once; past it a new connection is closed at once (and logged).
    #[arg(long, env = "KEEL_MAX_CONNECTIONS", value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// Most bytes of events in one page of `GET /v0/events` or `GET /v0/executions/{id}/events`
    /// (a page always holds at least one event; its next cursor says where the rest starts),
    /// and in one read of an execution or feed stream's backlog.
    #[arg(long, env = "KEEL_MAX_PAGE_BYTES", value_name = "SIZE", default_value = "8MiB", value_parser = parse_byte_size)]
    pub max_page_bytes: usize,

    /// Most bytes of events one `GET /v0/events/stream` holds for its client; one that stays
    /// full past the feed's cut-off (30 s) is disconnected.
    #[arg(long, env = "KEEL_STREAM_BUFFER_BYTES", value_name = "SIZE", default_value = "8MiB", value_parser = parse_byte_size)]
    pub stream_buffer_bytes: usize,

    /// A response write that makes no progress for this long (the client stopped reading a
    /// stream or a page) closes the connection.
    #[arg(long, env = "KEEL_WRITE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub write_stall_timeout: Duration,
}

/// Checked [`ExposureArgs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposureSettings {
    /// `--allowed-hosts`, lower-case, without blanks.
    pub allowed_hosts: Vec<String>,
    /// `--allow-unauthenticated`.
    pub allow_unauthenticated: bool,
    /// `--first-byte-timeout`.
    pub first_byte_timeout: Duration,
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--max-page-bytes`.
    pub max_page_bytes: usize,
    /// `--stream-buffer-bytes`.
    pub stream_buffer_bytes: usize,
    /// `--write-stall-timeout`.
    pub write_stall_timeout: Duration,
}

impl ExposureArgs {
    /// Checks the flags, adding a line to `problems` for each bad one.
    pub fn validate(&self, problems: &mut Vec<String>) -> ExposureSettings {
        let mut allowed_hosts = Vec::new();
        for host in &self.allowed_hosts {
            let host = host.trim().to_ascii_lowercase();
            if host.is_empty() {
                continue;
            }
            let valid = host == "*"
                || host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            if valid {
                allowed_hosts.push(host);
            } else {
                problems.push(format!(
                    "--allowed-hosts {host:?} must be a host name without scheme or port (or *)"
                ));
            }
        }
        if self.first_byte_timeout.is_zero() {
            problems.push("--first-byte-timeout must be greater than zero".to_owned());
        }
        if self.stream_buffer_bytes == 0 {
            problems.push("--stream-buffer-bytes must be at least 1 byte".to_owned());
        }
        if self.write_stall_timeout.is_zero() {
            problems.push("--write-stall-timeout must be greater than zero".to_owned());
        }
        if self.max_page_bytes == 0 {
            problems.push("--max-page-bytes must be at least 1 byte".to_owned());
        }
        if self.max_connections == 0 {
            problems.push("--max-connections must be at least 1".to_owned());
        }
        ExposureSettings {
            allowed_hosts,
            allow_unauthenticated: self.allow_unauthenticated,
            first_byte_timeout: self.first_byte_timeout,
            max_connections: self.max_connections,
            max_page_bytes: self.max_page_bytes,
            stream_buffer_bytes: self.stream_buffer_bytes,
            write_stall_timeout: self.write_stall_timeout,
        }
    }
}

impl ExposureSettings {
    /// Adds the settings to the `--dump-config` object.
    pub fn dump_into(&self, dump: &mut Value) {
        let entries = json!({
            "allowed-hosts": self.allowed_hosts,
            "allow-unauthenticated": self.allow_unauthenticated,
            "first-byte-timeout": format_duration(self.first_byte_timeout),
            "max-connections": self.max_connections,
            "max-page-bytes": format_byte_size(self.max_page_bytes),
            "stream-buffer-bytes": format_byte_size(self.stream_buffer_bytes),
            "write-stall-timeout": format_duration(self.write_stall_timeout),
        });
        if let (Some(dump), Value::Object(entries)) = (dump.as_object_mut(), entries) {
            dump.extend::<Map<String, Value>>(entries);
        }
    }

    /// Why `keel serve` must not start: listening on `listen`, beyond loopback, when no request
    /// needs credentials (`credentials`: a token or an API key) and that was not allowed.
    pub fn refusal(&self, listen: SocketAddr, credentials: bool) -> Option<String> {
        (!credentials && !listen.ip().is_loopback() && !self.allow_unauthenticated).then(|| {
            format!(
                "refusing to listen on {listen} without credentials: anyone who can reach it \
                 could use the whole API. Pass --bearer-token (KEEL_BEARER_TOKEN), listen on \
                 loopback (--bind 127.0.0.1), or accept it with --allow-unauthenticated \
                 (KEEL_ALLOW_UNAUTHENTICATED=true)"
            )
        })
    }
}
