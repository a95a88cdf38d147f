//! The route × role table (docs/security.md): every route of the router, for every kind of
//! principal, answers as the table says, and a refused request changes nothing. The table must
//! name every routed path: a new route without a row fails the test.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{TOKEN, call, create_key, with_token};
use crate::harness::{TestKernel, assert_error};

/// What the kernel holds that a refused request must not change: the feed's head, the
/// executions and the keys (last use aside).
async fn snapshot(kernel: &TestKernel) -> Value {
    let (_, executions) = kernel.get("/v0/executions?limit=100").await;
    let (_, feed) = kernel.get("/v0/events?limit=1000").await;
    let (_, mut keys) = kernel.get("/v0/keys").await;
    for key in keys["keys"].as_array_mut().into_iter().flatten() {
        key.as_object_mut().map(|key| key.remove("last_used_at"));
    }
    json!({"executions": executions["executions"], "feed": feed["events"].as_array().map(Vec::len), "keys": keys})
}

/// The principals of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    Admin,
    Operator,
    AgentIn,
    AgentOut,
    RunnerIn,
    RunnerOut,
    Approver,
    Reader,
    Revoked,
    Expired,
    NoKey,
}

use Who::*;

const EVERYONE: [Who; 11] = [
    Admin, Operator, AgentIn, AgentOut, RunnerIn, RunnerOut, Approver, Reader, Revoked, Expired,
    NoKey,
];
const READERS: &[Who] = &[Admin, Operator, Approver, Reader];

#[tokio::test]
async fn every_route_answers_each_role_as_the_table_says_and_refusals_change_nothing() {
    let kernel = TestKernel::start_with(with_token()).await;
    // An execution of agent `billing` (ids in paths point at it).
    let execution = kernel.create("billing", json!({"n": 1})).await;
    let id = execution["id"].as_str().expect("id").to_owned();
    let mut keys = std::collections::HashMap::new();
    keys.insert(Admin, TOKEN.to_owned());
    for (who, body) in [
        (Operator, json!({"name": "ops", "role": "operator"})),
        (
            AgentIn,
            json!({"name": "billing-agent", "role": "agent", "scopes": {"agents": ["billing", "billing-idle"]}}),
        ),
        (
            AgentOut,
            json!({"name": "support-agent", "role": "agent", "scopes": {"agents": ["support-*"]}}),
        ),
        (
            RunnerIn,
            json!({"name": "r1", "role": "runner", "scopes": {"runners": ["r1"], "tools": ["fs.*"]}}),
        ),
        (
            RunnerOut,
            json!({"name": "r9", "role": "runner", "scopes": {"runners": ["r9"]}}),
        ),
        (Approver, json!({"name": "alice", "role": "approver"})),
        (Reader, json!({"name": "dashboards", "role": "reader"})),
        (Revoked, json!({"name": "old", "role": "operator"})),
        (
            Expired,
            json!({"name": "brief", "role": "operator",
            "expires_at": keel_actors::time::format(&(keel_actors::time::now() + chrono::Duration::milliseconds(600)))}),
        ),
    ] {
        keys.insert(who, create_key(&kernel, body).await);
    }
    create_key(&kernel, json!({"name": "victim", "role": "reader"})).await;
    let (status, _) = kernel
        .send(kernel.client.delete(kernel.url("/v0/keys/old")))
        .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let runner_body = json!({"execution_id": id, "runner_id": "r1"});
    // (method, path, body, who gets past authentication and authorization). The agent stream
    // serves an agent without executions, so that no assignment runs behind the table.
    let llm = format!("/v0/executions/{id}/llm/openai");
    let table: Vec<(Method, String, Value, &[Who])> = vec![
        (Method::GET, "/v0/health".into(), Value::Null, &EVERYONE),
        (Method::GET, "/v0/ready".into(), Value::Null, &EVERYONE),
        (Method::GET, "/v0/cluster".into(), Value::Null, READERS),
        // The LLM gateway: admin credentials and agent keys pass the middleware; which agent
        // is the gateway's check (`llm::holder`, after its configuration, absent here: 404).
        (
            Method::POST,
            format!("{llm}/v1/chat/completions"),
            json!({"model": "m", "messages": []}),
            &[Admin, AgentIn, AgentOut],
        ),
        (
            Method::POST,
            format!("{llm}/v1/embeddings"),
            json!({"model": "m", "input": "x"}),
            &[Admin, AgentIn, AgentOut],
        ),
        (
            Method::POST,
            format!("{llm}/v1/messages"),
            json!({"model": "m", "messages": []}),
            &[Admin, AgentIn, AgentOut],
        ),
        (
            Method::POST,
            format!("{llm}/v2/unknown"),
            json!({}),
            &[Admin, AgentIn, AgentOut],
        ),
        // The MCP endpoint: admin credentials and the keys of the execution's agent.
        (
            Method::POST,
            format!("/v0/executions/{id}/mcp"),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            &[Admin, AgentIn],
        ),
        (
            Method::DELETE,
            format!("/v0/executions/{id}/mcp"),
            Value::Null,
            &[Admin, AgentIn],
        ),
        (Method::GET, "/metrics".into(), Value::Null, READERS),
        (Method::GET, "/v0/openapi.json".into(), Value::Null, READERS),
        (
            Method::POST,
            "/v0/executions".into(),
            json!({"agent_id": "billing"}),
            &[Admin, Operator, AgentIn],
        ),
        (
            Method::POST,
            "/v0/executions".into(),
            json!({"agent_id": "billing", "labels": {"team": "x"}}),
            &[Admin, Operator, AgentIn],
        ),
        (Method::GET, "/v0/executions".into(), Value::Null, READERS),
        (
            Method::GET,
            format!("/v0/executions/{id}"),
            Value::Null,
            READERS,
        ),
        (
            Method::GET,
            format!("/v0/executions/{id}/events"),
            Value::Null,
            READERS,
        ),
        (
            Method::GET,
            format!("/v0/executions/{id}/stream"),
            Value::Null,
            READERS,
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/signal"),
            json!({"signal_type": "nudge"}),
            &[Admin, Operator],
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/signal"),
            json!({"signal_type": "step.approve", "payload": {"step_id": "none"}}),
            &[Admin, Operator, Approver],
        ),
        (Method::GET, "/v0/events".into(), Value::Null, READERS),
        (
            Method::GET,
            "/v0/events/stream".into(),
            Value::Null,
            READERS,
        ),
        (
            Method::GET,
            "/v0/agents/stream?agent_id=billing-idle&consumer_id=c1".into(),
            Value::Null,
            &[Admin, AgentIn],
        ),
        (
            Method::POST,
            "/v0/agents/intent".into(),
            json!({"execution_id": id, "session_id": "s", "intent": {"type": "complete"}}),
            &[Admin, AgentIn],
        ),
        (
            Method::POST,
            "/v0/agents/step-result".into(),
            json!({"execution_id": id, "session_id": "s", "step_id": "x", "success": true}),
            &[Admin, AgentIn],
        ),
        (
            Method::GET,
            "/v0/runners/stream?runner_id=r1&consumer_id=c2&capabilities=fs.read".into(),
            Value::Null,
            &[Admin, RunnerIn],
        ),
        (
            Method::GET,
            "/v0/runners/stream?runner_id=r1&consumer_id=c3&capabilities=shell.exec".into(),
            Value::Null,
            &[Admin],
        ),
        (
            Method::POST,
            "/v0/runners/r1/results".into(),
            json!({}),
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/steps/s1/started".into(),
            runner_body,
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/steps/s1/progress".into(),
            json!({"execution_id": id, "runner_id": "r1", "progress": 1}),
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/r1/tool-changes".into(),
            json!({"changes": []}),
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/r1/tool-changes/accept".into(),
            json!({}),
            &[Admin, Operator],
        ),
        (
            Method::POST,
            "/v0/runners/r1/capabilities".into(),
            json!({"tools": ["fs.read"]}),
            &[Admin, RunnerIn],
        ),
        (
            Method::POST,
            "/v0/runners/r1/capabilities".into(),
            json!({"tools": ["shell.exec"]}),
            &[Admin],
        ),
        (
            Method::POST,
            "/v0/runners/r1/tools".into(),
            json!({"tools": []}),
            &[Admin, RunnerIn],
        ),
        (
            Method::DELETE,
            "/v0/runners/r1".into(),
            Value::Null,
            &[Admin, Operator, RunnerIn],
        ),
        (
            Method::GET,
            "/v0/tools".into(),
            Value::Null,
            &[
                Admin, Operator, AgentIn, AgentOut, RunnerIn, RunnerOut, Approver, Reader,
            ],
        ),
        (Method::GET, "/v0/approvals".into(), Value::Null, READERS),
        (
            Method::GET,
            "/v0/executions/counts".into(),
            Value::Null,
            READERS,
        ),
        (Method::GET, "/v0/agents".into(), Value::Null, READERS),
        (Method::GET, "/v0/runners".into(), Value::Null, READERS),
        (Method::GET, "/v0/policy".into(), Value::Null, READERS),
        (Method::GET, "/v0/breakers".into(), Value::Null, READERS),
        (Method::GET, "/v0/keys".into(), Value::Null, &[Admin]),
        (
            Method::POST,
            "/v0/keys/victim/rotate".into(),
            Value::Null,
            &[Admin],
        ),
        (
            Method::POST,
            "/v0/keys".into(),
            json!({"name": "made-in-table", "role": "reader"}),
            &[Admin],
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/steps/none/reconcile"),
            json!({"answer": "fail"}),
            &[Admin, Operator],
        ),
        (
            Method::POST,
            format!("/v0/approvals/{id}.none"),
            json!({"decision": "approve"}),
            &[Admin, Operator, Approver],
        ),
        (
            Method::POST,
            "/v0/approvals".into(),
            json!({"answers": [{"id": format!("{id}.none"), "decision": "deny", "reason": "no"}]}),
            &[Admin, Operator, Approver],
        ),
        (
            Method::POST,
            format!("/v0/executions/{id}/cancel"),
            json!({}),
            &[Admin, Operator],
        ),
        (
            Method::DELETE,
            "/v0/keys/victim".into(),
            Value::Null,
            &[Admin],
        ),
    ];
    let mut allowed_calls = 0;
    for (method, path, body, allowed) in &table {
        for who in EVERYONE {
            let key = match who {
                NoKey => None,
                other => Some(keys[&other].as_str()),
            };
            let expected = if allowed.contains(&who) {
                None
            } else if matches!(who, Revoked | Expired | NoKey) {
                Some(StatusCode::UNAUTHORIZED)
            } else {
                Some(StatusCode::FORBIDDEN)
            };
            let before = match expected {
                Some(_) => Some(snapshot(&kernel).await),
                None => None,
            };
            let answer = call(&kernel, key, method, path, body).await;
            match expected {
                None => {
                    allowed_calls += 1;
                    // Past authentication: a handler's own 401 (an unknown session) is not
                    // the middleware's `unauthorized`.
                    let refused_by_auth = answer.0 == StatusCode::FORBIDDEN
                        || (answer.0 == StatusCode::UNAUTHORIZED
                            && answer.1["error"]
                                .as_str()
                                .is_some_and(|error| error.starts_with("unauthorized")));
                    assert!(!refused_by_auth, "{who:?} {method} {path}: {answer:?}");
                }
                Some(StatusCode::UNAUTHORIZED) => {
                    assert_error(&answer, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", None);
                }
                // A handler's refusal may name its rule (`rule_id`) beside the envelope.
                Some(status) => assert_eq!(
                    (answer.0, &answer.1["code"]),
                    (status, &json!("FORBIDDEN")),
                    "{who:?} {method} {path}: {}",
                    answer.1
                ),
            }
            if let Some(before) = before {
                assert_eq!(
                    snapshot(&kernel).await,
                    before,
                    "{who:?} {method} {path} changed something"
                );
            }
        }
    }
    assert!(allowed_calls > 100, "{allowed_calls}");
    // Every routed path has a row (trailing-slash aliases are the same route).
    let routed: BTreeSet<String> = keel::http::routes()
        .paths()
        .iter()
        .map(|path| path.trim_end_matches('/').to_owned())
        .collect();
    let covered: BTreeSet<String> = table
        .iter()
        .filter_map(|(_, path, _, _)| route_of(&routed, path))
        .collect();
    let missing: Vec<&String> = routed.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "routes without a row in the table: {missing:?}"
    );
    // The allowed calls did their work: the admin's and the in-scope agent's creations exist.
    let (_, listed) = kernel.get("/v0/executions?agent_id=billing").await;
    assert!(
        listed["executions"].as_array().expect("list").len() >= 7,
        "{listed}"
    );
    kernel.shutdown().await;
}

/// The routed pattern `path` reaches: the one with the fewest parameters among those that
/// match (as the router prefers a static segment), a catch-all last.
fn route_of(patterns: &BTreeSet<String>, path: &str) -> Option<String> {
    let path = path.split('?').next()?.trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').collect();
    patterns
        .iter()
        .filter_map(|pattern| {
            let parts: Vec<&str> = pattern.split('/').collect();
            let mut parameters = 0;
            for (index, part) in parts.iter().enumerate() {
                if part.starts_with("{*") {
                    return (segments.len() > index).then_some((parameters + 100, pattern));
                }
                let segment = segments.get(index)?;
                if part.starts_with('{') {
                    parameters += 1;
                } else if part != segment {
                    return None;
                }
            }
            (parts.len() == segments.len()).then_some((parameters, pattern))
        })
        .min()
        .map(|(_, pattern)| pattern.clone())
}
