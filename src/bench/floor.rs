//! `keel bench floor`: what the machine itself charges for one execution of the `--local-steps
//! K` job before the kernel does any work, the lower bound under the latency and CPU targets
//! of docs/benchmarks.md. It measures:
//!
//! - the HTTP round trip at C=1: `GET /v0/health` (through the same middleware as every
//!   call, answered without touching an actor or the store) on one keep-alive connection;
//! - the kernel's CPU per request with `--concurrency` connections doing the same (`--pid`);
//! - with `--sync-dir`, a durable write on that disk: one WAL frame's bytes (a 4 096-byte
//!   page and its 24-byte header) written then `fsync`ed, as a SQLite commit with
//!   `synchronous=FULL` does at least once. The frames overwrite a file written beforehand,
//!   as a WAL restarted after a checkpoint is reused; appending to a growing file costs more,
//!   so this is the cheaper of the two.
//!
//! From these, the floor of one execution: its 2K+2 requests (create, an intent and a step
//! result per step, complete) are sequential round trips, its 2K+3 acknowledged writes
//! (creation, assignment, two per step, completion) are sequential `fsync`s, and the kernel
//! parses and answers 2K+2 requests.

use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::http::Http;
use super::latency::{Latency, round3};
use super::procfs::{CpuMeter, per_execution, read_memory};
use super::progress::Progress;
use super::report::{Errors, Report};
use super::{FloorArgs, Target, emit, invalid, verdict};
use crate::cli::CliError;

/// The request every round trip makes.
const PATH: &str = "/v0/health";
/// Bytes of one WAL frame at SQLite's default 4 096-byte page: the page and its header.
const FRAME_BYTES: usize = 4096 + 24;

/// Runs the scenario and prints its report.
pub async fn run(args: FloorArgs) -> Result<(), CliError> {
    if args.concurrency == 0 {
        return Err(invalid("--concurrency", "must be at least 1"));
    }
    if args.duration.is_zero() {
        return Err(invalid("--duration", "must be greater than zero"));
    }
    if args.sync_dir.is_some() && args.syncs == 0 {
        return Err(invalid("--syncs", "must be at least 1 with --sync-dir"));
    }
    if let Some(dir) = &args.sync_dir
        && !dir.is_dir()
    {
        return Err(invalid("--sync-dir", "must be an existing directory"));
    }
    let target = Target::connect(&args.target).await?;
    let errors = Arc::new(Errors::default());

    let single = Latency::new();
    round_trips(
        &target.http,
        1,
        args.duration,
        &single,
        &errors,
        "floor c=1",
    )
    .await;
    let loaded = Latency::new();
    let cpu = CpuMeter::start(target.pid);
    let started = Instant::now();
    let done = round_trips(
        &target.http,
        args.concurrency,
        args.duration,
        &loaded,
        &errors,
        &format!("floor c={}", args.concurrency),
    )
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    let usage = cpu.stop();
    let memory = target.pid.and_then(read_memory);
    let syncs = match &args.sync_dir {
        Some(dir) => Some(sync_probe(dir.clone(), args.syncs).await?),
        None => None,
    };

    let single = single.summary();
    let sync = syncs.as_ref().map(Latency::summary);
    let cpu_per_request = usage.kernel_ms.and_then(|ms| per_execution(ms, done));
    let floor = Floor::of(
        args.local_steps,
        single.p50,
        sync.map(|sync| sync.p50),
        cpu_per_request,
    );

    let mut report = Report::new(
        "floor",
        target.http.base_url(),
        target.embedded.is_some(),
        format!(
            "keel bench floor against {}: GET {PATH} at C=1 then C={} for {:?} each{}",
            target.http.base_url(),
            args.concurrency,
            args.duration,
            match &args.sync_dir {
                Some(dir) => format!(", {} writes + fsync in {}", args.syncs, dir.display()),
                None => String::new(),
            }
        ),
    );
    report.field("concurrency", args.concurrency);
    report.field("requests", done);
    report.throughput(done, elapsed, "requests");
    report.latency("round_trip", "round trip c=1", single);
    report.latency("round_trip_loaded", "round trip loaded", loaded.summary());
    if let Some(sync) = sync {
        report.latency("sync", "write + fsync", sync);
    }
    // Per execution = per 2K+2 requests: the floor of the kernel's and the bench's CPU.
    report.resources(
        usage,
        done / u64::from(floor.requests()),
        memory,
        target.embedded.is_some(),
    );
    report.field("floor", floor.to_json());
    report.line("floor", floor.to_text());
    report.errors(&errors);
    let output = target.output;
    target.finish().await?;
    emit(&report, output);
    verdict(errors.count(), done, "request answered")
}

/// Runs `connections` closed loops of `GET /v0/health` for `duration`, recording each round
/// trip; returns how many were answered. A loop stops at its first failure (recorded).
async fn round_trips(
    http: &Http,
    connections: usize,
    duration: Duration,
    latency: &Latency,
    errors: &Arc<Errors>,
    phase: &str,
) -> u64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let counter = done.clone();
    let _progress = Progress::start(phase.to_owned(), None, move || {
        counter.load(Ordering::Relaxed)
    });
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let mut conn = match http.conn() {
            Ok(conn) => conn,
            Err(error) => {
                errors.record(error);
                continue;
            }
        };
        let done = done.clone();
        let errors = errors.clone();
        loops.spawn(async move {
            let own = Latency::new();
            while Instant::now() < deadline {
                let started = Instant::now();
                match conn.get(PATH).await {
                    Ok(_) => {
                        own.record(started.elapsed());
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        errors.record(error);
                        break;
                    }
                }
            }
            own
        });
    }
    while let Some(joined) = loops.join_next().await {
        match joined {
            Ok(own) => latency.merge(&own),
            Err(error) => errors.record(format!("round-trip loop failed: {error}")),
        }
    }
    done.load(Ordering::Relaxed)
}

/// Writes one WAL frame's bytes then `fsync`s, `count` times, over a new file in `dir` that
/// is written and synced first and removed afterwards.
async fn sync_probe(dir: PathBuf, count: u32) -> Result<Latency, CliError> {
    tokio::task::spawn_blocking(move || {
        let path = dir.join(format!(
            "keel-bench-floor-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let written = write_and_sync(&path, count);
        let removed = std::fs::remove_file(&path);
        let failed =
            |error: std::io::Error| CliError::Failed(format!("{}: {error}", path.display()));
        let latency = written.map_err(failed)?;
        removed.map_err(failed)?;
        Ok(latency)
    })
    .await
    .map_err(|error| CliError::Failed(format!("the fsync probe failed: {error}")))?
}

fn write_and_sync(path: &Path, count: u32) -> std::io::Result<Latency> {
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)?;
    let frame_bytes = FRAME_BYTES as u64;
    // Written a frame at a time: --syncs bounds the file's size, not one buffer's.
    let zeros = vec![0_u8; FRAME_BYTES];
    for _ in 0..count {
        file.write_all(&zeros)?;
    }
    file.sync_all()?;
    let frame = vec![0x5a_u8; FRAME_BYTES];
    let latency = Latency::new();
    for index in 0..u64::from(count) {
        let started = Instant::now();
        file.write_all_at(&frame, index * frame_bytes)?;
        file.sync_all()?;
        latency.record(started.elapsed());
    }
    Ok(latency)
}

/// The floor of one execution of K local steps on this machine.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Floor {
    steps: u32,
    round_trip_ms: f64,
    sync_ms: Option<f64>,
    cpu_ms_per_request: Option<f64>,
}

impl Floor {
    fn of(
        steps: u32,
        round_trip_ms: f64,
        sync_ms: Option<f64>,
        cpu_ms_per_request: Option<f64>,
    ) -> Self {
        Self {
            steps,
            round_trip_ms,
            sync_ms,
            cpu_ms_per_request,
        }
    }

    /// Sequential HTTP round trips (2K+2): create, an intent and a step result per step,
    /// complete.
    fn requests(&self) -> u32 {
        self.steps.saturating_mul(2).saturating_add(2)
    }

    /// Sequential acknowledged writes (2K+3): each request's, and the assignment's.
    fn commits(&self) -> u32 {
        self.requests().saturating_add(1)
    }

    /// The round trips alone, one after another.
    fn round_trips_ms(&self) -> f64 {
        f64::from(self.requests()) * self.round_trip_ms
    }

    /// The `fsync`s alone, one after another.
    fn syncs_ms(&self) -> Option<f64> {
        self.sync_ms.map(|sync| f64::from(self.commits()) * sync)
    }

    /// The shortest execution: its round trips and its `fsync`s.
    fn execution_ms(&self) -> f64 {
        self.round_trips_ms() + self.syncs_ms().unwrap_or(0.0)
    }

    /// The kernel CPU of the execution's requests.
    fn kernel_cpu_ms(&self) -> Option<f64> {
        self.cpu_ms_per_request
            .map(|cpu| f64::from(self.requests()) * cpu)
    }

    fn to_json(self) -> serde_json::Value {
        json!({
            "local_steps": self.steps,
            "requests_per_execution": self.requests(),
            "durable_commits_per_execution": self.commits(),
            "round_trip_p50_ms": round3(self.round_trip_ms),
            "sync_p50_ms": self.sync_ms.map(round3),
            "round_trips_ms": round3(self.round_trips_ms()),
            "syncs_ms": self.syncs_ms().map(round3),
            "execution_ms": round3(self.execution_ms()),
            "kernel_cpu_us_per_request": self.cpu_ms_per_request.map(|cpu| round3(cpu * 1000.0)),
            "kernel_cpu_ms_per_execution": self.kernel_cpu_ms().map(round3),
        })
    }

    fn to_text(self) -> String {
        let syncs = match self.syncs_ms() {
            Some(syncs) => format!(" + {} fsyncs {syncs:.2} ms", self.commits()),
            None => " (no fsync probe: pass --sync-dir)".to_owned(),
        };
        let cpu = match self.kernel_cpu_ms() {
            Some(cpu) => format!("; kernel CPU {cpu:.3} ms per execution"),
            None => String::new(),
        };
        format!(
            "K={}: {} round trips {:.2} ms{syncs} = execution {:.2} ms at least{cpu}",
            self.steps,
            self.requests(),
            self.round_trips_ms(),
            self.execution_ms()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execution_of_k_steps_is_2k_plus_2_round_trips_and_2k_plus_3_syncs() {
        let floor = Floor::of(5, 0.05, Some(0.1), Some(0.008));
        assert_eq!((floor.requests(), floor.commits()), (12, 13));
        let json = floor.to_json();
        assert_eq!(json["round_trips_ms"], 0.6);
        assert_eq!(json["syncs_ms"], 1.3);
        assert_eq!(json["execution_ms"], 1.9);
        assert_eq!(json["kernel_cpu_us_per_request"], 8.0);
        assert_eq!(json["kernel_cpu_ms_per_execution"], 0.096);
        assert!(
            floor.to_text().contains("= execution 1.90 ms"),
            "{}",
            floor.to_text()
        );
    }

    #[test]
    fn without_a_sync_probe_or_a_pid_the_floor_is_the_round_trips_alone() {
        let floor = Floor::of(0, 0.25, None, None);
        assert_eq!((floor.requests(), floor.commits()), (2, 3));
        let json = floor.to_json();
        assert_eq!(json["execution_ms"], 0.5);
        assert!(json["syncs_ms"].is_null());
        assert!(json["kernel_cpu_ms_per_execution"].is_null());
        assert!(floor.to_text().contains("pass --sync-dir"));
    }

    #[test]
    fn the_probe_overwrites_whole_frames_in_place_and_times_each_sync() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("probe");
        let latency = write_and_sync(&path, 3).expect("probe runs");
        assert_eq!(latency.summary().count, 3);
        let written = std::fs::read(&path).unwrap_or_default();
        assert_eq!(written.len(), 3 * FRAME_BYTES, "the file did not grow");
        assert!(
            written.iter().all(|byte| *byte == 0x5a),
            "every frame was rewritten"
        );
        assert!(
            write_and_sync(&path, 1).is_err(),
            "an existing file is not reused"
        );
    }
}
