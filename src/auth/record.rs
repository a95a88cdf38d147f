//! A key as stored and shown (`KeyRecord`), what creating one takes and returns, and the
//! admin operations' errors.

use keel_actors::error::StoreError;
use keel_actors::time::{self, Timestamp};
use serde::{Deserialize, Serialize};

use super::role::{Role, Scopes};

/// A key as stored (the `record` column) and as the admin API shows it (without the hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Unique name; the principal its requests act as.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Limits.
    #[serde(default)]
    pub scopes: Scopes,
    /// SHA-256 of the secret, hex (never sent in a response).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_hash: String,
    /// When created.
    #[serde(with = "time::serde_micros")]
    pub created_at: Timestamp,
    /// Principal that created it.
    pub created_by: String,
    /// When it stops working.
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<Timestamp>,
    /// When it was revoked.
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub revoked_at: Option<Timestamp>,
    /// When its secret was last replaced.
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub rotated_at: Option<Timestamp>,
    /// Last request it authenticated (written in batches, up to [`super::registry::FLUSH_PERIOD`] late).
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_used_at: Option<Timestamp>,
}

impl KeyRecord {
    /// The record as the admin API shows it: no hash, with its public id and state.
    pub fn public_view(&self, public_id: &str, now: Timestamp) -> serde_json::Value {
        let mut record = self.clone();
        record.secret_hash.clear();
        let mut value = serde_json::to_value(record).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.insert("id".to_owned(), public_id.into());
            object.insert("state".to_owned(), self.state(now).into());
        }
        value
    }

    /// `active`, `revoked` or `expired`.
    pub fn state(&self, now: Timestamp) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|at| at <= now) {
            "expired"
        } else {
            "active"
        }
    }
}

/// What a new or rotated key returns: the record and the secret, shown once.
pub struct Issued {
    /// Public id.
    pub public_id: String,
    /// The record (as stored).
    pub record: KeyRecord,
    /// The whole key.
    pub token: String,
}

/// What `create` takes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Unique name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Limits.
    #[serde(default)]
    pub scopes: Scopes,
    /// Expiry (RFC 3339).
    #[serde(default, with = "time::serde_micros_opt")]
    pub expires_at: Option<Timestamp>,
}

/// Failures of the admin operations.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No key of that name.
    #[error("no key named {0:?}")]
    NotFound(String),
    /// The name is taken.
    #[error("a key named {0:?} already exists")]
    Taken(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whether two records differ at most in their last use.
pub(super) fn same_but_last_use(a: &KeyRecord, b: &KeyRecord) -> bool {
    let mut a = a.clone();
    a.last_used_at = b.last_used_at;
    a == *b
}

/// Key names: 1–64 characters of letters, digits, `-`, `_`, `.`, `@`, `:`.
pub(super) fn validate_name(name: &str) -> Result<(), KeyError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.@:".contains(&byte))
        && !["admin", "anonymous", "system"].contains(&name);
    if ok {
        Ok(())
    } else {
        Err(KeyError::Invalid(format!(
            "key name {name:?}: 1-64 letters, digits or -_.@: (admin, anonymous and system are reserved)"
        )))
    }
}
