//! `keel bench llm`: what the LLM gateway adds to a model call. A fake OpenAI-format provider
//! runs in this process (answers at once: a small JSON answer, or `--chunks` stream chunks
//! and a usage chunk); the same chat calls are made to it directly and through the kernel's
//! gateway (`/v0/executions/{id}/llm/{provider}/v1/chat/completions`, one execution per
//! connection), plain and streamed, at C=1 and C=`--concurrency`, each for `--duration`, over
//! the same HTTP client. Reported: latency p50/p99 of each, the gateway's overhead at p50 and
//! p99, time to first chunk of streams, and the kernel's CPU per call through the gateway.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::post;
use serde_json::{Value, json};

use super::latency::{Latency, round3};
use super::procfs::{CpuMeter, per_execution};
use super::progress::Progress;
use super::report::{Errors, Report};
use super::{EmbeddedKernel, LlmArgs, emit, invalid, verdict};
use crate::cli::CliError;

/// Bearer token of the embedded kernel (an admin may call for any execution).
const EMBEDDED_TOKEN: &str = "keel-bench-llm";
/// The request every call makes (`"stream": true` added for streams).
const PROMPT: &str =
    r#"{"model":"bench-model","messages":[{"role":"user","content":"Say hello."}]"#;

/// Runs the scenario and prints its report.
pub async fn run(args: LlmArgs) -> Result<(), CliError> {
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.duration.is_zero() {
        return Err(invalid("--duration", "must be greater than zero"));
    }
    let fake = start_fake(args.provider_port, args.chunks).await?;
    let dir = tempfile::tempdir().map_err(|error| {
        CliError::Failed(format!("cannot create a temporary directory: {error}"))
    })?;
    let (embedded, url, token, pid) = if args.target.embedded {
        let config = dir.path().join("llm.yaml");
        std::fs::write(
            &config,
            format!(
                "providers:\n  {}:\n    format: openai\n    base_url: {fake}\n",
                args.provider
            ),
        )
        .map_err(|error| CliError::Failed(format!("cannot write the gateway file: {error}")))?;
        let kernel = EmbeddedKernel::start_with(|kernel| {
            kernel.llm_config = Some(config);
            kernel.bearer_token = Some(EMBEDDED_TOKEN.to_owned());
        })
        .await?;
        let url = kernel.url.clone();
        (
            Some(kernel),
            url,
            Some(EMBEDDED_TOKEN.to_owned()),
            Some(std::process::id()),
        )
    } else {
        let client = &args.target.client;
        if args.target.pid.len() > 1 || client.url().contains(',') {
            return Err(invalid(
                "--url",
                "`bench llm` measures one kernel (one --url, at most one --pid)",
            ));
        }
        (
            None,
            client.url().to_owned(),
            client.token().map(str::to_owned),
            args.target.pid.first().copied(),
        )
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency + 8)
        .build()
        .map_err(|error| CliError::Failed(format!("cannot build the HTTP client: {error}")))?;
    let errors = Arc::new(Errors::default());
    let mut executions = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        executions.push(create_execution(&client, &url, token.as_deref()).await?);
    }
    let gateway = |execution: &str| {
        format!(
            "{url}/v0/executions/{execution}/llm/{}/v1/chat/completions",
            args.provider
        )
    };
    let direct_url = format!("{fake}/chat/completions");
    let mut report = Report::new(
        "llm",
        &url,
        embedded.is_some(),
        format!(
            "keel bench llm against {url}: chat calls to a fake provider directly and through \
             the gateway, plain and streamed ({} chunks), C=1 and C={}, {:?} each",
            args.chunks, args.concurrency, args.duration
        ),
    );
    let mut summary = serde_json::Map::new();
    let mut all_calls = 0;
    for stream in [false, true] {
        for connections in [1, args.concurrency] {
            let mode = if stream { "stream" } else { "plain" };
            let phase = |via: &str| format!("llm {mode} {via} c={connections}");
            let direct_urls = vec![direct_url.clone(); connections];
            let direct = calls(
                &client,
                &direct_urls,
                None,
                stream,
                args.duration,
                &errors,
                &phase("direct"),
            )
            .await;
            let gateway_urls: Vec<String> = executions[..connections]
                .iter()
                .map(|id| gateway(id))
                .collect();
            let cpu = CpuMeter::start(pid);
            let through = calls(
                &client,
                &gateway_urls,
                token.as_deref(),
                stream,
                args.duration,
                &errors,
                &phase("gateway"),
            )
            .await;
            let usage = cpu.stop();
            all_calls += through.done;
            let key = format!("{mode}_c{connections}");
            let (direct_total, gateway_total) = (direct.total.summary(), through.total.summary());
            report.latency(
                &format!("{key}_direct"),
                &format!("{mode} c={connections} direct"),
                direct_total,
            );
            report.latency(
                &format!("{key}_gateway"),
                &format!("{mode} c={connections} gateway"),
                gateway_total,
            );
            let mut entry = json!({
                "overhead_p50_ms": round3(gateway_total.p50 - direct_total.p50),
                "overhead_p99_ms": round3(gateway_total.p99 - direct_total.p99),
                "kernel_cpu_ms_per_call": usage.kernel_ms.and_then(|ms| per_execution(ms, through.done)).map(round3),
                "calls_through_gateway": through.done,
            });
            let mut line = format!(
                "overhead p50 {:.3} ms, p99 {:.3} ms",
                gateway_total.p50 - direct_total.p50,
                gateway_total.p99 - direct_total.p99
            );
            if stream {
                let (direct_first, gateway_first) =
                    (direct.first.summary(), through.first.summary());
                entry["first_chunk_overhead_p50_ms"] =
                    json!(round3(gateway_first.p50 - direct_first.p50));
                report.latency(
                    &format!("{key}_first_chunk_direct"),
                    &format!("{mode} c={connections} first chunk direct"),
                    direct_first,
                );
                report.latency(
                    &format!("{key}_first_chunk_gateway"),
                    &format!("{mode} c={connections} first chunk gateway"),
                    gateway_first,
                );
                line.push_str(&format!(
                    ", first chunk p50 {:.3} ms",
                    gateway_first.p50 - direct_first.p50
                ));
            }
            if let Some(per) = usage
                .kernel_ms
                .and_then(|ms| per_execution(ms, through.done))
            {
                line.push_str(&format!(", kernel cpu {per:.3} ms per call"));
            }
            report.line(&format!("{mode} c={connections}"), line);
            summary.insert(key, entry);
        }
    }
    report.field("overhead", Value::Object(summary));
    report.errors(&errors);
    if let Some(kernel) = embedded {
        kernel.stop().await?;
    }
    emit(&report, args.target.client.output);
    verdict(errors.count(), all_calls, "model call answered")
}

/// Latencies of one phase.
struct Phase {
    total: Latency,
    first: Latency,
    done: u64,
}

/// Runs one closed loop per URL for `duration`; a loop stops at its first failure (recorded).
async fn calls(
    client: &reqwest::Client,
    urls: &[String],
    token: Option<&str>,
    stream: bool,
    duration: Duration,
    errors: &Arc<Errors>,
    phase: &str,
) -> Phase {
    let done = Arc::new(AtomicU64::new(0));
    let counter = done.clone();
    let _progress = Progress::start(phase.to_owned(), None, move || {
        counter.load(Ordering::Relaxed)
    });
    let body = if stream {
        Bytes::from(format!("{PROMPT},\"stream\":true}}"))
    } else {
        Bytes::from(format!("{PROMPT}}}"))
    };
    let deadline = Instant::now() + duration;
    let mut loops = tokio::task::JoinSet::new();
    for url in urls {
        let (client, url, body, token) = (
            client.clone(),
            url.clone(),
            body.clone(),
            token.map(str::to_owned),
        );
        let (done, errors) = (done.clone(), errors.clone());
        loops.spawn(async move {
            let (total, first) = (Latency::new(), Latency::new());
            while Instant::now() < deadline {
                let started = Instant::now();
                let mut request = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone());
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                match one_call(request, started).await {
                    Ok(first_chunk) => {
                        total.record(started.elapsed());
                        first.record(first_chunk);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        errors.record(error);
                        break;
                    }
                }
            }
            (total, first)
        });
    }
    let (total, first) = (Latency::new(), Latency::new());
    while let Some(joined) = loops.join_next().await {
        match joined {
            Ok((own_total, own_first)) => {
                total.merge(&own_total);
                first.merge(&own_first);
            }
            Err(error) => errors.record(format!("call loop failed: {error}")),
        }
    }
    Phase {
        total,
        first,
        done: done.load(Ordering::Relaxed),
    }
}

/// Makes one call and reads its whole answer; returns the time to its first body chunk.
async fn one_call(request: reqwest::RequestBuilder, started: Instant) -> Result<Duration, String> {
    let mut response = request.send().await.map_err(|error| error.to_string())?;
    if !response.status().is_success() {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        return Err(format!("{status}: {text}"));
    }
    let mut first = None;
    while let Some(chunk) = response.chunk().await.map_err(|error| error.to_string())? {
        if first.is_none() && !chunk.is_empty() {
            first = Some(started.elapsed());
        }
    }
    Ok(first.unwrap_or_else(|| started.elapsed()))
}

async fn create_execution(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> Result<String, CliError> {
    let mut request = client
        .post(format!("{url}/v0/executions"))
        .json(&json!({"agent_id": "bench-llm", "input": {}}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer: Value = request
        .send()
        .await
        .map_err(|error| CliError::Failed(format!("cannot create an execution: {error}")))?
        .json()
        .await
        .map_err(|error| CliError::Failed(format!("cannot read the created execution: {error}")))?;
    answer["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| CliError::Failed(format!("creating an execution answered {answer}")))
}

/// Starts the fake provider on 127.0.0.1:`port`; returns its `/v1` base URL.
async fn start_fake(port: u16, chunks: usize) -> Result<String, CliError> {
    let answer = json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "bench-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})
    .to_string();
    let mut events = String::new();
    for index in 0..chunks {
        events.push_str(&format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{index} \"}}}}]}}\n\n"
        ));
    }
    events.push_str("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"bench-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":16,\"total_tokens\":25}}\n\ndata: [DONE]\n\n");
    let (answer, events) = (Bytes::from(answer), Bytes::from(events));
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |body: Bytes| {
            let (answer, events) = (answer.clone(), events.clone());
            async move {
                if asks_for_stream(&body) {
                    ([("content-type", "text/event-stream")], Body::from(events))
                } else {
                    ([("content-type", "application/json")], Body::from(answer))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|error| CliError::Failed(format!("cannot listen on 127.0.0.1:{port}: {error}")))?;
    let address = listener
        .local_addr()
        .map_err(|error| CliError::Failed(format!("cannot read the fake's address: {error}")))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{address}/v1"))
}

/// Whether a request body asks for a stream (without parsing it: the fake costs little).
fn asks_for_stream(body: &[u8]) -> bool {
    body.windows(13).any(|window| window == b"\"stream\":true")
}
