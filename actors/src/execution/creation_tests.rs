//! A creation is committed before its actor is spawned. In between, the execution's agent group
//! may find it in the store (a group that starts loads its pending executions) and assign it
//! through an actor woken from the store. The creation's own spawn must then use that actor: a
//! second one would hold the execution without the session the first one assigned, and the
//! agent's first intent would be refused with "session not found".

use serde_json::json;

use super::messages::ExecutionSupervisorMsg;
use super::rebuild::record_creation_with;
use super::test_support::{allow_all, next_of, start};
use crate::execution::Intent;
use crate::guardrails::CreateOptions;
use crate::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
use crate::kernel::context::{call, read};

#[tokio::test]
async fn an_execution_assigned_before_its_actor_was_spawned_keeps_its_session() {
    let t = start(allow_all(), |_| {}).await;
    let ctx = t.kernel.ctx.clone();
    let id = ExecutionId::generate();
    let options = CreateOptions::default();
    let created = record_creation_with(&ctx, &id, &"a".into(), json!({"n": 1}), None, options)
        .await
        .expect("creation committed");

    // The agent connects now: its group starts, finds the execution in the store and assigns it.
    let mut agent = t
        .kernel
        .connect_agent(AgentId::new("a"), ConsumerId::new("c1"))
        .await
        .expect("connect");
    let assigned = next_of(&mut agent, "execution.assigned").await;
    assert_eq!(assigned.data["execution_id"], id.as_str());
    let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
    let woken = ctx.execution(&id).expect("the assignment woke an actor");

    // Only now does the creation's spawn reach the supervisor.
    let supervisor = read(&ctx.singletons)
        .executions
        .clone()
        .expect("execution supervisor");
    let create = |reply| ExecutionSupervisorMsg::Create {
        state: Box::new(created.clone()),
        reply,
    };
    let actor = call(&supervisor, create, ctx.config.call_timeout, "supervisor")
        .await
        .expect("answered")
        .expect("an actor");
    assert_eq!(actor.get_id(), woken.get_id(), "the woken actor is reused");
    assert_eq!(
        ctx.execution(&id).map(|actor| actor.get_id()),
        Some(woken.get_id())
    );

    // The agent carries on with the session it was given.
    let reply = t
        .kernel
        .submit_intent(
            &id,
            &session,
            Intent::Complete {
                output: Some(json!("done")),
            },
        )
        .await
        .expect("the session is known");
    assert!(reply.accepted, "{reply:?}");
    t.shutdown().await;
}
