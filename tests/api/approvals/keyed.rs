//! What the approval tests with keys share: a kernel with an admin token and a YAML policy,
//! keys of each role, and requests sent with a key.

use std::time::Duration;

use keel::http::HttpSettings;
use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Options, TestKernel};

/// The admin token of the keyed test kernels.
const TOKEN: &str = "approvals-admin-token";

/// Installs `yaml` as the kernel's policy (loaded from a file, like `--policy`) and the
/// tests' step deadline ([`super::STEP_TIMEOUT`]).
pub(super) fn install_policy(config: &mut KernelConfig, yaml: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, yaml).expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
    config.execution.step_timeout = super::STEP_TIMEOUT;
}

/// Options of a kernel that needs credentials (the admin token, then keys), with `kernel`
/// applied to its configuration (its policy).
pub(super) fn keyed(kernel: fn(&mut KernelConfig)) -> Options {
    Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            heartbeat: Duration::from_millis(300),
            ..HttpSettings::default()
        },
        kernel,
        ..Options::default()
    }
}

/// Creates the key `name` with `role` (an agent key serves the agent `deployer`); returns
/// its secret.
pub(super) async fn key(kernel: &TestKernel, name: &str, role: &str) -> String {
    let scopes = if role == "agent" {
        json!({"agents": ["deployer"]})
    } else {
        json!({})
    };
    let body = json!({"name": name, "role": role, "scopes": scopes});
    let (status, body) = kernel.post("/v0/keys", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["secret"].as_str().expect("secret").to_owned()
}

/// `POST path` with `body`, authenticated with `secret`.
pub(super) async fn post_as(
    kernel: &TestKernel,
    secret: &str,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let response = kernel
        .client
        .post(kernel.url(path))
        .bearer_auth(secret)
        .json(body)
        .send()
        .await
        .expect("sent");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The console view at `path` (its HTML) as `secret` sees it.
pub(super) async fn view_as(kernel: &TestKernel, secret: &str, path: &str) -> String {
    let request = kernel.client.get(kernel.url(path)).bearer_auth(secret);
    let response = request.send().await.expect("view sent");
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.text().await.expect("html")
}
