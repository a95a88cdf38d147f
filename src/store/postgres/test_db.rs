//! Fresh PostgreSQL databases for tests. `KEEL_TEST_POSTGRES_URL` names a server and an admin
//! database; each test gets its own `keel_test_<uuid>` database there, dropped when the test
//! ends (even when it fails), so runs never collide. Without the variable every PostgreSQL
//! test passes after saying it skipped.
//!
//! The one helper for test databases: the unit tests of the store use it as a module, the
//! api suite and the crash test include this file by path (`tests/api/backend.rs`).

use std::io::Write;
use std::sync::Once;

use sqlx::{Connection, PgConnection};

/// The variable naming the admin URL, e.g. `postgres://postgres@127.0.0.1:5432/test`.
pub const ENV: &str = "KEEL_TEST_POSTGRES_URL";

/// A database created for one test; dropped with it.
pub struct TestDatabase {
    admin_url: String,
    name: String,
    /// URL of the new database.
    pub url: String,
}

/// Creates a fresh, empty database, or returns `None` (after saying so once per process on
/// stderr, past the test harness's capture) when `KEEL_TEST_POSTGRES_URL` is not set.
pub async fn fresh() -> Option<TestDatabase> {
    let admin_url = match std::env::var(ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => {
            static NOTICE: Once = Once::new();
            NOTICE.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "postgres store tests skipped: {ENV} not set"
                );
            });
            return None;
        }
    };
    Some(create(&admin_url, "keel_test").await)
}

/// Creates the empty database `<prefix>_<uuid>` on the server of `admin_url` (an admin
/// database URL); panics when the server cannot be reached.
pub async fn create(admin_url: &str, prefix: &str) -> TestDatabase {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|error| panic!("{ENV} does not connect: {error}"));
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("create test database");
    let _ = admin.close().await;
    let url = replace_database(admin_url, &name);
    TestDatabase {
        admin_url: admin_url.to_owned(),
        name,
        url,
    }
}

impl TestDatabase {
    /// Returns the database's URL with host and port replaced by `127.0.0.1:{port}`.
    pub fn url_via(&self, port: u16) -> String {
        let (scheme, rest) = self.url.split_once("://").expect("url has a scheme");
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        let user = authority
            .rsplit_once('@')
            .map_or(String::new(), |(user, _)| format!("{user}@"));
        format!("{scheme}://{user}127.0.0.1:{port}{path}")
    }

    /// Returns the server's `host:port`, for a proxy in front of it.
    pub fn server_address(&self) -> std::net::SocketAddr {
        let (_, rest) = self.url.split_once("://").expect("url has a scheme");
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        let host_port = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let host_port = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:5432")
        };
        let host_port = host_port.replace("localhost", "127.0.0.1");
        host_port.parse().expect("test server address is ip:port")
    }

    /// Runs `sql` on a fresh admin connection (for example to terminate sessions).
    pub async fn admin(&self, sql: &str) {
        let mut admin = PgConnection::connect(&self.admin_url)
            .await
            .expect("admin connects");
        sqlx::query(sql)
            .execute(&mut admin)
            .await
            .unwrap_or_else(|error| panic!("{sql}: {error}"));
        let _ = admin.close().await;
    }

    /// Returns the pid of the session holding the kernel lock on this database, if any.
    pub async fn kernel_lock_holder(&self) -> Option<i32> {
        let mut admin = PgConnection::connect(&self.admin_url)
            .await
            .expect("admin connects");
        let holder = sqlx::query_scalar::<_, i32>(
            "SELECT l.pid FROM pg_locks AS l JOIN pg_database AS d ON d.oid = l.database \
             WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND d.datname = $1",
        )
        .bind(&self.name)
        .fetch_optional(&mut admin)
        .await
        .expect("lock holder read");
        let _ = admin.close().await;
        holder
    }

    /// Returns whether a server session with this pid exists.
    pub async fn session_exists(&self, pid: i32) -> bool {
        let mut admin = PgConnection::connect(&self.admin_url)
            .await
            .expect("admin connects");
        let exists = sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)",
        )
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .expect("session read");
        let _ = admin.close().await;
        exists
    }

    /// Returns the test database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop cannot await, and may run on a current-thread runtime: use a runtime of its own.
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
