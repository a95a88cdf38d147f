//! The web console (docs/console.md): HTML pages served by the kernel at `/`, plus the read
//! endpoints operators (and the console) use that WIRE.md does not have: `GET /v0/approvals`,
//! `GET /v0/executions/counts`, `GET /v0/agents`, `GET /v0/runners`, `GET /v0/policy`.
//!
//! Token handling: every console URL (`/`, `/executions/{id}`, ...) answers the same small
//! shell document (no data) and the static assets without authentication; the shell's script
//! keeps the bearer token in `sessionStorage` and fetches the page's server-rendered HTML
//! from `/console/view/...` with `Authorization: Bearer`, like every JSON call and the
//! execution stream (read with `fetch`, not `EventSource`, which cannot send the header).
//! No cookie is ever set, so a cross-site request carries no credential (CSRF-safe).

mod answering;
pub(crate) mod api;
mod approvals_page;
mod assets;
mod directory_page;
mod pages;
mod presence;
mod render;
mod shell;
mod timeline_page;
mod viewer;

use axum::Router;
use axum::routing::get;

use crate::http::AppState;

pub use presence::{Connection, Presence, PresenceGuard, StreamRole};

/// Console pages: each serves the shell; the matching view is under [`VIEW_PREFIX`].
const PAGES: [&str; 5] = ["/", "/approvals", "/directory", "/status", "/login"];
/// Prefix of the console's static files.
const ASSETS_PREFIX: &str = "/console/assets/";
/// Prefix of the execution pages.
const EXECUTION_PREFIX: &str = "/executions/";

/// Returns whether `path` is a console page or asset, served without a token (`GET` only):
/// they carry no data.
pub fn is_public(path: &str) -> bool {
    PAGES.contains(&path)
        || path.starts_with(ASSETS_PREFIX)
        || path
            .strip_prefix(EXECUTION_PREFIX)
            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// The console's pages, assets and views, merged into the kernel's router (the read
/// endpoints of [`api`] are routed with the API in `crate::http::routes`).
pub fn pages() -> Router<AppState> {
    let mut router = Router::new();
    for page in PAGES {
        router = router.route(page, get(shell::page));
    }
    router
        .route("/executions/{id}", get(shell::page))
        .route("/console/assets/{file}", get(assets::serve))
        .route("/console/view/executions", get(pages::executions))
        .route(
            "/console/view/executions/{id}",
            get(timeline_page::execution),
        )
        .route("/console/view/approvals", get(approvals_page::approvals))
        .route("/console/view/directory", get(directory_page::directory))
        .route("/console/view/status", get(pages::status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_and_assets_are_public() {
        for public in [
            "/",
            "/approvals",
            "/directory",
            "/status",
            "/login",
            "/executions/0196",
            "/console/assets/console.js",
        ] {
            assert!(is_public(public), "{public}");
        }
        for private in [
            "/console/view/executions",
            "/console/view/executions/0196",
            "/executions/",
            "/executions/a/b",
            "/v0/approvals",
            "/v0/executions",
            "/metrics",
        ] {
            assert!(!is_public(private), "{private}");
        }
    }
}
