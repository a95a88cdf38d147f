//! Provider protection: a 429 parks the provider, and requests per minute and the breaker
//! hold calls before they reach it.

use super::*;

#[tokio::test]
async fn a_429_parks_the_provider_so_callers_wait_once_instead_of_retrying_into_it() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), |_| {}).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id").to_owned();
    let call = |kernel: &TestKernel| {
        let request = kernel
            .client
            .post(kernel.url(&chat_path(&id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "busy", "messages": []}));
        async move { request.send().await.expect("sent").status() }
    };
    let started = std::time::Instant::now();
    let first = call(&kernel);
    let others = async {
        // Once the provider has answered the first call's 429, more callers arrive.
        crate::harness::eventually("the first 429", || async {
            (fake.busy_refusals.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
        })
        .await;
        futures::future::join_all((0..5).map(|_| call(&kernel))).await
    };
    let (first, others) = tokio::join!(first, others);
    assert_eq!(
        first,
        StatusCode::OK,
        "the parked call went again after Retry-After"
    );
    assert!(
        others.iter().all(|status| *status == StatusCode::OK),
        "{others:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(
        fake.busy_refusals.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "callers arriving while parked waited instead of calling the provider"
    );
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        7,
        "one 429, its retry, five calls"
    );
}

#[tokio::test]
async fn requests_per_minute_and_the_breaker_hold_calls_before_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let yaml = format!(
        "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    limits:\n      rpm: 3\n      max_wait: 1s\n      breaker_failures: 2\n      breaker_cool_down: 1m\n"
    );
    let kernel = kernel_from_yaml(&yaml).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let call = |model: &'static str| {
        let request = kernel
            .client
            .post(kernel.url(&chat_path(id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": model, "messages": []}));
        async move { request.send().await.expect("sent") }
    };
    assert_eq!(call("gpt-test").await.status(), StatusCode::OK);
    // Two failures in a row open the breaker: the next call is not sent.
    assert_eq!(
        call("broken").await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        call("broken").await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let open = call("gpt-test").await;
    assert_eq!(open.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(open.headers().contains_key("retry-after"));
    let body: Value = open.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "provider_unavailable");
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        3,
        "the open breaker sent nothing"
    );
    let metrics = scrape(&kernel).await;
    assert_eq!(
        refusals(&metrics),
        BTreeMap::from([refused("gpt-test", "breaker", 1.0)]),
        "{metrics}"
    );

    // Three requests in this minute already: a fourth would wait past max_wait (1 s).
    let kernel2 = kernel_with_rpm(&base_url).await;
    let execution = kernel2.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = kernel2
            .client
            .post(kernel2.url(&chat_path(id, "openai")))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "gpt-test", "messages": []}))
            .send()
            .await
            .expect("sent");
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        vec![StatusCode::OK; 2]
            .into_iter()
            .chain([StatusCode::TOO_MANY_REQUESTS])
            .collect::<Vec<_>>()
    );
    assert_eq!(
        refusals(&scrape(&kernel2).await),
        BTreeMap::from([refused("gpt-test", "throttled", 1.0)])
    );
}

async fn kernel_with_rpm(base_url: &str) -> TestKernel {
    let yaml = format!(
        "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    limits:\n      rpm: 2\n      max_wait: 1s\n"
    );
    kernel_from_yaml(&yaml).await
}
