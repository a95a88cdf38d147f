//! Identity: API keys (`key.rs`), roles and scopes (`role.rs`), the in-memory key registry
//! (`registry.rs`, its entries in `entry.rs`, stored records in `record.rs`, principals in
//! `principal.rs`) and the failed-authentication limiter (`failures.rs`). The HTTP middleware
//! in `http/auth.rs` uses them; docs/security.md is the user's view.

mod entry;
pub mod failures;
pub mod key;
pub mod principal;
pub mod record;
pub mod registry;
pub mod role;

pub use principal::{Principal, Rejected};
pub use record::{KeyError, KeyRecord, NewKey};
pub use registry::KeyRegistry;
pub use role::{Access, Role, Scopes};
