//! The webhook subscriptions file (`--webhooks PATH`, docs/events.md): a YAML document with a
//! `subscriptions` list. Unknown keys are refused, so a typo never silently drops a filter.
//!
//! ```yaml
//! subscriptions:
//!   - id: approvals-to-chat
//!     url: https://chat.example.com/hooks/keel
//!     secret_env: CHAT_WEBHOOK_SECRET   # or `secret: ...` inline
//!     types: [step.approval_required]
//!     agent_id: assistant                # optional
//!     labels: {team: billing}            # optional, every pair must match
//!     start: latest                      # or `beginning`; used only the first time
//!     timeout: 10s                       # per delivery attempt
//!     max_backoff: 1m                    # retries back off from 500ms up to this
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use keel_actors::policy::rules::parse_duration;
use serde::Deserialize;

use crate::feed::{FeedFilter, TypePatterns};
use keel_actors::ids::{AgentId, ExecutionId};

/// Where a subscription without an acknowledged position starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Start {
    /// Only events committed after the subscription first runs.
    #[default]
    Latest,
    /// Every event still in the log.
    Beginning,
}

/// One validated subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// Unique id; names the acknowledged position in the store.
    pub id: String,
    /// Endpoint every matching event is POSTed to.
    pub url: String,
    /// HMAC-SHA256 key of the signatures.
    pub secret: String,
    /// Which events are delivered.
    pub filter: FeedFilter,
    /// Where a new subscription starts.
    pub start: Start,
    /// Bound of one delivery attempt.
    pub timeout: Duration,
    /// First retry delay (doubles per failed attempt).
    pub min_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    subscriptions: Vec<SubscriptionSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscriptionSpec {
    id: String,
    url: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    secret_env: Option<String>,
    #[serde(default)]
    types: Vec<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    execution_id: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    min_backoff: Option<String>,
    #[serde(default)]
    max_backoff: Option<String>,
}

/// Default bound of one delivery attempt.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default first retry delay.
const DEFAULT_MIN_BACKOFF: Duration = Duration::from_millis(500);
/// Default longest retry delay.
const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Reads and validates the file at `path`. The error lists every problem found.
pub fn load_file(path: &Path) -> Result<Vec<Subscription>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read webhooks file {}: {error}", path.display()))?;
    parse(&text, |name| std::env::var(name).ok())
        .map_err(|error| format!("webhooks file {}: {error}", path.display()))
}

/// Parses and validates a subscriptions document; `env` looks up `secret_env` variables.
pub fn parse(
    text: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Subscription>, String> {
    let spec: FileSpec = if text.trim().is_empty() {
        FileSpec {
            subscriptions: Vec::new(),
        }
    } else {
        yaml_serde::from_str(text).map_err(|error| error.to_string())?
    };
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    let mut subscriptions = Vec::new();
    for (index, item) in spec.subscriptions.into_iter().enumerate() {
        let name = if item.id.is_empty() {
            format!("subscription #{}", index + 1)
        } else {
            format!("subscription {:?}", item.id)
        };
        match validate(item, &env) {
            Ok(subscription) => {
                if seen.insert(subscription.id.clone()) {
                    subscriptions.push(subscription);
                } else {
                    problems.push(format!("{name}: the id is used twice"));
                }
            }
            Err(errors) => problems.extend(errors.into_iter().map(|e| format!("{name}: {e}"))),
        }
    }
    if problems.is_empty() {
        Ok(subscriptions)
    } else {
        Err(problems.join("; "))
    }
}

fn validate(
    item: SubscriptionSpec,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Subscription, Vec<String>> {
    let mut problems = Vec::new();
    if item.id.is_empty()
        || !item
            .id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
    {
        problems.push("id must be non-empty letters, digits, `-`, `_` or `.`".to_owned());
    }
    match url::Url::parse(&item.url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
        _ => problems.push(format!(
            "url {:?} must be an http:// or https:// URL",
            item.url
        )),
    }
    let secret = match (&item.secret, &item.secret_env) {
        (Some(secret), None) if !secret.is_empty() => secret.clone(),
        (None, Some(name)) => match env(name) {
            Some(secret) if !secret.is_empty() => secret,
            _ => {
                problems.push(format!("secret_env {name} is not set or empty"));
                String::new()
            }
        },
        _ => {
            problems.push("exactly one of secret and secret_env must be given".to_owned());
            String::new()
        }
    };
    let types = TypePatterns::parse(&item.types).unwrap_or_else(|error| {
        problems.push(error.to_string());
        TypePatterns::default()
    });
    let start = match item.start.as_deref() {
        None | Some("latest") => Start::Latest,
        Some("beginning") => Start::Beginning,
        Some(other) => {
            problems.push(format!("start {other:?} must be latest or beginning"));
            Start::Latest
        }
    };
    let mut duration = |name: &str, text: Option<&str>, default: Duration| match text {
        None => default,
        Some(text) => parse_duration(text.trim()).unwrap_or_else(|error| {
            problems.push(format!("{name}: {error}"));
            default
        }),
    };
    let timeout = duration("timeout", item.timeout.as_deref(), DEFAULT_TIMEOUT);
    let min_backoff = duration(
        "min_backoff",
        item.min_backoff.as_deref(),
        DEFAULT_MIN_BACKOFF,
    );
    let max_backoff = duration(
        "max_backoff",
        item.max_backoff.as_deref(),
        DEFAULT_MAX_BACKOFF,
    );
    if min_backoff > max_backoff {
        problems.push("min_backoff must not exceed max_backoff".to_owned());
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Subscription {
        id: item.id,
        url: item.url,
        secret,
        filter: FeedFilter {
            types,
            agent_id: item.agent_id.map(AgentId::new),
            execution_id: item.execution_id.map(ExecutionId::new),
            labels: item.labels.into_iter().collect(),
        },
        start,
        timeout,
        min_backoff,
        max_backoff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_subscription_parses() {
        let text = "subscriptions:\n  - id: chat\n    url: http://127.0.0.1:9/x\n    \
                    secret_env: S\n    types: [step.approval_required, '*.failed']\n    \
                    agent_id: a\n    labels: {team: t}\n    start: beginning\n    \
                    timeout: 2s\n    max_backoff: 1m\n";
        let parsed = parse(text, |name| (name == "S").then(|| "k".to_owned())).expect("valid");
        assert_eq!(parsed.len(), 1);
        let sub = &parsed[0];
        assert_eq!(sub.secret, "k");
        assert_eq!(sub.start, Start::Beginning);
        assert_eq!(sub.timeout, Duration::from_secs(2));
        assert_eq!(sub.max_backoff, Duration::from_secs(60));
        assert!(sub.filter.types.matches("execution.failed"));
        assert!(!sub.filter.types.matches("step.created"));
        assert_eq!(sub.filter.labels, vec![("team".to_owned(), "t".to_owned())]);
    }

    #[test]
    fn every_problem_is_reported() {
        let text = "subscriptions:\n  - id: a\n    url: ftp://x\n    types: ['st*']\n  \
                    - id: a\n    url: http://h\n    secret: s\n  - id: a\n    url: http://h\n    secret: s\n";
        let error = parse(text, |_| None).expect_err("invalid");
        assert!(error.contains("ftp://x"), "{error}");
        assert!(error.contains("secret"), "{error}");
        assert!(error.contains("pattern"), "{error}");
        assert!(error.contains("used twice"), "{error}");
        let error = parse(
            "subscriptions:\n  - id: a\n    url: http://h\n    secret: s\n    typo: 1\n",
            |_| None,
        )
        .expect_err("unknown key");
        assert!(error.contains("typo"), "{error}");
    }

    #[test]
    fn an_empty_file_has_no_subscriptions() {
        assert_eq!(parse("", |_| None).expect("valid"), Vec::new());
        assert_eq!(
            parse("subscriptions: []", |_| None).expect("valid"),
            Vec::new()
        );
    }
}
