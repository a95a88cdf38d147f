//! Issue 32, check 7: claims superseded by a failover are refused and change nothing; the
//! current claim's report is accepted (docs/architecture.md, "Cluster", matching).
//!
//! The runner side: a recovered job is held for the runner grace on the new owner (any report
//! on it is taken then: nobody else has it), then queued again and given to the next idle
//! runner. From then on only that connection may report on it; the runner that had it before
//! the failover gets 409 `conflict` and nothing is written.
//!
//! The agent side: the new owner restores the execution's session for its consumer; when that
//! consumer does not come back within the grace, the execution is reset and assigned to
//! another consumer under a new session. The old session is refused with 401 `session not
//! found` (WIRE.md §9.6; the SDK swallows that on `complete`/`fail`, a 409 would raise), not
//! with the 409, and nothing is written.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::{Database, Kernel, poll};
use super::matching::{
    ALLOW_ALL, Messages, agent_stream, create, next_assigned, next_named, runner_stream, sse,
};
use super::{BUDGET, get_retrying, owner_of, post};

/// Events of execution `id` in the table.
async fn events_of(database: &Database, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM events WHERE execution_id = $1")
        .bind(id)
        .fetch_one(&database.pool)
        .await
        .expect("count events")
}

/// Payloads of the `step.completed` events of execution `id`.
async fn completions(database: &Database, id: &str) -> Vec<Value> {
    sqlx::query_scalar::<_, sqlx::types::Json<Value>>(
        "SELECT payload FROM events WHERE execution_id = $1 AND type = 'step.completed'",
    )
    .bind(id)
    .fetch_all(&database.pool)
    .await
    .expect("read step.completed")
    .into_iter()
    .map(|payload| payload.0)
    .collect()
}

/// POSTs `body` to `url`, retrying a 503 (a partition moving between kernels) for up to 10 s.
async fn post_retrying(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, retry, answer) = post(http, url, body.clone()).await;
        if status != 503 || Instant::now() >= deadline {
            return (status, answer);
        }
        assert_eq!(
            retry.as_deref(),
            Some("1"),
            "503 without Retry-After: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every kernel's log, for a failure message.
fn logs(kernels: &[Kernel]) -> String {
    kernels
        .iter()
        .map(Kernel::log)
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Sends `invoke_tool` for remote `tool` through `url`; returns the step id.
async fn invoke(http: &reqwest::Client, url: &str, id: &str, session: &str, tool: &str) -> String {
    let (status, _, body) = post(
        http,
        &format!("{url}/v0/agents/intent"),
        json!({
            "execution_id": id, "session_id": session,
            "intent": {"type": "invoke_tool", "tool_id": tool, "arguments": {}, "remote": true}
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["accepted"], true, "{body}");
    body["step_id"].as_str().expect("step id").to_owned()
}

/// The next `job.assigned` on `stream` (10 s), checked to be for `step`.
async fn job_for(stream: &mut Messages, step: &str, kernels: &[Kernel]) -> Value {
    let Some(job) = next_named(stream, "job.assigned", Duration::from_secs(15)).await else {
        panic!("no job.assigned for step {step}; logs:\n{}", logs(kernels));
    };
    assert_eq!(job["step_id"], step, "{job}");
    job
}

/// A runner's result for `job`.
fn result(job: &Value, consumer: &str, data: Value) -> Value {
    json!({
        "job_id": job["id"], "execution_id": job["execution_id"], "step_id": job["step_id"],
        "success": true, "data": data, "consumer_id": consumer
    })
}

/// Completes execution `id` under `session` with `output` through `url`: the answer.
async fn complete(
    http: &reqwest::Client,
    url: &str,
    id: &str,
    session: &str,
    output: Value,
) -> (u16, Value) {
    post_retrying(
        http,
        &format!("{url}/v0/agents/intent"),
        json!({
            "execution_id": id, "session_id": session,
            "intent": {"type": "complete", "output": output}
        }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_result_from_a_claim_a_failover_superseded_is_refused_and_the_current_one_taken() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, ALLOW_ALL).expect("policy written");
        let policy = policy.to_str().expect("utf-8 path").to_owned();
        let flags = ["--cluster", "--policy", &policy, "--runner-timeout", "2s"];
        let mut kernels = super::three_settled(&database, dir.path(), &flags).await;
        let http = reqwest::Client::new();
        let a = kernels[0].url.clone();

        // The agent and two runners on A; two executions owned by B, one job on each runner.
        let mut agent = agent_stream(&http, &a, "stale-tools", "agent-1").await;
        let (mut leaver, leaver_reader) =
            runner_stream(&http, &a, "r1", "r1-c", "remote.echo").await;
        let (mut keeper, _keeper_reader) =
            runner_stream(&http, &a, "rk", "rk-c", "remote.keep").await;
        let superseded = create(&http, &kernels[1], "stale-tools", 1).await;
        let kept = create(&http, &kernels[1], "stale-tools", 2).await;
        let mut sessions = std::collections::BTreeMap::new();
        while sessions.len() < 2 {
            let Some(assigned) = next_assigned(&mut agent, Duration::from_secs(10)).await else {
                panic!(
                    "both executions assigned to the agent; logs:\n{}",
                    logs(&kernels)
                );
            };
            let execution = assigned["execution_id"].as_str().expect("id").to_owned();
            sessions.insert(
                execution,
                assigned["session_id"].as_str().expect("session").to_owned(),
            );
        }
        let step = invoke(
            &http,
            &a,
            &superseded,
            &sessions[&superseded],
            "remote.echo",
        )
        .await;
        let kept_step = invoke(&http, &a, &kept, &sessions[&kept], "remote.keep").await;
        let old_job = job_for(&mut leaver, &step, &kernels).await;
        let kept_job = job_for(&mut keeper, &kept_step, &kernels).await;

        // r1 goes away, B dies. A survivor takes B's partitions and recovers both executions.
        leaver_reader.abort();
        let victim = kernels.remove(1);
        assert_eq!(victim.node_id, "k2");
        victim.kill().await;
        let killed = Instant::now();

        // rk stayed: its result on the recovered job is the current claim, taken once.
        let url = format!("{}/v0/runners/rk/results", kernels[1].url);
        let (status, body) = post_retrying(
            &http,
            &url,
            result(&kept_job, "rk-c", json!({"kept": true})),
        )
        .await;
        assert_eq!(status, 200, "{body}; logs:\n{}", logs(&kernels));
        println!(
            "the kept job's result taken {:?} after kill -9",
            killed.elapsed()
        );
        let taken = events_of(&database, &kept).await;
        let (status, body) =
            post_retrying(&http, &url, result(&kept_job, "rk-c", json!({"kept": 2}))).await;
        assert_eq!(status, 409, "a second report on a resolved step: {body}");
        assert_eq!(
            events_of(&database, &kept).await,
            taken,
            "the repeat wrote nothing"
        );
        assert_eq!(
            completions(&database, &kept).await,
            vec![json!({"result": {"kept": true}})]
        );

        // r2 comes, on C. After the runner grace the recovered job of r1 goes to r2.
        let c = &kernels[1];
        assert_eq!(c.node_id, "k3");
        let (mut arriving, _arriving_reader) =
            runner_stream(&http, &c.url, "r2", "r2-c", "remote.echo").await;
        let current_job = job_for(&mut arriving, &step, &kernels).await;
        println!(
            "re-dispatched to r2 {:?} after kill -9 (job id {} then, {} now)",
            killed.elapsed(),
            old_job["id"],
            current_job["id"]
        );
        assert_ne!(owner_of(&database, &superseded).await, "k2");

        // r1 reports on the claim it had before the failover: refused, nothing written.
        let before = events_of(&database, &superseded).await;
        let (status, body) = post_retrying(
            &http,
            &format!("{a}/v0/runners/r1/results"),
            result(&old_job, "r1-c", json!({"from": "r1"})),
        )
        .await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["code"], "CONFLICT", "{body}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|text| text.contains("held by another runner")),
            "{body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            events_of(&database, &superseded).await,
            before,
            "the stale result wrote nothing"
        );

        // r2's result, the current claim, is taken and reaches the agent, which completes.
        let (status, body) = post_retrying(
            &http,
            &format!("{a}/v0/runners/r2/results"),
            result(&current_job, "r2-c", json!({"from": "r2"})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let mut pushed = std::collections::BTreeMap::new();
        while pushed.len() < 2 {
            let Some(push) = next_named(&mut agent, "tool.result", Duration::from_secs(10)).await
            else {
                panic!("tool.results so far {pushed:?}; logs:\n{}", logs(&kernels));
            };
            pushed.insert(
                push["step_id"].as_str().unwrap_or_default().to_owned(),
                push["result"].clone(),
            );
        }
        assert_eq!(pushed[&kept_step], json!({"kept": true}), "{pushed:?}");
        assert_eq!(pushed[&step], json!({"from": "r2"}), "{pushed:?}");
        for id in [&kept, &superseded] {
            let (status, body) = complete(&http, &a, id, &sessions[id], json!({"done": id})).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["accepted"], true, "{body}");
        }
        assert_eq!(
            completions(&database, &superseded).await,
            vec![json!({"result": {"from": "r2"}})]
        );
        let (_, _, execution) =
            get_retrying(&http, &format!("{}/v0/executions/{superseded}", c.url)).await;
        assert_eq!(execution["status"], "completed", "{execution}");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_session_a_failover_superseded_is_refused_and_the_new_session_taken() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let flags = ["--cluster", "--agent-timeout", "2s"];
        let mut kernels = super::three_settled(&database, dir.path(), &flags).await;
        let http = reqwest::Client::new();
        let a = kernels[0].url.clone();

        // The agent on A runs an execution owned by B.
        let url = format!("{a}/v0/agents/stream?agent_id=stale-agent&consumer_id=c1");
        let (mut on_a, reader) = sse(&http, &url).await;
        let id = create(&http, &kernels[1], "stale-agent", 0).await;
        let Some(first) = next_assigned(&mut on_a, Duration::from_secs(10)).await else {
            panic!("no execution.assigned on A; logs:\n{}", logs(&kernels));
        };
        assert_eq!(first["execution_id"], id.as_str(), "{first}");
        let old_session = first["session_id"].as_str().expect("session").to_owned();

        // The agent goes away and B dies; another consumer connects to C. The new owner
        // restores the session for c1, which does not come back within the grace (2 s): the
        // execution is reset and assigned to c2 under a new session.
        reader.abort();
        let victim = kernels.remove(1);
        victim.kill().await;
        let killed = Instant::now();
        let c = &kernels[1];
        assert_eq!(c.node_id, "k3");
        let mut on_c = agent_stream(&http, &c.url, "stale-agent", "c2").await;
        let Some(again) = next_assigned(&mut on_c, Duration::from_secs(20)).await else {
            panic!(
                "not reassigned to c2 after the failover; logs:\n{}",
                logs(&kernels)
            );
        };
        println!("reassigned {:?} after kill -9", killed.elapsed());
        assert_eq!(again["execution_id"], id.as_str(), "{again}");
        let new_session = again["session_id"].as_str().expect("session").to_owned();
        assert_ne!(new_session, old_session);
        assert_ne!(owner_of(&database, &id).await, "k2");

        // The superseded session is refused (401, WIRE.md §9.6) and changes nothing.
        let before = events_of(&database, &id).await;
        let (status, body) = complete(&http, &a, &id, &old_session, json!({"by": "c1"})).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|text| text.contains("session not found")),
            "{body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            events_of(&database, &id).await,
            before,
            "the stale intent wrote nothing"
        );
        let (_, _, execution) = get_retrying(&http, &format!("{}/v0/executions/{id}", c.url)).await;
        assert_eq!(execution["status"], "running", "{execution}");

        // The current session's intent is taken.
        let (status, body) = complete(&http, &a, &id, &new_session, json!({"by": "c2"})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["accepted"], true, "{body}");
        let done = poll(Duration::from_secs(5), || async {
            let (_, _, execution) =
                get_retrying(&http, &format!("{}/v0/executions/{id}", c.url)).await;
            (execution["status"] == "completed").then_some(execution)
        })
        .await
        .expect("the execution completes");
        assert_eq!(done["output"], json!({"by": "c2"}), "{done}");
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
