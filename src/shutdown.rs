//! Process signals: [`signal`] resolves on the first SIGTERM or SIGINT (Ctrl-C), which starts the
//! graceful shutdown in [`crate::run`]; a second signal while that runs exits the process at
//! once with code 130, for an operator who does not want to wait for the drain.

use tokio::signal::unix::{SignalKind, signal as unix_signal};

/// Exit code used when a second signal cuts the graceful shutdown short (128 + SIGINT).
pub const FORCED_EXIT_CODE: i32 = 130;

/// Resolves when the process receives SIGTERM or SIGINT. From then on, a second signal ends
/// the process immediately with [`FORCED_EXIT_CODE`].
///
/// If the signal handlers cannot be installed (which only happens when the process is out of
/// resources), the failure is logged and the future never resolves: the kernel keeps serving
/// and can still be stopped with SIGKILL.
pub async fn signal() {
    let (mut terminate, mut interrupt) = match (
        unix_signal(SignalKind::terminate()),
        unix_signal(SignalKind::interrupt()),
    ) {
        (Ok(terminate), Ok(interrupt)) => (terminate, interrupt),
        (Err(error), _) | (_, Err(error)) => {
            tracing::error!(%error, "cannot install signal handlers; graceful shutdown is unavailable");
            std::future::pending::<()>().await;
            return;
        }
    };
    let name = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    };
    tracing::info!(
        signal = name,
        "shutdown signal received; a second signal exits at once"
    );
    tokio::spawn(async move {
        let second = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::warn!(
            signal = second,
            "second shutdown signal received; exiting immediately"
        );
        std::process::exit(FORCED_EXIT_CODE);
    });
}
