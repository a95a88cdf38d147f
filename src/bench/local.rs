//! `keel bench run --local-steps K`: `--concurrency` closed loops, each an agent of its own
//! (`<agent>-<i>`) with one SSE consumer and one execution in flight: create, wait for
//! `execution.assigned`, K × (`invoke_tool` of `bench.local` → step result), `complete`, next.
//! After `--duration` no loop starts a new execution; the ones in flight finish and count, as
//! in the Restate peer's load generator. `--warmup` runs the loops first without measuring.
//!
//! With several kernels (`--url A,B,C`, a cluster), agent i keeps its stream, intents and step
//! results on kernel i mod N, as a rebuno agent does with its one `REBUNO_URL`, and its n-th
//! execution is created on kernel (i + n) mod N, as clients behind a load balancer would: an
//! execution is owned by the kernel creating it, so (N - 1)/N of them are assigned through a
//! bridged stream and their intents forwarded to the owner.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::conn::Conn;
use super::http::{Assigned, EventStream, Http, Intent, StepData};
use super::procfs::{CpuMeter, read_memory_all};
use super::progress::Progress;
use super::report::{Report, Stats};
use super::{LOCAL_TOOL, RunArgs, Target, bench_id, emit, invalid, verdict};
use crate::cli::CliError;

/// How long the agents may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a loop waits for the assignment of the execution it created.
const ASSIGN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the executions in flight at the end may take to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause after a failed execution, so a broken kernel is not hammered.
const ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Most local steps per execution.
const MAX_STEPS: u32 = 10_000;

/// State shared by the loops.
struct LocalRun {
    /// One client per kernel.
    kernels: Vec<Http>,
    stats: Stats,
    steps: u32,
    agent_base: String,
    /// Executions still to create.
    remaining: AtomicU64,
    /// Cancelled at `--duration`: no new execution starts.
    stop: CancellationToken,
    /// One permit per connected agent.
    connected: Semaphore,
    /// Turns true when every agent is connected.
    go: watch::Receiver<bool>,
    /// Executions started from this instant on are measured.
    measured_from: OnceLock<Instant>,
}

impl LocalRun {
    /// Takes one execution off the budget.
    fn claim(&self) -> bool {
        self.remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }

    /// Whether an execution started at `started` counts.
    fn measured(&self, started: Instant) -> bool {
        self.measured_from
            .get()
            .is_some_and(|from| started >= *from)
    }
}

/// Runs the local-steps closed loop and prints its report.
pub async fn run(args: RunArgs) -> Result<(), CliError> {
    let steps = args.local_steps.unwrap_or_default();
    if args.executions == 0 {
        return Err(invalid("--executions", "must be at least 1"));
    }
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.duration.is_zero() {
        return Err(invalid("--duration", "must be greater than zero"));
    }
    if steps > MAX_STEPS {
        return Err(invalid("--local-steps", "must be at most 10000"));
    }
    let target = Target::connect_many(&args.target).await?;
    // Each loop's own connections speak plain HTTP; refuse before any agent connects.
    for http in &target.kernels {
        http.conn().map_err(|error| {
            invalid(
                "--url",
                &format!("run --local-steps needs http://: {error}"),
            )
        })?;
    }
    let (go_sender, go) = watch::channel(false);
    let run = Arc::new(LocalRun {
        kernels: target.kernels.clone(),
        stats: Stats::new(),
        steps,
        agent_base: args.agent_id.clone().unwrap_or_else(bench_id),
        remaining: AtomicU64::new(args.executions),
        stop: CancellationToken::new(),
        connected: Semaphore::new(0),
        go,
        measured_from: OnceLock::new(),
    });
    let mut loops = tokio::task::JoinSet::new();
    for index in 0..args.concurrency {
        loops.spawn(agent_loop(run.clone(), index));
    }
    let agents = u32::try_from(args.concurrency).unwrap_or(u32::MAX);
    if tokio::time::timeout(CONNECT_TIMEOUT, run.connected.acquire_many(agents))
        .await
        .is_err()
    {
        loops.abort_all();
        return Err(CliError::Failed(format!(
            "{} agents did not connect within {CONNECT_TIMEOUT:?}: {}",
            args.concurrency,
            run.stats.errors.first().unwrap_or_default()
        )));
    }
    if !args.warmup.is_zero() {
        let _ = go_sender.send(true);
        tokio::time::sleep(args.warmup).await;
        run.stats.reset();
    }
    let cpu = CpuMeter::start_all(&target.pids);
    let started = Instant::now();
    let _ = run.measured_from.set(started);
    let _ = go_sender.send(true);
    let progress = {
        let run = run.clone();
        Progress::start("run".to_owned(), None, move || {
            run.stats.completed.load(Ordering::Relaxed)
        })
    };
    let deadline = tokio::time::Instant::now() + args.duration;
    let all_done = async { while loops.join_next().await.is_some() {} };
    let mut capped = false;
    tokio::select! {
        () = all_done => {}
        () = tokio::time::sleep_until(deadline) => capped = true,
    }
    run.stop.cancel();
    if capped {
        let drained = async { while loops.join_next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
            run.stats.error(format!(
                "executions in flight did not finish within {DRAIN_TIMEOUT:?}"
            ));
            loops.abort_all();
        }
    }
    let elapsed = started.elapsed();
    let usage = cpu.stop();
    let memory = read_memory_all(&target.pids);
    drop(progress);

    let stats = &run.stats;
    let completed = stats.completed.load(Ordering::Relaxed);
    let urls: Vec<&str> = target.kernels.iter().map(Http::base_url).collect();
    let urls = urls.join(",");
    let mut report = Report::new(
        "run",
        &urls,
        target.embedded.is_some(),
        format!(
            "keel bench run against {}{}: {} agents, one execution each at a time, {steps} local steps per execution, {:?}{}",
            if target.kernels.len() > 1 {
                format!("{} kernels ({urls})", target.kernels.len())
            } else {
                urls.clone()
            },
            if target.embedded.is_some() {
                " (embedded)"
            } else {
                ""
            },
            args.concurrency,
            args.duration,
            if args.warmup.is_zero() {
                String::new()
            } else {
                format!(" after {:?} of warm-up", args.warmup)
            },
        ),
    );
    report.field("mode", "local");
    report.field("kernels", target.kernels.len());
    report.field("concurrency", args.concurrency);
    report.field("agents", args.concurrency);
    report.field("runners", 0);
    report.field("tools_per_execution", steps);
    report.field("local_steps", steps);
    report.field("warmup_s", args.warmup.as_secs_f64());
    report.field(
        "executions",
        json!({
            "requested": args.executions,
            "created": stats.created.load(Ordering::Relaxed),
            "completed": completed,
            "abandoned": stats.abandoned.load(Ordering::Relaxed),
        }),
    );
    report.field("duration_capped", capped);
    report.throughput(completed, elapsed.as_secs_f64(), "executions");
    report.field(
        "executions_per_s",
        report.to_json()["throughput_per_s"].clone(),
    );
    report.latency("execution", "execution", stats.execution.summary());
    report.latency("intent", "intent", stats.intent.summary());
    report.latency("step_result", "step result", stats.step_result.summary());
    report.latency("create", "create", stats.create.summary());
    report.resources(usage, completed, memory, target.embedded.is_some());
    report.errors(&stats.errors);
    let output = target.output;
    target.finish().await?;
    emit(&report, output);
    verdict(stats.errors.count(), completed, "execution completed")
}

/// One agent: connects its consumer, then runs executions one after the other.
async fn agent_loop(run: Arc<LocalRun>, index: usize) {
    let agent_id = format!("{}-{index}", run.agent_base);
    let consumer_id = format!("{agent_id}-consumer");
    let count = run.kernels.len();
    let home = &run.kernels[index % count];
    let mut stream = match home.agent_stream(&agent_id, &consumer_id).await {
        Ok(stream) => stream,
        Err(error) => {
            run.stats.error(error);
            return;
        }
    };
    // One connection per kernel; the home kernel's is `conns[index % count]`.
    let conns: Result<Vec<Conn>, String> = run.kernels.iter().map(Http::conn).collect();
    let mut conns = match conns {
        Ok(conns) => conns,
        Err(error) => {
            run.stats.error(error);
            return;
        }
    };
    run.connected.add_permits(1);
    let mut go = run.go.clone();
    if go.wait_for(|go| *go).await.is_err() {
        return;
    }
    let mut number = 0_u64;
    while !run.stop.is_cancelled() && run.claim() {
        let started = Instant::now();
        let creator = (index + usize::try_from(number).unwrap_or_default()) % count;
        let outcome = one_execution(
            &run,
            Conns::new(&mut conns, index % count, creator),
            (&agent_id, &consumer_id),
            &mut stream,
            number,
        )
        .await;
        number += 1;
        let measured = run.measured(started);
        match outcome {
            Ok(()) if measured => {
                run.stats.completed.fetch_add(1, Ordering::Relaxed);
                run.stats.execution.record(started.elapsed());
            }
            Ok(()) => {}
            Err(error) => {
                if measured {
                    run.stats.abandoned.fetch_add(1, Ordering::Relaxed);
                }
                run.stats.error(format!("agent {agent_id}: {error}"));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

/// The connections one execution uses: the agent's home kernel's and the creating kernel's
/// (the same one with a single kernel).
struct Conns<'a> {
    all: &'a mut [Conn],
    home: usize,
    creator: usize,
}

impl<'a> Conns<'a> {
    fn new(all: &'a mut [Conn], home: usize, creator: usize) -> Self {
        Self { all, home, creator }
    }

    fn home(&mut self) -> &mut Conn {
        &mut self.all[self.home]
    }

    fn creator(&mut self) -> &mut Conn {
        &mut self.all[self.creator]
    }
}

/// Creates one execution and plays it to `complete`.
async fn one_execution(
    run: &LocalRun,
    mut conns: Conns<'_>,
    (agent_id, consumer_id): (&str, &str),
    stream: &mut EventStream,
    number: u64,
) -> Result<(), String> {
    let started = Instant::now();
    let execution_id = conns.creator().create(agent_id, number).await?;
    run.stats.create.record(started.elapsed());
    run.stats.created.fetch_add(1, Ordering::Relaxed);
    let home = &run.kernels[conns.home];
    let session_id = wait_assigned(home, agent_id, consumer_id, stream, &execution_id).await?;
    let conn = conns.home();
    for index in 0..run.steps {
        let started = Instant::now();
        let intent = Intent::InvokeTool {
            tool_id: LOCAL_TOOL,
            arguments: StepData { index },
            idempotency_key: format!("{execution_id}:{LOCAL_TOOL}:{index}"),
        };
        let step_id = conn
            .intent(&execution_id, &session_id, intent)
            .await?
            .ok_or("accepted invoke_tool without step_id")?;
        run.stats.intent.record(started.elapsed());
        let started = Instant::now();
        conn.step_result(&execution_id, &session_id, &step_id, index)
            .await?;
        run.stats.step_result.record(started.elapsed());
    }
    let started = Instant::now();
    let output = StepData { index: run.steps };
    conn.intent(&execution_id, &session_id, Intent::Complete { output })
        .await?;
    run.stats.intent.record(started.elapsed());
    Ok(())
}

/// Reads the agent's stream until `execution_id` is assigned; returns its session id.
/// A dropped stream is reopened with the same consumer id (the kernel keeps pushes for it).
pub(super) async fn wait_assigned(
    http: &Http,
    agent_id: &str,
    consumer_id: &str,
    stream: &mut EventStream,
    execution_id: &str,
) -> Result<String, String> {
    use futures::StreamExt as _;
    let deadline = tokio::time::Instant::now() + ASSIGN_TIMEOUT;
    loop {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| format!("{execution_id} not assigned within {ASSIGN_TIMEOUT:?}"))?;
        match event {
            Some(Ok(event)) if event.event == "execution.assigned" => {
                let assigned: Assigned = serde_json::from_str(&event.data)
                    .map_err(|error| format!("bad execution.assigned: {error}"))?;
                if assigned.execution_id == execution_id {
                    return Ok(assigned.session_id);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => {
                *stream =
                    tokio::time::timeout_at(deadline, http.agent_stream(agent_id, consumer_id))
                        .await
                        .map_err(|_| "agent stream did not reconnect".to_owned())??;
            }
        }
    }
}
