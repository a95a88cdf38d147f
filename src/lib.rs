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

/// Installs ring as the process's rustls crypto provider, once (later calls do nothing).
///
/// The MCP client's reqwest is built without a provider, and Cargo's feature unification gives
/// that build to every reqwest of the process (the OpenTelemetry exporter's too), which then
/// cannot make a client without one. `main` calls this first; the library entry points that
/// build such clients call it too, for callers that are not the `keel` binary.
pub fn install_tls_provider() {
    // An error only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
