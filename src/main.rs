//! The `keel` binary: parses the command line, installs the log subscriber and dispatches —
//! `dev`/`serve` bind the listener and call [`keel::run`] until SIGTERM/SIGINT; `bench` and the
//! client and policy commands run to completion. Exit codes: 0 success, 1 failure, 2 bad
//! usage or configuration (clap's own errors also exit 2).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use keel::cli::{self, Cli, Command};
use keel::config::{Config, LogFormat, Mode};
use tokio::net::TcpListener;

/// mimalloc returns freed memory to the system (RSS falls back after a burst of executions,
/// where glibc's arenas keep it) and is cheaper per allocation on the request path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code of an invalid configuration.
const EXIT_USAGE: u8 = 2;

#[tokio::main]
async fn main() -> ExitCode {
    keel::install_tls_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Dev(config) => serve(config.with_mode(Mode::Dev)).await,
        Command::Serve(config) => serve(config.with_mode(Mode::Serve)).await,
        Command::Bench(args) => {
            install_client_telemetry(args.log_filter());
            report(keel::bench::run(args).await)
        }
        command => {
            let command = command.normalized();
            let filter = cli::log_filter(&command);
            install_client_telemetry(filter);
            report(cli::execute(command).await)
        }
    }
}

/// Runs a kernel until a shutdown signal.
async fn serve(config: Config) -> ExitCode {
    let settings = match config.validate() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!(
                "keel {}: invalid configuration:\n{error}",
                config.mode.as_str()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if config.dump_config {
        keel::cli::output::emit(&keel::cli::output::pretty(&settings.dump()));
        return ExitCode::SUCCESS;
    }
    let traces = match keel::telemetry::init_with_traces(
        &settings.log_filter,
        settings.log_format,
        settings.otel_endpoint.as_deref(),
    ) {
        Ok((_, traces)) => traces,
        Err(error) => {
            eprintln!("keel: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let started = async {
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        keel::run(config, listener, keel::shutdown::signal()).await
    };
    let outcome = started.await;
    // Exports the spans still buffered (the exporter runs on threads of its own).
    tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .ok();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Text logs already go to the terminal: print the error once, plainly. JSON logs go
            // to a collector, which gets the error as a log record too.
            if settings.log_format == LogFormat::Json {
                tracing::error!(error = format!("{error:#}"), "keel stopped with an error");
            }
            eprintln!("keel: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs warnings (or `RUST_LOG`) of client commands as text on stderr.
fn install_client_telemetry(filter: &str) {
    if let Err(error) = keel::telemetry::init(filter, LogFormat::Text) {
        eprintln!("keel: {error}; logging stays off");
    }
}

/// Prints a command's error and returns its exit code.
fn report(result: Result<(), cli::CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(cli::CliError::Exit(code)) => ExitCode::from(code),
        Err(cli::CliError::InvalidArgument { what, message }) => {
            eprintln!("keel: invalid {what}: {message}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(error) => {
            eprintln!("keel: {error}");
            ExitCode::FAILURE
        }
    }
}
