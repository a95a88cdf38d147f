//! What hooks and webhooks share as HTTP clients of URLs an operator configured (issue 38,
//! items 7 and 8): no redirects (a 3xx is an answer like any other non-2xx, so a signed body
//! is never re-posted to another host and no other host's verdict is trusted), answers read up
//! to a bound, and errors that name only the URL's origin (a query `?token=…` or a secret
//! path never reaches an event, a response or a log line).

use std::error::Error as _;

/// Builds the client of hooks or webhooks (`what` names it in the error).
pub fn client(what: &str) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| format!("cannot build the {what} http client: {error}"))
}

/// The scheme, host and port of `url`: all that errors show of it.
pub fn origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => parsed.origin().ascii_serialization(),
        Err(_) => "<invalid url>".to_owned(),
    }
}

/// `error` without its URL, with its causes (`error sending request: … Connection refused`).
pub fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Reads the body of `response`, failing past `limit` bytes (announced or received).
pub async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let too_large = || format!("answer exceeds {}", crate::config::format_byte_size(limit));
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("answer not read: {}", describe(error)))?
    {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_origin_of_a_url_is_shown() {
        assert_eq!(
            origin("https://user:pw@hooks.example.com:8443/services/T0/B0/XXXX?token=abc#f"),
            "https://hooks.example.com:8443"
        );
        assert_eq!(origin("http://127.0.0.1:9/h?token=s"), "http://127.0.0.1:9");
        assert_eq!(origin("not a url ?token=s"), "<invalid url>");
    }
}
