//! A small HTTP client for the client commands and `keel bench`: JSON calls against a kernel's
//! `/v0` API with the bearer token, mapping the error envelope (WIRE.md §3) and transport
//! failures into [`CliError`] with messages an operator can act on.

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;

use crate::config::ClientConfig;

/// Time allowed to open a TCP connection to the kernel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for a whole JSON call (a little above the kernel's own call timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(35);
/// Longest silence on a stream; the kernel sends a heartbeat every 5 s.
const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The kernel could not be reached (refused, timed out, reset).
    #[error("cannot reach the kernel at {url}: {message}")]
    Connect {
        /// Base URL tried.
        url: String,
        /// The transport error, with its causes.
        message: String,
    },
    /// The kernel answered with an error status.
    #[error("kernel answered {} {code}: {message}", status.as_u16())]
    Api {
        /// HTTP status.
        status: StatusCode,
        /// Error code of the envelope (`NOT_FOUND`, …).
        code: String,
        /// Error message of the envelope.
        message: String,
    },
    /// An argument is malformed.
    #[error("invalid {what}: {message}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The kernel answered something this client does not understand.
    #[error("unexpected response from the kernel: {0}")]
    Decode(String),
    /// The command ran and its answer is an exit status of its own (`policy eval` on a deny),
    /// already reported on stdout.
    #[error("exit status {0}")]
    Exit(u8),
    /// The command ran and its outcome is a failure (an invalid policy, a kernel not ready).
    #[error("{0}")]
    Failed(String),
}

/// HTTP client bound to one kernel.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    streams: reqwest::Client,
    base_url: String,
    token: Option<String>,
}

impl Client {
    /// Builds a client for [`ClientConfig::url`] with [`ClientConfig::token`].
    pub fn new(config: &ClientConfig) -> Result<Self, CliError> {
        let base_url = config.url().trim_end_matches('/').to_owned();
        if !base_url.starts_with("http://") && !base_url.starts_with("https://") {
            return Err(CliError::InvalidArgument {
                what: "--url",
                message: format!("{base_url:?} must start with http:// or https://"),
            });
        }
        // https:// uses rustls with the Mozilla roots plus the system's trust store, so a
        // kernel behind a proxy with a private CA works once that CA is installed.
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|error| {
                CliError::Failed(format!("cannot build the HTTP client: {}", chain(&error)))
            })?;
        let streams = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(STREAM_READ_TIMEOUT)
            .build()
            .map_err(|error| {
                CliError::Failed(format!("cannot build the HTTP client: {}", chain(&error)))
            })?;
        let token = config.token().map(str::to_owned);
        Ok(Self {
            http,
            streams,
            base_url,
            token,
        })
    }

    /// Returns the kernel's base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// GETs `path` with `query` and decodes the JSON answer.
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CliError> {
        let request = self.request(&self.http, Method::GET, path).query(query);
        decode(self.send(request).await?).await
    }

    /// POSTs `body` (or no body) to `path` and decodes the JSON answer (`null` when empty).
    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        self.post_with(path, body, &[]).await
    }

    /// POSTs like [`Client::post`], with extra request headers.
    pub async fn post_with(
        &self,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Value, CliError> {
        let mut request = self.request(&self.http, Method::POST, path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request = match body {
            Some(body) => request.json(body),
            // A body-less POST says JSON too: the kernel refuses other state-changing requests.
            None => request.header(reqwest::header::CONTENT_TYPE, "application/json"),
        };
        decode(self.send(request).await?).await
    }

    /// DELETEs `path` and decodes the JSON answer (`null` when empty).
    pub async fn delete(&self, path: &str) -> Result<Value, CliError> {
        let request = self
            .request(&self.http, Method::DELETE, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        decode(self.send(request).await?).await
    }

    /// Opens a streaming GET (SSE) on `path`; an error status is decoded into [`CliError::Api`].
    pub async fn stream(&self, path: &str, query: &[(&str, String)]) -> Result<Response, CliError> {
        let request = self
            .request(&self.streams, Method::GET, path)
            .query(query)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        self.send(request).await
    }

    /// Builds a request with the token.
    fn request(&self, client: &reqwest::Client, method: Method, path: &str) -> RequestBuilder {
        let request = client.request(method, format!("{}{path}", self.base_url));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends a request; a non-2xx answer becomes [`CliError::Api`].
    async fn send(&self, request: RequestBuilder) -> Result<Response, CliError> {
        let response = request
            .send()
            .await
            .map_err(|error| self.transport_error(&error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(api_error(response).await)
    }

    /// Maps a transport failure.
    pub fn transport_error(&self, error: &reqwest::Error) -> CliError {
        CliError::Connect {
            url: self.base_url.clone(),
            message: chain(error),
        }
    }
}

/// Decodes a JSON body; an empty body is `null`.
async fn decode(response: Response) -> Result<Value, CliError> {
    let bytes = response
        .bytes()
        .await
        .map_err(|error| CliError::Decode(chain(&error)))?;
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes)
        .map_err(|error| CliError::Decode(format!("invalid JSON: {error}")))
}

/// Turns an error response into [`CliError::Api`], using the envelope when there is one.
async fn api_error(response: Response) -> CliError {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let envelope: Option<Value> = serde_json::from_str(&text).ok();
    let field = |name: &str| {
        envelope
            .as_ref()
            .and_then(|body| body.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let code = field("code")
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("ERROR").to_uppercase());
    let message = field("error").unwrap_or_else(|| {
        if text.trim().is_empty() {
            "(no body)".to_owned()
        } else {
            text
        }
    });
    let hint = match status {
        StatusCode::UNAUTHORIZED if !message.contains("session") => {
            " (pass --token or set KEEL_TOKEN)"
        }
        _ => "",
    };
    CliError::Api {
        status,
        code,
        message: format!("{message}{hint}"),
    }
}

/// Formats an error with its causes, `outer: inner: innermost`.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Percent-encodes an id for use as one URL path segment.
pub fn path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Reads one SSE connection of `path` and hands `each` every event whose `field` (`sequence` on
/// an execution stream, `position` on the feed) is past `cursor`, moving the cursor on. `each`
/// answers whether to stop; the result says whether it did (otherwise the connection ended).
pub async fn read_stream_after(
    client: &Client,
    path: &str,
    query: &[(&str, String)],
    field: &str,
    cursor: &mut i64,
    mut each: impl FnMut(&str, &serde_json::Value) -> bool,
) -> Result<bool, CliError> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let response = client.stream(path, query).await?;
    let mut events = response.bytes_stream().eventsource();
    while let Some(message) = events.next().await {
        let message = message.map_err(|error| CliError::Connect {
            url: client.base_url().to_owned(),
            message: error.to_string(),
        })?;
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&message.data) else {
            continue;
        };
        let at = event
            .get(field)
            .and_then(serde_json::Value::as_i64)
            .unwrap_or_default();
        if at <= *cursor {
            continue;
        }
        *cursor = at;
        if each(&message.event, &event) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tls_tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn config(url: String) -> ClientConfig {
        ClientConfig::new(url, None)
    }

    #[tokio::test]
    async fn https_urls_are_accepted_and_spoken_over_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = Client::new(&config(format!("https://{address}"))).unwrap();
        let request = tokio::spawn(async move { client.get("/v0/health", &[]).await });
        let (mut socket, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .unwrap()
            .unwrap();
        let mut first = [0u8; 3];
        tokio::time::timeout(Duration::from_secs(10), socket.read_exact(&mut first))
            .await
            .unwrap()
            .unwrap();
        // A TLS handshake record (0x16), version 3.x: a ClientHello, not plain HTTP.
        assert_eq!((first[0], first[1]), (0x16, 0x03), "{first:?}");
        drop(socket);
        assert!(request.await.unwrap().is_err(), "no TLS server answered");
    }

    #[test]
    fn other_schemes_are_refused() {
        let error = Client::new(&config("ftp://kernel".to_owned())).unwrap_err();
        assert!(error.to_string().contains("http:// or https://"), "{error}");
    }
}
