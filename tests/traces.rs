//! OpenTelemetry export end to end: a `keel dev --otel-endpoint` child process sends its spans
//! over OTLP/HTTP (protobuf) to a receiver in this test, which decodes them with
//! opentelemetry-proto. A request carrying a W3C `traceparent` joins that trace, and its span
//! names the route and carries the execution and agent ids.

use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(20);

/// Starts an OTLP/HTTP receiver on a free port; every exported span arrives on the channel.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Span>) {
    let (spans, received) = mpsc::unbounded_channel();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let spans = spans.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            let _ = spans.send(span);
                        }
                    }
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
        .map(|value| match value {
            AnyValue::StringValue(text) => text.clone(),
            AnyValue::IntValue(number) => number.to_string(),
            other => format!("{other:?}"),
        })
}

#[tokio::test]
async fn a_client_traceparent_is_joined_and_spans_are_exported_over_otlp_http() {
    let (endpoint, mut spans) = receiver().await;
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["dev", "--port", "0", "--log-level", "info"])
        .arg("--data-dir")
        .arg(data.path())
        .env_clear()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = log.next_line().await {
            if let Some(rest) = line.split("listening on ").nth(1) {
                return rest.split_whitespace().next().map(str::to_owned);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .expect("keel dev reports its address");
    tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let created: serde_json::Value = reqwest::Client::new()
        .post(format!("http://{address}/v0/executions"))
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .json(&serde_json::json!({"agent_id": "traced-agent"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let execution_id = created["id"].as_str().unwrap().to_owned();
    let untraced = reqwest::get(format!("http://{address}/v0/executions/{execution_id}"))
        .await
        .unwrap();
    assert_eq!(untraced.status(), 200);

    let mut create = None;
    let mut get = None;
    tokio::time::timeout(WAIT, async {
        while create.is_none() || get.is_none() {
            let span = spans.recv().await.expect("receiver open");
            match span.name.as_str() {
                "POST /v0/executions" => create = Some(span),
                "GET /v0/executions/{id}" => get = Some(span),
                _ => {}
            }
        }
    })
    .await
    .expect("both request spans exported");
    let (create, get) = (create.unwrap(), get.unwrap());
    assert_eq!(
        hex(&create.trace_id),
        trace_id,
        "the client's trace is joined"
    );
    assert_eq!(hex(&create.parent_span_id), parent_id);
    assert_eq!(
        attribute(&create, "agent.id").as_deref(),
        Some("traced-agent")
    );
    assert_eq!(
        attribute(&create, "execution.id").as_deref(),
        Some(execution_id.as_str())
    );
    assert_eq!(
        attribute(&create, "http.response.status_code").as_deref(),
        Some("201")
    );
    // A request without traceparent starts a trace of its own.
    assert_ne!(hex(&get.trace_id), trace_id);
    assert!(get.parent_span_id.is_empty(), "a root span");
    child.start_kill().unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
