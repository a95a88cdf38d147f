//! What a starting kernel logs: the address it listens on, warnings about risky settings, and
//! the parts of the start-up summary line (policy, authentication, hooks).

use std::net::SocketAddr;

use keel_actors::hooks::HookSpec;
use tracing::{info, warn};

use crate::config::{Mode, Settings};

/// Logs the address (the line tools and tests look for) and warns about risky settings.
pub(super) fn announce(settings: &Settings, address: SocketAddr) {
    info!(address = %address, "listening on {address}");
    if settings.bearer_token.is_none() && !address.ip().is_loopback() {
        warn!(address = %address, "no --bearer-token: anyone who can reach this address can use the API");
    }
    if settings.agent_timeout.is_zero() {
        warn!(
            "--agent-timeout 0: a disconnected agent's executions are reset at once (meant for tests)"
        );
    }
    if settings.production && settings.cors_origins.iter().any(|origin| origin == "*") {
        warn!("--cors-origins * in production: any web page may call the API with a user's token");
    }
}

/// The policy source for the start-up summary.
pub(super) fn describe_policy(settings: &Settings) -> String {
    match (&settings.policy, settings.mode) {
        (Some(path), _) => path.display().to_string(),
        (None, Mode::Dev) => "none: every tool call allowed".to_owned(),
        (None, Mode::Serve) => "none: every tool call denied".to_owned(),
    }
}

/// The authentication mode for the start-up summary (never the token).
pub(super) fn describe_auth(settings: &Settings, keys: bool) -> &'static str {
    match (settings.bearer_token.is_some(), keys) {
        (true, true) => "bearer token or API key required",
        (true, false) => "bearer token required",
        (false, true) => "API key required",
        (false, false) => "off: no --bearer-token and no API key",
    }
}

/// The hooks of the policy for the start-up summary: `off`, or their ids by point.
pub(super) fn describe_hooks(hooks: &[HookSpec]) -> String {
    if hooks.is_empty() {
        return "off".to_owned();
    }
    hooks
        .iter()
        .map(|hook| format!("{} {}", hook.point.as_str(), hook.id))
        .collect::<Vec<_>>()
        .join(", ")
}
