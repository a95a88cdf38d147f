//! Types exchanged through the [`Kernel`](super::Kernel) handle: errors, connections, tool
//! directory entries and commit notices.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::{ErrorCode, StoreError};
use crate::execution::Rejection;
use crate::ids::{ExecutionId, RunnerId, ToolId};
use crate::push::Push;
use crate::time::Timestamp;

/// Why a kernel call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KernelError {
    /// The execution refused the command (nothing was recorded).
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// Storage failed (nothing was acknowledged).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An actor did not answer in time.
    #[error("kernel timeout: {0}")]
    Timeout(String),
    /// An actor is gone or the kernel is shutting down.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// A `pre_create` hook refused the creation (nothing was recorded).
    #[error("creation refused by hook {hook_id}: {reason}")]
    HookRefused {
        /// Hook that refused.
        hook_id: String,
        /// Its reason (or why the call failed, under `fail_closed`).
        reason: String,
    },
}

impl KernelError {
    /// Returns the client-facing class of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Rejected(rejection) => rejection.code(),
            Self::Store(error) => match error.code() {
                // A projection that cannot be decoded is ours to fix, not the client's.
                ErrorCode::Conflict => ErrorCode::Unavailable,
                code => code,
            },
            Self::Timeout(_) => ErrorCode::Timeout,
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::HookRefused { .. } => ErrorCode::Forbidden,
        }
    }
}

/// A tool schema as a runner publishes it (WIRE.md §13.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool id.
    pub id: ToolId,
    /// Description (docstring).
    #[serde(default)]
    pub description: Value,
    /// JSON schema of the arguments.
    #[serde(default)]
    pub input_schema: Value,
}

/// A tool directory entry (WIRE.md §13.7).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolEntry {
    /// Tool id.
    pub id: ToolId,
    /// Description.
    pub description: Value,
    /// JSON schema of the arguments.
    pub input_schema: Value,
    /// Runner that published it.
    pub runner_id: RunnerId,
    /// When it was published.
    #[serde(with = "crate::time::serde_micros")]
    pub registered_at: Timestamp,
}

/// Told to every live stream after a commit: an execution has new events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitNotice {
    /// Execution that changed.
    pub execution_id: ExecutionId,
    /// Its last sequence after the commit.
    pub last_sequence: i64,
}

/// Called when a stream connection ends, exactly once.
pub(crate) type OnClose = Box<dyn FnOnce() + Send + Sync>;

/// The pushes of one agent or runner connection. Dropping it tells the kernel the connection
/// is gone (the HTTP layer drops it when the client disconnects).
pub struct PushStream {
    receiver: mpsc::Receiver<Push>,
    on_close: Option<OnClose>,
}

impl PushStream {
    pub(crate) fn new(receiver: mpsc::Receiver<Push>, on_close: OnClose) -> Self {
        Self {
            receiver,
            on_close: Some(on_close),
        }
    }

    /// Waits for the next push; `None` when the kernel ended the connection (replaced by a
    /// newer connection with the same consumer id, too slow, or shutting down).
    pub async fn next(&mut self) -> Option<Push> {
        self.receiver.recv().await
    }
}

impl Drop for PushStream {
    fn drop(&mut self) {
        if let Some(on_close) = self.on_close.take() {
            on_close();
        }
    }
}

impl std::fmt::Debug for PushStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushStream").finish_non_exhaustive()
    }
}
