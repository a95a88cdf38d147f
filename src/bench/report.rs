//! What `keel bench` counts and how a scenario reports it: the error log every scenario
//! shares, the counters of the `run` scenario, and [`Report`], which builds one scenario's
//! result as a JSON object with stable keys (printed as one line) and as aligned text.
//!
//! Keys every scenario's JSON carries: `scenario`, `url`, `embedded`, `elapsed_s`,
//! `throughput_per_s`, `latency` (an object of [`LatencySummary`] objects), `kernel`
//! (`pid`, `cpu_ms`, `cpu_ms_per_execution`, `rss_kib`, `peak_rss_kib`), `bench` (`cpu_ms`,
//! `cpu_ms_per_execution`), `errors` and `first_error`.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use super::latency::{Latency, LatencySummary, round3};
use super::procfs::{CpuUsage, Memory, per_execution};

/// Failed requests: a count and the first message.
#[derive(Default)]
pub struct Errors {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

impl Errors {
    /// Counts an error and keeps the first message.
    pub fn record(&self, message: impl Into<String>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first.lock()
            && first.is_none()
        {
            let text = message.into();
            tracing::warn!(error = %text, "bench request failed");
            *first = Some(text);
        }
    }

    /// Errors counted so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The first error, if any.
    pub fn first(&self) -> Option<String> {
        self.first.lock().ok().and_then(|first| first.clone())
    }
}

/// Everything the `run` scenario's tasks record.
#[derive(Default)]
pub struct Stats {
    /// `invoke_tool` and `complete` intents, request to answer.
    pub intent: Latency,
    /// Agent step results, request to answer.
    pub step_result: Latency,
    /// Remote tool calls, intent sent to `tool.result` received.
    pub remote_tool: Latency,
    /// Executions, creation request to `complete` answered.
    pub execution: Latency,
    /// Creation requests, request to answer.
    pub create: Latency,
    /// Executions created (2xx).
    pub created: AtomicU64,
    /// Executions the agents completed.
    pub completed: AtomicU64,
    /// Executions a handler gave up on (error, denial, cancellation).
    pub abandoned: AtomicU64,
    /// Remote jobs the runners executed.
    pub jobs: AtomicU64,
    /// Requests that failed (transport or non-2xx) plus denied intents.
    pub errors: Errors,
}

impl Stats {
    /// Returns empty statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts an error and keeps the first message.
    pub fn error(&self, message: impl Into<String>) {
        self.errors.record(message);
    }

    /// Returns the number of executions that ended one way or the other.
    pub fn finished(&self) -> u64 {
        self.completed.load(Ordering::Relaxed) + self.abandoned.load(Ordering::Relaxed)
    }

    /// Forgets what was measured so far (the end of a warm-up); errors are kept.
    pub fn reset(&self) {
        for latency in [
            &self.intent,
            &self.step_result,
            &self.remote_tool,
            &self.execution,
            &self.create,
        ] {
            latency.reset();
        }
        for counter in [&self.created, &self.completed, &self.abandoned, &self.jobs] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// One scenario's result, built key by key.
pub struct Report {
    title: String,
    json: Map<String, Value>,
    latency: Map<String, Value>,
    lines: Vec<(String, String)>,
}

impl Report {
    /// Starts the report of `scenario` against `url`.
    pub fn new(scenario: &str, url: &str, embedded: bool, title: String) -> Self {
        let mut json = Map::new();
        json.insert("scenario".to_owned(), json!(scenario));
        json.insert("url".to_owned(), json!(url));
        json.insert("embedded".to_owned(), json!(embedded));
        Self {
            title,
            json,
            latency: Map::new(),
            lines: Vec::new(),
        }
    }

    /// Sets a JSON key (no text line).
    pub fn field(&mut self, key: &str, value: impl Into<Value>) {
        self.json.insert(key.to_owned(), value.into());
    }

    /// Adds a text line.
    pub fn line(&mut self, label: &str, text: impl Into<String>) {
        self.lines.push((label.to_owned(), text.into()));
    }

    /// Sets the elapsed time and the scenario's headline rate (`what` per second).
    pub fn throughput(&mut self, done: u64, elapsed_s: f64, what: &str) {
        let rate = if elapsed_s > 0.0 {
            done as f64 / elapsed_s
        } else {
            0.0
        };
        self.field("elapsed_s", round3(elapsed_s));
        self.field("throughput_per_s", round3(rate));
        self.line(
            "throughput",
            format!("{done} {what} in {elapsed_s:.2} s = {rate:.1} {what}/s"),
        );
    }

    /// Adds a latency summary under `latency.<key>`.
    pub fn latency(&mut self, key: &str, label: &str, summary: LatencySummary) {
        self.latency.insert(key.to_owned(), summary.to_json());
        self.line(label, summary.to_text());
    }

    /// Sets `kernel` and `bench`: CPU spent (total and per execution) and the kernel's memory.
    pub fn resources(
        &mut self,
        cpu: CpuUsage,
        executions: u64,
        memory: Option<Memory>,
        embedded: bool,
    ) {
        let kernel_per = cpu.kernel_ms.and_then(|ms| per_execution(ms, executions));
        let bench_per = per_execution(cpu.bench_ms, executions);
        self.field(
            "kernel",
            json!({
                "pid": memory.map(|memory| memory.pid),
                "cpu_ms": cpu.kernel_ms,
                "cpu_ms_per_execution": kernel_per.map(round3),
                "rss_kib": memory.map(|memory| memory.rss_kib),
                "peak_rss_kib": memory.map(|memory| memory.peak_kib),
            }),
        );
        self.field(
            "bench",
            json!({ "cpu_ms": cpu.bench_ms, "cpu_ms_per_execution": bench_per.map(round3) }),
        );
        let shared = if embedded {
            " (embedded: kernel and bench share the process)"
        } else {
            ""
        };
        let kernel_cpu = match (cpu.kernel_ms, kernel_per) {
            (Some(total), Some(per)) => format!("{per:.3} ms per execution ({total} ms in all)"),
            (Some(total), None) => format!("{total} ms in all"),
            _ => "unknown (pass --pid PID of the kernel)".to_owned(),
        };
        self.line("kernel cpu", format!("{kernel_cpu}{shared}"));
        self.line(
            "kernel memory",
            memory.map_or_else(
                || "unknown (pass --pid PID of the kernel)".to_owned(),
                |memory| format!("{} pid {}", memory.to_text(), memory.pid),
            ),
        );
        self.line(
            "bench cpu",
            match bench_per {
                Some(per) => format!("{per:.3} ms per execution ({} ms in all)", cpu.bench_ms),
                None => format!("{} ms in all", cpu.bench_ms),
            },
        );
    }

    /// Sets `errors` and `first_error`.
    pub fn errors(&mut self, errors: &Errors) {
        let first = errors.first();
        self.field("errors", errors.count());
        self.field("first_error", first.clone());
        let mut text = errors.count().to_string();
        if let Some(first) = first {
            let _ = write!(text, " (first: {first})");
        }
        self.line("errors", text);
    }

    /// Returns the JSON object.
    pub fn to_json(&self) -> Value {
        let mut json = self.json.clone();
        json.insert("latency".to_owned(), Value::Object(self.latency.clone()));
        Value::Object(json)
    }

    /// Returns the text report: the title, then one aligned line per measure.
    pub fn to_text(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|(label, _)| label.len())
            .max()
            .unwrap_or(0);
        let mut out = format!("{}\n", self.title);
        for (label, text) in &self.lines {
            let _ = writeln!(out, "{label:<width$}  {text}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: &Value) -> Vec<String> {
        let mut keys: Vec<String> = value
            .as_object()
            .map(|object| object.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn every_report_carries_the_common_keys() {
        let mut report = Report::new("create", "http://127.0.0.1:1", false, "t".to_owned());
        report.throughput(500, 2.0, "creates");
        report.latency("create", "create latency", LatencySummary::default());
        report.resources(
            CpuUsage {
                kernel_ms: Some(1000),
                bench_ms: 250,
            },
            500,
            Some(Memory {
                pid: 9,
                rss_kib: 2048,
                peak_kib: 4096,
            }),
            false,
        );
        let errors = Errors::default();
        report.errors(&errors);
        let json = report.to_json();
        assert_eq!(
            keys(&json),
            [
                "bench",
                "elapsed_s",
                "embedded",
                "errors",
                "first_error",
                "kernel",
                "latency",
                "scenario",
                "throughput_per_s",
                "url"
            ]
        );
        assert_eq!(
            keys(&json["kernel"]),
            [
                "cpu_ms",
                "cpu_ms_per_execution",
                "peak_rss_kib",
                "pid",
                "rss_kib"
            ]
        );
        assert_eq!(keys(&json["bench"]), ["cpu_ms", "cpu_ms_per_execution"]);
        assert_eq!(json["throughput_per_s"], 250.0);
        assert_eq!(json["kernel"]["cpu_ms_per_execution"], 2.0);
        assert_eq!(json["bench"]["cpu_ms_per_execution"], 0.5);
        assert_eq!(json["latency"]["create"]["count"], 0);
    }

    #[test]
    fn unknown_kernel_and_no_executions_are_null_not_zero() {
        let mut report = Report::new("run", "u", true, "t".to_owned());
        report.resources(
            CpuUsage {
                kernel_ms: None,
                bench_ms: 5,
            },
            0,
            None,
            true,
        );
        let json = report.to_json();
        assert!(json["kernel"]["cpu_ms"].is_null());
        assert!(json["kernel"]["rss_kib"].is_null());
        assert!(json["bench"]["cpu_ms_per_execution"].is_null());
        assert!(report.to_text().contains("pass --pid"));
    }

    #[test]
    fn errors_keep_the_first_message_and_count_all() {
        let errors = Errors::default();
        errors.record("first");
        errors.record("second");
        let mut report = Report::new("run", "u", false, "t".to_owned());
        report.errors(&errors);
        let json = report.to_json();
        assert_eq!(json["errors"], 2);
        assert_eq!(json["first_error"], "first");
        assert!(report.to_text().contains("2 (first: first)"));
    }

    #[test]
    fn stats_reset_clears_counters_and_histograms_but_not_errors() {
        let stats = Stats::new();
        stats.completed.fetch_add(3, Ordering::Relaxed);
        stats.execution.record(std::time::Duration::from_millis(2));
        stats.error("boom");
        stats.reset();
        assert_eq!(stats.finished(), 0);
        assert_eq!(stats.execution.summary().count, 0);
        assert_eq!(stats.errors.count(), 1);
    }
}
