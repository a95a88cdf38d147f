//! Request-body decoding shared by every route that reads JSON (WIRE.md §1.1): the body is read
//! under a size limit, only its first JSON value is decoded, `null` means "all fields absent",
//! an object with a key given twice (at any depth) is refused, and every failure is a 400 in
//! our envelope (never axum's plain-text rejections).

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::CONTENT_LENGTH;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;
use super::strict_json::UniqueKeys;

/// How much of an oversized body is still read (and discarded) so that the client, which may
/// still be writing, receives the 400 instead of a reset connection.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// Reads the body of `request` (at most `limit` bytes, all of it within `timeout`) and
/// decodes it as `T`.
pub async fn read_json<T: DeserializeOwned>(
    request: Request,
    limit: usize,
    timeout: Duration,
) -> Result<T, ApiError> {
    super::cross_site::require_json(request.headers())?;
    let bytes = tokio::time::timeout(timeout, read_limited(request, limit))
        .await
        .map_err(|_| {
            ApiError::validation(format_args!(
                "request body not received within {}",
                crate::config::format_duration(timeout)
            ))
        })??;
    decode(&bytes)
}

/// Decodes the first JSON value of `bytes` as `T`; `null` decodes like `{}`. A duplicate key
/// anywhere in that value is a 400: one pass builds the value and checks the keys.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<UniqueKeys>();
    let value = match values.next() {
        None => return Err(ApiError::validation("invalid JSON: EOF")),
        Some(Err(error)) => {
            return Err(ApiError::validation(format_args!("invalid JSON: {error}")));
        }
        Some(Ok(UniqueKeys(Value::Null))) => Value::Object(serde_json::Map::new()),
        Some(Ok(UniqueKeys(value))) => value,
    };
    serde_json::from_value(value)
        .map_err(|error| ApiError::validation(format_args!("invalid JSON: {error}")))
}

/// Reads the whole body, failing with `request body too large` past `limit` bytes.
async fn read_limited(request: Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let too_large = || ApiError::validation("request body too large");
    let body: Body = request.into_body();
    if declared.is_some_and(|length| length > limit as u64) {
        drain(body).await;
        return Err(too_large());
    }
    let mut stream = body.into_data_stream();
    let mut buffer = Vec::with_capacity(declared.map_or(0, |length| length as usize));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|error| ApiError::validation(format_args!("invalid request body: {error}")))?;
        if buffer.len() + chunk.len() > limit {
            drain_stream(stream, buffer.len() + chunk.len()).await;
            return Err(too_large());
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer)
}

/// Discards a body, up to [`DRAIN_LIMIT`] bytes.
async fn drain(body: Body) {
    drain_stream(body.into_data_stream(), 0).await;
}

async fn drain_stream(mut stream: axum::body::BodyDataStream, mut seen: usize) {
    while seen < DRAIN_LIMIT {
        match stream.next().await {
            Some(Ok(chunk)) => seen += chunk.len(),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Sample {
        name: Option<String>,
    }

    #[test]
    fn empty_and_blank_bodies_are_eof() {
        for body in [&b""[..], b"  \n"] {
            let error = decode::<Sample>(body).unwrap_err();
            assert_eq!(
                error,
                ApiError::BadRequest("validation error: invalid JSON: EOF".into())
            );
        }
    }

    #[test]
    fn null_means_every_field_absent_and_trailing_data_is_ignored() {
        assert_eq!(decode::<Sample>(b"null").unwrap(), Sample { name: None });
        assert_eq!(
            decode::<Sample>(br#"{"name":"a","x":1} trailing"#).unwrap(),
            Sample {
                name: Some("a".into())
            }
        );
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        #[derive(Debug, Deserialize)]
        struct Loose {
            #[allow(dead_code)]
            inner: Option<Value>,
        }
        for (body, key) in [
            (&br#"{"name":"a","name":"b"}"#[..], "name"),
            (br#"{"name":"a","x":1,"name":"a"}"#, "name"),
            (br#"{"inner":{"type":"x","type":"y"}}"#, "type"),
            (br#"{"inner":[1,{"k":[{"z":1,"z":2}]}]}"#, "z"),
            (br#"{"na\u006de":"a","name":"b"}"#, "name"),
        ] {
            let message = match decode::<Loose>(body) {
                Err(ApiError::BadRequest(message)) => message,
                other => panic!("{}: unexpected {other:?}", String::from_utf8_lossy(body)),
            };
            assert!(
                message.starts_with(&format!(
                    "validation error: invalid JSON: duplicate key {key:?}"
                )),
                "{message}"
            );
        }
        let sample: Sample =
            decode(br#"{"name":"a","inner":{"name":"b"},"list":[{"name":1},{"name":2}]}"#).unwrap();
        assert_eq!(sample.name.as_deref(), Some("a"));
    }

    #[test]
    fn numbers_and_nesting_decode_as_serde_json_does() {
        let text = br#"{"a":[1,-2,3.5,18446744073709551615,-9223372036854775808,1e300,true,null,"s\n"],"b":{}}"#;
        let strict: Value = decode(text).unwrap();
        let plain: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(strict, plain);
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            decode::<Value>(deep.as_bytes()).is_err(),
            "recursion limit still applies"
        );
    }

    #[test]
    fn malformed_json_and_wrong_types_are_validation_errors() {
        for body in [&b"{"[..], br#"{"name": 5}"#, b"[1]"] {
            match decode::<Sample>(body) {
                Err(ApiError::BadRequest(message)) => {
                    assert!(message.starts_with("validation error: invalid JSON: "))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
