//! The HTTP side of the hook chain (docs/hooks.md): POSTs a hook's request JSON to its URL,
//! bounded by its timeout, and reads the verdict: `{"decision": "pass"}`,
//! `{"decision": "modify", "arguments": ...}` (pre_tool), `{"decision": "modify", "result":
//! ...}` (post_tool) or `{"decision": "modify", "labels": {...}}` (pre_create),
//! `{"decision": "abort", "reason": "..."}`. Anything else (a connection
//! error, the timeout, a non-2xx status, a body that is not such a verdict) is a failed call,
//! which the hook's failure mode turns into an abort or a pass. Redirects are not followed (a
//! 3xx is a failed call), an answer over the answer limit (`--large-body-limit`) is a failed
//! call, and a failure names only the URL's origin ([`crate::outbound`]). Calls are counted in
//! `keel_hook_calls_total{hook,decision}`.

use async_trait::async_trait;
use keel_actors::hooks::creation::{Labels, labels_to_add};
use keel_actors::hooks::{HookCaller, HookPoint, HookSpec, HookVerdict};
use keel_actors::kernel::Kernel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::Value;

/// Labels of hook calls.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    hook: String,
    decision: String,
}

/// Calls hooks over HTTP.
pub struct HttpHookCaller {
    client: reqwest::Client,
    calls: Family<CallLabels, Counter>,
    answer_limit: usize,
}

impl HttpHookCaller {
    /// Returns a caller (its metrics are registered by [`HttpHookCaller::register`]).
    pub fn new() -> Result<Self, String> {
        Ok(Self {
            client: crate::outbound::client("hook")?,
            calls: Family::default(),
            answer_limit: crate::http::DEFAULT_LARGE_BODY_LIMIT,
        })
    }

    /// Bounds the answers read to `limit` bytes (the kernel uses `--large-body-limit`: a hook
    /// cannot store more arguments or results than an agent could send).
    pub fn with_answer_limit(mut self, limit: usize) -> Self {
        self.answer_limit = limit;
        self
    }

    /// Registers the call counter with `kernel`'s metrics.
    pub fn register(&self, kernel: &Kernel) {
        kernel.metrics().register(
            "hook_calls",
            "Hook calls, by hook and decision (pass, modify, abort, error)",
            self.calls.clone(),
        );
    }

    fn count(&self, hook: &str, decision: &str) {
        self.calls
            .get_or_create(&CallLabels {
                hook: keel_actors::metrics::labels::escape(hook),
                decision: decision.to_owned(),
            })
            .inc();
    }

    async fn post(&self, hook: &HookSpec, request: &Value) -> Result<HookVerdict, String> {
        let response = self
            .client
            .post(&hook.url)
            .timeout(hook.timeout)
            .json(request)
            .send()
            .await
            .map_err(|error| {
                if error.is_timeout() {
                    format!("no answer within {} ms", hook.timeout.as_millis())
                } else {
                    format!(
                        "request to {} failed: {}",
                        crate::outbound::origin(&hook.url),
                        crate::outbound::describe(error)
                    )
                }
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("answered {}", status.as_u16()));
        }
        let bytes = tokio::time::timeout(
            hook.timeout,
            crate::outbound::read_bounded(response, self.answer_limit),
        )
        .await
        .map_err(|_| format!("no answer within {} ms", hook.timeout.as_millis()))??;
        let body: Value = serde_json::from_slice(&bytes)
            .map_err(|error| format!("answer is not JSON: {error}"))?;
        parse_verdict(hook.point, &body, request)
    }
}

/// Reads a verdict body. A `pre_create` modify is checked against the labels the hook was
/// sent (an object of string values, none already set to another value) and carries only the
/// labels it adds.
fn parse_verdict(point: HookPoint, body: &Value, request: &Value) -> Result<HookVerdict, String> {
    let field = match point {
        HookPoint::PreTool => "arguments",
        HookPoint::PostTool => "result",
        HookPoint::PreCreate => "labels",
    };
    match body.get("decision").and_then(Value::as_str) {
        Some("pass") => Ok(HookVerdict::Pass),
        Some("modify") => {
            let value = body
                .get(field)
                .cloned()
                .ok_or_else(|| format!("a modify answer needs `{field}`"))?;
            if point != HookPoint::PreCreate {
                return Ok(HookVerdict::Modify(value));
            }
            let current: Labels = request
                .get("labels")
                .and_then(|labels| serde_json::from_value(labels.clone()).ok())
                .unwrap_or_default();
            let added = labels_to_add(&current, &value)?;
            Ok(HookVerdict::Modify(serde_json::json!(added)))
        }
        Some("abort") => Ok(HookVerdict::Abort(
            body.get("reason")
                .and_then(Value::as_str)
                .filter(|reason| !reason.is_empty())
                .unwrap_or("aborted by hook")
                .to_owned(),
        )),
        _ => Err("answer has no decision pass, modify or abort".to_owned()),
    }
}

#[async_trait]
impl HookCaller for HttpHookCaller {
    async fn call(&self, hook: &HookSpec, request: &Value) -> Result<HookVerdict, String> {
        let verdict = self.post(hook, request).await;
        let decision = match &verdict {
            Ok(HookVerdict::Pass) => "pass",
            Ok(HookVerdict::Modify(_)) => "modify",
            Ok(HookVerdict::Abort(_)) => "abort",
            Err(_) => "error",
        };
        self.count(&hook.id, decision);
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verdicts_are_read_per_point() {
        let none = json!({});
        let read = |point, body: Value| parse_verdict(point, &body, &none);
        assert_eq!(
            read(HookPoint::PreTool, json!({"decision": "pass"})),
            Ok(HookVerdict::Pass)
        );
        let modify = read(
            HookPoint::PreTool,
            json!({"decision": "modify", "arguments": {"a": 1}}),
        );
        assert_eq!(modify, Ok(HookVerdict::Modify(json!({"a": 1}))));
        let result = read(
            HookPoint::PostTool,
            json!({"decision": "modify", "result": 2}),
        );
        assert_eq!(result, Ok(HookVerdict::Modify(json!(2))));
        assert!(
            read(
                HookPoint::PostTool,
                json!({"decision": "modify", "arguments": 2})
            )
            .is_err()
        );
        let abort = read(
            HookPoint::PreTool,
            json!({"decision": "abort", "reason": "no"}),
        );
        assert_eq!(abort, Ok(HookVerdict::Abort("no".to_owned())));
        assert!(read(HookPoint::PreTool, json!({"decision": "maybe"})).is_err());
        assert!(read(HookPoint::PreTool, json!([])).is_err());
    }

    #[test]
    fn pre_create_label_answers_are_checked_against_the_labels_sent() {
        let request = json!({"point": "pre_create", "labels": {"team": "ops"}});
        let read = |body: Value| parse_verdict(HookPoint::PreCreate, &body, &request);
        assert_eq!(
            read(json!({"decision": "modify", "labels": {"tier": "gold", "team": "ops"}})),
            Ok(HookVerdict::Modify(json!({"tier": "gold"})))
        );
        assert!(read(json!({"decision": "modify", "labels": {"team": "dev"}})).is_err());
        assert!(read(json!({"decision": "modify", "labels": {"tier": 1}})).is_err());
        assert!(read(json!({"decision": "modify", "labels": "tier"})).is_err());
        assert!(read(json!({"decision": "modify", "arguments": {}})).is_err());
        assert_eq!(
            read(json!({"decision": "abort", "reason": "quota"})),
            Ok(HookVerdict::Abort("quota".to_owned()))
        );
    }
}
