//! How an MCP `tools/call` result becomes a Keel step result (docs/mcp.md, "Results"):
//!
//! - `structuredContent`, when the server sent it, is the result as it is;
//! - else one text block is the result as a string, no content is `null`, and anything else is
//!   `{"content": [...]}` with text blocks kept and binary data (images, audio, blobs) replaced
//!   by a reference: `{"type", "mime_type", "bytes", "sha256"}`;
//! - `isError: true` fails the step (not retryable) with the text blocks as the message and the
//!   mapped content as data;
//! - a result whose JSON is longer than the limit becomes
//!   `{"truncated": true, "bytes": N, "preview": "..."}` (the first bytes, up to the limit).

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::super::protocol::Outcome;

/// Longest failure message taken from an error result's text, in characters.
const MAX_ERROR_CHARS: usize = 4096;
/// Message of an error result without text.
pub const NO_ERROR_TEXT: &str = "the MCP tool reported an error without a message";

/// Maps a `CallToolResult` (as JSON) to the outcome posted for the job.
pub fn outcome(result: &Value, max_bytes: usize) -> Outcome {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let blocks: &[Value] = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let data = match result.get("structuredContent") {
        Some(structured) => structured.clone(),
        None => content(blocks),
    };
    let data = bound(data, max_bytes);
    if is_error {
        let text: Vec<&str> = blocks.iter().filter_map(text_of).collect();
        let mut message = text.join("\n");
        if message.trim().is_empty() {
            message = NO_ERROR_TEXT.to_owned();
        } else if message.chars().count() > MAX_ERROR_CHARS {
            message = message.chars().take(MAX_ERROR_CHARS).collect::<String>() + "…";
        }
        return Outcome {
            success: false,
            data: Some(data),
            error: Some(message),
            retryable: false,
            cost: None,
        };
    }
    Outcome {
        success: true,
        data: Some(data),
        error: None,
        retryable: false,
        cost: None,
    }
}

/// The text of a text block.
fn text_of(block: &Value) -> Option<&str> {
    (block.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| block.get("text").and_then(Value::as_str))
        .flatten()
}

/// Maps content blocks without structured content.
fn content(blocks: &[Value]) -> Value {
    match blocks {
        [] => Value::Null,
        [only] if text_of(only).is_some() => {
            Value::String(text_of(only).unwrap_or_default().to_owned())
        }
        blocks => json!({ "content": blocks.iter().map(block).collect::<Vec<_>>() }),
    }
}

/// One content block, binary data replaced by a reference.
fn block(block: &Value) -> Value {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "image" | "audio" => binary_reference(kind, block, "data"),
        "resource" => {
            let Some(resource) = block.get("resource") else {
                return json!({ "type": "resource" });
            };
            if resource.get("blob").is_some() {
                let mut reference = binary_reference("resource", resource, "blob");
                if let (Some(fields), Some(uri)) = (reference.as_object_mut(), resource.get("uri"))
                {
                    fields.insert("uri".into(), uri.clone());
                }
                reference
            } else {
                let mut fields = Map::new();
                fields.insert("type".into(), json!("resource"));
                for (from, to) in [("uri", "uri"), ("mimeType", "mime_type"), ("text", "text")] {
                    if let Some(value) = resource.get(from) {
                        fields.insert(to.into(), value.clone());
                    }
                }
                Value::Object(fields)
            }
        }
        _ => block.clone(),
    }
}

/// `{"type", "mime_type", "bytes", "sha256"}` for base64 data in `field`.
fn binary_reference(kind: &str, block: &Value, field: &str) -> Value {
    let data = block.get(field).and_then(Value::as_str).unwrap_or_default();
    let digest = hex::encode(Sha256::digest(data.as_bytes()));
    let padding = data.bytes().rev().take_while(|byte| *byte == b'=').count();
    let bytes = (data.len() / 4 * 3).saturating_sub(padding);
    json!({
        "type": kind,
        "mime_type": block.get("mimeType").cloned().unwrap_or(Value::Null),
        "bytes": bytes,
        "sha256": digest,
    })
}

/// Cuts a result whose JSON is longer than `max_bytes`.
fn bound(data: Value, max_bytes: usize) -> Value {
    let text = match &data {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let size = match &data {
        Value::String(_) => data.to_string().len(),
        _ => text.len(),
    };
    if size <= max_bytes {
        return data;
    }
    let mut cut = max_bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    json!({ "truncated": true, "bytes": size, "preview": &text[..cut] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_text_block_is_the_result_string() {
        let result = json!({ "content": [{ "type": "text", "text": "hello" }] });
        let outcome = outcome(&result, 1024);
        assert!(outcome.success);
        assert_eq!(outcome.data, Some(json!("hello")));
    }

    #[test]
    fn structured_content_wins_over_text() {
        let result = json!({
            "content": [{ "type": "text", "text": "{\"n\": 3}" }],
            "structuredContent": { "n": 3 },
        });
        assert_eq!(outcome(&result, 1024).data, Some(json!({ "n": 3 })));
    }

    #[test]
    fn images_become_references_without_their_data() {
        let result = json!({ "content": [
            { "type": "text", "text": "a picture" },
            { "type": "image", "mimeType": "image/png", "data": "aGVsbG8=" },
        ] });
        let data = outcome(&result, 1024).data.unwrap_or_default();
        let image = &data["content"][1];
        assert_eq!(image["type"], "image");
        assert_eq!(image["mime_type"], "image/png");
        assert_eq!(image["bytes"], 5);
        assert_eq!(image["sha256"].as_str().map(str::len), Some(64));
        assert!(!data.to_string().contains("aGVsbG8="));
        assert_eq!(
            data["content"][0],
            json!({ "type": "text", "text": "a picture" })
        );
    }

    #[test]
    fn is_error_fails_the_step_with_the_text_and_is_not_retryable() {
        let result =
            json!({ "isError": true, "content": [{ "type": "text", "text": "no such file" }] });
        let outcome = outcome(&result, 1024);
        assert!(!outcome.success);
        assert!(!outcome.retryable);
        assert_eq!(outcome.error.as_deref(), Some("no such file"));
        let empty = super::outcome(&json!({ "isError": true, "content": [] }), 1024);
        assert_eq!(empty.error.as_deref(), Some(NO_ERROR_TEXT));
    }

    #[test]
    fn a_large_result_is_cut_with_a_marker() {
        let text = "é".repeat(100);
        let result = json!({ "content": [{ "type": "text", "text": text }] });
        let data = outcome(&result, 51).data.unwrap_or_default();
        assert_eq!(data["truncated"], true);
        assert_eq!(data["bytes"], 202);
        // Cut on a character boundary, at most the limit.
        assert_eq!(data["preview"].as_str().map(str::len), Some(50));
        let small = outcome(
            &json!({ "content": [{ "type": "text", "text": "ok" }] }),
            51,
        );
        assert_eq!(small.data, Some(json!("ok")));
    }

    #[test]
    fn no_content_is_null() {
        assert_eq!(
            outcome(&json!({ "content": [] }), 10).data,
            Some(Value::Null)
        );
    }
}
