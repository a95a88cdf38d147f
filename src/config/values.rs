//! Typed values of checked flags that must not leak: [`Secret`] (the bearer token) and
//! [`DbUrl`] (the database URL, whose password never shows up in `Debug` output, logs or
//! `--dump-config`).

use std::fmt;
use std::path::PathBuf;

use super::redact::redact_url;

/// What [`Debug`] and `--dump-config` print in place of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

/// A secret string (bearer token) that never shows up in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Returns the secret itself, for the one place that must compare or send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// The database a kernel uses, chosen by the URL scheme.
#[derive(Clone, PartialEq, Eq)]
pub enum DbUrl {
    /// An embedded SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL server; the URL may carry a password.
    Postgres(String),
}

impl DbUrl {
    /// Parses `sqlite://PATH`, `sqlite:PATH`, `postgres://…` or `postgresql://…`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let trimmed = url.trim();
        if let Some(path) = trimmed
            .strip_prefix("sqlite://")
            .or_else(|| trimmed.strip_prefix("sqlite:"))
        {
            if path.is_empty() || path == ":memory:" {
                return Err(format!("--db-url {trimmed:?} must name a database file"));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
            return Ok(Self::Postgres(trimmed.to_owned()));
        }
        Err(format!(
            "--db-url {:?} has an unsupported scheme; expected sqlite://PATH or postgres://...",
            redact_url(trimmed)
        ))
    }

    /// Returns the URL to hand to the store, password included.
    pub fn connection_string(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres(url) => url.clone(),
        }
    }

    /// Returns the names of the PostgreSQL URL's query parameters the driver ignores (their
    /// values are never shown: they may be secrets).
    pub fn unrecognized_parameters(&self) -> Vec<String> {
        match self {
            Self::Sqlite(_) => Vec::new(),
            Self::Postgres(url) => super::redact::unrecognized_postgres_parameters(url),
        }
    }

    /// Returns the URL with every credential replaced, for logs and `--dump-config`.
    pub fn redacted(&self) -> String {
        match self {
            Self::Sqlite(_) => self.connection_string(),
            Self::Postgres(url) => redact_url(url),
        }
    }
}

impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}
