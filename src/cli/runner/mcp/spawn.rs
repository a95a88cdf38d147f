//! Starting and stopping an MCP server: the process in a group of its own with only the
//! allowed environment and the MCP handshake over its stdio (or over HTTP with `--mcp-url`);
//! stopping ends the session, then SIGTERM and SIGKILL to the group.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use rmcp::ServiceExt;
use tokio::process::Command;

use super::{Handler, Live, McpError, RESTART_MAX, RESTART_MIN, ServerSpec};
use crate::cli::runner::child::{confine, signal_group, terminate};

/// Pause before the start that follows `crashes` crashes in a row.
pub(super) fn restart_delay(crashes: u32) -> Duration {
    let doublings = crashes.saturating_sub(1).min(16);
    (RESTART_MIN * 2_u32.pow(doublings)).min(RESTART_MAX)
}

/// Starts the process and runs the MCP handshake over its stdio (or, with `--mcp-url`,
/// connects over HTTP).
pub(super) async fn connect(spec: &ServerSpec, handler: Handler) -> Result<Live, McpError> {
    if let Some(target) = &spec.http {
        let service = super::http::connect(target, handler)
            .await
            .map_err(McpError::Initialize)?;
        tracing::info!(url = %target.url, server = ?service.peer_info().and_then(|info| info.server_info.as_ref().map(|server| server.name.clone())), "MCP server initialised");
        return Ok(Live {
            service,
            child: None,
            group: None,
            generation: 0,
        });
    }
    let mut command = Command::new(&spec.program);
    confine(
        &mut command,
        &spec.args,
        &spec.env,
        spec.workdir.as_deref(),
        Stdio::inherit(),
    );
    let mut child = command.spawn().map_err(McpError::Spawn)?;
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        signal_group(group, Signal::SIGKILL);
        return Err(McpError::Initialize("no stdio pipes".to_owned()));
    };
    match handler.serve((stdout, stdin)).await {
        Ok(service) => {
            tracing::info!(pid = ?group, server = ?service.peer_info().and_then(|info| info.server_info.as_ref().map(|server| server.name.clone())), "MCP server initialised");
            Ok(Live {
                service,
                child: Some(child),
                group,
                generation: 0,
            })
        }
        Err(error) => {
            signal_group(group, Signal::SIGKILL);
            let _ = child.wait().await;
            Err(McpError::Initialize(error.to_string()))
        }
    }
}

/// Ends a session and its process: the session is closed (stdin ends), the group gets SIGTERM,
/// and SIGKILL after `grace`.
pub(super) async fn stop(live: &mut Live, grace: Duration) {
    live.service.cancellation_token().cancel();
    let Some(child) = live.child.as_mut() else {
        return;
    };
    let _ = terminate(child, live.group, grace).await;
    // Whatever the server left behind in its group goes with it.
    signal_group(live.group, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_half_a_second_to_thirty() {
        assert_eq!(restart_delay(1), Duration::from_millis(500));
        assert_eq!(restart_delay(2), Duration::from_secs(1));
        assert_eq!(restart_delay(4), Duration::from_secs(4));
        assert_eq!(restart_delay(10), RESTART_MAX);
        assert_eq!(restart_delay(u32::MAX), RESTART_MAX);
    }
}
