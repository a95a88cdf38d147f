//! The store a test kernel runs on. `KEEL_TEST_BACKEND` picks the backend: unset or `sqlite`
//! gives a SQLite file in a temp directory; `postgres` gives a fresh database
//! `keel_test_<uuid>` created on the server `KEEL_TEST_POSTGRES_URL` names (its admin database)
//! and dropped when the [`TestStore`] is dropped, even when the test fails. A kernel restarted
//! on the same [`TestStore`] reopens the same database.
//!
//! Shared by the api suite and `tests/crash.rs` (which includes this file by path).

use std::net::SocketAddr;
use std::path::PathBuf;

/// The PostgreSQL test databases of the store's own tests (one helper for both).
#[allow(dead_code)]
#[path = "../../src/store/postgres/test_db.rs"]
mod test_db;

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
    Postgres(test_db::TestDatabase),
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
        let database = test_db::create(admin_url, prefix).await;
        Self {
            url: database.url.clone(),
            location: Location::Postgres(database),
        }
    }

    /// Returns the SQLite database file, `None` on PostgreSQL.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        match &self.location {
            Location::Sqlite(dir) => Some(dir.path().join("keel.db")),
            Location::Postgres(_) => None,
        }
    }

    /// Returns the PostgreSQL server's `ip:port` (for a proxy in front of it), `None` on SQLite.
    pub fn postgres_server(&self) -> Option<SocketAddr> {
        match &self.location {
            Location::Postgres(database) => Some(database.server_address()),
            Location::Sqlite(_) => None,
        }
    }

    /// Makes kernels reach this PostgreSQL database through `127.0.0.1:port` (a proxy).
    pub fn connect_via(mut self, port: u16) -> Self {
        if let Location::Postgres(database) = &self.location {
            self.url = database.url_via(port);
        }
        self
    }
}
