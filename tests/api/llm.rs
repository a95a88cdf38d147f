//! The LLM gateway's OpenAI route against a scripted fake provider on loopback: the body goes
//! upstream unchanged with the provider's key (never the caller's token, never shown back),
//! streams are forwarded chunk by chunk as they arrive, and refusals use OpenAI's error shape.
//!
//! This file holds the shared pieces (kernels with a gateway, calls, scrapes); the tests are in
//! `llm/`, by feature: the OpenAI route, call records, policy limits, replay, other formats and
//! throttling. The fake provider is `llm/fake.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use futures::StreamExt;
use keel::gateway::{Gateway, GatewayConfig};
use keel::http::HttpSettings;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::harness::{Options, TestKernel, WAIT};

pub(crate) const TOKEN: &str = "kernel-token-42";
const KEY: &str = "sk-provider-key-9f3a";

mod fake;
mod formats;
mod openai;
mod policy_limits;
mod records;
mod replay;
mod throttling;

pub(crate) use fake::{Fake, start_fake};

async fn kernel_with_gateway(base_url: Option<&str>) -> TestKernel {
    kernel_with(base_url, Some(TOKEN), |_| {}).await
}

/// A kernel with the gateway (prices for `gpt-test`), the bearer token `token` (none: open)
/// and `kernel` applied to its configuration (a policy).
pub(crate) async fn kernel_with(
    base_url: Option<&str>,
    token: Option<&str>,
    kernel: fn(&mut keel_actors::kernel::KernelConfig),
) -> TestKernel {
    let gateway = base_url.map(|base_url| {
        let yaml = format!(
            "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    api_key_env: FAKE_KEY\n    prices:\n      gpt-test: {{input: 2.0, output: 10.0}}\n    limits:\n      max_wait: 2s\n"
        );
        let config = GatewayConfig::parse(&yaml, Path::new("."), |_| Some(KEY.to_owned()))
            .expect("valid gateway configuration");
        Arc::new(Gateway::new(config).expect("gateway"))
    });
    TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: token.map(str::to_owned),
            heartbeat: Duration::from_millis(300),
            gateway,
            ..HttpSettings::default()
        },
        kernel,
        ..Options::default()
    })
    .await
}

pub(crate) fn chat_path(execution_id: &str, provider: &str) -> String {
    format!("/v0/executions/{execution_id}/llm/{provider}/v1/chat/completions")
}

/// One chat completion with `body` through `execution_id`'s `openai` provider, as an admin:
/// the answer's status and JSON body. The future owns what it needs, so it can be spawned.
pub(crate) fn chat(
    kernel: &TestKernel,
    execution_id: &str,
    body: Value,
) -> impl Future<Output = (StatusCode, Value)> + Send + 'static {
    let request = kernel
        .client
        .post(kernel.url(&chat_path(execution_id, "openai")))
        .bearer_auth(TOKEN)
        .json(&body);
    async move {
        let response = request.send().await.expect("sent");
        (
            response.status(),
            response.json::<Value>().await.expect("JSON"),
        )
    }
}

/// The `llm.called` events of an execution, once `count` are recorded.
pub(crate) async fn llm_calls(kernel: &TestKernel, execution_id: &str, count: usize) -> Vec<Value> {
    crate::harness::eventually("llm.called recorded", || async {
        let calls: Vec<Value> = kernel
            .events(execution_id)
            .await
            .into_iter()
            .filter(|event| event["type"] == "llm.called")
            .map(|event| event["payload"].clone())
            .collect();
        (calls.len() >= count).then_some(calls)
    })
    .await
}

/// The refusal counters of a scrape, by (provider, model, reason).
pub(crate) fn refusals(metrics: &str) -> BTreeMap<(String, String, String), f64> {
    crate::exposition::family(metrics, "keel_llm_refused_total")
        .into_iter()
        .map(|sample| {
            let label = |name: &str| sample.labels.get(name).cloned().unwrap_or_default();
            assert_eq!(sample.labels.len(), 3, "{:?}", sample.labels);
            (
                (label("provider"), label("model"), label("reason")),
                sample.value,
            )
        })
        .collect()
}

/// One expected refusal counter.
pub(crate) fn refused(model: &str, reason: &str, count: f64) -> ((String, String, String), f64) {
    (
        ("openai".to_owned(), model.to_owned(), reason.to_owned()),
        count,
    )
}

pub(crate) async fn scrape(kernel: &TestKernel) -> String {
    kernel
        .client
        .get(kernel.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text")
}

/// A kernel with the bearer token and the gateway configuration `yaml` (every key variable
/// resolves to the provider key).
pub(crate) async fn kernel_from_yaml(yaml: &str) -> TestKernel {
    let config =
        GatewayConfig::parse(yaml, Path::new("."), |_| Some(KEY.to_owned())).expect("valid");
    TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            gateway: Some(Arc::new(Gateway::new(config).expect("gateway"))),
            ..HttpSettings::default()
        },
        ..Options::default()
    })
    .await
}
