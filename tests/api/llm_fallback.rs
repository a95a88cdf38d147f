//! A model's configured fallback answers while the model fails: on a 5xx, and without reaching
//! the failing provider while its breaker is open. The call records which model answered and
//! is priced as that model.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::llm::{Fake, chat, kernel_from_yaml, llm_calls, start_fake};

#[tokio::test]
async fn a_failing_model_hands_its_calls_to_its_fallback_and_the_record_says_so() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    // `broken` always answers 500; one failure opens the primary's breaker.
    let kernel = kernel_from_yaml(&format!(
        "providers:\n  openai:\n    format: openai\n    base_url: {base_url}\n    fallback:\n      broken: backup/gpt-test\n    limits:\n      breaker_failures: 1\n      breaker_cool_down: 60s\n  backup:\n    format: openai\n    base_url: {base_url}\n    prices:\n      gpt-test: {{input: 2.0, output: 10.0}}\n"
    ))
    .await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let call = || chat(&kernel, id, json!({"model": "broken", "messages": []}));
    // The 500 goes to the fallback, which answers.
    let (status, answer) = call().await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "hello");
    let models = |fake: &Fake| -> Vec<String> {
        fake.seen
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, body)| {
                serde_json::from_slice::<Value>(body).expect("JSON")["model"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(models(&fake), ["broken", "gpt-test"]);
    // Now the primary's breaker is open: the fallback answers without the primary being tried.
    let (status, answer) = call().await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(models(&fake), ["broken", "gpt-test", "gpt-test"]);
    let calls = llm_calls(&kernel, id, 2).await;
    for recorded in &calls {
        assert_eq!(recorded["model"], "broken", "{recorded}");
        assert_eq!(recorded["fallback"], "backup/gpt-test", "{recorded}");
        assert_eq!(recorded["outcome"], "ok", "{recorded}");
        // Priced as the fallback's model: 7 input at $2/M + 1 output at $10/M.
        let usd = recorded["cost"]["usd"].as_f64().expect("priced");
        assert!((usd - (7.0 * 2.0 + 10.0) / 1e6).abs() < 1e-12, "{recorded}");
    }
    // A model without a fallback still gets the provider's error.
    let (status, error) = chat(&kernel, id, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(error["error"]["code"], "provider_unavailable", "{error}");
}
