//! The store a test kernel runs on. `KEEL_TEST_BACKEND` picks the backend: unset or `sqlite`
//! gives a SQLite file in a temp directory; `postgres` gives a fresh database
//! `keel_test_<uuid>` created on the server `KEEL_TEST_POSTGRES_URL` names (its admin database)
//! and dropped when the [`TestStore`] is dropped, even when the test fails. A kernel restarted
//! on the same [`TestStore`] reopens the same database.
//!
//! Shared by the api suite and `tests/crash.rs` (which includes this file by path).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use sqlx::{Connection, PgConnection};

/// The variable naming the backend of the test kernels (`sqlite` or `postgres`).
pub const BACKEND_ENV: &str = "KEEL_TEST_BACKEND";
/// The variable naming the PostgreSQL admin URL, e.g. `postgres://postgres@127.0.0.1:5432/test`.
pub const POSTGRES_ENV: &str = "KEEL_TEST_POSTGRES_URL";

/// A storage backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

/// Returns the backend `KEEL_TEST_BACKEND` names; panics on an unknown value.
pub fn backend() -> Backend {
    match std::env::var(BACKEND_ENV).as_deref() {
        Err(_) | Ok("" | "sqlite") => Backend::Sqlite,
        Ok("postgres" | "postgresql") => Backend::Postgres,
        Ok(other) => panic!("{BACKEND_ENV}={other:?}: expected sqlite or postgres"),
    }
}

/// Returns `KEEL_TEST_POSTGRES_URL`, or `None` when it is unset or empty.
pub fn postgres_admin_url() -> Option<String> {
    std::env::var(POSTGRES_ENV)
        .ok()
        .filter(|url| !url.is_empty())
}

/// Where a test store lives; removed on drop.
enum Location {
    Sqlite(tempfile::TempDir),
    Postgres { _database: Database },
}

/// One test's database, and the URL a kernel opens it with.
pub struct TestStore {
    /// The URL a kernel opens (`sqlite://...` or `postgres://...`).
    pub url: String,
    location: Location,
}

impl TestStore {
    /// Returns a fresh store of the backend `KEEL_TEST_BACKEND` names. With `postgres` the
    /// server must be configured: a missing `KEEL_TEST_POSTGRES_URL` fails the test rather than
    /// silently testing SQLite.
    pub async fn fresh() -> Self {
        match backend() {
            Backend::Sqlite => Self::sqlite(),
            Backend::Postgres => {
                let admin_url = postgres_admin_url().unwrap_or_else(|| {
                    panic!("{BACKEND_ENV}=postgres needs {POSTGRES_ENV} (an admin URL)")
                });
                Self::postgres(&admin_url, "keel_test").await
            }
        }
    }

    /// Returns a SQLite file in a fresh temp directory.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("keel.db").display());
        Self {
            url,
            location: Location::Sqlite(dir),
        }
    }

    /// Creates the empty database `<prefix>_<uuid>` on the server of `admin_url`.
    pub async fn postgres(admin_url: &str, prefix: &str) -> Self {
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|error| panic!("{POSTGRES_ENV} does not connect: {error}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create test database");
        let _ = admin.close().await;
        Self {
            url: replace_database(admin_url, &name),
            location: Location::Postgres {
                _database: Database {
                    admin_url: admin_url.to_owned(),
                    name,
                },
            },
        }
    }

    /// Returns the SQLite database file, `None` on PostgreSQL.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        match &self.location {
            Location::Sqlite(dir) => Some(dir.path().join("keel.db")),
            Location::Postgres { .. } => None,
        }
    }

    /// Returns the PostgreSQL server's `ip:port` (for a proxy in front of it), `None` on SQLite.
    pub fn postgres_server(&self) -> Option<SocketAddr> {
        let Location::Postgres { .. } = self.location else {
            return None;
        };
        let (_, rest) = self.url.split_once("://")?;
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        let host_port = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let host_port = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:5432")
        };
        host_port.replace("localhost", "127.0.0.1").parse().ok()
    }

    /// Makes kernels reach this PostgreSQL database through `127.0.0.1:port` (a proxy).
    pub fn connect_via(mut self, port: u16) -> Self {
        let (scheme, rest) = self.url.split_once("://").expect("url has a scheme");
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        let user = authority
            .rsplit_once('@')
            .map_or(String::new(), |(user, _)| format!("{user}@"));
        self.url = format!("{scheme}://{user}127.0.0.1:{port}{path}");
        self
    }
}

/// A PostgreSQL database dropped (with its sessions) on drop.
struct Database {
    admin_url: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop cannot await and may run inside a runtime: use a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&admin_url)
                    .await
                    .map_err(|error| error.to_string())?;
                sqlx::query(&sql)
                    .execute(&mut admin)
                    .await
                    .map_err(|error| error.to_string())?;
                let _ = admin.close().await;
                Ok::<(), String>(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            let _ = writeln!(
                std::io::stderr(),
                "dropping test database {}: {error}",
                self.name
            );
        }
    }
}

/// Returns `url` naming database `name` instead, keeping user, host and parameters.
fn replace_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("url has a scheme");
    let (location, query) = match rest.split_once('?') {
        Some((location, query)) => (location, format!("?{query}")),
        None => (rest, String::new()),
    };
    let authority = location.split('/').next().unwrap_or(location);
    format!("{scheme}://{authority}/{name}{query}")
}
