//! Worker processes for real (`/bin/sh`): what is left of a worker's group is killed, the
//! output limit and cancellation kill it, a missing program is a spawn failure, and a process
//! that escaped the group cannot hold the runner.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::child::{RunEnd, TimeLimit, WorkerSpec, run};
use super::protocol::Ending;
use super::shim::Rlimits;

fn spec(script: &str) -> WorkerSpec {
    WorkerSpec {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        workdir: None,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        rlimits: Rlimits::default(),
        keel_exe: PathBuf::from("/nonexistent/keel"),
        max_output: 1024,
        stderr_tail: 256,
        kill_grace: Duration::from_millis(300),
    }
}

fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Ok(stat) => !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next()),
            Some("Z" | "X")
        ),
        Err(_) => false,
    }
}

async fn run_plain(spec: &WorkerSpec, limit: Option<TimeLimit>) -> RunEnd {
    let never = CancellationToken::new();
    run(spec, b"{}\n".to_vec(), &[], limit, &never, &never).await
}

fn read_pid(path: &Path) -> String {
    std::fs::read_to_string(path).expect("pid file")
}

#[tokio::test]
async fn what_a_worker_leaves_in_its_group_is_killed_when_it_exits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > {}; read line; echo '{{\"success\":true}}'",
        pidfile.display()
    );
    let end = run_plain(&spec(&script), None).await;
    let RunEnd::Finished { ending, stdout, .. } = end else {
        panic!("not cancelled")
    };
    assert_eq!(
        ending,
        Ending::Exited {
            status: "exit status 0".to_owned(),
            ok: true
        }
    );
    assert_eq!(stdout, b"{\"success\":true}\n");
    let pid = read_pid(&pidfile);
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(&pid) {
        assert!(
            Instant::now() < deadline,
            "the background sleep {pid} outlived its worker"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn output_over_the_limit_kills_a_worker_that_keeps_writing() {
    let end = run_plain(&spec("exec yes"), None).await;
    let RunEnd::Finished { ending, stdout, .. } = end else {
        panic!("not cancelled")
    };
    assert_eq!(ending, Ending::OutputTooLarge(1024));
    assert_eq!(stdout.len(), 1024);
}

#[tokio::test]
async fn the_time_limit_kills_with_sigterm_then_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("term");
    // The worker notes SIGTERM and ignores it; only SIGKILL ends it.
    let script = format!(
        "trap 'echo term > {}' TERM; while :; do sleep 0.05; done",
        marker.display()
    );
    let started = Instant::now();
    let limit = TimeLimit {
        at: started + Duration::from_millis(200),
        why: "wall time limit of 200ms exceeded".to_owned(),
    };
    let end = run_plain(&spec(&script), Some(limit)).await;
    let RunEnd::Finished { ending, .. } = end else {
        panic!("not cancelled")
    };
    assert_eq!(
        ending,
        Ending::TimedOut("wall time limit of 200ms exceeded".to_owned())
    );
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "SIGKILL came before the grace"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).expect("TERM noted").trim(),
        "term"
    );
}

#[tokio::test]
async fn cancellation_kills_the_worker_and_reports_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 300", pidfile.display());
    let spec = spec(&script);
    let cancel = CancellationToken::new();
    let never = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        let pidfile = pidfile.clone();
        tokio::spawn(async move {
            while !pidfile.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
        })
    };
    let end = run(&spec, b"{}\n".to_vec(), &[], None, &cancel, &never).await;
    canceller.await.expect("canceller");
    assert!(matches!(end, RunEnd::Cancelled), "{end:?}");
    assert!(!alive(&read_pid(&pidfile)));
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_failure() {
    let mut spec = spec("");
    spec.program = PathBuf::from("/nonexistent/worker");
    let RunEnd::Finished { ending, .. } = run_plain(&spec, None).await else {
        panic!("not cancelled")
    };
    assert!(matches!(ending, Ending::SpawnFailed(_)), "{ending:?}");
}

#[tokio::test]
async fn a_process_that_left_the_group_cannot_hold_the_runner() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    // setsid puts the sleep outside the worker's group, still holding stdout open.
    let script = format!(
        "setsid sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 30' & \
         while [ ! -s {0} ]; do sleep 0.01; done; echo '{{\"success\":true}}'",
        pidfile.display()
    );
    let started = Instant::now();
    let end = run_plain(&spec(&script), None).await;
    let escaped = read_pid(&pidfile);
    if let Ok(pid) = escaped.trim().parse::<i32>() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
    let RunEnd::Finished { ending, stdout, .. } = end else {
        panic!("not cancelled")
    };
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(ending, Ending::Exited { ok: true, .. }),
        "{ending:?}"
    );
    assert_eq!(stdout, b"{\"success\":true}\n");
}
