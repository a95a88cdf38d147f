//! Pages bounded by bytes as well as by count (issue 38, item 4): a page of large events stops
//! at `--max-page-bytes` and its usual next cursor (`latest_sequence`, `next_after_position`)
//! says where the rest starts. Each item is serialized once, into the body itself; a page
//! always holds at least one item, so a single event larger than the cap is still readable.

use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;

use keel_actors::ids::ExecutionId;

use super::AppState;
use super::error::ApiError;

/// Events read from the store at once while a page is filled; each read also stops once it
/// passes the byte cap (`Store::events_within`), so that a page stopped by its byte cap did not
/// read (and hold) the rest of its count.
const READ_CHUNK: i64 = 200;

/// One page of an execution's log: up to `limit` events after `after_sequence`, and at most
/// the byte cap of them; `latest_sequence` is the last one's sequence (0 for an empty page).
pub async fn execution_events(
    state: &AppState,
    id: &ExecutionId,
    after_sequence: i64,
    limit: i64,
) -> Result<Response, ApiError> {
    let mut array = CappedArray::new(state.settings.max_page_bytes);
    let mut after = after_sequence;
    let mut remaining = limit;
    let budget = i64::try_from(state.settings.max_page_bytes).unwrap_or(i64::MAX);
    'read: while remaining > 0 {
        let chunk = remaining.min(READ_CHUNK);
        let batch = state.kernel.events_within(id, after, chunk, budget).await?;
        let read = i64::try_from(batch.items.len()).unwrap_or(i64::MAX);
        for event in &batch.items {
            if !array.push(event)? {
                break 'read;
            }
            after = event.sequence;
        }
        remaining -= read;
        if !batch.full {
            break;
        }
    }
    let latest_sequence = if array.is_empty() { 0 } else { after };
    array.respond(
        "events",
        &serde_json::json!({ "latest_sequence": latest_sequence }),
    )
}

/// Default `--max-page-bytes`.
pub const DEFAULT_MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// A JSON array being filled up to a byte cap.
pub struct CappedArray {
    body: Vec<u8>,
    count: usize,
    cap: usize,
}

impl CappedArray {
    /// An empty array that takes items while it holds at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            body: b"[".to_vec(),
            count: 0,
            cap,
        }
    }

    /// Adds `item` unless the array holds something and would grow past the cap; whether it
    /// was added (`false`: the page is full, the item starts the next one).
    pub fn push(&mut self, item: &impl Serialize) -> Result<bool, ApiError> {
        let mark = self.body.len();
        if self.count > 0 {
            self.body.push(b',');
        }
        serde_json::to_writer(&mut self.body, item)
            .map_err(|error| ApiError::Internal(format!("encoding a page item: {error}")))?;
        if self.count > 0 && self.body.len() + 1 > self.cap {
            self.body.truncate(mark);
            return Ok(false);
        }
        self.count += 1;
        Ok(true)
    }

    /// How many items the array holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// A 200 JSON answer `{"<name>": [..items..], <rest of `tail`>}`; `tail` must be an object.
    pub fn respond(mut self, name: &str, tail: &serde_json::Value) -> Result<Response, ApiError> {
        self.body.push(b']');
        let mut out = Vec::with_capacity(self.body.len() + name.len() + 64);
        out.push(b'{');
        serde_json::to_writer(&mut out, name)
            .map_err(|error| ApiError::Internal(format!("encoding a page: {error}")))?;
        out.push(b':');
        out.extend_from_slice(&self.body);
        drop(self.body);
        let tail = serde_json::to_vec(tail)
            .map_err(|error| ApiError::Internal(format!("encoding a page: {error}")))?;
        match tail.strip_prefix(b"{").filter(|rest| rest != b"}") {
            Some(rest) => {
                out.push(b',');
                out.extend_from_slice(rest);
            }
            None => out.push(b'}'),
        }
        let mut response = Response::new(Body::from(out));
        *response.status_mut() = StatusCode::OK;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::CappedArray;
    use serde_json::{Value, json};

    async fn body(array: CappedArray, tail: &Value) -> Value {
        let response = array.respond("events", tail).expect("response");
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("valid JSON")
    }

    #[tokio::test]
    async fn a_page_stops_at_the_cap_but_holds_at_least_one_item() {
        let mut array = CappedArray::new(100);
        let big = json!({"data": "x".repeat(200)});
        assert!(
            array.push(&big).expect("push"),
            "the first item always fits"
        );
        assert!(!array.push(&json!({"n": 1})).expect("push"));
        assert_eq!(array.len(), 1);
        let page = body(array, &json!({"latest_sequence": 3})).await;
        assert_eq!(page, json!({"events": [big], "latest_sequence": 3}));

        let mut array = CappedArray::new(1000);
        for n in 0..3 {
            assert!(array.push(&json!({"n": n})).expect("push"));
        }
        assert_eq!(
            body(array, &json!({})).await,
            json!({"events": [{"n": 0}, {"n": 1}, {"n": 2}]})
        );
    }
}
