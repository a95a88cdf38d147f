//! Outage tests of the PostgreSQL store: a TCP proxy between the store and the server is closed
//! (connections reset, port refusing) or frozen (a partition: sockets open, nothing flows), the
//! server terminates the store's sessions, or the database turns read-only. Each time the store
//! must answer `Unavailable` quickly, change nothing, and recover by itself without reopening.
//! Measured timings go to stderr (`--nocapture` shows them).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use keel_actors::error::StoreError;
use keel_actors::events::{EventBody, NewEvent};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{Commit, ExecutionRow, Store};

use super::super::conformance::{advance, at, create, new_execution, sequences};
use super::super::{StoreOptions, open};
use super::test_db::{self, TestDatabase};

/// A TCP proxy on 127.0.0.1 that can be closed, reopened on the same port, and frozen.
struct Proxy {
    address: SocketAddr,
    upstream: SocketAddr,
    frozen: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding from a free local port to `upstream`.
    async fn start(upstream: SocketAddr) -> Self {
        let listener = listen("127.0.0.1:0".parse().expect("address"));
        let address = listener.local_addr().expect("local address");
        let (frozen, _) = watch::channel(false);
        let mut proxy = Self {
            address,
            upstream,
            frozen,
            accept: None,
        };
        proxy.accept = Some(proxy.serve(listener));
        proxy
    }

    /// Stops listening and resets every forwarded connection.
    async fn close(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            let _ = accept.await;
        }
    }

    /// Listens on the same port again.
    fn reopen(&mut self) {
        let listener = listen(self.address);
        self.accept = Some(self.serve(listener));
    }

    /// Freezes (nothing flows, sockets stay open, new connections hang) or thaws; connections
    /// frozen once stay stuck, like TCP across a partition.
    fn freeze(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }

    fn serve(&self, listener: TcpListener) -> JoinHandle<()> {
        let upstream = self.upstream;
        let frozen = self.frozen.subscribe();
        tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every pipe and closes its sockets.
            let mut pipes = JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                while pipes.try_join_next().is_some() {}
                pipes.spawn(pipe(client, upstream, frozen.clone()));
            }
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
        }
    }
}

/// Binds a listener that may take over a port whose old connections are in TIME_WAIT.
fn listen(address: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("reuseaddr");
    socket.bind(address).expect("bind");
    socket.listen(64).expect("listen")
}

/// Forwards one connection until either side closes, or holds it silent once frozen.
async fn pipe(mut client: TcpStream, upstream: SocketAddr, mut frozen: watch::Receiver<bool>) {
    let frozen_at_accept = *frozen.borrow();
    if frozen_at_accept {
        std::future::pending::<()>().await;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = async { frozen.wait_for(|frozen| *frozen).await.is_ok() } => {
            // Keep both sockets open and silent: the server keeps the session.
            std::future::pending::<()>().await;
        }
    }
}

/// Retries `attempt` every 50 ms until it succeeds; returns the time it took. Fails after
/// `limit`.
async fn recovers_within<F, Fut>(limit: Duration, what: &str, mut attempt: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    let started = Instant::now();
    loop {
        let result = attempt().await;
        match result {
            Ok(()) => return started.elapsed(),
            Err(StoreError::Unavailable(_)) if started.elapsed() < limit => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("{what} did not recover within {limit:?}: {error:?}"),
        }
    }
}

/// Runs `operation`, asserts it fails with `Unavailable` within `limit`, returns the time.
async fn unavailable_within<T: std::fmt::Debug>(
    limit: Duration,
    what: &str,
    operation: impl Future<Output = Result<T, StoreError>>,
) -> Duration {
    let started = Instant::now();
    let result = operation.await;
    let elapsed = started.elapsed();
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "{what}: got {result:?}"
    );
    assert!(elapsed <= limit, "{what} took {elapsed:?}, over {limit:?}");
    elapsed
}

/// Prints one measured timing past the test harness's capture.
fn report(test: &str, what: &str, elapsed: Duration) {
    let _ = writeln!(
        std::io::stderr(),
        "outage timing [{test}] {what}: {} ms",
        elapsed.as_millis()
    );
}

/// Returns the commit resuming `row` once more.
fn resume(row: &ExecutionRow) -> Commit {
    let body = EventBody::ExecutionResumed {
        reason: "again".into(),
    };
    advance(
        row,
        at(10),
        ExecutionStatus::Running,
        vec![NewEvent::execution(body)],
    )
}

/// Commits one commit alone.
async fn commit_one(store: &Arc<dyn Store>, commit: Commit) -> Result<(), StoreError> {
    store.commit(&[commit]).await
}

/// Opens a store through `proxy` and creates one execution.
async fn open_via(
    db: &TestDatabase,
    proxy: &Proxy,
    options: &StoreOptions,
) -> (Arc<dyn Store>, ExecutionRow) {
    let store = open(&db.url_via(proxy.address.port()), options)
        .await
        .unwrap_or_else(|error| panic!("open: {error}"));
    let row = create(&store, "exec-before", "agent-a", &[], at(1)).await;
    store.ping().await.expect("ping before the outage");
    (store, row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_is_unavailable_within_two_seconds_and_recovers_without_reopening() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let test = "closed";
    let mut proxy = Proxy::start(db.server_address()).await;
    let (store, row) = open_via(&db, &proxy, &StoreOptions::default()).await;

    proxy.close().await;
    let two_seconds = Duration::from_secs(2);
    let ping = unavailable_within(two_seconds, "ping", store.ping()).await;
    report(test, "ping fails after", ping);
    let write = unavailable_within(two_seconds, "commit", commit_one(&store, resume(&row))).await;
    report(test, "commit fails after", write);
    let fresh = new_execution("exec-during", "agent-a", &[], at(2));
    let create_new = unavailable_within(two_seconds, "create", commit_one(&store, fresh)).await;
    report(test, "second commit fails after", create_new);
    let read = unavailable_within(
        Duration::from_millis(2500),
        "read",
        store.execution(&row.id),
    )
    .await;
    report(test, "read fails after", read);

    proxy.reopen();
    let five_seconds = Duration::from_secs(5);
    let ping = recovers_within(five_seconds, "ping", || store.ping()).await;
    report(test, "ping recovers after", ping);
    assert_eq!(
        sequences(&store, "exec-before").await,
        vec![1],
        "nothing changed"
    );
    assert_eq!(sequences(&store, "exec-during").await, Vec::<i64>::new());
    let write = recovers_within(five_seconds, "commit", || commit_one(&store, resume(&row))).await;
    report(test, "commit recovers after", write);
    assert_eq!(sequences(&store, "exec-before").await, vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_times_out_as_unavailable_and_the_orphaned_session_is_replaced() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let test = "partition";
    let options = StoreOptions {
        acquire_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(1),
        ..StoreOptions::default()
    };
    let proxy = Proxy::start(db.server_address()).await;
    let (store, row) = open_via(&db, &proxy, &options).await;

    let old_writer = db
        .kernel_lock_holder()
        .await
        .expect("the writer holds the lock");
    proxy.freeze(true);
    let ping = unavailable_within(Duration::from_secs(2), "ping", store.ping()).await;
    report(test, "ping fails after", ping);
    let write = unavailable_within(
        Duration::from_millis(1500),
        "commit",
        commit_one(&store, resume(&row)),
    )
    .await;
    report(test, "commit fails after", write);

    assert_eq!(
        db.kernel_lock_holder().await,
        Some(old_writer),
        "the server still sees the old writer session, holding the lock"
    );
    proxy.freeze(false);
    let five_seconds = Duration::from_secs(5);
    let ping = recovers_within(five_seconds, "ping", || store.ping()).await;
    report(test, "ping recovers after", ping);
    assert_eq!(
        sequences(&store, "exec-before").await,
        vec![1],
        "nothing changed"
    );
    let write = recovers_within(five_seconds, "commit", || commit_one(&store, resume(&row))).await;
    report(test, "commit recovers after", write);
    assert_eq!(sequences(&store, "exec-before").await, vec![1, 2]);
    let new_writer = db
        .kernel_lock_holder()
        .await
        .expect("the writer holds the lock");
    assert_ne!(new_writer, old_writer);
    assert!(
        !db.session_exists(old_writer).await,
        "the orphaned session was terminated"
    );
}

#[tokio::test]
async fn terminated_sessions_and_a_read_only_database_are_unavailable_then_recover() {
    let Some(db) = test_db::fresh().await else {
        return;
    };
    let test = "server";
    let store = open(&db.url, &StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open: {error}"));
    let row = create(&store, "exec-before", "agent-a", &[], at(1)).await;
    let terminate = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{}' AND pid <> pg_backend_pid()",
        db.name()
    );

    // An administrator (or a restart) ends every session: 57P01 / connection closed.
    db.admin(&terminate).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let write = unavailable_within(
        Duration::from_secs(2),
        "commit",
        commit_one(&store, resume(&row)),
    );
    report(
        test,
        "commit on a terminated session fails after",
        write.await,
    );
    let five_seconds = Duration::from_secs(5);
    let ping = recovers_within(five_seconds, "ping", || store.ping()).await;
    report(test, "ping recovers after", ping);
    assert_eq!(
        sequences(&store, "exec-before").await,
        vec![1],
        "nothing changed"
    );

    // The database turns read-only (as after a fail-over to a standby): 25006.
    db.admin(&format!(
        "ALTER DATABASE {} SET default_transaction_read_only = on",
        db.name()
    ))
    .await;
    db.admin(&terminate).await;
    let read_only = recovers_within(five_seconds, "read-only refusal", || async {
        match commit_one(&store, resume(&row)).await {
            Err(StoreError::Unavailable(message)) if message.contains("read-only") => Ok(()),
            Err(error) => Err(error),
            Ok(()) => panic!("a read-only database accepted a commit"),
        }
    })
    .await;
    report(test, "read-only refusal seen after", read_only);
    let ping = unavailable_within(Duration::from_secs(2), "ping", store.ping()).await;
    report(test, "ping on a read-only database fails after", ping);
    db.admin(&format!(
        "ALTER DATABASE {} RESET default_transaction_read_only",
        db.name()
    ))
    .await;
    let write = recovers_within(five_seconds, "commit", || commit_one(&store, resume(&row))).await;
    report(test, "commit recovers after", write);
    assert_eq!(sequences(&store, "exec-before").await, vec![1, 2]);
}
