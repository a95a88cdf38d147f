//! Identity: API keys (`key.rs`), roles and scopes (`role.rs`), the in-memory key registry
//! (`registry.rs`) and the failed-authentication limiter (`failures.rs`). The HTTP middleware
//! in `http/auth.rs` uses them; docs/security.md is the user's view.

pub mod failures;
pub mod key;
pub mod registry;
pub mod role;

pub use registry::{KeyError, KeyRecord, KeyRegistry, NewKey, Principal, Rejected};
pub use role::{Access, Role, Scopes};
