//! The `keel` crate: adapters around the actor system (HTTP/SSE, storage, policy loading,
//! configuration, telemetry) and the `run` entry point used by `main` and by tests.
#![forbid(unsafe_code)]
// Module docs link to the private modules that do the work: read them with
// `cargo doc --document-private-items`, where those links resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod app;
pub mod auth;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod console;
pub mod feed;
pub mod gateway;
pub mod hook_caller;
pub mod http;
pub mod outbound;
pub mod policy;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod trace_context;
pub mod webhooks;

pub use app::run;
