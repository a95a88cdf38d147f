//! Tests of flag parsing, defaults, environment layering, validation and redaction.

use std::path::PathBuf;
use std::process::Command as Process;
use std::time::Duration;

use clap::Parser;

use super::{Config, DbUrl, LogFormat, Mode, format_duration, parse_byte_size, parse_duration};
use crate::cli::args::{Cli, Command};

/// Set in the child process of [`environment_overrides_defaults_and_flags_override_environment`].
const CHILD_MARKER: &str = "KEEL_CONFIG_TEST_CHILD";

/// Parses `keel <args>` and returns the server configuration of `dev` or `serve`.
fn parse(args: &[&str]) -> Config {
    let cli = Cli::try_parse_from(std::iter::once("keel").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("parse {args:?}: {error}"));
    match cli.command {
        Command::Dev(config) => config.with_mode(Mode::Dev),
        Command::Serve(config) => config.with_mode(Mode::Serve),
        other => panic!("not a server command: {other:?}"),
    }
}

#[test]
fn dev_defaults_are_local_and_permissive() {
    let settings = parse(&["dev"]).validate().unwrap();
    assert_eq!(settings.mode, Mode::Dev);
    assert_eq!(settings.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(settings.db, DbUrl::Sqlite(PathBuf::from("./.keel/keel.db")));
    assert!(
        settings.cors_origins.is_empty(),
        "dev answers only its own origin"
    );
    assert_eq!(settings.log_format, LogFormat::Text);
    assert!(settings.bearer_token.is_none());
    assert!(settings.policy.is_none());
    assert_eq!(settings.step_timeout, Duration::from_secs(300));
    assert_eq!(settings.execution_timeout, Duration::from_secs(3600));
    assert_eq!(settings.agent_timeout, Duration::from_secs(10));
    assert_eq!(settings.retry_base_delay, Duration::from_secs(1));
    assert_eq!(settings.retry_max_delay, Duration::from_secs(30));
    assert_eq!(settings.stall_after, Duration::from_secs(300));
    assert_eq!(settings.job_start_timeout, Duration::from_secs(60));
    assert_eq!(settings.runner_timeout, Duration::from_secs(10));
    assert_eq!(
        settings.retention_period,
        Some(Duration::from_secs(168 * 3600))
    );
    assert_eq!(settings.cleanup_interval, Duration::from_secs(3600));
    assert_eq!(settings.shutdown_timeout, Duration::from_secs(10));
    assert_eq!(settings.body_limit, 1 << 20);
    assert_eq!(settings.large_body_limit, 16 << 20);
}

#[test]
fn serve_defaults_listen_everywhere_with_json_logs_and_no_cors() {
    let settings = parse(&["serve"]).validate().unwrap();
    assert_eq!(settings.mode, Mode::Serve);
    assert_eq!(settings.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(settings.log_format, LogFormat::Json);
    assert!(settings.cors_origins.is_empty());
}

#[test]
fn flags_are_parsed_into_typed_values() {
    let config = parse(&[
        "serve",
        "--bind",
        "::1",
        "--port",
        "0",
        "--db-url",
        "postgres://keel:hunter2@db:5432/keel",
        "--step-timeout",
        "1h30m",
        "--agent-timeout",
        "500ms",
        "--body-limit",
        "512KiB",
        "--large-body-limit",
        "2MB",
        "--cors-origins",
        "https://a.example, https://b.example",
        "--log-level",
        "info,keel=debug",
    ]);
    let settings = config.validate().unwrap();
    assert_eq!(settings.listen.to_string(), "[::1]:0");
    assert_eq!(
        settings.db,
        DbUrl::Postgres("postgres://keel:hunter2@db:5432/keel".to_owned())
    );
    assert_eq!(settings.step_timeout, Duration::from_secs(5400));
    assert_eq!(settings.agent_timeout, Duration::from_millis(500));
    assert_eq!(
        parse(&["dev", "--retention-period", "0s"])
            .validate()
            .unwrap()
            .retention_period,
        None
    );
    assert_eq!(settings.body_limit, 512 * 1024);
    assert_eq!(settings.large_body_limit, 2_000_000);
    assert_eq!(
        settings.cors_origins,
        vec![
            "https://a.example".to_owned(),
            "https://b.example".to_owned()
        ]
    );
    assert_eq!(settings.log_filter, "info,keel=debug");
}

#[test]
fn bad_values_are_rejected_by_the_parser() {
    for args in [
        &["dev", "--step-timeout", "5 fortnights"][..],
        &["dev", "--port", "70000"],
        &["dev", "--body-limit", "1 banana"],
        &["dev", "--log-format", "yaml"],
    ] {
        let parsed = Cli::try_parse_from(std::iter::once("keel").chain(args.iter().copied()));
        assert!(parsed.is_err(), "{args:?} should be rejected");
    }
}

#[test]
fn validation_reports_every_problem_at_once() {
    let config = parse(&[
        "dev",
        "--bind",
        "not-an-ip",
        "--db-url",
        "mysql://x",
        "--retry-base-delay",
        "1m",
        "--body-limit",
        "2MiB",
        "--large-body-limit",
        "1MiB",
        "--log-level",
        "info,[",
    ]);
    let error = config.validate().unwrap_err();
    assert_eq!(error.problems.len(), 5, "{error}");
    let text = error.to_string();
    assert!(text.contains("--bind"), "{text}");
    assert!(text.contains("unsupported scheme"), "{text}");
    assert!(text.contains("--retry-base-delay"), "{text}");
    assert!(text.contains("--large-body-limit"), "{text}");
    assert!(text.contains("log filter"), "{text}");
}

#[test]
fn production_refuses_to_start_without_token_policy_and_db_url() {
    let error = parse(&["serve", "--production"]).validate().unwrap_err();
    let text = error.to_string();
    assert!(text.contains("--production"), "{text}");
    assert!(text.contains("--bearer-token"), "{text}");
    assert!(text.contains("--policy"), "{text}");
    assert!(text.contains("--db-url"), "{text}");

    let missing_token = parse(&[
        "serve",
        "--production",
        "--policy",
        "p.yaml",
        "--db-url",
        "sqlite:///var/keel.db",
    ]);
    let text = missing_token.validate().unwrap_err().to_string();
    assert!(
        text.contains("--bearer-token") && !text.contains("--policy ("),
        "{text}"
    );

    let complete = parse(&[
        "serve",
        "--production",
        "--policy",
        "p.yaml",
        "--db-url",
        "sqlite:///var/keel.db",
        "--bearer-token",
        "s3cret",
    ]);
    let settings = complete.validate().unwrap();
    assert!(settings.production);
    assert_eq!(
        settings.bearer_token.as_ref().map(|token| token.expose()),
        Some("s3cret")
    );
}

#[test]
fn production_is_not_a_dev_flag() {
    let text = parse(&["dev", "--production"])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(text.contains("keel serve"), "{text}");
}

#[test]
fn secrets_are_redacted_in_debug_and_dump() {
    let config = parse(&[
        "serve",
        "--bearer-token",
        "tok-123",
        "--db-url",
        "postgres://keel:pw-456@db/keel",
    ]);
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("tok-123") && !debug.contains("pw-456"),
        "{debug}"
    );
    assert!(debug.contains("<redacted>"), "{debug}");

    let settings = config.validate().unwrap();
    let settings_debug = format!("{settings:?}");
    assert!(
        !settings_debug.contains("tok-123") && !settings_debug.contains("pw-456"),
        "{settings_debug}"
    );

    let dump = settings.dump().to_string();
    assert!(
        !dump.contains("tok-123") && !dump.contains("pw-456"),
        "{dump}"
    );
    assert!(
        dump.contains("postgres://keel:<redacted>@db/keel"),
        "{dump}"
    );
    assert_eq!(settings.dump()["bearer-token"], "<redacted>");
    assert_eq!(settings.dump()["step-timeout"], "5m");
    assert_eq!(settings.dump()["retention-period"], "168h");
}

#[test]
fn durations_and_sizes_round_trip_through_their_formats() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
    assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    assert!(parse_duration("soon").is_err());
    // The flags take Go's duration grammar, the one policy files use.
    assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    for refused in ["-5s", "1min", "1h 30m", "2days", "10"] {
        assert!(parse_duration(refused).is_err(), "{refused}");
    }
    for text in ["0s", "500ms", "30s", "5m", "1h30m", "168h", "1m500ms"] {
        let duration = parse_duration(text).unwrap();
        assert_eq!(format_duration(duration), text);
    }
    assert_eq!(parse_byte_size("1048576").unwrap(), 1 << 20);
    assert_eq!(parse_byte_size("1MiB").unwrap(), 1 << 20);
    assert_eq!(parse_byte_size("16M").unwrap(), 16 << 20);
    assert_eq!(parse_byte_size("1kb").unwrap(), 1000);
    assert!(parse_byte_size("MiB").is_err());
    assert!(parse_byte_size("99999999999999999999GiB").is_err());
}

#[test]
fn db_url_parsing_accepts_sqlite_and_postgres_only() {
    assert_eq!(
        DbUrl::parse("sqlite:///tmp/k.db").unwrap(),
        DbUrl::Sqlite(PathBuf::from("/tmp/k.db"))
    );
    assert_eq!(
        DbUrl::parse("sqlite:k.db").unwrap(),
        DbUrl::Sqlite(PathBuf::from("k.db"))
    );
    assert!(matches!(
        DbUrl::parse("postgresql://h/db").unwrap(),
        DbUrl::Postgres(_)
    ));
    assert!(DbUrl::parse("sqlite://").is_err());
    assert!(DbUrl::parse("sqlite::memory:").is_err());
    let error = DbUrl::parse("mysql://root:pw@h/db").unwrap_err();
    assert!(!error.contains("pw"), "{error}");
}

/// Runs the child half of the environment test in a fresh process, so that no test of this
/// binary sees the variables (setting them in-process would race the other tests).
#[test]
fn environment_overrides_defaults_and_flags_override_environment() {
    let output = Process::new(std::env::current_exe().unwrap())
        .args([
            "config::tests::environment_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_MARKER, "1")
        .env("KEEL_PORT", "9999")
        .env("KEEL_BIND", "10.1.2.3")
        .env("KEEL_STEP_TIMEOUT", "42s")
        .env("KEEL_PRODUCTION", "1")
        .env("KEEL_BEARER_TOKEN", "from-env")
        .env("KEEL_POLICY", "/etc/keel/policy")
        .env("KEEL_DB_URL", "sqlite:///var/lib/keel/keel.db")
        .env("KEEL_LOG_FORMAT", "text")
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("1 passed"), "child did not run:\n{stdout}");
}

#[test]
fn environment_child() {
    if std::env::var_os(CHILD_MARKER).is_none() {
        return;
    }
    let from_env = parse(&["serve"]).validate().unwrap();
    assert_eq!(from_env.listen.to_string(), "10.1.2.3:9999");
    assert_eq!(from_env.step_timeout, Duration::from_secs(42));
    assert!(from_env.production);
    assert_eq!(
        from_env.bearer_token.as_ref().map(|token| token.expose()),
        Some("from-env")
    );
    assert_eq!(from_env.log_format, LogFormat::Text);
    assert_eq!(from_env.log_filter, "debug");

    let flags_win = parse(&[
        "serve",
        "--port",
        "7000",
        "--step-timeout",
        "2m",
        "--log-level",
        "warn",
    ]);
    assert_eq!(flags_win.port, 7000);
    assert_eq!(flags_win.step_timeout, Duration::from_secs(120));
    // RUST_LOG still wins over --log-level, as documented.
    assert_eq!(flags_win.log_filter(), "debug");
}

#[test]
fn backlog_bounds_default_to_unbounded_and_parse() {
    let settings = parse(&["dev"]).validate().unwrap();
    assert_eq!(
        (settings.max_pending_per_agent, settings.max_pending),
        (0, 0)
    );
    assert_eq!(settings.backlog_retry_after, Duration::from_secs(1));
    let settings = parse(&[
        "dev",
        "--max-pending-per-agent",
        "100",
        "--max-pending",
        "5000",
        "--backlog-retry-after",
        "2500ms",
    ])
    .validate()
    .unwrap();
    assert_eq!(
        (settings.max_pending_per_agent, settings.max_pending),
        (100, 5000)
    );
    assert_eq!(settings.backlog_retry_after, Duration::from_millis(2500));
    let problems = parse(&["dev", "--backlog-retry-after", "0s"])
        .validate()
        .expect_err("a zero Retry-After is refused");
    assert!(
        format!("{problems:?}").contains("--backlog-retry-after"),
        "{problems:?}"
    );
}

/// Set in the child process of [`rebuno_variables_are_aliases_of_the_keel_ones`].
const ALIAS_CHILD_MARKER: &str = "KEEL_CONFIG_ALIAS_TEST_CHILD";

/// Runs `child` in a fresh test process with `vars` set and every token/URL variable removed.
fn run_alias_child(child: &str, vars: &[(&str, &str)]) {
    let mut process = Process::new(std::env::current_exe().unwrap());
    process
        .args([child, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALIAS_CHILD_MARKER, "1");
    for name in [
        "KEEL_URL",
        "KEEL_TOKEN",
        "KEEL_BEARER_TOKEN",
        "REBUNO_URL",
        "REBUNO_API_KEY",
        "REBUNO_BEARER_TOKEN",
    ] {
        process.env_remove(name);
    }
    for (name, value) in vars {
        process.env(name, value);
    }
    let output = process.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child {vars:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("1 passed"), "child did not run:\n{stdout}");
}

/// Parses `keel executions <args>` and returns its client flags.
fn client_flags(args: &[&str]) -> crate::config::ClientConfig {
    let cli = Cli::try_parse_from(
        ["keel", "executions"]
            .into_iter()
            .chain(args.iter().copied()),
    )
    .unwrap();
    match cli.command {
        Command::Executions(args) => args.list.client,
        other => panic!("not executions: {other:?}"),
    }
}

#[test]
fn rebuno_variables_are_aliases_of_the_keel_ones() {
    let rebuno = [
        ("REBUNO_URL", "http://rebuno.example:9000"),
        ("REBUNO_API_KEY", "sdk-key"),
        ("REBUNO_BEARER_TOKEN", "rebuno-server"),
    ];
    run_alias_child("config::tests::alias_child_rebuno_only", &rebuno);
    let mut both = rebuno.to_vec();
    both.extend([
        ("KEEL_URL", "http://keel.example:8080"),
        ("KEEL_TOKEN", "keel-key"),
        ("KEEL_BEARER_TOKEN", "keel-server"),
    ]);
    run_alias_child("config::tests::alias_child_keel_wins", &both);
    run_alias_child("config::tests::alias_child_none", &[]);
}

#[test]
fn alias_child_rebuno_only() {
    if std::env::var_os(ALIAS_CHILD_MARKER).is_none() {
        return;
    }
    let client = client_flags(&[]);
    assert_eq!(client.url(), "http://rebuno.example:9000");
    assert_eq!(client.token(), Some("sdk-key"));
    let server = parse(&["serve"]).validate().unwrap();
    assert_eq!(
        server.bearer_token.as_ref().map(|token| token.expose()),
        Some("rebuno-server")
    );
    // Flags win over every variable.
    let flagged = client_flags(&["--url", "http://flag:1", "--token", "flag-key"]);
    assert_eq!(
        (flagged.url(), flagged.token()),
        ("http://flag:1", Some("flag-key"))
    );
}

#[test]
fn alias_child_keel_wins() {
    if std::env::var_os(ALIAS_CHILD_MARKER).is_none() {
        return;
    }
    let client = client_flags(&[]);
    assert_eq!(client.url(), "http://keel.example:8080");
    assert_eq!(client.token(), Some("keel-key"));
    let server = parse(&["serve"]).validate().unwrap();
    assert_eq!(
        server.bearer_token.as_ref().map(|token| token.expose()),
        Some("keel-server")
    );
}

#[test]
fn alias_child_none() {
    if std::env::var_os(ALIAS_CHILD_MARKER).is_none() {
        return;
    }
    let client = client_flags(&[]);
    assert_eq!(client.url(), "http://127.0.0.1:8080");
    assert_eq!(client.token(), None);
    assert!(parse(&["serve"]).validate().unwrap().bearer_token.is_none());
}

#[test]
fn otel_endpoints_must_be_plain_http_base_urls() {
    let settings = parse(&["dev", "--otel-endpoint", "http://collector:4318/"])
        .validate()
        .unwrap();
    assert_eq!(
        settings.otel_endpoint.as_deref(),
        Some("http://collector:4318")
    );
    assert_eq!(settings.dump()["otel-endpoint"], "http://collector:4318");
    for bad in ["https://collector:4318", "collector:4318", "http://"] {
        let error = parse(&["dev", "--otel-endpoint", bad])
            .validate()
            .unwrap_err();
        assert!(
            error.to_string().contains("--otel-endpoint"),
            "{bad}: {error}"
        );
    }
}

#[test]
fn cluster_mode_needs_postgres_a_node_id_and_an_advertised_url() {
    let problems = parse(&["serve", "--cluster"])
        .validate()
        .unwrap_err()
        .problems;
    let text = problems.join("\n");
    assert!(
        text.contains("--cluster needs a PostgreSQL --db-url"),
        "{text}"
    );
    assert!(text.contains("--cluster needs --node-id"), "{text}");
    assert!(text.contains("--cluster needs --advertise-url"), "{text}");

    let problems = parse(&[
        "serve",
        "--cluster",
        "--db-url",
        "postgres://keel@db/keel",
        "--node-id",
        "a b",
        "--advertise-url",
        "ftp://x",
        "--partitions",
        "0",
    ])
    .validate()
    .unwrap_err()
    .problems
    .join("\n");
    assert!(problems.contains("--node-id \"a b\""), "{problems}");
    assert!(problems.contains("--advertise-url"), "{problems}");
    assert!(
        problems.contains("--partitions must be between 1"),
        "{problems}"
    );

    let settings = parse(&[
        "serve",
        "--cluster",
        "--db-url",
        "postgres://keel:pw@db/keel",
        "--node-id",
        "kernel-1",
        "--advertise-url",
        "http://10.0.0.5:8080/",
    ])
    .validate()
    .unwrap();
    let cluster = settings.cluster.clone().expect("cluster mode");
    assert_eq!(cluster.node_id, "kernel-1");
    assert_eq!(cluster.advertise_url, "http://10.0.0.5:8080");
    assert_eq!(cluster.partitions, 64);
    let dump = settings.dump();
    assert_eq!(dump["cluster"], true);
    assert_eq!(dump["node-id"], "kernel-1");
    assert_eq!(dump["partitions"], 64);
    // Notifications are on unless --no-notify (KEEL_NO_NOTIFY) turns them off.
    assert!(cluster.notify);
    assert_eq!(dump["no-notify"], false);
    let quiet = parse(&[
        "serve",
        "--cluster",
        "--no-notify",
        "--db-url",
        "postgres://keel:pw@db/keel",
        "--node-id",
        "kernel-1",
        "--advertise-url",
        "http://10.0.0.5:8080/",
    ])
    .validate()
    .unwrap();
    assert!(!quiet.cluster.expect("cluster mode").notify);
}

#[test]
fn cluster_flags_without_cluster_mode_are_refused_and_the_default_is_one_kernel() {
    let problems = parse(&["serve", "--node-id", "kernel-1"])
        .validate()
        .unwrap_err()
        .problems
        .join("\n");
    assert!(problems.contains("add --cluster"), "{problems}");
    let settings = parse(&["serve"]).validate().unwrap();
    assert!(settings.cluster.is_none());
    assert_eq!(settings.dump()["cluster"], false);
}
