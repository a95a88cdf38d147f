//! The web console's HTTP surface (docs/console.md): the shell pages and assets are the only
//! things served without the token; the views and the operator read endpoints
//! (`GET /v0/approvals`, `/v0/executions/counts`, `/v0/agents`, `/v0/runners`) answer real
//! data; the list's `created_after` / `created_before` window. The browser scenarios are in
//! tests/sdk/test_console.py.

use std::time::Duration;

use keel::http::HttpSettings;
use keel_actors::kernel::KernelConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{
    Options, TestAgent, TestKernel, TestRunner, assert_error, eventually, running_execution,
};

const TOKEN: &str = "console-token";

/// Every `gated.*` tool call needs a human; everything else is allowed.
const POLICY: &str = r#"
rules:
  - id: gated-needs-human
    priority: 1
    when:
      tool_id: "gated.*"
    then:
      decision: require_approval
      reason: a human decides
default:
  decision: allow
"#;

fn gated_policy(config: &mut KernelConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).expect("policy written");
    config.policy = keel::policy::load_path(&path).expect("policy loads").engine;
}

/// `GET path` without any token: status, content type and body text.
async fn anonymous(kernel: &TestKernel, path: &str) -> (StatusCode, String, String) {
    let response = kernel
        .client
        .get(kernel.url(path))
        .send()
        .await
        .expect("request sent");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, content_type, response.text().await.expect("body"))
}

/// `GET path` with the kernel's token, as text.
async fn text(kernel: &TestKernel, path: &str) -> (StatusCode, String) {
    let mut request = kernel.client.get(kernel.url(path));
    if let Some(token) = &kernel.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request sent");
    (response.status(), response.text().await.expect("body"))
}

#[tokio::test]
async fn only_the_shell_and_its_assets_are_served_without_the_token() {
    let kernel = TestKernel::start_with(Options {
        settings: HttpSettings {
            bearer_token: Some(TOKEN.to_owned()),
            ..Options::default().settings
        },
        ..Options::default()
    })
    .await;
    let created = kernel.create("agent-a", json!({"secret": "s3"})).await;
    let id = created["id"].as_str().expect("id");

    for page in ["/", "/approvals", "/directory", "/status", "/login"] {
        let (status, content_type, body) = anonymous(&kernel, page).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert!(
            content_type.starts_with("text/html"),
            "{page}: {content_type}"
        );
        assert!(body.contains(r#"data-auth="token""#), "{page}");
    }
    let (status, _, shell) = anonymous(&kernel, &format!("/executions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !shell.contains(id) && !shell.contains("s3"),
        "the shell carries no data"
    );
    let (status, content_type, script) = anonymous(&kernel, "/console/assets/console.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content_type.starts_with("text/javascript"),
        "{content_type}"
    );
    assert!(script.contains("sessionStorage"));
    let (status, _, body) = anonymous(&kernel, "/console/assets/nothing.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("envelope")["code"],
        "NOT_FOUND"
    );

    // Everything with data needs the token, and gets the 401 envelope without it.
    for path in [
        "/console/view/executions".to_owned(),
        format!("/console/view/executions/{id}"),
        "/console/view/approvals".to_owned(),
        "/console/view/directory".to_owned(),
        "/console/view/status".to_owned(),
        "/v0/approvals".to_owned(),
        "/v0/executions/counts".to_owned(),
        "/v0/agents".to_owned(),
        "/v0/runners".to_owned(),
        "/v0/policy".to_owned(),
    ] {
        let (status, _, body) = anonymous(&kernel, &path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("envelope"),
            json!({"error": "unauthorized", "code": "UNAUTHORIZED"}),
            "{path}"
        );
    }
    let response = kernel
        .client
        .get(kernel.url("/"))
        .send()
        .await
        .expect("shell");
    let csp = response
        .headers()
        .get("content-security-policy")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(
        response.headers().get("set-cookie").is_none(),
        "no cookie, ever"
    );

    let (status, view) = text(&kernel, &format!("/console/view/executions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(view.contains(id) && view.contains("s3") && view.contains("pending"));
    // The header says which events it was rendered from: the script refreshes it when the
    // timeline holds later ones (an event committed between the two reads).
    assert!(
        view.contains(r#"id="execution-events" data-sequence="1""#),
        "{view}"
    );
    let (status, list) = text(&kernel, "/console/view/executions").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains(id));
    let missing = kernel.get("/console/view/executions/nope").await;
    assert_error(&missing, StatusCode::NOT_FOUND, "NOT_FOUND", None);
    kernel.shutdown().await;
}

#[tokio::test]
async fn approvals_are_listed_oldest_first_until_answered() {
    let kernel = TestKernel::start_with(Options {
        kernel: gated_policy,
        ..Options::default()
    })
    .await;
    let (_first_agent, first) = running_execution(&kernel, "gatekeeper").await;
    let body =
        json!({"type": "invoke_tool", "tool_id": "gated.deploy", "arguments": {"env": "prod"}});
    let (_, answer) = first.intent(&kernel, body.clone()).await;
    let first_step = answer["step_id"].as_str().expect("step").to_owned();
    let (_second_agent, second) = running_execution(&kernel, "gatekeeper-2").await;
    // A tool call that needs no approval is not listed.
    second.invoke(&kernel, "free.tool").await;
    let (_, answer) = second.intent(&kernel, body).await;
    let second_step = answer["step_id"].as_str().expect("step").to_owned();

    let (status, listed) = kernel.get("/v0/approvals").await;
    assert_eq!(status, StatusCode::OK);
    let approvals = listed["approvals"].as_array().expect("array").clone();
    assert_eq!(approvals.len(), 2, "{listed}");
    assert_eq!(approvals[0]["execution_id"], first.execution_id.as_str());
    assert_eq!(approvals[0]["step_id"], first_step.as_str());
    assert_eq!(approvals[0]["agent_id"], "gatekeeper");
    assert_eq!(approvals[0]["tool_id"], "gated.deploy");
    assert_eq!(approvals[0]["arguments"], json!({"env": "prod"}));
    assert_eq!(approvals[0]["reason"], "a human decides");
    assert_eq!(approvals[0]["remote"], false);
    assert_eq!(approvals[1]["step_id"], second_step.as_str());
    let (_, one) = kernel.get("/v0/approvals?limit=1").await;
    assert_eq!(one["approvals"].as_array().map(Vec::len), Some(1));
    let (status, inbox) = text(&kernel, "/console/view/approvals").await;
    assert_eq!(status, StatusCode::OK);
    assert!(inbox.contains(&first_step) && inbox.contains(&second_step));

    // Granted: gone from the list. Cancelled: gone too.
    let signal = json!({"signal_type": "step.approve", "payload": {"step_id": first_step, "approved": true}});
    let (status, _) = kernel
        .post(
            &format!("/v0/executions/{}/signal", first.execution_id),
            &signal,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, listed) = kernel.get("/v0/approvals").await;
    let steps: Vec<&str> = listed["approvals"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|approval| approval["step_id"].as_str())
        .collect();
    assert_eq!(steps, vec![second_step.as_str()]);
    let (status, _) = kernel
        .post(
            &format!("/v0/executions/{}/cancel", second.execution_id),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, listed) = kernel.get("/v0/approvals").await;
    assert_eq!(listed, json!({"approvals": []}));
    kernel.shutdown().await;
}

#[tokio::test]
async fn counts_and_the_creation_time_window() {
    let kernel = TestKernel::start().await;
    let labelled = |agent: &str, team: &str| json!({"agent_id": agent, "labels": {"team": team}});
    let mut ids = Vec::new();
    for (agent, team) in [("count-a", "ops"), ("count-a", "dev"), ("count-b", "ops")] {
        let (status, body) = kernel.post("/v0/executions", &labelled(agent, team)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(body);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cancelled = ids[0]["id"].as_str().expect("id");
    let (status, _) = kernel
        .post(&format!("/v0/executions/{cancelled}/cancel"), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, all) = kernel.get("/v0/executions/counts").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        all,
        json!({"counts": {"pending": 2, "running": 0, "blocked": 0, "completed": 0, "failed": 0, "cancelled": 1}, "total": 3})
    );
    let (_, agent) = kernel.get("/v0/executions/counts?agent_id=count-a").await;
    assert_eq!(agent["total"], 2);
    assert_eq!(agent["counts"]["cancelled"], 1);
    let (_, team) = kernel
        .get("/v0/executions/counts?label=team:ops&agent_id=count-b")
        .await;
    assert_eq!(team["total"], 1);
    let bad = kernel.get("/v0/executions/counts?label=nocolon").await;
    assert_error(
        &bad,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some(r#"validation error: invalid label filter "nocolon", expected key=value"#),
    );

    // created_after is inclusive, created_before exclusive; paging stops at the window.
    let second_at = ids[1]["created_at"].as_str().expect("time");
    let since = url::form_urlencoded::byte_serialize(second_at.as_bytes()).collect::<String>();
    let (_, newer) = kernel
        .get(&format!("/v0/executions?created_after={since}&limit=1"))
        .await;
    assert_eq!(newer["executions"][0]["id"], ids[2]["id"]);
    let cursor = newer["next_cursor"].as_str().expect("cursor").to_owned();
    assert!(!cursor.is_empty());
    let (_, rest) = kernel
        .get(&format!(
            "/v0/executions?created_after={since}&limit=1&cursor={cursor}"
        ))
        .await;
    assert_eq!(rest["executions"][0]["id"], ids[1]["id"]);
    assert_eq!(rest["next_cursor"], "", "the window ends the paging");
    let (_, older) = kernel
        .get(&format!("/v0/executions?created_before={since}"))
        .await;
    let older: Vec<&Value> = older["executions"]
        .as_array()
        .expect("array")
        .iter()
        .collect();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0]["id"], ids[0]["id"]);
    let bad = kernel.get("/v0/executions?created_after=yesterday").await;
    assert_error(
        &bad,
        StatusCode::BAD_REQUEST,
        "VALIDATION_ERROR",
        Some(r#"validation error: invalid created_after "yesterday", expected an RFC 3339 time"#),
    );
    // The console's view takes the browser's datetime-local form as UTC.
    let (status, view) = text(
        &kernel,
        "/console/view/executions?created_after=2000-01-01T00:00",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(view.contains(ids[2]["id"].as_str().expect("id")));
    kernel.shutdown().await;
}

#[tokio::test]
async fn agents_and_runners_are_listed_while_connected() {
    let kernel = TestKernel::start().await;
    let agent = TestAgent::connect(&kernel, "listed-agent").await;
    let served = kernel.create("listed-agent", json!(null)).await;
    assert!(served.get("notice").is_none(), "{served}");
    // Nobody serves absent-agent: the creation answer says so.
    let unserved = kernel.create("absent-agent", json!(null)).await;
    assert_eq!(unserved["status"], "pending");
    assert_eq!(
        unserved["notice"],
        "no consumer of agent absent-agent has connected since the kernel started; the execution waits for one"
    );
    let runner = TestRunner::connect(&kernel, "listed-runner", &["gpu"]).await;
    let (status, _) = kernel
        .post(
            "/v0/runners/listed-runner/tools",
            &json!({"tools": [{"id": "listed.tool", "description": "a tool"}]}),
        )
        .await;
    assert!(status.is_success(), "{status}");

    let (status, agents) = kernel.get("/v0/agents").await;
    assert_eq!(status, StatusCode::OK);
    let listed = agents["agents"].as_array().expect("array");
    assert_eq!(listed.len(), 1, "{agents}");
    assert_eq!(listed[0]["agent_id"], "listed-agent");
    assert_eq!(
        listed[0]["consumers"][0]["consumer_id"],
        agent.consumer_id.as_str()
    );
    assert_eq!(listed[0]["consumers"][0]["streams"], 1);
    let (status, runners) = kernel.get("/v0/runners").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runners["runners"][0]["runner_id"], "listed-runner");
    assert_eq!(
        runners["runners"][0]["consumers"][0]["capabilities"],
        json!(["gpu"])
    );
    assert_eq!(runners["runners"][0]["tools"], json!(["listed.tool"]));
    let (status, page) = text(&kernel, "/console/view/directory").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("listed-agent") && page.contains("listed.tool"));
    // The directory lists the agent ids with pending work and nobody to run it.
    assert!(
        page.contains(r#"data-unserved-agent="absent-agent""#),
        "{page}"
    );
    assert!(
        !page.contains(r#"data-unserved-agent="listed-agent""#),
        "{page}"
    );

    drop(agent);
    drop(runner);
    eventually("the directory to empty", || async {
        let (_, agents) = kernel.get("/v0/agents").await;
        let (_, runners) = kernel.get("/v0/runners").await;
        (agents == json!({"agents": []}) && runners == json!({"runners": []})).then_some(())
    })
    .await;
    let later = kernel.create("listed-agent", json!(null)).await;
    assert_eq!(
        later["notice"],
        "no consumer of agent listed-agent is connected now (one was earlier); the execution waits for one"
    );
    kernel.shutdown().await;
}

/// The rows of the directory's tool-changes table: (tool, runner, state).
fn change_rows(page: &str) -> Vec<(String, String, String)> {
    let attribute = |row: &str, name: &str| {
        let start = row.find(&format!("{name}=\"")).expect(name) + name.len() + 2;
        row[start..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    page.split("<tr data-tool-change=")
        .skip(1)
        .map(|row| {
            let row = format!("data-tool-change={row}");
            let row = row.split('>').next().unwrap_or_default();
            (
                attribute(row, "data-tool-change"),
                attribute(row, "data-change-runner"),
                attribute(row, "data-state"),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_directory_shows_a_runners_withdrawn_tools_until_the_runner_takes_up_their_acceptance()
{
    let kernel = TestKernel::start().await;
    let _runner = TestRunner::connect(&kernel, "mcp-runner", &[]).await;
    let directory = || async {
        let (status, page) = text(&kernel, "/console/view/directory").await;
        assert_eq!(status, StatusCode::OK);
        page
    };
    let page = directory().await;
    assert!(
        change_rows(&page).is_empty() && !page.contains("tool-changes-title"),
        "{page}"
    );

    let pinned = format!("sha256:{}", "a".repeat(64));
    let listed = format!("sha256:{}", "b".repeat(64));
    let changes = json!({"changes": [
        {"tool_id": "fs.read_file", "change": "changed", "pinned": pinned, "listed": listed},
        {"tool_id": "fs.write_file", "change": "new", "listed": listed},
    ]});
    let (status, answer) = kernel
        .post("/v0/runners/mcp-runner/tool-changes", &changes)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let page = directory().await;
    let pending = |tool: &str| {
        (
            tool.to_owned(),
            "mcp-runner".to_owned(),
            "pending".to_owned(),
        )
    };
    assert_eq!(
        change_rows(&page),
        vec![pending("fs.read_file"), pending("fs.write_file")],
        "{page}"
    );
    // The runner's row counts them; the digests are shown shortened, whole in their title.
    assert!(page.contains("2 withdrawn"), "{page}");
    assert!(
        page.contains(&format!(r#"title="{pinned}">aaaaaaaaaaaa<"#)),
        "{page}"
    );

    let (status, answer) = kernel
        .post(
            "/v0/runners/mcp-runner/tool-changes/accept",
            &json!({"tools": ["fs.read_file"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let page = directory().await;
    assert_eq!(
        change_rows(&page),
        vec![
            pending("fs.write_file"),
            (
                "fs.read_file".to_owned(),
                "mcp-runner".to_owned(),
                "accepted".to_owned()
            ),
        ],
        "{page}"
    );
    assert!(page.contains("1 withdrawn"), "{page}");

    // The runner pinned the accepted change and reports what is left.
    let (status, answer) = kernel
        .post(
            "/v0/runners/mcp-runner/tool-changes",
            &json!({"changes": [changes["changes"][1]]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        change_rows(&directory().await),
        vec![pending("fs.write_file")]
    );
    let (status, _) = kernel
        .post(
            "/v0/runners/mcp-runner/tool-changes",
            &json!({"changes": []}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let page = directory().await;
    assert!(
        change_rows(&page).is_empty() && !page.contains("withdrawn"),
        "{page}"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_execution_view_shows_its_state_and_offers_actions_until_it_ends() {
    let kernel = TestKernel::start().await;
    let (_agent, assignment) = running_execution(&kernel, "viewed").await;
    let path = format!("/console/view/executions/{}", assignment.execution_id);
    let (_, running) = text(&kernel, &path).await;
    assert!(running.contains(r#"data-status="running""#), "{running}");
    assert!(running.contains("data-cancel") && running.contains("data-signal"));
    assignment
        .complete(&kernel, json!({"answer": "<b>42</b>"}))
        .await;
    let (_, done) = text(&kernel, &path).await;
    assert!(done.contains(r#"data-status="completed""#));
    assert!(
        !done.contains("data-cancel"),
        "no actions on a finished execution"
    );
    assert!(
        done.contains("&lt;b&gt;42&lt;/b&gt;"),
        "output is escaped: {done}"
    );
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_one_kernel_database_answers_single_and_the_console_shows_no_cluster() {
    let kernel = TestKernel::start().await;
    let (status, body) = kernel.get("/v0/cluster").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"mode": "single"}));
    let (status, page) = text(&kernel, "/console/view/status").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Executions by status"), "{page}");
    assert!(!page.contains("data-cluster"), "{page}");
    let (_agent, assignment) = running_execution(&kernel, "plain").await;
    let id = assignment.execution_id;
    let (_, page) = text(&kernel, &format!("/console/view/executions/{id}")).await;
    assert!(
        page.contains("Events") && !page.contains("data-owner"),
        "{page}"
    );
}
