//! Cross-site use (issue 38, item 3): a request a browser sends from another site without a
//! preflight — a `text/plain` or form body, a body-less POST, an `<img>` on a consumer stream —
//! changes nothing and opens no stream, on a kernel without a token; the SDK's requests (JSON
//! content type) and allowed CORS origins still work.

use keel::http::HttpSettings;
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{Options, TestKernel, assert_error};

#[tokio::test]
async fn requests_a_browser_sends_cross_site_without_a_preflight_change_nothing() {
    let kernel = TestKernel::start_with(Options {
        settings: HttpSettings {
            cors_origins: vec!["https://ui.example".to_owned()],
            ..Options::default().settings
        },
        ..Options::default()
    })
    .await;
    let created = kernel.create("victim", json!({})).await;
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    let body = r#"{"agent_id":"victim","input":{}}"#;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut request = kernel.client.post(kernel.url("/v0/executions")).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let response = kernel.send(request).await;
        assert_error(
            &response,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            Some("Content-Type must be application/json"),
        );
    }
    // A body-less cancel (a form or fetch with no-cors) is refused; the execution is untouched.
    let cancel = kernel.url(&format!("/v0/executions/{id}/cancel"));
    let response = kernel.send(kernel.client.post(&cancel)).await;
    assert_eq!(
        response.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        response.1
    );
    assert_eq!(kernel.status(&id).await, "pending");
    // An <img> on the agent stream: the browser marks it cross-site and sends no Origin.
    let stream = kernel
        .client
        .get(kernel.url("/v0/agents/stream?agent_id=victim&consumer_id=img"))
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-dest", "image");
    let response = kernel.send(stream).await;
    assert_error(&response, StatusCode::FORBIDDEN, "FORBIDDEN", None);
    // A page of another origin, even with a JSON body it could only send after a preflight.
    let foreign = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .header("sec-fetch-site", "cross-site")
        .header("origin", "https://evil.example")
        .json(&json!({"agent_id": "victim"}));
    assert_eq!(kernel.send(foreign).await.0, StatusCode::FORBIDDEN);
    let (status, list) = kernel.get("/v0/executions").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        list["executions"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    let (status, agents) = kernel.get("/v0/agents").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !agents.to_string().contains("\"img\""),
        "no consumer was registered: {agents}"
    );

    // What clients send still works: JSON with parameters, a body-less JSON cancel, a
    // body-less DELETE with a custom header, the allowed origin cross-site.
    let allowed = kernel
        .client
        .post(kernel.url("/v0/executions"))
        .header("sec-fetch-site", "cross-site")
        .header("origin", "https://ui.example")
        .header("content-type", "application/json; charset=utf-8")
        .body(body);
    assert_eq!(kernel.send(allowed).await.0, StatusCode::CREATED);
    let response = kernel
        .send(
            kernel
                .client
                .post(&cancel)
                .header("content-type", "application/json"),
        )
        .await;
    assert_eq!(response.0, StatusCode::OK, "{}", response.1);
    assert_eq!(kernel.status(&id).await, "cancelled");
    // A body-less POST with a header only a preflighted request carries (curl users).
    let second = kernel.create("victim", json!({})).await;
    let second_cancel = format!(
        "/v0/executions/{}/cancel",
        second["id"].as_str().unwrap_or_default()
    );
    let response = kernel
        .send(
            kernel
                .client
                .post(kernel.url(&second_cancel))
                .header("keel-client", "curl"),
        )
        .await;
    assert_eq!(response.0, StatusCode::OK, "{}", response.1);
    // DELETE always needs a preflight in a browser: no header is asked of it.
    let response = kernel
        .send(kernel.client.delete(kernel.url("/v0/runners/nobody")))
        .await;
    assert_ne!(
        response.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        response.1
    );
    kernel.shutdown().await;
}
