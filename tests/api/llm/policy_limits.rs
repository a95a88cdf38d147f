//! What the policy bounds before a call reaches the provider: the execution's token budget
//! and the models section's allow-list.

use super::*;

fn token_budget(config: &mut keel_actors::kernel::KernelConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "budget:\n  max_cost:\n    tokens: 10\nrules:\n  - id: all\n    priority: 1\n    when: {}\n    then:\n      decision: allow\n",
    )
    .expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}

#[tokio::test]
async fn a_spent_token_budget_refuses_the_next_call_before_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), token_budget).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let call = || chat(&kernel, id, json!({"model": "gpt-test", "messages": []}));
    // 8 tokens: under the 10-token budget, so the second call is allowed too (16 > 10) ...
    assert_eq!(call().await.0, StatusCode::OK);
    llm_calls(&kernel, id, 1).await;
    assert_eq!(call().await.0, StatusCode::OK);
    llm_calls(&kernel, id, 2).await;
    // ... and the third is refused: the spend reached the limit.
    let (status, error) = call().await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["error"]["code"], "budget_exceeded");
    assert!(
        error["error"]["message"]
            .as_str()
            .expect("message")
            .contains("max_cost.tokens 10"),
        "{error}"
    );
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        2,
        "the refused call reached the provider"
    );
    assert_eq!(
        refusals(&scrape(&kernel).await),
        BTreeMap::from([refused("gpt-test", "budget", 1.0)])
    );
    let (_, body) = kernel.get(&format!("/v0/executions/{id}")).await;
    assert_eq!(llm_calls(&kernel, id, 2).await.len(), 2, "{body}");
}

fn allow_one_model(config: &mut keel_actors::kernel::KernelConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "models:\n  allow: [\"openai/gpt-test\", \"local/*\"]\nrules:\n  - id: all\n    priority: 1\n    when: {}\n    then:\n      decision: allow\n",
    )
    .expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}

#[tokio::test]
async fn a_model_outside_the_policys_allow_list_is_refused_before_the_provider() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), allow_one_model).await;
    let execution = kernel.create("llm-agent", json!({})).await;
    let id = execution["id"].as_str().expect("id");
    let kernel = &kernel;
    let call = |model: &str| chat(kernel, id, json!({"model": model, "messages": []}));
    let (status, error) = call("gpt-expensive").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["error"]["code"], "model_not_allowed");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("openai/gpt-expensive") && message.contains("openai/gpt-test"),
        "{message}"
    );
    assert!(
        fake.seen.lock().expect("lock").is_empty(),
        "a refused model reached the provider"
    );
    assert_eq!(
        refusals(&scrape(kernel).await),
        BTreeMap::from([refused("gpt-expensive", "model", 1.0)])
    );
    let (status, answer) = call("gpt-test").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(fake.seen.lock().expect("lock").len(), 1);
}

#[test]
fn a_bad_models_section_stops_the_policy_with_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, "rules: []\nmodels:\n  allow: \"openai/*\"\n").expect("policy written");
    let Err(errors) = keel::policy::load_path(&path) else {
        panic!("a models section that is not a list must not load");
    };
    let text = format!("{errors}");
    assert!(text.contains("models") && text.contains(":2"), "{text}");
}
