//! What `keel bench` measures and how it is reported: latency histograms (hdrhistogram, in
//! microseconds), counters, the kernel's memory from `/proc/PID/status`, and the final report
//! as text or JSON.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Highest latency recorded exactly (anything above is clamped): one hour, in microseconds.
const HIGHEST_MICROS: u64 = 3_600_000_000;

/// A latency histogram shared by the bench's tasks.
pub struct Latency {
    /// `None` only if the histogram could not be built (the bounds are valid constants).
    histogram: Mutex<Option<Histogram<u64>>>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// Returns an empty histogram (1 µs to 1 h, 3 significant digits).
    pub fn new() -> Self {
        Self {
            histogram: Mutex::new(Histogram::new_with_bounds(1, HIGHEST_MICROS, 3).ok()),
        }
    }

    /// Records one sample.
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, HIGHEST_MICROS);
        if let Ok(mut guard) = self.histogram.lock()
            && let Some(histogram) = guard.as_mut()
        {
            let _ = histogram.record(micros);
        }
    }

    /// Returns count and percentiles in milliseconds.
    pub fn summary(&self) -> LatencySummary {
        let Ok(guard) = self.histogram.lock() else {
            return LatencySummary::default();
        };
        let Some(histogram) = guard.as_ref() else {
            return LatencySummary::default();
        };
        let millis = |micros: u64| micros as f64 / 1000.0;
        LatencySummary {
            count: histogram.len(),
            p50: millis(histogram.value_at_quantile(0.50)),
            p90: millis(histogram.value_at_quantile(0.90)),
            p99: millis(histogram.value_at_quantile(0.99)),
            max: millis(histogram.max()),
        }
    }
}

/// Percentiles of one histogram, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl LatencySummary {
    /// Returns the summary as JSON.
    pub fn to_json(self) -> Value {
        json!({ "count": self.count, "p50_ms": round(self.p50), "p90_ms": round(self.p90), "p99_ms": round(self.p99), "max_ms": round(self.max) })
    }

    /// Returns the summary as one line of text.
    pub fn to_text(self) -> String {
        if self.count == 0 {
            return "no samples".to_owned();
        }
        format!(
            "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  (n={})",
            self.p50, self.p90, self.p99, self.max, self.count
        )
    }
}

/// Everything the bench's tasks record.
pub struct Stats {
    /// `invoke_tool` and `complete` intents, request to answer.
    pub intent: Latency,
    /// Agent step results, request to answer.
    pub step_result: Latency,
    /// Remote tool calls, intent sent to `tool.result` received.
    pub remote_tool: Latency,
    /// Executions, creation request to `complete` answered.
    pub execution: Latency,
    /// Executions created (2xx).
    pub created: AtomicU64,
    /// Executions the agents completed.
    pub completed: AtomicU64,
    /// Executions a handler gave up on (error, denial, cancellation).
    pub abandoned: AtomicU64,
    /// Requests that failed (transport or non-2xx) plus denied intents.
    pub errors: AtomicU64,
    /// Remote jobs the runners executed.
    pub jobs: AtomicU64,
    /// First error seen, for the report.
    pub first_error: Mutex<Option<String>>,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Returns empty statistics.
    pub fn new() -> Self {
        Self {
            intent: Latency::new(),
            step_result: Latency::new(),
            remote_tool: Latency::new(),
            execution: Latency::new(),
            created: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            first_error: Mutex::new(None),
        }
    }

    /// Counts an error and keeps the first message.
    pub fn error(&self, message: impl Into<String>) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first_error.lock()
            && first.is_none()
        {
            let text = message.into();
            tracing::warn!(error = %text, "bench request failed");
            *first = Some(text);
        }
    }

    /// Returns the number of executions that ended one way or the other.
    pub fn finished(&self) -> u64 {
        self.completed.load(Ordering::Relaxed) + self.abandoned.load(Ordering::Relaxed)
    }
}

/// Memory of the kernel process, from `/proc/PID/status` (KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// Process id read.
    pub pid: u32,
    /// Resident set size now.
    pub rss_kib: u64,
    /// Peak resident set size.
    pub peak_kib: u64,
}

/// Reads `VmRSS` and `VmHWM` of `pid`; `None` when the process or the fields are missing.
pub fn read_memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse::<u64>().ok())
    };
    Some(Memory {
        pid,
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:").unwrap_or_default(),
    })
}

/// The parameters of a run, echoed in the report.
#[derive(Clone, Debug)]
pub struct RunShape {
    /// Kernel base URL.
    pub url: String,
    /// Whether the kernel ran inside the bench process.
    pub embedded: bool,
    /// Executions requested.
    pub executions: u64,
    /// Executions in flight at most.
    pub concurrency: usize,
    /// Tool calls per execution.
    pub tools_per_execution: u32,
    /// Agent consumers.
    pub agents: usize,
    /// Runner connections.
    pub runners: usize,
}

/// Returns the final report as JSON.
pub fn report_json(
    shape: &RunShape,
    stats: &Stats,
    elapsed: Duration,
    memory: Option<Memory>,
    capped: bool,
) -> Value {
    let completed = stats.completed.load(Ordering::Relaxed);
    let seconds = elapsed.as_secs_f64();
    json!({
        "url": shape.url,
        "embedded": shape.embedded,
        "concurrency": shape.concurrency,
        "agents": shape.agents,
        "runners": shape.runners,
        "tools_per_execution": shape.tools_per_execution,
        "executions": {
            "requested": shape.executions,
            "created": stats.created.load(Ordering::Relaxed),
            "completed": completed,
            "abandoned": stats.abandoned.load(Ordering::Relaxed),
        },
        "duration_capped": capped,
        "elapsed_s": round(seconds),
        "executions_per_s": round(if seconds > 0.0 { completed as f64 / seconds } else { 0.0 }),
        "remote_jobs": stats.jobs.load(Ordering::Relaxed),
        "intent_latency": stats.intent.summary().to_json(),
        "step_result_latency": stats.step_result.summary().to_json(),
        "remote_tool_latency": stats.remote_tool.summary().to_json(),
        "execution_latency": stats.execution.summary().to_json(),
        "errors": stats.errors.load(Ordering::Relaxed),
        "first_error": stats.first_error.lock().ok().and_then(|first| first.clone()),
        "memory": memory.map(|memory| json!({ "pid": memory.pid, "rss_kib": memory.rss_kib, "peak_rss_kib": memory.peak_kib })),
    })
}

/// Returns the final report as text.
pub fn report_text(
    shape: &RunShape,
    stats: &Stats,
    elapsed: Duration,
    memory: Option<Memory>,
    capped: bool,
) -> String {
    let completed = stats.completed.load(Ordering::Relaxed);
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 {
        completed as f64 / seconds
    } else {
        0.0
    };
    let local = shape.tools_per_execution.div_ceil(2);
    let remote = shape.tools_per_execution / 2;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "keel bench against {}{}: {} executions x {} tools ({local} local, {remote} remote), concurrency {}, {} agents, {} runners",
        shape.url,
        if shape.embedded { " (embedded)" } else { "" },
        shape.executions,
        shape.tools_per_execution,
        shape.concurrency,
        shape.agents,
        shape.runners,
    );
    let _ = writeln!(
        out,
        "completed        {completed}/{} in {seconds:.2} s = {rate:.1} executions/s",
        shape.executions
    );
    if capped {
        let created = stats.created.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "                 (stopped by --duration: {} unfinished, {} never created)",
            created.saturating_sub(completed),
            shape.executions.saturating_sub(created)
        );
    }
    let _ = writeln!(out, "intent latency   {}", stats.intent.summary().to_text());
    let _ = writeln!(
        out,
        "step result      {}",
        stats.step_result.summary().to_text()
    );
    let _ = writeln!(
        out,
        "remote tool      {}",
        stats.remote_tool.summary().to_text()
    );
    let _ = writeln!(
        out,
        "execution        {}",
        stats.execution.summary().to_text()
    );
    match memory {
        Some(memory) => {
            let _ = writeln!(
                out,
                "kernel memory    rss {:.1} MiB, peak {:.1} MiB (pid {}{})",
                memory.rss_kib as f64 / 1024.0,
                memory.peak_kib as f64 / 1024.0,
                memory.pid,
                if shape.embedded {
                    ", includes the bench itself"
                } else {
                    ""
                }
            );
        }
        None => {
            let _ = writeln!(
                out,
                "kernel memory    unknown (pass --pid PID of the kernel)"
            );
        }
    }
    let errors = stats.errors.load(Ordering::Relaxed);
    let _ = write!(out, "errors           {errors}");
    if let Some(first) = stats
        .first_error
        .lock()
        .ok()
        .and_then(|first| first.clone())
    {
        let _ = write!(out, " (first: {first})");
    }
    out.push('\n');
    out
}

/// Rounds to two decimals for the JSON report.
fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}
