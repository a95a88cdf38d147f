//! `/metrics` against docs/metrics.md: after a kernel ran executions (a local step, a remote
//! step, a queued remote step, a pending execution), every metric family in the exposition is
//! in the reference table with its type and labels, and every listed metric without labels is
//! exposed. Also checks the values of the queue and duration metrics.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::harness::{TestKernel, TestRunner, eventually, running_execution};

/// One row of the reference table.
#[derive(Debug)]
struct Documented {
    kind: String,
    labels: BTreeSet<String>,
}

/// Reads the table of docs/metrics.md: name → type and labels.
fn reference() -> BTreeMap<String, Documented> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md");
    let text = std::fs::read_to_string(path).expect("docs/metrics.md");
    text.lines()
        .filter(|line| line.starts_with("| `keel_"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let labels = cells[3]
                .split(',')
                .map(|label| label.trim().trim_matches('`').to_owned())
                .filter(|label| !label.is_empty() && label != "–")
                .collect();
            (
                cells[1].trim_matches('`').to_owned(),
                Documented {
                    kind: cells[2].to_owned(),
                    labels,
                },
            )
        })
        .collect()
}

/// Families of an exposition: name as queried (counters with `_total`) → type and the label
/// names seen on its samples.
fn exposed(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut kinds: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let queried = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            kinds.push((name.to_owned(), kind.to_owned()));
            families.insert(queried, (kind.to_owned(), BTreeSet::new()));
        } else if !line.starts_with('#') && !line.is_empty() {
            let sample = line.split([' ', '{']).next().unwrap_or_default();
            let Some((family, kind)) = kinds
                .iter()
                .filter(|(name, _)| sample.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
            else {
                continue;
            };
            let queried = if kind == "counter" {
                format!("{family}_total")
            } else {
                family.clone()
            };
            if let Some(labels) = line
                .split_once('{')
                .and_then(|(_, rest)| rest.split_once('}'))
            {
                for pair in labels.0.split(',').filter(|pair| !pair.is_empty()) {
                    let name = pair.split('=').next().unwrap_or_default();
                    if name != "le" {
                        families
                            .get_mut(&queried)
                            .expect("family")
                            .1
                            .insert(name.to_owned());
                    }
                }
            }
        }
    }
    families
}

async fn scrape(kernel: &TestKernel) -> String {
    let response = kernel
        .client
        .get(kernel.url("/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(response.status(), 200);
    response.text().await.expect("exposition")
}

#[tokio::test]
async fn the_reference_table_matches_the_exposition() {
    let kernel = TestKernel::start().await;
    // A local step, a remote step run by a runner, a remote step no runner serves yet.
    let mut runner = TestRunner::connect(&kernel, "metrics-runner", &["served_tool"]).await;
    let (_agent, assignment) = running_execution(&kernel, "metrics-agent").await;
    let local = assignment.invoke(&kernel, "local_tool").await;
    assignment
        .step_result(&kernel, &local, true, json!(1))
        .await;
    let (_, served) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "served_tool", "remote": true}),
        )
        .await;
    assert_eq!(served["accepted"], true, "{served}");
    let job = runner.job().await;
    runner.result(&kernel, &job, false, json!(null)).await;
    let (_, queued) = assignment
        .intent(
            &kernel,
            json!({"type": "invoke_tool", "tool_id": "unserved_tool", "remote": true}),
        )
        .await;
    assert_eq!(queued["accepted"], true, "{queued}");
    // Two executions no agent takes.
    kernel.create("idle-agent", json!(null)).await;
    kernel.create("idle-agent", json!(null)).await;
    let _ = kernel.get("/v0/no-such-route").await;

    let text = eventually("step durations recorded", || async {
        let text = scrape(&kernel).await;
        (text.contains("tool_id=\"served_tool\"") && text.contains("tool_id=\"local_tool\""))
            .then_some(text)
    })
    .await;
    let documented = reference();
    let exposed = exposed(&text);
    for (name, (kind, labels)) in &exposed {
        let Some(row) = documented.get(name) else {
            panic!("{name} ({kind}) is exposed but not in docs/metrics.md");
        };
        assert_eq!(&row.kind, kind, "type of {name}");
        if !labels.is_empty() {
            assert_eq!(&row.labels, labels, "labels of {name}");
        }
    }
    for (name, row) in &documented {
        if row.labels.is_empty() {
            assert!(
                exposed.contains_key(name),
                "{name} is documented but not exposed"
            );
        }
    }

    // The values behind the table.
    assert!(
        text.contains("keel_pending_executions{agent_id=\"idle-agent\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("keel_queued_jobs{tool_id=\"unserved_tool\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "keel_step_duration_seconds_count{tool_id=\"served_tool\",outcome=\"failed\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "keel_step_duration_seconds_count{tool_id=\"local_tool\",outcome=\"succeeded\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("route=\"/v0/executions\",status=\"201\""),
        "{text}"
    );
    assert!(
        text.contains("route=\"unmatched\",status=\"404\""),
        "{text}"
    );
    let age_line = text
        .lines()
        .find(|line| line.starts_with("keel_oldest_pending_execution_age_seconds "))
        .expect("age exposed");
    let age: f64 = age_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((0.0..60.0).contains(&age), "{age_line}");
    let policy_count = text
        .lines()
        .find(|line| line.starts_with("keel_policy_evaluation_seconds_count"))
        .expect("policy latency exposed");
    assert!(!policy_count.ends_with(" 0"), "{policy_count}");
    // Store transactions are counted on both backends (SQLite's writer thread counts its own
    // folded transactions), each with the executions it wrote.
    let transactions = sample(&text, "keel_store_commit_batch_size_count");
    assert!(transactions >= 1.0, "{text}");
    assert!(
        sample(&text, "keel_store_commit_batch_size_sum") >= transactions,
        "{text}"
    );
    kernel.shutdown().await;
}

/// The value of the sample without labels named `name`.
fn sample(text: &str, name: &str) -> f64 {
    crate::exposition::value(text, name, &[]).unwrap_or_else(|| panic!("{name} exposed"))
}
