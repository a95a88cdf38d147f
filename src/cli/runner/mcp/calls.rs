//! One job's `tools/call`: sent with a progress token whose notifications go to the job's
//! [`ProgressSink`], cancelled with `notifications/cancelled` when the job's future is
//! dropped, and the check of a server after a cancelled call.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, PingRequest, ProgressNotificationParam, ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient};
use serde_json::Value;
use tokio::sync::mpsc;

use super::super::protocol::Outcome;
use super::result as mapping;
use super::{McpServer, spawn::stop};

/// Progress notifications buffered per call; more are dropped until the job's forwarder
/// catches up.
const PROGRESS_BUFFER: usize = 32;

/// One progress notification of a call.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressUpdate {
    /// Progress so far.
    pub progress: f64,
    /// Total, when known.
    pub total: Option<f64>,
    /// The server's message.
    pub message: Option<String>,
}

/// Where a call's progress notifications go.
pub type ProgressSink = mpsc::Sender<ProgressUpdate>;

/// A new progress channel of a call.
pub fn progress_channel() -> (ProgressSink, mpsc::Receiver<ProgressUpdate>) {
    mpsc::channel(PROGRESS_BUFFER)
}

/// The progress sinks of the calls in flight, by progress token.
#[derive(Clone, Default)]
pub(super) struct ProgressRoutes(Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>);

impl ProgressRoutes {
    /// Hands a notification to the sink of its call (dropped when unknown or the sink is full).
    pub(super) fn deliver(&self, params: ProgressNotificationParam) {
        let sink = self
            .0
            .lock()
            .ok()
            .and_then(|routes| routes.get(&params.progress_token).cloned());
        if let Some(sink) = sink {
            let _ = sink.try_send(ProgressUpdate {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    /// Routes `token` to `sink` until the returned guard is dropped.
    fn register(&self, token: ProgressToken, sink: ProgressSink) -> RouteGuard {
        if let Ok(mut routes) = self.0.lock() {
            routes.insert(token.clone(), sink);
        }
        RouteGuard {
            routes: self.clone(),
            token,
        }
    }
}

/// Removes a call's progress route.
struct RouteGuard {
    routes: ProgressRoutes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.0.lock() {
            routes.remove(&self.token);
        }
    }
}

/// Sends `notifications/cancelled` for a request unless disarmed (its answer came).
struct CancelOnDrop {
    peer: rmcp::Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let params =
                CancelledNotificationParam::new(Some(id), Some("cancelled by Keel".to_owned()));
            let _ = peer.notify_cancelled(params).await;
        });
    }
}

impl McpServer {
    /// Sends the `tools/call` and waits for its answer, routing its progress to `progress`.
    async fn request(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: CallToolRequestParams,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolResult, ServiceError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await?;
        let _route = progress.map(|sink| {
            self.notices
                .progress
                .register(handle.progress_token.clone(), sink)
        });
        let mut cancel = CancelOnDrop {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answer = handle.await_response().await;
        cancel.id = None;
        match answer? {
            ServerResult::CallToolResult(result) => Ok(result),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Runs one job's `tools/call`; the server's progress notifications for it go to
    /// `progress`. Dropping the future cancels the call (`notifications/cancelled` is sent to
    /// the server).
    pub async fn call(
        &self,
        tool_id: &str,
        arguments: &Value,
        progress: Option<ProgressSink>,
    ) -> Outcome {
        let name = self
            .active
            .read()
            .ok()
            .and_then(|active| active.get(tool_id).map(|tool| tool.name.clone()));
        let Some(name) = name else {
            let reason = self
                .withdrawn
                .read()
                .ok()
                .and_then(|withdrawn| withdrawn.get(tool_id).map(|tool| tool.describe()));
            let message = match reason {
                Some(reason) => format!(
                    "MCP tool '{tool_id}' is withdrawn: {reason}; it is not callable until the change is accepted (`keel runner accept-changes` or --accept-tool-changes)"
                ),
                None => format!("No handler registered for tool '{tool_id}'"),
            };
            return Outcome::failure(message, false);
        };
        let arguments = match arguments {
            Value::Object(fields) => Some(fields.clone()),
            Value::Null => None,
            other => {
                return Outcome::failure(
                    format!("MCP tool arguments must be a JSON object, not {other}"),
                    false,
                );
            }
        };
        let (peer, generation) = match self.peer().await {
            Ok(peer) => peer,
            Err(error) => return Outcome::failure(error.to_string(), true),
        };
        let mut params = CallToolRequestParams::new(name);
        params.arguments = arguments;
        let result = self.request(&peer, params, progress).await;
        if result.is_ok() {
            self.crashes.store(0, Ordering::Relaxed);
        }
        match result {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(result) => mapping::outcome(&result, self.spec.max_output),
                Err(error) => Outcome::failure(format!("unreadable MCP result: {error}"), false),
            },
            Err(ServiceError::McpError(error)) => Outcome::failure(
                format!("MCP error {}: {}", error.code.0, error.message),
                false,
            ),
            Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                self.forget(generation).await;
                Outcome::failure(format!("the MCP server went away: {error}"), true)
            }
            Err(error) => Outcome::failure(format!("MCP call failed: {error}"), true),
        }
    }

    /// After a call was cancelled (its future dropped, which sent `notifications/cancelled`):
    /// waits the kill grace, then pings the server; one that does not answer within the grace
    /// is stuck in the cancelled call, so its process group is killed and the next job starts
    /// it again.
    pub async fn after_cancel(self: Arc<Self>) {
        let (peer, generation) = {
            let state = self.state.lock().await;
            match &state.live {
                Some(live) => (live.service.peer().clone(), live.generation),
                None => return,
            }
        };
        let grace = self.spec.kill_grace;
        tokio::time::sleep(grace).await;
        let ping = ClientRequest::PingRequest(PingRequest::default());
        let answered = matches!(
            tokio::time::timeout(grace, peer.send_request(ping)).await,
            Ok(Ok(_))
        );
        if answered {
            return;
        }
        let mut state = self.state.lock().await;
        if let Some(live) = state.live.as_mut()
            && live.generation == generation
        {
            tracing::warn!(
                pid = ?live.group,
                "the MCP server did not answer a ping after a cancelled call; killing its process group"
            );
            stop(live, grace).await;
            state.live = None;
        }
    }
}
