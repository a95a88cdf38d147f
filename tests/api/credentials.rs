//! Credentials in `--db-url` never reach `--dump-config`, the logs or an error message: the
//! `keel` binary is run as an operator would run it, and its whole output is searched for the
//! secrets.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::backend::{TestStore, postgres_admin_url};

/// Every secret the URLs below carry.
const SECRETS: [&str; 5] = ["pw-user", "pw-query", "pw-ssl", "pw-file", "tok-secret"];

/// A `keel` command with no `KEEL_*` or `RUST_LOG` from the test's environment.
fn keel(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
    for (name, _) in std::env::vars() {
        if name.starts_with("KEEL_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

fn assert_no_secret(output: &str) {
    for secret in SECRETS {
        assert!(!output.contains(secret), "{secret} leaked in:\n{output}");
    }
}

/// Adds every credential form to a PostgreSQL URL: userinfo password, `password`,
/// `sslpassword` (which the driver ignores, and would log with its value), `passfile`.
fn with_credentials(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let rest = rest.split_once('@').map_or(rest, |(_, host)| host);
    let separator = if rest.contains('?') { '&' } else { '?' };
    format!(
        "{scheme}://postgres:pw-user@{rest}{separator}password=pw-query&sslpassword=pw-ssl&passfile=/pw-file"
    )
}

#[tokio::test]
async fn dump_config_prints_no_credential() {
    let url = with_credentials("postgres://db:5432/keel?sslmode=verify-full");
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        keel(&[
            "serve",
            "--dump-config",
            "--db-url",
            &url,
            "--bearer-token",
            "tok-secret",
        ])
        .output(),
    )
    .await
    .expect("keel exits in time")
    .expect("keel runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_no_secret(&stdout);
    assert_no_secret(&String::from_utf8_lossy(&output.stderr));
    let dump: Value = serde_json::from_str(&stdout).expect("JSON dump");
    assert_eq!(
        dump["db-url"],
        "postgres://postgres:<redacted>@db:5432/keel?sslmode=verify-full&password=<redacted>&sslpassword=<redacted>&passfile=<redacted>"
    );
    assert_eq!(dump["bearer-token"], "<redacted>");
    assert_eq!(dump["header-read-timeout"], "10s");
    assert_eq!(dump["body-read-timeout"], "1m");
    assert_eq!(dump["idle-timeout"], "2m");
}

#[tokio::test]
async fn a_database_that_cannot_be_opened_is_reported_without_credentials() {
    // Nothing listens on port 1: the kernel fails at once, with every log line at trace.
    let url = with_credentials("postgres://127.0.0.1:1/keel");
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        keel(&[
            "dev",
            "--port",
            "0",
            "--log-level",
            "trace",
            "--db-url",
            &url,
        ])
        .output(),
    )
    .await
    .expect("keel exits in time")
    .expect("keel runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_no_secret(&stderr);
    assert_no_secret(&String::from_utf8_lossy(&output.stdout));
    assert!(
        stderr.contains(
            "cannot open the database postgres://postgres:<redacted>@127.0.0.1:1/keel?password=<redacted>"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("ignoring an unrecognized parameter") && stderr.contains("sslpassword"),
        "the ignored parameter is named: {stderr}"
    );
}

#[tokio::test]
async fn the_database_open_log_line_carries_no_credential() {
    let Some(admin) = postgres_admin_url() else {
        eprintln!("SKIPPED: KEEL_TEST_POSTGRES_URL is not set");
        return;
    };
    let store = TestStore::postgres(&admin, "keel_creds").await;
    let url = with_credentials(&store.url);
    let mut child = keel(&[
        "dev",
        "--port",
        "0",
        "--log-level",
        "debug",
        "--db-url",
        &url,
    ])
    .spawn()
    .expect("keel starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let listening = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("listening on") {
                return true;
            }
        }
        false
    })
    .await;
    let _ = child.kill().await;
    assert_eq!(listening, Ok(true), "the kernel started:\n{seen}");
    assert_no_secret(&seen);
    let open = seen
        .lines()
        .find(|line| line.contains("database open"))
        .expect("a database open line");
    assert!(open.contains("postgres:<redacted>@"), "{open}");
    assert!(open.contains("password=<redacted>"), "{open}");
    drop(store);
}
