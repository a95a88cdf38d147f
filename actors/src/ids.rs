//! Identifier newtypes. Every id that crosses a module boundary is one of these, never a bare
//! `String`, so an agent id cannot be passed where an execution id is expected.
//!
//! Kernel-generated ids (executions, sessions, steps, jobs, events) are UUIDv7 strings in
//! canonical hyphenated form; client-chosen ids (agents, consumers, runners) are kept verbatim.
//! An id is shared, not copied, when cloned (`Arc<str>`): an execution's id is cloned into each of
//! its events, rows and messages.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps an existing id string.
            pub fn new(value: impl Into<String>) -> Self {
                Self(Arc::from(value.into()))
            }

            /// Returns the id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Returns the id as an owned string.
            pub fn into_string(self) -> String {
                self.0.to_string()
            }
        }

        // Serialized as the bare string, as `#[serde(transparent)]` over a `String` would.
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map(Self::from)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(Arc::from(value))
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self(Arc::from(value))
            }
        }

        impl From<&String> for $name {
            fn from(value: &String) -> Self {
                Self(Arc::from(value.as_str()))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Hash and Eq are the string's, so maps keyed by the id can be looked up by `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                *self.0 == *other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                *self.0 == **other
            }
        }

        impl PartialEq<&$name> for $name {
            fn eq(&self, other: &&$name) -> bool {
                self == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == *other.as_str()
            }
        }
    };
}

string_id!(
    /// Identifies one execution (a run of an agent on one input).
    ExecutionId
);
string_id!(
    /// Identifies an agent kind; every process serving it connects with this id.
    AgentId
);
string_id!(
    /// Identifies one agent or runner process within its agent or runner id.
    ConsumerId
);
string_id!(
    /// Identifies a runner (a process offering remote tools).
    RunnerId
);
string_id!(
    /// Identifies one tool step of an execution; stays the same across retries.
    StepId
);
string_id!(
    /// Identifies the session an agent process uses to act on one execution.
    SessionId
);
string_id!(
    /// Identifies one delivery of a remote step to a runner (a new one per attempt).
    JobId
);
string_id!(
    /// Identifies a tool, such as `web.search` or `github_create_pr`.
    ToolId
);

/// Returns a fresh UUIDv7 in canonical hyphenated form.
pub fn new_uuid_v7() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

impl ExecutionId {
    /// Returns a fresh, time-ordered execution id.
    pub fn generate() -> Self {
        Self::from(new_uuid_v7())
    }
}

impl SessionId {
    /// Returns a fresh session id.
    pub fn generate() -> Self {
        Self::from(new_uuid_v7())
    }
}

impl StepId {
    /// Returns a fresh step id.
    pub fn generate() -> Self {
        Self::from(new_uuid_v7())
    }
}

impl JobId {
    /// Returns a fresh job id.
    pub fn generate() -> Self {
        Self::from(new_uuid_v7())
    }
}

/// Largest client-chosen id (agent, consumer, runner, tool, signal type), in bytes
/// (WIRE.md §9.2, §10.1, §13.1).
pub const MAX_CLIENT_ID_BYTES: usize = 256;

/// Why a client-chosen id was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdProblem {
    /// The id is empty.
    #[error("is required")]
    Empty,
    /// The id is longer than [`MAX_CLIENT_ID_BYTES`].
    #[error("exceeds maximum length of {MAX_CLIENT_ID_BYTES} characters")]
    TooLong,
    /// The id holds a NUL character (PostgreSQL cannot store it in text; issue 38).
    #[error("must not contain NUL")]
    Nul,
}

/// Checks the length of a client-chosen id that may be absent (empty), and that it holds no
/// NUL.
pub fn check_length(value: &str) -> Result<(), IdProblem> {
    if value.len() > MAX_CLIENT_ID_BYTES {
        return Err(IdProblem::TooLong);
    }
    if value.contains('\0') {
        return Err(IdProblem::Nul);
    }
    Ok(())
}

/// Checks a client-chosen id that must be present: non-empty and at most
/// [`MAX_CLIENT_ID_BYTES`] bytes.
pub fn check_required(value: &str) -> Result<(), IdProblem> {
    if value.is_empty() {
        return Err(IdProblem::Empty);
    }
    check_length(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_bounded_and_required_ones_non_empty() {
        assert_eq!(check_length(""), Ok(()));
        assert_eq!(check_length(&"x".repeat(256)), Ok(()));
        assert_eq!(check_length(&"x".repeat(257)), Err(IdProblem::TooLong));
        // Bytes, not characters: 129 two-byte characters are 258 bytes.
        assert_eq!(check_length(&"é".repeat(129)), Err(IdProblem::TooLong));
        assert_eq!(check_required(""), Err(IdProblem::Empty));
        assert_eq!(check_required("r"), Ok(()));
        assert_eq!(check_required(&"x".repeat(10_000)), Err(IdProblem::TooLong));
        assert_eq!(check_required("a\0b"), Err(IdProblem::Nul));
        assert_eq!(check_length("\0"), Err(IdProblem::Nul));
        assert_eq!(
            IdProblem::TooLong.to_string(),
            "exceeds maximum length of 256 characters"
        );
    }

    #[test]
    fn an_id_is_a_bare_json_string_and_its_clones_share_one_allocation() {
        let id = ExecutionId::new("exec-1");
        assert_eq!(
            serde_json::to_string(&id).ok(),
            Some(r#""exec-1""#.to_owned())
        );
        let decoded: Result<ExecutionId, _> = serde_json::from_str(r#""exec-1""#);
        assert_eq!(decoded.ok(), Some(id.clone()));
        assert!(serde_json::from_str::<ExecutionId>("5").is_err());
        assert!(serde_json::from_str::<ExecutionId>("null").is_err());
        let clone = id.clone();
        assert!(
            std::ptr::eq(id.as_str(), clone.as_str()),
            "a clone copies no bytes"
        );
        assert_eq!(id, "exec-1");
        assert_eq!(id, *"exec-1");
        assert_eq!(id, "exec-1".to_owned());
        assert_eq!(clone.into_string(), "exec-1");
    }
}
