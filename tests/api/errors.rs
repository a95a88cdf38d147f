//! Cross-cutting behaviour: bearer authentication on every route (WIRE.md §2), request ids and
//! CORS (§1.3), routing details (§1.4) and the observability routes (§5).

use std::time::Duration;

use keel::http::HttpSettings;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Options, TestKernel, assert_error, eventually};

const TOKEN: &str = "s3cret-token";

fn with_token() -> Options {
    Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            heartbeat: Duration::from_millis(300),
            ..HttpSettings::default()
        },
        ..Options::default()
    }
}

/// Every route of WIRE.md §4 except health and ready.
pub fn protected_routes() -> Vec<(Method, String)> {
    let id = "0196f1c2-0000-7000-8000-000000000000";
    vec![
        (Method::GET, "/metrics".to_owned()),
        (Method::GET, "/v0/openapi.json".to_owned()),
        (Method::POST, "/v0/executions".to_owned()),
        (Method::GET, "/v0/executions".to_owned()),
        (Method::GET, format!("/v0/executions/{id}")),
        (Method::POST, format!("/v0/executions/{id}/cancel")),
        (Method::POST, format!("/v0/executions/{id}/signal")),
        (Method::GET, format!("/v0/executions/{id}/events")),
        (Method::GET, format!("/v0/executions/{id}/stream")),
        (Method::GET, "/v0/events".to_owned()),
        (Method::GET, "/v0/events/stream".to_owned()),
        (
            Method::GET,
            "/v0/agents/stream?agent_id=a&consumer_id=c".to_owned(),
        ),
        (Method::POST, "/v0/agents/intent".to_owned()),
        (Method::POST, "/v0/agents/step-result".to_owned()),
        (
            Method::GET,
            "/v0/runners/stream?runner_id=r&consumer_id=c".to_owned(),
        ),
        (Method::POST, "/v0/runners/r/results".to_owned()),
        (Method::POST, "/v0/runners/steps/s/started".to_owned()),
        (Method::POST, "/v0/runners/r/capabilities".to_owned()),
        (Method::POST, "/v0/runners/r/tools".to_owned()),
        (Method::DELETE, "/v0/runners/r".to_owned()),
        (Method::GET, "/v0/tools".to_owned()),
        (Method::GET, "/v0/no-such-route".to_owned()),
    ]
}

#[tokio::test]
async fn every_route_but_health_and_ready_needs_the_bearer_token() {
    let kernel = TestKernel::start_with(with_token()).await;
    let bad_headers = [
        None,
        Some("Bearer  s3cret-token"),
        Some("Basic s3cret-token"),
        Some("s3cret-token"),
        Some("Bearer "),
        Some("Bearer s3cret-toke"),
    ];
    for (method, path) in protected_routes() {
        for header in bad_headers {
            let mut request = kernel
                .client
                .request(method.clone(), kernel.url(&path))
                .json(&json!({}));
            if let Some(header) = header {
                request = request.header("authorization", header);
            }
            let response = request.send().await.unwrap();
            let status = response.status();
            assert_eq!(
                response
                    .headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().unwrap()),
                Some("Bearer realm=\"keel\""),
                "{method} {path}"
            );
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {header:?}"
            );
            assert_eq!(
                body,
                json!({"error": "unauthorized", "code": "UNAUTHORIZED"}),
                "{method} {path}"
            );
        }
    }
    assert_eq!(
        kernel
            .client
            .get(kernel.url("/v0/health"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        kernel
            .client
            .get(kernel.url("/v0/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    // With the token, the same routes get past authentication; the scheme's case does not
    // matter (RFC 7235).
    let (status, _) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::OK);
    for scheme in ["bearer", "BEARER"] {
        let response = kernel
            .client
            .get(kernel.url("/v0/executions"))
            .header("authorization", format!("{scheme} {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{scheme}");
    }
    let response = kernel
        .client
        .get(kernel.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = kernel
        .sse("/v0/agents/stream?agent_id=a&consumer_id=c")
        .await;
    stream.wait_raw("retry: 5000").await;
    let (status, _) = kernel.get("/v0/executions?limit=1").await;
    assert_eq!(status, StatusCode::OK);
    // Nothing was created by the rejected requests.
    let (_, list) = kernel.get("/v0/executions").await;
    assert_eq!(list["executions"], json!([]));
    kernel.shutdown().await;
}

#[tokio::test]
async fn request_ids_are_echoed_or_generated() {
    let kernel = TestKernel::start().await;
    let response = kernel
        .client
        .get(kernel.url("/v0/health"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "abc-123");
    let long = "r".repeat(129);
    let response = kernel
        .client
        .get(kernel.url("/v0/health"))
        .header("x-request-id", &long)
        .send()
        .await
        .unwrap();
    let generated = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(generated, long);
    uuid::Uuid::parse_str(&generated).expect("a fresh UUID");
    let exactly_128 = "q".repeat(128);
    let response = kernel
        .client
        .get(kernel.url("/v0/executions"))
        .header("x-request-id", &exactly_128)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], exactly_128.as_str());
    // Errors carry it too.
    let response = kernel
        .client
        .get(kernel.url("/v0/executions/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    uuid::Uuid::parse_str(response.headers()["x-request-id"].to_str().unwrap()).expect("uuid");
    kernel.shutdown().await;
}

#[tokio::test]
async fn cors_answers_options_before_authentication() {
    let mut options = with_token();
    options.settings.cors_origins = vec!["https://ui.example".to_owned()];
    let kernel = TestKernel::start_with(options).await;
    let response = kernel
        .client
        .request(Method::OPTIONS, kernel.url("/v0/executions"))
        .header("origin", "https://ui.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let headers = response.headers();
    assert_eq!(headers["access-control-allow-origin"], "https://ui.example");
    assert_eq!(
        headers["access-control-allow-methods"],
        "GET, POST, PUT, DELETE, OPTIONS"
    );
    assert_eq!(
        headers["access-control-allow-headers"],
        "Content-Type, Authorization, X-Request-ID"
    );
    assert_eq!(headers["access-control-max-age"], "86400");
    let response = kernel
        .client
        .get(kernel.url("/v0/health"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn health_ready_and_metrics() {
    let kernel = TestKernel::start().await;
    let response = kernel
        .client
        .get(kernel.url("/v0/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"status": "ok"})
    );
    assert_eq!(
        kernel.get("/v0/ready").await,
        (StatusCode::OK, json!({"status": "ready"}))
    );
    kernel.create("metered", json!(null)).await;
    let metrics = || async {
        let response = kernel
            .client
            .get(kernel.url("/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        response.text().await.unwrap()
    };
    let text = metrics().await;
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains(r#"keel_executions_total{status="created"} 1"#),
        "{text}"
    );
    // Open SSE connections are counted by kind while they live.
    let stream = kernel
        .sse("/v0/agents/stream?agent_id=m&consumer_id=c")
        .await;
    assert!(
        metrics()
            .await
            .contains(r#"keel_sse_connections{kind="agent"} 1"#)
    );
    drop(stream);
    eventually("the closed stream is no longer counted", || async {
        metrics()
            .await
            .contains(r#"keel_sse_connections{kind="agent"} 0"#)
            .then_some(())
    })
    .await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_are_json_404s_and_wrong_methods_405() {
    let kernel = TestKernel::start().await;
    assert_error(
        &kernel.get("/v0/nothing-here").await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        None,
    );
    let response = kernel
        .client
        .put(kernel.url("/v0/executions"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    // The envelope like every other error; the Allow header stays.
    let allow = response.headers()["allow"].to_str().unwrap().to_owned();
    assert!(allow.contains("POST") && allow.contains("GET"), "{allow}");
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], "METHOD_NOT_ALLOWED", "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.starts_with("method PUT is not allowed on this path"),
        "{message}"
    );
    kernel.shutdown().await;
}
