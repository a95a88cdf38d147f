//! The durable event log's vocabulary: one typed variant per event type of WIRE.md §15, and the
//! envelope every event is stored and sent in (§7.6).
//!
//! Payload field names are part of the wire contract. Keel adds a few fields the reference
//! kernel does not write (`remote`, `timeout_ms`, `retry_base_delay_ms` and
//! `retry_max_delay_ms` on `step.created`, `not_before` on `step.retried`) because a restarted
//! kernel rebuilds every execution from its events alone, and one informational event type,
//! `execution.stalled`, written by the stall watchdog.
//!
//! Files: the typed bodies (`body.rs`), the envelope (`envelope.rs`), what a body says about its type (`kinds.rs`), and the
//! larger payloads: approvals, block and resume reasons, `llm.called` (`llm_call.rs`).

/// Most `step.progress` events recorded for one step; later notifications are dropped.
pub const MAX_PROGRESS_EVENTS: u32 = 20;
/// Longest `message` of a `step.progress` event, in bytes (longer ones are cut, ending in `…`).
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 512;

/// Version of the payload schemas (`body.rs`), written into every event.
pub const SCHEMA_VERSION: i64 = 1;

mod approvals;
mod body;
mod envelope;
mod kinds;
mod llm_call;
mod reasons;
pub use approvals::{ApprovalRequest, ApprovalResolution, Escalation};
pub use body::EventBody;
pub use envelope::{Event, NewEvent, seal};
pub use kinds::is_terminal_type;
pub use llm_call::LlmCall;
pub use reasons::{BlockReason, Blocker, Cleared, ResumeReason};

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
