//! `keel runner --mcp-url URL`: the MCP server is reached over Streamable HTTP instead of being
//! started over stdio. rmcp's client transport (with its reqwest client) speaks the protocol;
//! this module only builds its configuration: the URL and the headers whose values come from
//! files (`--mcp-header-file NAME=FILE`, e.g. `Authorization`), which are never logged.

use std::collections::HashMap;
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// Where an HTTP MCP server is and what to send it.
#[derive(Clone)]
pub struct HttpTarget {
    /// The server's MCP endpoint (`http://` or `https://`).
    pub url: String,
    /// Headers sent with every request; their values are secrets.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("HttpTarget")
            .field("url", &self.url)
            .field("headers", &names)
            .finish()
    }
}

impl HttpTarget {
    /// Checks the URL and builds the headers from `(name, value)` pairs read from files.
    pub fn new(url: &str, headers: Vec<(String, String)>) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("{url:?} is not an http:// or https:// URL"));
        }
        let mut checked = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a header name"))?;
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| format!("the value of header {name} is not a valid header value"))?;
            value.set_sensitive(true);
            checked.push((header, value));
        }
        Ok(Self {
            url: url.to_owned(),
            headers: checked,
        })
    }
}

/// Connects to the server and runs the MCP handshake with `handler`.
pub async fn connect<H>(
    target: &HttpTarget,
    handler: H,
) -> Result<RunningService<RoleClient, H>, String>
where
    H: rmcp::ClientHandler,
{
    crate::install_tls_provider();
    let headers: HashMap<HeaderName, HeaderValue> = target.headers.iter().cloned().collect();
    let config =
        StreamableHttpClientTransportConfig::with_uri(Arc::<str>::from(target.url.as_str()))
            .custom_headers(headers);
    let transport = StreamableHttpClientTransport::from_config(config);
    handler
        .serve(transport)
        .await
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_check_the_url_and_headers_and_never_show_header_values() {
        let target = HttpTarget::new(
            "https://mcp.example/mcp",
            vec![("Authorization".to_owned(), "Bearer s3cret".to_owned())],
        )
        .expect("valid");
        let shown = format!("{target:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(HttpTarget::new("ftp://x", Vec::new()).is_err());
        assert!(
            HttpTarget::new("http://x", vec![("bad name".to_owned(), "v".to_owned())]).is_err()
        );
        assert!(HttpTarget::new("http://x", vec![("X".to_owned(), "a\nb".to_owned())]).is_err());
    }
}
