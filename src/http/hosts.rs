//! The `Host` check (issue 38, item 3: DNS rebinding). A web page on `evil.example` whose
//! name is re-pointed at 127.0.0.1 makes the browser send the kernel same-origin requests with
//! `Host: evil.example`; no CORS rule stops them. So a kernel answers only the names it is
//! known by: IP addresses (a rebinding needs a name), `localhost` and `*.localhost` (browsers
//! resolve them to loopback without asking DNS), `--allowed-hosts`, and its cluster
//! `--advertise-url` host (the other kernels forward with it).
//!
//! The check applies to every request of a kernel that needs no credentials (a rebinding page
//! cannot present a token it does not know), and to every request once `--allowed-hosts` is
//! given. Health and readiness are never refused (probes use whatever name they are given).
//! A request whose `Origin` is neither an allowed CORS origin nor the kernel's own (the origin
//! naming the request's `Host`) is refused too (`cross_site.rs`).

use axum::extract::Request;
use axum::http::header::HOST;

use super::AppState;
use super::error::ApiError;

/// The names a kernel answers besides IP addresses and `localhost`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// Lower-case host names (no port); `*` allows any.
    pub names: Vec<String>,
    /// Check kernels that need credentials too (`--allowed-hosts` was given).
    pub always: bool,
}

impl AllowedHosts {
    /// Whether a `Host` header value (`name`, `name:port`, `1.2.3.4:80`, `[::1]:80`) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        // Compared without a lower-cased copy: this runs on every request of an open kernel.
        let name = host_name(host);
        let name = name.trim_end_matches('.');
        if name.parse::<std::net::IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || ends_with_ignore_case(name, ".localhost")
        {
            return true;
        }
        self.names
            .iter()
            .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(name))
    }
}

/// Whether `text` ends with `suffix`, ASCII case ignored.
fn ends_with_ignore_case(text: &str, suffix: &str) -> bool {
    text.len() >= suffix.len()
        && text.as_bytes()[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// The host part of a `Host` value, without port or IPv6 brackets.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|byte| byte.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Refuses a request whose `Host` the kernel is not known by (see the module notes).
/// `credentials`: whether the kernel needs them for this request.
pub fn check(state: &AppState, request: &Request, credentials: bool) -> Result<(), ApiError> {
    let hosts = &state.settings.allowed_hosts;
    if credentials && !hosts.always {
        return Ok(());
    }
    if matches!(request.uri().path(), "/v0/health" | "/v0/ready") {
        return Ok(());
    }
    let Some(value) = request.headers().get(HOST) else {
        return Ok(());
    };
    let host = match value.to_str() {
        Ok(host) => std::borrow::Cow::Borrowed(host),
        Err(_) => String::from_utf8_lossy(value.as_bytes()),
    };
    if hosts.allows(&host) {
        return Ok(());
    }
    Err(ApiError::Forbidden {
        rule_id: String::new(),
        message: format!(
            "forbidden: Host {host:?} is not a name of this kernel; add it to --allowed-hosts (KEEL_ALLOWED_HOSTS)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::AllowedHosts;

    #[test]
    fn addresses_localhost_and_listed_names_are_allowed() {
        let hosts = AllowedHosts {
            names: vec!["keel.example".to_owned()],
            always: false,
        };
        for good in [
            "127.0.0.1:8080",
            "10.1.2.3",
            "[::1]:8080",
            "localhost:8080",
            "LOCALHOST",
            "app.localhost:3000",
            "keel.example",
            "Keel.Example:443",
            "keel.example.",
        ] {
            assert!(hosts.allows(good), "{good}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "keel.example.evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
        let any = AllowedHosts {
            names: vec!["*".to_owned()],
            always: true,
        };
        assert!(any.allows("evil.example"));
    }
}
