//! Who may call a model through the LLM gateway for an execution (docs/llm.md, docs/security.md):
//! the holder of its live session, an agent key for the execution's agent, or an admin
//! credential. A refused call never reaches the provider and records nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestKernel, running_execution};
use crate::llm::{
    Fake, TOKEN, chat_path, kernel_with, llm_calls, refusals, refused, scrape, start_fake,
};

#[tokio::test]
async fn a_caller_must_hold_the_execution() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    // No token: the session is the only proof a caller holds the execution.
    let kernel = kernel_with(Some(&base_url), None, |_| {}).await;
    let (_agent, mine) = running_execution(&kernel, "llm-holder").await;
    let (_other_agent, other) = running_execution(&kernel, "llm-other").await;
    let call = |session: Option<&str>| {
        let mut request = kernel
            .client
            .post(kernel.url(&chat_path(&mine.execution_id, "openai")))
            .json(&json!({"model": "gpt-test", "messages": []}));
        if let Some(session) = session {
            request = request.header("keel-session", session);
        }
        async move {
            let response = request.send().await.expect("sent");
            (
                response.status(),
                response.json::<Value>().await.expect("JSON"),
            )
        }
    };
    for session in [None, Some(other.session_id.as_str()), Some("not-a-session")] {
        let (status, error) = call(session).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{session:?}: {error}");
        assert_eq!(error["error"]["code"], "not_execution_holder");
    }
    assert!(
        fake.seen.lock().expect("lock").is_empty(),
        "a refused call reached the provider"
    );
    // Counted without the model: a stranger's request does not name label values.
    assert_eq!(
        refusals(&scrape(&kernel).await),
        BTreeMap::from([refused("", "holder", 3.0)])
    );
    let (status, answer) = call(Some(&mine.session_id)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(fake.seen.lock().expect("lock").len(), 1);
    let calls = llm_calls(&kernel, &mine.execution_id, 1).await;
    assert_eq!(calls.len(), 1);
    assert!(
        !kernel
            .event_types(&other.execution_id)
            .await
            .contains(&"llm.called".to_owned()),
        "the other execution recorded nothing"
    );
}

/// Calls the chat route of `execution_id` with `key` and, when given, a `Keel-Session` header.
async fn call_as(
    kernel: &TestKernel,
    key: &str,
    execution_id: &str,
    session: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = kernel
        .client
        .post(kernel.url(&chat_path(execution_id, "openai")))
        .bearer_auth(key)
        .json(&json!({"model": "gpt-test", "messages": []}));
    if let Some(session) = session {
        request = request.header("keel-session", session);
    }
    let response = request.send().await.expect("sent");
    (
        response.status(),
        response.json::<Value>().await.expect("JSON"),
    )
}

#[tokio::test]
async fn an_agent_key_is_refused_for_an_execution_of_an_agent_outside_its_scope() {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), |_| {}).await;
    let (_theirs_agent, theirs) = running_execution(&kernel, "llm-theirs").await;
    let (_mine_agent, mine) = running_execution(&kernel, "llm-mine").await;
    let body = json!({"name": "mine-bot", "role": "agent", "scopes": {"agents": ["llm-mine*"]}});
    let (status, created) = kernel.post("/v0/keys", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let key = created["secret"].as_str().expect("secret").to_owned();

    // Outside its scope: without a session, with the other execution's own (leaked) session,
    // and with a session that holds nothing of it.
    for (execution, session) in [
        (&theirs, None),
        (&theirs, Some(theirs.session_id.as_str())),
        (&mine, Some(theirs.session_id.as_str())),
    ] {
        let (status, error) = call_as(&kernel, &key, &execution.execution_id, session).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{session:?}: {error}");
        assert_eq!(error["error"]["code"], "not_execution_holder", "{error}");
    }
    assert!(
        fake.seen.lock().expect("lock").is_empty(),
        "a refused call reached the provider"
    );
    // The same key for its own agent's execution is answered, and only that call is recorded.
    let (status, answer) = call_as(&kernel, &key, &mine.execution_id, None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(fake.seen.lock().expect("lock").len(), 1);
    let calls = llm_calls(&kernel, &mine.execution_id, 1).await;
    assert_eq!(calls.len(), 1);
    assert!(
        !kernel
            .event_types(&theirs.execution_id)
            .await
            .contains(&"llm.called".to_owned()),
        "the refused execution recorded nothing"
    );
    kernel.shutdown().await;
}
