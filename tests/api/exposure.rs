//! What a kernel exposes to the network (issue 38, item 3): the `Host` names it answers (DNS
//! rebinding), the origins a browser may call it from (`keel dev` included), and `keel serve`
//! refusing to listen beyond loopback without credentials unless told to.

use std::process::Stdio;
use std::time::Duration;

use keel::http::HttpSettings;
use keel::http::hosts::AllowedHosts;
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{Options, TestKernel, assert_error};

/// The port of a test kernel's base URL.
fn port(kernel: &TestKernel) -> String {
    kernel
        .base_url
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `POST /v0/executions` naming `host`, as the SDK would send it.
async fn create_as(kernel: &TestKernel, host: &str) -> (StatusCode, serde_json::Value) {
    let request = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .header("host", host)
        .json(&json!({"agent_id": "a", "input": {}}));
    kernel.send(request).await
}

async fn execution_count(kernel: &TestKernel) -> usize {
    let (status, list) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["executions"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_kernel_without_credentials_answers_only_its_own_names() {
    let kernel = TestKernel::start().await;
    let port = port(&kernel);
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "127.0.0.1.nip.io",
    ] {
        let response = create_as(&kernel, host).await;
        let expected = format!(
            "forbidden: Host {host:?} is not a name of this kernel; add it to --allowed-hosts (KEEL_ALLOWED_HOSTS)"
        );
        assert_error(
            &response,
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            Some(&expected),
        );
        let read = kernel
            .send(
                kernel
                    .client
                    .get(kernel.url("/v0/executions"))
                    .header("host", host),
            )
            .await;
        assert_eq!(read.0, StatusCode::FORBIDDEN, "{host}: {}", read.1);
        let stream = kernel
            .client
            .get(kernel.url("/v0/agents/stream?agent_id=a&consumer_id=rebound"))
            .header("host", host);
        assert_eq!(kernel.send(stream).await.0, StatusCode::FORBIDDEN);
    }
    assert_eq!(execution_count(&kernel).await, 0, "nothing was created");
    // Probes use whatever name they were given.
    for path in ["/v0/health", "/v0/ready"] {
        let probe = kernel
            .client
            .get(kernel.url(path))
            .header("host", "evil.example");
        assert_eq!(kernel.send(probe).await.0, StatusCode::OK, "{path}");
    }
    // Addresses and localhost are the kernel's own.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("console.localhost:{port}"),
    ] {
        let response = create_as(&kernel, &host).await;
        assert_eq!(response.0, StatusCode::CREATED, "{host}: {}", response.1);
    }
    assert_eq!(execution_count(&kernel).await, 3);
    kernel.shutdown().await;
}

#[tokio::test]
async fn allowed_hosts_add_names_and_apply_to_kernels_with_credentials() {
    let listed = TestKernel::start_with(Options {
        settings: HttpSettings {
            allowed_hosts: AllowedHosts {
                names: vec!["keel.example".to_owned()],
                always: true,
            },
            bearer_token: Some("tok".to_owned()),
            ..Options::default().settings
        },
        ..Options::default()
    })
    .await;
    let response = create_as(&listed, "Keel.Example").await;
    assert_eq!(response.0, StatusCode::CREATED, "{}", response.1);
    let response = create_as(&listed, "evil.example").await;
    assert_eq!(response.0, StatusCode::FORBIDDEN, "{}", response.1);
    assert_eq!(execution_count(&listed).await, 1);
    listed.shutdown().await;

    // With credentials and no --allowed-hosts, any name is served (a rebinding page has no
    // token): a kernel behind a load balancer's name keeps working.
    let token = TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some("tok".to_owned()),
            ..Options::default().settings
        },
        ..Options::default()
    })
    .await;
    let response = create_as(&token, "keel.internal.example").await;
    assert_eq!(response.0, StatusCode::CREATED, "{}", response.1);
    token.shutdown().await;
}

#[tokio::test]
async fn a_foreign_origin_without_fetch_metadata_changes_nothing_and_opens_no_stream() {
    let kernel = TestKernel::start().await;
    let created = kernel.create("victim", json!({})).await;
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    // An older browser: an EventSource or fetch from another page names its Origin only.
    let foreign = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .header("origin", "http://evil.example")
        .json(&json!({"agent_id": "victim"}));
    assert_eq!(kernel.send(foreign).await.0, StatusCode::FORBIDDEN);
    let event_source = kernel
        .client
        .get(kernel.url("/v0/agents/stream?agent_id=victim&consumer_id=es"))
        .header("origin", "http://evil.example")
        .header("accept", "text/event-stream");
    assert_eq!(kernel.send(event_source).await.0, StatusCode::FORBIDDEN);
    // An <img> from a page of the same site (another port of localhost).
    let image = kernel
        .client
        .get(kernel.url("/v0/agents/stream?agent_id=victim&consumer_id=img"))
        .header("sec-fetch-site", "same-site")
        .header("sec-fetch-mode", "no-cors")
        .header("sec-fetch-dest", "image")
        .header("accept", "image/avif,image/webp,image/*,*/*;q=0.8");
    assert_error(
        &kernel.send(image).await,
        StatusCode::FORBIDDEN,
        "FORBIDDEN",
        None,
    );
    let (_, agents) = kernel.get("/v0/agents").await;
    assert!(
        !agents.to_string().contains("\"es\"") && !agents.to_string().contains("\"img\""),
        "no consumer was registered: {agents}"
    );
    assert_eq!(kernel.status(&id).await, "pending", "nothing took it");
    // The kernel's own page (its console) names its own origin.
    let own = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .header("origin", kernel.base_url.as_str())
        .json(&json!({"agent_id": "victim"}));
    let response = kernel.send(own).await;
    assert_eq!(response.0, StatusCode::CREATED, "{}", response.1);
    assert_eq!(execution_count(&kernel).await, 2);
    kernel.shutdown().await;
}

/// A `keel` command with no `KEEL_*` or `RUST_LOG` from the test's environment.
fn keel(args: &[&str], data_dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
    for (name, _) in std::env::vars() {
        if name.starts_with("KEEL_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command
        .args(args)
        .args(["--port", "0", "--log-format", "text", "--data-dir"])
        .arg(data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Reads the kernel's log until it is ready; returns the address it listens on and the log
/// so far.
async fn listening(child: &mut Child) -> (Option<String>, String) {
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let address = tokio::time::timeout(Duration::from_secs(30), async {
        let mut address = None;
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
            if let Some((_, rest)) = line.split_once("listening on ") {
                address = rest.split_whitespace().next().map(str::to_owned);
            }
            if line.contains("kernel ready") {
                return address;
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    (address, seen)
}

#[tokio::test]
async fn serve_without_credentials_listens_beyond_loopback_only_when_told() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        keel(&["serve", "--bind", "0.0.0.0"], dir.path()).output(),
    )
    .await
    .expect("keel exits in time")
    .expect("keel runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:")
            && stderr.contains("--allow-unauthenticated"),
        "{stderr}"
    );

    for (flag, env) in [
        (Some("--allow-unauthenticated"), None),
        (None, Some("true")),
    ] {
        let mut command = keel(&["serve", "--bind", "0.0.0.0"], dir.path());
        command.args(flag);
        if let Some(value) = env {
            command.env("KEEL_ALLOW_UNAUTHENTICATED", value);
        }
        let mut child = command.spawn().expect("keel starts");
        let (address, seen) = listening(&mut child).await;
        let _ = child.kill().await;
        assert!(address.is_some(), "{flag:?} {env:?}: {seen}");
        assert!(
            seen.contains("no --bearer-token: anyone who can reach this address"),
            "warned: {seen}"
        );
    }
    // Loopback needs no flag; a token neither.
    for args in [
        &["serve", "--bind", "127.0.0.1"][..],
        &["serve", "--bind", "0.0.0.0", "--bearer-token", "tok"][..],
    ] {
        let mut child = keel(args, dir.path()).spawn().expect("keel starts");
        let (address, seen) = listening(&mut child).await;
        let _ = child.kill().await;
        assert!(address.is_some(), "{args:?}: {seen}");
    }
}

#[tokio::test]
async fn keel_dev_allows_only_its_own_origin_by_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = keel(&["dev"], dir.path()).spawn().expect("keel starts");
    let (address, seen) = listening(&mut child).await;
    let address = address.unwrap_or_else(|| panic!("keel dev listens: {seen}"));
    let client = reqwest::Client::new();
    let url = format!("http://{address}/v0/executions");
    let foreign = client
        .get(&url)
        .header("origin", "https://evil.example")
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .expect("answer");
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    assert!(
        foreign
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "no CORS grant: {:?}",
        foreign.headers()
    );
    let own = client
        .post(&url)
        .header("origin", format!("http://{address}"))
        .header("sec-fetch-site", "same-origin")
        .json(&json!({"agent_id": "a"}))
        .send()
        .await
        .expect("answer");
    assert_eq!(own.status(), StatusCode::CREATED);
    let _ = child.kill().await;
}
