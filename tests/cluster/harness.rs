//! Real `keel serve --cluster` processes on loopback, sharing one fresh PostgreSQL database,
//! and reads of the cluster tables. Every wait is bounded.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The fresh database of one test, and a pool on it for the test's own reads.
pub struct Database {
    pub url: String,
    pub pool: PgPool,
    _database: test_db::TestDatabase,
}

#[allow(dead_code)]
#[path = "../../src/store/postgres/test_db.rs"]
mod test_db;

impl Database {
    /// A fresh database, or `None` (after printing why) when `KEEL_TEST_POSTGRES_URL` is unset.
    pub async fn fresh() -> Option<Self> {
        let database = test_db::fresh().await?;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect(&database.url)
            .await
            .expect("connect to the test database");
        Some(Self {
            url: database.url.clone(),
            pool,
            _database: database,
        })
    }

    /// Owners of the partitions whose leases run and whose owners' heartbeats are fresh, on the
    /// database's clock: `(partition, owner, epoch)`.
    pub async fn live_owners(&self) -> Vec<(i32, String, i64)> {
        sqlx::query_as::<_, (i32, String, i64)>(
            "SELECT p.id, p.owner, p.epoch FROM partitions AS p \
             JOIN nodes AS n ON n.id = p.owner AND n.incarnation = p.owner_incarnation \
             WHERE p.lease_expires_at > now() AND n.heartbeat > now() - interval '5 seconds' \
             ORDER BY p.id",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default()
    }

    /// The database's URL through a proxy listening on 127.0.0.1:`port`.
    pub fn url_via(&self, port: u16) -> String {
        self._database.url_via(port)
    }

    /// The server's address, for a proxy in front of it.
    pub fn server_address(&self) -> std::net::SocketAddr {
        self._database.server_address()
    }

    /// Every partition: `(partition, owner, epoch)`.
    pub async fn partitions(&self) -> Vec<(i32, Option<String>, i64)> {
        sqlx::query_as::<_, (i32, Option<String>, i64)>(
            "SELECT id, owner, epoch FROM partitions ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .expect("read partitions")
    }
}

/// Returns a port free on 127.0.0.1 at the time of the call (the kernel's advertised URL must
/// be known before it starts).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// A running kernel process.
pub struct Kernel {
    pub node_id: String,
    /// Its advertised URL (`http://127.0.0.1:PORT`).
    pub url: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Kernel {
    /// Starts `keel serve --cluster` as `node_id` on `db_url` and waits for `listening on`.
    pub async fn start(node_id: &str, db_url: &str, data_dir: &Path) -> Kernel {
        Self::start_with(node_id, db_url, data_dir, &["--cluster"])
            .await
            .unwrap_or_else(|log| panic!("kernel {node_id} did not start; log:\n{log}"))
    }

    /// Starts `keel serve` with `extra` flags; `Err(log)` when it exits before listening.
    pub async fn start_with(
        node_id: &str,
        db_url: &str,
        data_dir: &Path,
        extra: &[&str],
    ) -> Result<Kernel, String> {
        Self::start_on(node_id, db_url, data_dir, extra, free_port()).await
    }

    /// Starts `keel serve` on `port` (a restart keeps its kernel's address).
    pub async fn start_on(
        node_id: &str,
        db_url: &str,
        data_dir: &Path,
        extra: &[&str],
        port: u16,
    ) -> Result<Kernel, String> {
        let url = format!("http://127.0.0.1:{port}");
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
        command
            .args(["serve", "--bind", "127.0.0.1", "--log-format", "text"])
            .args(["--port", &port.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--db-url", db_url])
            .args(extra);
        if extra.contains(&"--cluster") {
            command.args(["--node-id", node_id, "--advertise-url", &url]);
        }
        let mut child = command
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn keel serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                let listening = line.contains("listening on ");
                sink.lock().unwrap().push(line);
                if listening && let Some(sender) = ready_tx.take() {
                    let _ = sender.send(());
                }
            }
        });
        let started = tokio::time::timeout(Duration::from_secs(20), ready_rx).await;
        let text = log.lock().unwrap().join("\n");
        match started {
            Ok(Ok(())) => Ok(Kernel {
                node_id: node_id.to_owned(),
                url,
                child,
                log,
            }),
            // The log reader ended: the process exited.
            Ok(Err(_)) => {
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                Err(log.lock().unwrap().join("\n"))
            }
            Err(_) => Err(format!("no `listening on` within 20 s; log:\n{text}")),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .expect("url ends with the port")
    }

    /// The log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running kernel has a pid")).expect("pid fits")
    }

    /// Sends `signal` (`TERM`, `STOP`, `CONT`) to the process.
    pub async fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// SIGKILL, and waits for the process to be gone.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill -9 keel");
    }

    /// SIGTERM, and waits (bounded) for a clean exit; returns the log.
    pub async fn terminate(mut self) -> String {
        self.signal("TERM").await;
        let exit = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("kernel stops within 20 s of SIGTERM")
            .expect("wait for kernel");
        // Let the last lines through the pipe.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let log = self.log();
        assert!(exit.success(), "kernel exited with {exit}; log:\n{log}");
        log
    }
}

/// Polls `check` every 100 ms until it returns `Some`, at most `limit`; `None` on timeout.
pub async fn poll<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (at most 10 s) until every kernel's own view of the cluster (`GET /v0/cluster`, by
/// which it routes; a tick behind the database at most) shows every partition owned and `urls`
/// live kernels holding at least `P / n - 3` each. Asserting on the database alone lets a
/// request reach a kernel that still sees a partition moving (503).
pub async fn views_settled(urls: &[&str]) -> bool {
    let http = reqwest::Client::new();
    let n = urls.len() as u64;
    poll(Duration::from_secs(10), || async {
        for url in urls {
            let view: serde_json::Value = http
                .get(format!("{url}/v0/cluster"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let kernels = view["kernels"].as_array()?;
            let partitions = view["partitions"].as_u64().unwrap_or(64);
            let least = (partitions / n).saturating_sub(3);
            let live: Vec<&serde_json::Value> = kernels
                .iter()
                .filter(|kernel| kernel["partitions_owned"].as_u64().unwrap_or(0) > 0)
                .collect();
            let settled = view["unowned"] == 0
                && live.len() as u64 == n
                && live
                    .iter()
                    .all(|kernel| kernel["partitions_owned"].as_u64() >= Some(least));
            if !settled {
                return None;
            }
        }
        Some(())
    })
    .await
    .is_some()
}
