//! `keel bench create`: creations only, with no agent connected, `--concurrency` requests in
//! flight for `--duration` (or `--executions` creations); reports creates/s, create latency and
//! the kernel's CPU per creation. The executions stay pending on the kernel: run it against a
//! throwaway kernel.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::fanout::{Budget, Counters, create_many};
use super::procfs::{CpuMeter, read_memory};
use super::progress::Progress;
use super::report::{Errors, Report};
use super::{CreateArgs, Target, bench_id, emit, invalid, verdict};
use crate::cli::CliError;

/// Runs the scenario and prints its report.
pub async fn run(args: CreateArgs) -> Result<(), CliError> {
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.duration.is_zero() {
        return Err(invalid("--duration", "must be greater than zero"));
    }
    if args.executions == Some(0) {
        return Err(invalid("--executions", "must be at least 1"));
    }
    let target = Target::connect(&args.target).await?;
    let errors = Arc::new(Errors::default());
    let creates = Counters::new(&errors);
    let agent_id = bench_id();
    let baseline = target.pid.and_then(read_memory);
    let cpu = CpuMeter::start(target.pid);
    let started = Instant::now();
    {
        let counter = creates.clone();
        let _progress = Progress::start("create".to_owned(), args.executions, move || {
            counter.done.load(Ordering::Relaxed)
        });
        let budget = Budget {
            limit: args.executions.unwrap_or(u64::MAX),
            deadline: Some(tokio::time::Instant::now() + args.duration),
        };
        create_many(
            &target.http,
            &agent_id,
            budget,
            args.concurrency,
            &creates,
            false,
        )
        .await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let usage = cpu.stop();
    let memory = target.pid.and_then(read_memory);
    let created = creates.done.load(Ordering::Relaxed);

    let mut report = Report::new(
        "create",
        target.http.base_url(),
        target.embedded.is_some(),
        format!(
            "keel bench create against {}: {} concurrent creations for {:?}, no agent connected (agent {agent_id})",
            target.http.base_url(),
            args.concurrency,
            args.duration
        ),
    );
    report.field("concurrency", args.concurrency);
    report.field("agent_id", agent_id.as_str());
    report.field(
        "executions",
        serde_json::json!({ "requested": args.executions, "created": created }),
    );
    report.throughput(created, elapsed, "creates");
    report.field(
        "creates_per_s",
        report.to_json()["throughput_per_s"].clone(),
    );
    report.field("baseline_rss_kib", baseline.map(|memory| memory.rss_kib));
    report.latency("create", "create", creates.latency.summary());
    report.resources(usage, created, memory, target.embedded.is_some());
    report.errors(&errors);
    let output = target.output;
    target.finish().await?;
    emit(&report, output);
    verdict(errors.count(), created, "execution created")
}
