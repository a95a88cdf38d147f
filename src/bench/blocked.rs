//! `keel bench blocked`: parks N executions on a signal and measures what a waiting execution
//! costs the kernel. Agent consumers answer each assignment with `wait` for the bench's resume
//! signal; once all are blocked the kernel's memory is read (after a pause to settle) and set
//! against the baseline read before the first creation; then every execution is signalled, the
//! agents complete them, and the memory is read again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use super::fanout::{Budget, Counters, create_many, signal_all};
use super::parker::{OnAssign, Parker, Sessions};
use super::procfs::{CpuMeter, Memory, read_memory};
use super::progress::Progress;
use super::report::{Errors, Report};
use super::{BlockedArgs, Target, bench_id, emit, invalid, verdict};
use crate::cli::CliError;

/// How long the agents may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the scenario and prints its report.
pub async fn run(args: BlockedArgs) -> Result<(), CliError> {
    if args.executions == 0 {
        return Err(invalid("--executions", "must be at least 1"));
    }
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.agents == 0 {
        return Err(invalid("--agents", "must be at least 1"));
    }
    let target = Target::connect(&args.target).await?;
    let deadline = tokio::time::Instant::now() + args.timeout;
    let http = target.http.clone();
    let errors = Arc::new(Errors::default());
    let agent_id = bench_id();
    let parker = Parker::new(
        http.clone(),
        agent_id.clone(),
        OnAssign::Park,
        Sessions::default(),
        errors.clone(),
    );
    parker
        .connect(args.agents, CONNECT_TIMEOUT)
        .await
        .map_err(CliError::Failed)?;
    tokio::time::sleep(args.settle).await;
    let baseline = target.pid.and_then(read_memory);
    let cpu = CpuMeter::start(target.pid);
    let started = Instant::now();

    let creates = Counters::new(&errors);
    let ids = {
        let counter = creates.clone();
        let _progress = Progress::start(
            "blocked: create".to_owned(),
            Some(args.executions),
            move || counter.done.load(Ordering::Relaxed),
        );
        let budget = Budget {
            limit: args.executions,
            deadline: Some(deadline),
        };
        create_many(&http, &agent_id, budget, args.concurrency, &creates, true).await
    };
    let create_s = started.elapsed().as_secs_f64();
    let created = ids.len() as u64;
    let all_parked = {
        let counter = parker.clone();
        let _progress = Progress::start("blocked: park".to_owned(), Some(created), move || {
            counter.parked.load(Ordering::Relaxed)
        });
        Parker::wait_for(&parker.parked, created, remaining(deadline)).await
    };
    let park_s = started.elapsed().as_secs_f64();
    let parked = parker.parked.load(Ordering::Relaxed);
    if !all_parked {
        errors.record(format!(
            "only {parked} of {created} executions blocked in time"
        ));
    }
    tokio::time::sleep(args.settle).await;
    let blocked_memory = target.pid.and_then(read_memory);

    let resume_started = Instant::now();
    let signals = Counters::new(&errors);
    let all_completed = {
        let counter = parker.clone();
        let _progress = Progress::start("blocked: resume".to_owned(), Some(parked), move || {
            counter.completed.load(Ordering::Relaxed)
        });
        signal_all(&http, Arc::new(ids), args.concurrency, &signals).await;
        Parker::wait_for(&parker.completed, parked, remaining(deadline)).await
    };
    let resume_s = resume_started.elapsed().as_secs_f64();
    let elapsed = started.elapsed().as_secs_f64();
    let usage = cpu.stop();
    parker.stop();
    let completed = parker.completed.load(Ordering::Relaxed);
    if !all_completed {
        errors.record(format!(
            "only {completed} of {parked} blocked executions completed in time"
        ));
    }
    tokio::time::sleep(args.settle).await;
    let after = target.pid.and_then(read_memory);

    let mut report = Report::new(
        "blocked",
        target.http.base_url(),
        target.embedded.is_some(),
        format!(
            "keel bench blocked against {}: {} executions parked on a signal, {} agents, {} concurrent requests",
            target.http.base_url(),
            args.executions,
            args.agents,
            args.concurrency
        ),
    );
    report.field("concurrency", args.concurrency);
    report.field("agents", args.agents);
    report.field(
        "executions",
        json!({ "requested": args.executions, "created": created, "blocked": parked, "completed": completed }),
    );
    report.field(
        "phases_s",
        json!({ "create": round(create_s), "block": round(park_s), "resume": round(resume_s) }),
    );
    report.throughput(completed, elapsed, "executions");
    report.line(
        "phases",
        format!(
            "{created} created in {create_s:.2} s, all blocked after {park_s:.2} s, resumed and completed in {resume_s:.2} s"
        ),
    );
    report.field("creates_per_s", rate(created, create_s));
    report.field("resumes_per_s", rate(completed, resume_s));
    let memory = blocked_memory_json(baseline, blocked_memory, after, parked);
    report.line("rss", memory_text(&memory));
    report.field("memory", memory);
    report.latency("create", "create", creates.latency.summary());
    report.latency("wait", "wait intent", parker.wait_latency.summary());
    report.latency("signal", "signal", signals.latency.summary());
    report.latency(
        "complete",
        "complete intent",
        parker.complete_latency.summary(),
    );
    report.resources(usage, completed, after, target.embedded.is_some());
    report.errors(&errors);
    let output = target.output;
    target.finish().await?;
    emit(&report, output);
    verdict(errors.count(), completed, "execution completed")
}

/// Time left until `deadline` (zero when past).
fn remaining(deadline: tokio::time::Instant) -> Duration {
    deadline.saturating_duration_since(tokio::time::Instant::now())
}

/// `count / seconds` rounded, 0 when no time passed.
fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        round(count as f64 / seconds)
    } else {
        0.0
    }
}

/// Rounds to two decimals.
fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// The memory section: RSS at the three readings and the growth per blocked execution.
pub fn blocked_memory_json(
    baseline: Option<Memory>,
    blocked: Option<Memory>,
    after: Option<Memory>,
    blocked_count: u64,
) -> serde_json::Value {
    let per_blocked_bytes = match (baseline, blocked) {
        (Some(baseline), Some(blocked)) if blocked_count > 0 => {
            let growth_kib = blocked.rss_kib as f64 - baseline.rss_kib as f64;
            Some((growth_kib * 1024.0 / blocked_count as f64).round())
        }
        _ => None,
    };
    json!({
        "baseline_rss_kib": baseline.map(|memory| memory.rss_kib),
        "blocked_rss_kib": blocked.map(|memory| memory.rss_kib),
        "completed_rss_kib": after.map(|memory| memory.rss_kib),
        "peak_rss_kib": after.or(blocked).map(|memory| memory.peak_kib),
        "rss_per_blocked_bytes": per_blocked_bytes,
        "completed_over_baseline_kib": match (baseline, after) {
            (Some(baseline), Some(after)) => Some(after.rss_kib as i64 - baseline.rss_kib as i64),
            _ => None,
        },
    })
}

/// One line of text for the memory section.
fn memory_text(memory: &serde_json::Value) -> String {
    let mib = |key: &str| {
        memory[key]
            .as_f64()
            .map_or_else(|| "?".to_owned(), |kib| format!("{:.1} MiB", kib / 1024.0))
    };
    match memory["rss_per_blocked_bytes"].as_f64() {
        Some(bytes) => format!(
            "baseline {}, all blocked {} ({:.2} KiB per blocked execution), after completion {}",
            mib("baseline_rss_kib"),
            mib("blocked_rss_kib"),
            bytes / 1024.0,
            mib("completed_rss_kib")
        ),
        None => "unknown (pass --pid PID of the kernel)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(rss_kib: u64) -> Option<Memory> {
        Some(Memory {
            pid: 1,
            rss_kib,
            peak_kib: rss_kib + 10,
        })
    }

    #[test]
    fn growth_per_blocked_execution_in_bytes() {
        // 100 MiB over a 16 MiB baseline for 50 000 executions: 2 097 bytes each.
        let json = blocked_memory_json(
            memory(16 * 1024),
            memory(116 * 1024),
            memory(20 * 1024),
            50_000,
        );
        assert_eq!(json["rss_per_blocked_bytes"], 2097.0);
        assert_eq!(json["completed_over_baseline_kib"], 4 * 1024);
        assert_eq!(json["peak_rss_kib"], 20 * 1024 + 10);
        assert!(memory_text(&json).contains("2.05 KiB per blocked execution"));
    }

    #[test]
    fn no_pid_or_nothing_blocked_gives_nulls() {
        let json = blocked_memory_json(None, None, None, 10);
        assert!(json["rss_per_blocked_bytes"].is_null());
        let json = blocked_memory_json(memory(1), memory(2), None, 0);
        assert!(json["rss_per_blocked_bytes"].is_null());
        assert!(json["completed_over_baseline_kib"].is_null());
    }
}
