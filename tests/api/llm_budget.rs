//! Budgets of model calls under `on_exceed: require_approval`: a call that finds the budget
//! spent blocks the execution on an operator's `budget.approve` and waits for it, bounded by
//! `approval_wait`; `max_tokens` counts the tokens of the execution's model calls.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{
    TestAgent, TestKernel, eventually, install_allow_all_policy, running_execution,
};
use crate::llm::{Fake, TOKEN, chat, kernel_with, llm_calls, start_fake};

/// 10 model tokens, then a wait of up to 20 s for a raise (the fake answers 8 tokens a call).
fn approval_budget(config: &mut keel_actors::kernel::KernelConfig) {
    install_allow_all_policy(
        config,
        "budget:\n  max_tokens: 10\n  on_exceed: require_approval\n  approval_wait: 20s\n",
    );
}

/// 5 model tokens, then a wait of up to 1 s.
fn short_wait_budget(config: &mut keel_actors::kernel::KernelConfig) {
    install_allow_all_policy(
        config,
        "budget:\n  max_tokens: 5\n  on_exceed: require_approval\n  approval_wait: 1s\n",
    );
}

/// One chat call of `gpt-test` by `id`; returns status and body.
async fn call(kernel: &TestKernel, id: &str) -> (StatusCode, Value) {
    chat(kernel, id, json!({"model": "gpt-test", "messages": []})).await
}

/// A fake provider, a kernel with the gateway and `budget`, and an execution an agent holds.
struct Setup {
    fake: Arc<Fake>,
    kernel: TestKernel,
    /// Holds the execution: bind it (as `_agent`) for the whole test.
    _agent: TestAgent,
    id: String,
}

async fn setup(budget: fn(&mut keel_actors::kernel::KernelConfig)) -> Setup {
    let fake = Arc::new(Fake::default());
    let base_url = start_fake(fake.clone()).await;
    let kernel = kernel_with(Some(&base_url), Some(TOKEN), budget).await;
    let (agent, assignment) = running_execution(&kernel, "llm-agent").await;
    Setup {
        fake,
        kernel,
        _agent: agent,
        id: assignment.execution_id,
    }
}

/// The payloads of `type_name` events of the execution.
async fn payloads(kernel: &TestKernel, id: &str, type_name: &str) -> Vec<Value> {
    kernel
        .events(id)
        .await
        .into_iter()
        .filter(|event| event["type"] == type_name)
        .map(|event| event["payload"].clone())
        .collect()
}

#[tokio::test]
async fn a_spent_budget_blocks_the_execution_until_an_operator_raises_it() {
    let Setup {
        fake,
        kernel,
        _agent,
        id,
    } = setup(approval_budget).await;
    // 8 + 8 tokens: the second call starts under the limit and crosses it.
    assert_eq!(call(&kernel, &id).await.0, StatusCode::OK);
    llm_calls(&kernel, &id, 1).await;
    assert_eq!(call(&kernel, &id).await.0, StatusCode::OK);
    llm_calls(&kernel, &id, 2).await;
    // The third waits: the execution blocks on a raise, the provider sees nothing.
    let waiting = tokio::spawn(chat(
        &kernel,
        &id,
        json!({"model": "gpt-test", "messages": []}),
    ));
    eventually("the execution blocks on the budget", || async {
        (kernel.status(&id).await == "blocked").then_some(())
    })
    .await;
    let blocked = payloads(&kernel, &id, "execution.blocked").await;
    assert_eq!(
        blocked.last(),
        Some(&json!({"reason": "budget", "ref": "max_tokens"})),
        "{blocked:?}"
    );
    assert!(!waiting.is_finished(), "the call did not wait");
    assert_eq!(fake.seen.lock().expect("lock").len(), 2);
    // A grant without new limits is refused and changes nothing.
    let signal = format!("/v0/executions/{id}/signal");
    let (status, body) = kernel
        .post(
            &signal,
            &json!({"signal_type": "budget.approve", "payload": {"approved": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("max_tokens"),
        "{body}"
    );
    assert_eq!(kernel.status(&id).await, "blocked");
    assert!(payloads(&kernel, &id, "budget.raised").await.is_empty());
    // The raise lets the waiting call through.
    let (status, body) = kernel
        .post(
            &signal,
            &json!({"signal_type": "budget.approve",
                    "payload": {"approved": true, "max_tokens": 100}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, answer) = tokio::time::timeout(crate::harness::WAIT, waiting)
        .await
        .expect("the waiting call ends")
        .expect("task");
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "hello");
    assert_eq!(fake.seen.lock().expect("lock").len(), 3);
    assert_eq!(
        payloads(&kernel, &id, "budget.raised").await,
        vec![json!({"max_tokens": 100})]
    );
    let resumed = payloads(&kernel, &id, "execution.resumed").await;
    assert!(
        resumed.contains(&json!({"reason": "budget raised"})),
        "{resumed:?}"
    );
    llm_calls(&kernel, &id, 3).await;
    assert_eq!(kernel.status(&id).await, "running");
    // The raised limit is the execution's budget from now on.
    let (_, execution) = kernel.get(&format!("/v0/executions/{id}")).await;
    assert_eq!(execution["budget"]["used"]["tokens"], 24, "{execution}");
    assert_eq!(
        execution["budget"]["remaining"]["tokens"], 76,
        "{execution}"
    );
}

#[tokio::test]
async fn a_denied_raise_fails_the_waiting_call_and_the_execution_runs_on() {
    let Setup {
        fake,
        kernel,
        _agent,
        id,
    } = setup(approval_budget).await;
    for _ in 0..2 {
        assert_eq!(call(&kernel, &id).await.0, StatusCode::OK);
    }
    llm_calls(&kernel, &id, 2).await;
    let waiting = tokio::spawn(chat(
        &kernel,
        &id,
        json!({"model": "gpt-test", "messages": []}),
    ));
    eventually("the execution blocks on the budget", || async {
        (kernel.status(&id).await == "blocked").then_some(())
    })
    .await;
    let (status, body) = kernel
        .post(
            &format!("/v0/executions/{id}/signal"),
            &json!({"signal_type": "budget.approve", "payload": {"approved": false}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, error) = tokio::time::timeout(crate::harness::WAIT, waiting)
        .await
        .expect("the waiting call ends")
        .expect("task");
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["error"]["code"], "budget_exceeded");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(message.contains("max_tokens 10 reached"), "{message}");
    assert!(message.contains("denied"), "{message}");
    assert_eq!(
        fake.seen.lock().expect("lock").len(),
        2,
        "the denied call went upstream"
    );
    assert!(
        payloads(&kernel, &id, "execution.resumed")
            .await
            .contains(&json!({"reason": "budget raise denied"}))
    );
    assert_eq!(kernel.status(&id).await, "running");
}

#[tokio::test]
async fn a_raise_nobody_answers_fails_the_call_after_the_wait_and_unblocks_the_execution() {
    let Setup {
        fake,
        kernel,
        _agent,
        id,
    } = setup(short_wait_budget).await;
    assert_eq!(call(&kernel, &id).await.0, StatusCode::OK);
    llm_calls(&kernel, &id, 1).await;
    let (status, error) = call(&kernel, &id).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["error"]["code"], "budget_exceeded");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("max_tokens 5 reached (8 model tokens used)")
            && message.contains("no budget.approve raised it within 1 s"),
        "{message}"
    );
    assert_eq!(fake.seen.lock().expect("lock").len(), 1);
    let types = kernel.event_types(&id).await;
    let tail: Vec<&str> = types
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        ["execution.blocked", "execution.resumed"],
        "{types:?}"
    );
    assert!(
        payloads(&kernel, &id, "execution.resumed")
            .await
            .contains(&json!({"reason": "budget approval timed out"}))
    );
    assert_eq!(kernel.status(&id).await, "running");
}

/// 100 model tokens, refused once spent.
fn hundred_tokens(config: &mut keel_actors::kernel::KernelConfig) {
    install_allow_all_policy(config, "budget:\n  max_tokens: 100\n");
}

#[tokio::test]
async fn concurrent_calls_at_the_budget_edge_overshoot_by_at_most_one_call() {
    let Setup {
        fake,
        kernel,
        _agent,
        id,
    } = setup(hundred_tokens).await;
    // 20 calls at once, 8 tokens each (160 in all): without reservations every one would find
    // the budget unspent and go. Each names its output limit, so its estimate holds.
    let calls = (0..20).map(|_| {
        chat(
            &kernel,
            &id,
            json!({"model": "slow", "messages": [], "max_tokens": 1}),
        )
    });
    let answers = futures::future::join_all(calls).await;
    let ok = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::OK)
        .count();
    for (status, body) in answers
        .iter()
        .filter(|(status, _)| *status != StatusCode::OK)
    {
        assert_eq!(*status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
    }
    let recorded = llm_calls(&kernel, &id, ok).await;
    let tokens: u64 = recorded
        .iter()
        .map(|call| {
            call["input_tokens"].as_u64().unwrap_or(0) + call["output_tokens"].as_u64().unwrap_or(0)
        })
        .sum();
    assert_eq!(recorded.len(), ok, "{recorded:?}");
    assert_eq!(fake.seen.lock().expect("lock").len(), ok);
    // The budget was used up (enough calls went) and crossed by less than one call's 8 tokens.
    assert!(tokens >= 100, "only {tokens} tokens used by {ok} calls");
    assert!(
        tokens < 100 + 8,
        "{tokens} tokens used by {ok} calls: more than one call over"
    );
}
