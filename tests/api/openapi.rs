//! The OpenAPI document (`GET /v0/openapi.json`) against the router and against real answers:
//! every routed path and method is documented and every documented one is routed (the routed
//! paths come from `keel::http::routes()`, the router itself; the methods from probing it),
//! and the bodies of a real execution's answers, errors and pushes match the schemas the
//! document gives for them.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestKernel, TestRunner, running_execution};

/// Methods probed on every routed path.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

async fn document(kernel: &TestKernel) -> Value {
    let (status, document) = kernel.get("/v0/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{document}");
    document
}

/// `/v0/executions/` → `/v0/executions`: trailing-slash aliases share their path's entry; a
/// wildcard segment (`{*rest}`) is documented as a parameter (`{rest}`).
fn canonical(path: &str) -> String {
    let path = path.replace("{*", "{");
    match path.strip_suffix('/') {
        Some(stripped) if !stripped.is_empty() => stripped.to_owned(),
        _ => path,
    }
}

#[tokio::test]
async fn every_routed_path_and_method_is_documented_and_nothing_else() {
    let kernel = TestKernel::start().await;
    let document = document(&kernel).await;
    assert!(
        document["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        document["openapi"]
    );
    let documented: BTreeMap<String, BTreeSet<String>> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| {
            let methods = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|key| {
                    METHODS
                        .iter()
                        .any(|method| method.as_str().eq_ignore_ascii_case(key))
                })
                .map(|key| key.to_uppercase())
                .collect();
            (path.clone(), methods)
        })
        .collect();
    let routes = keel::http::routes();
    let routed_paths: BTreeSet<String> =
        routes.paths().iter().map(|path| canonical(path)).collect();
    let documented_paths: BTreeSet<String> = documented.keys().cloned().collect();
    assert_eq!(
        routed_paths
            .difference(&documented_paths)
            .collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "routed but not in the OpenAPI document (add a #[utoipa::path] in src/http/openapi/paths.rs)"
    );
    assert_eq!(
        documented_paths
            .difference(&routed_paths)
            .collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "documented but not routed"
    );
    // Methods: the router answers 405 to a method a path does not have.
    for path in routes.paths() {
        let concrete = path
            .split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "probe"
                } else {
                    segment
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        let mut routed = BTreeSet::new();
        for method in METHODS {
            let response = kernel
                .client
                .request(method.clone(), kernel.url(&concrete))
                .timeout(std::time::Duration::from_secs(10))
                .send()
                .await
                .expect("probe answers");
            if response.status() != StatusCode::METHOD_NOT_ALLOWED {
                routed.insert(method.as_str().to_owned());
            }
        }
        assert_eq!(
            routed,
            documented[&canonical(path)],
            "methods of {path}: routed vs documented"
        );
    }
    kernel.shutdown().await;
}

/// Validates bodies against the schemas of one OpenAPI document.
struct Schemas {
    document: Value,
}

impl Schemas {
    /// Returns the JSON schema the document gives for `status` of `method path`.
    fn response_schema(&self, method: &str, path: &str, status: StatusCode) -> Value {
        let operation = &self.document["paths"][path][method.to_lowercase()];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let response = &operation["responses"][status.as_str()];
        assert!(
            response.is_object(),
            "{method} {path} answered {status}, which the document does not list"
        );
        response["content"]["application/json"]["schema"].clone()
    }

    /// Asserts that `body` is valid against `schema` (which may refer to the components).
    fn assert_valid(&self, what: &str, schema: Value, body: &Value) {
        let mut root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.document["components"],
        });
        let Value::Object(schema) = schema else {
            panic!("{what}: no schema in the document");
        };
        for (key, value) in schema {
            root[key] = value;
        }
        let validator = jsonschema::draft202012::new(&root)
            .unwrap_or_else(|error| panic!("{what}: schema does not compile: {error}"));
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|error| format!("{error} at {}", error.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: {body} does not match: {errors:?}"
        );
    }

    /// Checks one answer of `method path` (the documented path template).
    fn answer(&self, method: &str, path: &str, answer: &(StatusCode, Value)) {
        let schema = self.response_schema(method, path, answer.0);
        self.assert_valid(&format!("{method} {path} {}", answer.0), schema, &answer.1);
    }

    /// Checks a push or event against a component schema.
    fn component(&self, name: &str, body: &Value) {
        assert!(
            self.document["components"]["schemas"][name].is_object(),
            "no component {name}"
        );
        let schema = json!({ "$ref": format!("#/components/schemas/{name}") });
        self.assert_valid(name, schema, body);
    }
}

#[tokio::test]
async fn real_answers_and_pushes_match_their_schemas() {
    let kernel = TestKernel::start().await;
    let schemas = Schemas {
        document: document(&kernel).await,
    };
    let check = |method, path, answer: &(StatusCode, Value)| schemas.answer(method, path, answer);

    check("GET", "/v0/health", &kernel.get("/v0/health").await);
    check("GET", "/v0/ready", &kernel.get("/v0/ready").await);

    // Runner side: publish, connect, and the directory.
    let published = kernel
        .post_raw(
            "/v0/runners/r1/tools",
            r#"{"tools":[{"id":"remote_echo","description":"echo","input_schema":{"type":"object"}}]}"#,
        )
        .await;
    assert_eq!(published.0, StatusCode::NO_CONTENT);
    let mut runner = TestRunner::connect(&kernel, "r1", &["remote_echo"]).await;
    check("GET", "/v0/tools", &kernel.get("/v0/tools").await);
    check(
        "POST",
        "/v0/runners/{id}/capabilities",
        &kernel
            .post(
                "/v0/runners/r1/capabilities",
                &json!({"tools": ["remote_echo"]}),
            )
            .await,
    );

    // An execution with a local step, a remote step, a signal and completion.
    let (mut agent, assignment) = running_execution(&kernel, "schema-agent").await;
    schemas.component("ExecutionAssigned", &assignment.data);
    let id = assignment.execution_id.clone();
    let local = assignment.invoke(&kernel, "local.tool").await;
    check(
        "POST",
        "/v0/agents/step-result",
        &assignment
            .step_result(&kernel, &local, true, json!({"n": 1}))
            .await,
    );
    check(
        "POST",
        "/v0/agents/step-result",
        &assignment
            .step_result(&kernel, &local, true, json!({"n": 1}))
            .await,
    );
    let remote = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "remote_echo", "arguments": {"x": 1}, "remote": true}),
        )
        .await;
    check("POST", "/v0/agents/intent", &remote);
    let job = runner.job().await;
    schemas.component("JobAssigned", &job);
    check(
        "POST",
        "/v0/runners/steps/{step_id}/started",
        &kernel
            .post(
                &format!(
                    "/v0/runners/steps/{}/started",
                    job["step_id"].as_str().unwrap()
                ),
                &json!({"execution_id": id, "runner_id": "r1"}),
            )
            .await,
    );
    check(
        "POST",
        "/v0/runners/{id}/results",
        &runner.result(&kernel, &job, true, json!({"echo": 1})).await,
    );
    let _ = agent.stream.next_of("tool.result").await;
    check(
        "POST",
        "/v0/agents/intent",
        &assignment
            .intent(&kernel, json!({"type": "invoke_tool", "tool_id": ""}))
            .await,
    );
    check(
        "POST",
        "/v0/executions/{id}/signal",
        &kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": "poke", "payload": {"a": 1}}),
            )
            .await,
    );
    assignment.complete(&kernel, json!({"done": true})).await;

    check(
        "GET",
        "/v0/executions/{id}",
        &kernel.get(&format!("/v0/executions/{id}")).await,
    );
    check(
        "GET",
        "/v0/executions/{id}/events",
        &kernel.get(&format!("/v0/executions/{id}/events")).await,
    );
    for event in kernel.events(&id).await {
        schemas.component("Event", &event);
    }
    check("GET", "/v0/executions", &kernel.get("/v0/executions").await);
    check(
        "GET",
        "/v0/executions",
        &kernel.get("/v0/executions?status=completed&limit=1").await,
    );

    // Create (with labels), cancel, and the errors of each kind.
    let created = kernel
        .post(
            "/v0/executions",
            &json!({"agent_id": "nobody", "input": "text", "labels": {"k": "v"}}),
        )
        .await;
    check("POST", "/v0/executions", &created);
    let other = created.1["id"].as_str().unwrap();
    check(
        "POST",
        "/v0/executions/{id}/cancel",
        &kernel
            .post(&format!("/v0/executions/{other}/cancel"), &json!({}))
            .await,
    );
    check(
        "POST",
        "/v0/executions/{id}/cancel",
        &kernel
            .post(&format!("/v0/executions/{other}/cancel"), &json!({}))
            .await,
    );
    check(
        "POST",
        "/v0/executions",
        &kernel
            .post("/v0/executions", &json!({"agent_id": ""}))
            .await,
    );
    check(
        "GET",
        "/v0/executions/{id}",
        &kernel.get("/v0/executions/no-such-id").await,
    );
    check(
        "GET",
        "/v0/executions",
        &kernel.get("/v0/executions?cursor=%21").await,
    );
    check(
        "POST",
        "/v0/agents/intent",
        &kernel.post("/v0/agents/intent", &json!({})).await,
    );
    check(
        "POST",
        "/v0/executions/{id}/signal",
        &kernel
            .post(
                &format!("/v0/executions/{id}/signal"),
                &json!({"signal_type": "late"}),
            )
            .await,
    );
    let not_found = kernel.get("/v0/no-such-route").await;
    assert_eq!(not_found.0, StatusCode::NOT_FOUND);
    schemas.component("Error", &not_found.1);
    kernel.shutdown().await;
}
