//! `keel bench restart`: how fast a kernel comes back after `kill -9` with N executions it must
//! keep. The bench starts `keel dev` itself (a free 127.0.0.1 port, a fresh data directory),
//! leaves half the executions pending (their agent never connected) and half blocked on a
//! signal, reads the kernel's memory, kills it with SIGKILL and starts it again on the same
//! data. It times `/v0/ready` and a first new execution served end to end (a fresh agent
//! connects, creates, makes one local step, completes), reads the memory again, and then —
//! unless `--verify-sample 0` — checks the old executions go on: the blocked agent reconnects
//! with the same consumer ids and a sample of the blocked executions is signalled, the pending
//! agent connects and completes every pending execution.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use super::fanout::{Budget, Counters, create_many};
use super::http::Http;
use super::kernel_process::{KernelProcess, KernelSpec, free_port};
use super::parker::{OnAssign, Parker, Sessions};
use super::procfs::{Memory, read_cpu_ms, read_memory};
use super::progress::Progress;
use super::report::{Errors, Report};
use super::resume::{CONNECT_TIMEOUT, first_execution, verify};
use super::{RestartArgs, bench_id, emit, invalid, verdict};
use crate::cli::CliError;
/// Pause before reading the memory of the loaded kernel.
const SETTLE: Duration = Duration::from_secs(1);

/// Runs the scenario and prints its report.
pub async fn run(args: RestartArgs) -> Result<(), CliError> {
    if args.executions == 0 {
        return Err(invalid("--executions", "must be at least 1"));
    }
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.agents == 0 {
        return Err(invalid("--agents", "must be at least 1"));
    }
    let bin = match &args.kernel_bin {
        Some(bin) => bin.clone(),
        None => std::env::current_exe()
            .map_err(|error| CliError::Failed(format!("cannot find this executable: {error}")))?,
    };
    let work = tempfile::Builder::new()
        .prefix("keel-bench-restart-")
        .tempdir()
        .map_err(|error| CliError::Failed(format!("cannot create a data directory: {error}")))?;
    let spec = KernelSpec {
        bin,
        port: free_port()?,
        data_dir: work.path().join("data"),
        db_url: args.db_url.clone(),
        log: work.path().join("kernel.log"),
    };
    let deadline = tokio::time::Instant::now() + args.timeout;
    let mut kernel = spec.start()?;
    let outcome = measure(&args, &spec, &mut kernel, deadline).await;
    let _ = kernel.kill9().await;
    let report = outcome?;
    emit(&report.report, args.output);
    verdict(
        report.errors,
        report.done,
        "new execution completed after the restart",
    )
}

/// The report and what decides the exit status.
struct Outcome {
    report: Report,
    errors: u64,
    done: u64,
}

/// Loads the kernel, kills it, restarts it and measures.
async fn measure(
    args: &RestartArgs,
    spec: &KernelSpec,
    kernel: &mut KernelProcess,
    deadline: tokio::time::Instant,
) -> Result<Outcome, CliError> {
    let http = Http::new(&spec.url(), None)?;
    kernel.wait_ready(&http, remaining(deadline)).await?;
    let errors = Arc::new(Errors::default());
    let base = bench_id();
    let (blocked_agent, pending_agent) = (format!("{base}-blocked"), format!("{base}-pending"));
    let pending_wanted = args.executions / 2;
    let blocked_wanted = args.executions - pending_wanted;

    // Load: blocked executions (an agent parks each on a signal), then pending ones.
    let parker = Parker::new(
        http.clone(),
        blocked_agent.clone(),
        OnAssign::Park,
        Sessions::default(),
        errors.clone(),
    );
    parker
        .connect(args.agents, CONNECT_TIMEOUT)
        .await
        .map_err(CliError::Failed)?;
    let load_started = Instant::now();
    let creates = Counters::new(&errors);
    let (blocked_ids, pending_created) = {
        let counter = creates.clone();
        let _progress = Progress::start(
            "restart: create".to_owned(),
            Some(args.executions),
            move || counter.done.load(Ordering::Relaxed),
        );
        let budget = |limit| Budget {
            limit,
            deadline: Some(deadline),
        };
        let blocked = create_many(
            &http,
            &blocked_agent,
            budget(blocked_wanted),
            args.concurrency,
            &creates,
            true,
        )
        .await;
        let pending = create_many(
            &http,
            &pending_agent,
            budget(pending_wanted),
            args.concurrency,
            &creates,
            true,
        )
        .await;
        (blocked, pending.len() as u64)
    };
    let blocked_created = blocked_ids.len() as u64;
    if !Parker::wait_for(&parker.parked, blocked_created, remaining(deadline)).await {
        errors.record(format!(
            "only {} of {blocked_created} executions blocked in time",
            parker.parked.load(Ordering::Relaxed)
        ));
    }
    let load_s = load_started.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let before_kill = read_memory(kernel.pid);
    parker.stop();

    // kill -9, start again on the same data, time readiness and a first new execution.
    kernel.kill9().await?;
    let restarted = Instant::now();
    *kernel = spec.start()?;
    let http = Http::new(&spec.url(), None)?;
    let ready = kernel.wait_ready(&http, remaining(deadline)).await?;
    let cpu_to_ready = read_cpu_ms(kernel.pid);
    let at_ready = read_memory(kernel.pid);
    let first = first_execution(&http, &format!("{base}-fresh"))
        .await
        .map(|()| restarted.elapsed());
    if let Err(error) = &first {
        errors.record(format!("first new execution: {error}"));
    }
    let after_first = read_memory(kernel.pid);

    // The old executions go on as their agents reconnect.
    let verify = if args.verify_sample > 0 {
        Some(
            verify(
                args,
                &http,
                kernel.pid,
                &parker,
                &blocked_ids,
                &pending_agent,
                pending_created,
                &errors,
                deadline,
            )
            .await?,
        )
    } else {
        None
    };
    let final_memory = read_memory(kernel.pid);

    let mut report = Report::new(
        "restart",
        &spec.url(),
        false,
        format!(
            "keel bench restart of a kernel it started at {}: {} non-terminal executions ({blocked_created} blocked on a signal, {pending_created} pending), kill -9, restart on the same data ({})",
            spec.url(),
            blocked_created + pending_created,
            spec.db_url
                .as_deref()
                .map_or("SQLite", |url| if url.starts_with("postgres") {
                    "PostgreSQL"
                } else {
                    "SQLite"
                }),
        ),
    );
    report.field("concurrency", args.concurrency);
    report.field("agents", args.agents);
    report.field(
        "executions",
        json!({ "requested": args.executions, "blocked": blocked_created, "pending": pending_created }),
    );
    report.field("load_s", round(load_s));
    let ready_ms = ready.as_secs_f64() * 1000.0;
    let first_ms = first
        .as_ref()
        .ok()
        .map(|first| first.as_secs_f64() * 1000.0);
    report.field("ready_ms", round(ready_ms));
    report.field("first_execution_ms", first_ms.map(round));
    report.field("kernel_cpu_ms_to_ready", cpu_to_ready);
    report.field(
        "memory",
        json!({
            "before_kill_rss_kib": rss(before_kill),
            "at_ready_rss_kib": rss(at_ready),
            "after_first_execution_rss_kib": rss(after_first),
            "after_verify_rss_kib": rss(final_memory),
        }),
    );
    report.line(
        "restart",
        format!(
            "ready {ready_ms:.1} ms after the restart, first new execution completed after {}",
            first_ms.map_or_else(|| "(failed)".to_owned(), |ms| format!("{ms:.1} ms"))
        ),
    );
    report.line(
        "rss",
        format!(
            "before kill {}, at ready {}, after the first execution {}",
            mib(before_kill),
            mib(at_ready),
            mib(after_first)
        ),
    );
    report.latency("create", "create", creates.latency.summary());
    report.latency("wait", "wait intent", parker.wait_latency.summary());
    let (usage, resumed, verify_s) = match &verify {
        Some(verify) => {
            report.field(
                "verify",
                json!({
                    "signalled": verify.signalled,
                    "blocked_resumed": verify.blocked_resumed,
                    "blocked_resume_s": round(verify.blocked_s),
                    "pending_completed": verify.pending_completed,
                    "pending_complete_s": round(verify.pending_s),
                }),
            );
            report.line(
                "old executions",
                format!(
                    "{}/{} signalled blocked ones completed in {:.2} s; {}/{pending_created} pending ones completed in {:.2} s",
                    verify.blocked_resumed,
                    verify.signalled,
                    verify.blocked_s,
                    verify.pending_completed,
                    verify.pending_s
                ),
            );
            report.latency("signal", "signal", verify.signals.latency.summary());
            report.latency(
                "complete",
                "complete intent",
                verify.complete_latency.summary(),
            );
            (
                verify.cpu,
                verify.blocked_resumed + verify.pending_completed,
                verify.blocked_s.max(verify.pending_s),
            )
        }
        None => {
            report.field("verify", serde_json::Value::Null);
            (Default::default(), 0, 0.0)
        }
    };
    report.throughput(resumed, verify_s, "old executions resumed");
    report.resources(usage, resumed, final_memory, false);
    report.errors(&errors);
    Ok(Outcome {
        report,
        errors: errors.count(),
        done: u64::from(first.is_ok()),
    })
}

/// Time left until `deadline` (zero when past).
pub(super) fn remaining(deadline: tokio::time::Instant) -> Duration {
    deadline.saturating_duration_since(tokio::time::Instant::now())
}

/// Rounds to two decimals.
fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// RSS in KiB, if read.
fn rss(memory: Option<Memory>) -> Option<u64> {
    memory.map(|memory| memory.rss_kib)
}

/// RSS in MiB as text.
fn mib(memory: Option<Memory>) -> String {
    memory.map_or_else(
        || "?".to_owned(),
        |memory| format!("{:.1} MiB", memory.rss_kib as f64 / 1024.0),
    )
}
