//! PostgreSQL over TLS (rustls). Needs a server with `ssl = on`, found through variables
//! (`.ci/run` exports them when the local server has TLS on):
//!
//! - `KEEL_TEST_POSTGRES_TLS_URL`: an admin URL asking for TLS, e.g.
//!   `postgres://postgres@localhost:5432/test?sslmode=require`;
//! - `KEEL_TEST_POSTGRES_TLS_ROOT_CERT` (optional): a PEM file the server's certificate chains
//!   to, a private one (e.g. the server's self-signed certificate), valid for the URL's host.
//!
//! Without them each test prints that it is skipped and passes.

use keel_actors::error::StoreError;
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::backend::TestStore;
use crate::harness::{Options, TestKernel};

const TLS_URL_ENV: &str = "KEEL_TEST_POSTGRES_TLS_URL";
const ROOT_CERT_ENV: &str = "KEEL_TEST_POSTGRES_TLS_ROOT_CERT";

fn variable(name: &str, test: &str) -> Option<String> {
    let value = std::env::var(name).ok().filter(|value| !value.is_empty());
    if value.is_none() {
        eprintln!("SKIPPED {test}: {name} is not set (see tests/api/tls.rs)");
    }
    value
}

/// Returns `url` with its `sslmode` (and any `sslrootcert`) replaced by `params`.
fn with_tls_params(url: &str, params: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let kept: Vec<&str> = query
        .split('&')
        .filter(|piece| {
            !piece.is_empty()
                && !piece.starts_with("sslmode=")
                && !piece.starts_with("sslrootcert=")
        })
        .collect();
    let mut all = kept.join("&");
    if !all.is_empty() {
        all.push('&');
    }
    format!("{base}?{all}{params}")
}

/// Returns the database a PostgreSQL URL names.
fn database_of(url: &str) -> String {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = path.split('?').next().unwrap_or(path);
    path.rsplit('/').next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_kernel_runs_on_postgres_over_tls_and_every_connection_is_encrypted() {
    let Some(url) = variable(TLS_URL_ENV, "postgres over TLS") else {
        return;
    };
    let store = TestStore::postgres(&url, "keel_tls").await;
    let database = database_of(&store.url);
    assert!(store.url.contains("sslmode="), "{}", store.url);
    let kernel = TestKernel::start_on(Options::default(), store).await;
    let created = kernel.create("tls", json!({"over": "tls"})).await;
    let id = created["id"].as_str().expect("id");
    assert_eq!(
        kernel.event_types(id).await,
        vec!["execution.created"],
        "written and read back"
    );

    let mut admin = PgConnection::connect(&url).await.expect("admin connects");
    let connections: Vec<(bool,)> = sqlx::query_as(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.datname = $1",
    )
    .bind(&database)
    .fetch_all(&mut admin)
    .await
    .expect("pg_stat_ssl");
    assert!(!connections.is_empty(), "the kernel holds connections");
    assert!(
        connections.iter().all(|(ssl,)| *ssl),
        "every kernel connection is encrypted: {connections:?}"
    );
    let _ = admin.close().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn verify_full_checks_the_server_certificate() {
    let (Some(url), Some(root)) = (
        variable(TLS_URL_ENV, "verify-full"),
        variable(ROOT_CERT_ENV, "verify-full"),
    ) else {
        return;
    };
    let store = TestStore::postgres(&url, "keel_tls").await;

    // Without the private root the certificate is unknown: the store refuses to open.
    let unverified = with_tls_params(&store.url, "sslmode=verify-full");
    match keel::store::open(&unverified, &Default::default()).await {
        Err(StoreError::Unavailable(message)) => assert!(
            message.contains("certificate"),
            "a certificate error: {message}"
        ),
        Err(other) => panic!("unexpected error {other:?}"),
        Ok(_) => panic!("verify-full accepted a certificate no trusted root signed"),
    }

    // With it, the kernel opens the database and works.
    let verified = with_tls_params(
        &store.url,
        &format!("sslmode=verify-full&sslrootcert={root}"),
    );
    let mut store = store;
    store.url = verified;
    let kernel = TestKernel::start_on(Options::default(), store).await;
    let created = kernel.create("tls", json!(null)).await;
    assert_eq!(created["status"], "pending");
    kernel.shutdown().await;
}
