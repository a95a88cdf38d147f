//! The kernel-wide event feed: type patterns, the replay-then-tail reader, and the JSON shape of
//! one feed event. Served by `GET /v0/events` and `GET /v0/events/stream` (`src/http/feed.rs`)
//! and consumed by webhook subscriptions (`src/webhooks/`). See docs/events.md.

pub mod patterns;
pub mod reader;

use keel_actors::feed::FeedEvent;
use serde_json::Value;

pub use patterns::{PatternError, TypePatterns};
pub use reader::{FeedFilter, FeedReader};

/// Returns the JSON of one feed event: the execution event envelope (WIRE.md §7.6) with two
/// more fields, `position` and `agent_id`.
pub fn event_json(event: &FeedEvent) -> Value {
    let mut json = serde_json::to_value(&event.event).unwrap_or_else(|error| {
        tracing::error!(event.position = event.position, error = %error, "event not serializable");
        Value::Object(serde_json::Map::new())
    });
    if let Value::Object(map) = &mut json {
        map.insert("position".to_owned(), Value::from(event.position));
        map.insert("agent_id".to_owned(), Value::from(event.agent_id.as_str()));
    }
    json
}
