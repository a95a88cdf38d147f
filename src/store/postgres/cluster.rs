//! The statements of cluster mode (`keel serve --cluster`, docs/architecture.md "Cluster"):
//! the database's mode at open, and membership and partition leases on plain rows with
//! conditional updates (migration 0010), every time read from the database's `now()`.
//! `crate::cluster` decides what to acquire and release; this file only talks to the database.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use keel_actors::error::StoreError;

use super::super::{StoreOptions, map_sqlx_error};
use super::schema::with_session_settings;

/// What a kernel started without `--cluster` is told on a cluster database.
pub const CLUSTER_DATABASE: &str = "this database is used by a cluster of keel kernels \
     (`keel serve --cluster`); start this kernel with --cluster --node-id NAME \
     --advertise-url URL like the others, or point it at another database";

/// What a cluster kernel is told when a kernel started without `--cluster` holds the database.
pub const SINGLE_KERNEL_DATABASE: &str = "a keel kernel started without --cluster is using \
     this database; stop it before starting kernels with --cluster, or point this one at \
     another database";

/// Marks the database as a cluster database with `partitions` partitions on its first cluster
/// open, or checks that its partition count is `partitions`. Runs with the kernel's
/// (shared) lock held, after the migrations.
pub(super) async fn ensure_cluster(
    connection: &mut PgConnection,
    partitions: u32,
) -> Result<(), StoreError> {
    let wanted = i32::try_from(partitions)
        .map_err(|_| StoreError::Unavailable(format!("{partitions} partitions is too many")))?;
    let mut transaction = sqlx::Connection::begin(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
    let marked =
        sqlx::query("INSERT INTO cluster_meta (partitions) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(wanted)
            .execute(&mut *transaction)
            .await
            .map_err(map_sqlx_error)?
            .rows_affected();
    let found = sqlx::query_scalar::<_, i32>("SELECT partitions FROM cluster_meta")
        .fetch_one(&mut *transaction)
        .await
        .map_err(map_sqlx_error)?;
    if found != wanted {
        return Err(StoreError::Unavailable(format!(
            "this cluster database has {found} partitions and this kernel was started with \
             --partitions {wanted}; the count is fixed when the database is created: start it \
             with --partitions {found}"
        )));
    }
    sqlx::query(
        "INSERT INTO partitions (id) SELECT generate_series(0, $1 - 1) ON CONFLICT DO NOTHING",
    )
    .bind(wanted)
    .execute(&mut *transaction)
    .await
    .map_err(map_sqlx_error)?;
    if marked == 1 {
        // A one-kernel database becoming a cluster database: its executions get their
        // partitions (new ones get theirs as they are written).
        sqlx::query(
            "UPDATE executions SET partition = keel_partition(id, $1) WHERE partition IS NULL",
        )
        .bind(wanted)
        .execute(&mut *transaction)
        .await
        .map_err(map_sqlx_error)?;
    }
    transaction.commit().await.map_err(map_sqlx_error)
}

/// Refuses a cluster database to a kernel started without `--cluster` (after the migrations,
/// with its exclusive lock held).
pub(super) async fn refuse_cluster(connection: &mut PgConnection) -> Result<(), StoreError> {
    if is_cluster(connection).await? {
        return Err(StoreError::Unavailable(CLUSTER_DATABASE.to_owned()));
    }
    Ok(())
}

/// Returns whether the database was marked as a cluster database (false before migration
/// 0010 exists).
pub(super) async fn is_cluster(connection: &mut PgConnection) -> Result<bool, StoreError> {
    let table = sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass('cluster_meta')::text")
        .fetch_one(&mut *connection)
        .await
        .map_err(map_sqlx_error)?;
    if table.is_none() {
        return Ok(false);
    }
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM cluster_meta)")
        .fetch_one(&mut *connection)
        .await
        .map_err(map_sqlx_error)
}

/// A kernel as the `nodes` table shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// `--node-id`.
    pub id: String,
    /// Grows at every start of the id.
    pub incarnation: i64,
    /// `--advertise-url`.
    pub url: String,
    /// Its heartbeat is younger than the lease, on the database's clock.
    pub live: bool,
}

/// A partition as the `partitions` table shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRow {
    /// 0..P-1.
    pub id: u32,
    /// The kernel that acquired it last, if any.
    pub owner: Option<String>,
    /// That kernel's incarnation.
    pub owner_incarnation: Option<i64>,
    /// Incremented at every acquisition.
    pub epoch: i64,
    /// Its lease has not expired, on the database's clock.
    pub leased: bool,
}

/// One kernel's membership: its own small pool (so leases never wait behind the writer) and
/// its identity.
#[derive(Debug)]
pub struct Membership {
    pool: PgPool,
    node: String,
    incarnation: i64,
    lease_ms: f64,
    timeout: Duration,
}

impl Membership {
    /// Connects to `url` and registers the kernel `node` (advertised at `advertise_url`) with a
    /// new incarnation, superseding an earlier process with the same id. Every later call is
    /// bounded by `timeout`.
    pub async fn join(
        url: &str,
        node: &str,
        advertise_url: &str,
        lease: Duration,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let base = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Unavailable(format!("invalid postgres url: {error}")))?;
        let options = StoreOptions {
            acquire_timeout: timeout,
            statement_timeout: timeout,
            ..StoreOptions::default()
        };
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .min_connections(0)
            .acquire_timeout(timeout)
            .test_before_acquire(true)
            .connect_lazy_with(with_session_settings(base, &options));
        let mut membership = Self {
            pool,
            node: node.to_owned(),
            incarnation: 0,
            lease_ms: lease.as_secs_f64() * 1000.0,
            timeout,
        };
        let join = sqlx::query_scalar::<_, i64>(
            "INSERT INTO nodes (id, incarnation, url) VALUES ($1, 1, $2) \
             ON CONFLICT (id) DO UPDATE SET incarnation = nodes.incarnation + 1, \
             url = EXCLUDED.url, started_at = now(), heartbeat = now() \
             RETURNING incarnation",
        )
        .bind(node)
        .bind(advertise_url)
        .fetch_one(&membership.pool);
        membership.incarnation = membership.bounded(join).await?;
        Ok(membership)
    }

    /// This process's incarnation of its node id.
    pub fn incarnation(&self) -> i64 {
        self.incarnation
    }

    /// Stamps the heartbeat and renews the leases of `held`, in one statement; returns the
    /// partitions renewed with their epochs (a partition missing was taken by another kernel,
    /// or this incarnation was superseded).
    pub async fn renew(&self, held: &[u32]) -> Result<Vec<(u32, i64)>, StoreError> {
        let ids = to_ids(held);
        let renew = sqlx::query_as::<_, (i32, i64)>(
            "WITH beat AS (UPDATE nodes SET heartbeat = now() \
             WHERE id = $1 AND incarnation = $2 RETURNING id) \
             UPDATE partitions SET lease_expires_at = now() + $3 * interval '1 millisecond' \
             WHERE owner = $1 AND owner_incarnation = $2 AND id = ANY($4) \
             AND EXISTS (SELECT 1 FROM beat) RETURNING id, epoch",
        )
        .bind(&self.node)
        .bind(self.incarnation)
        .bind(self.lease_ms)
        .bind(&ids)
        .fetch_all(&self.pool);
        Ok(from_ids(self.bounded(renew).await?))
    }

    /// Reads the kernels and the partitions (a constant amount: P rows and one per kernel).
    pub async fn view(&self) -> Result<(Vec<NodeRow>, Vec<PartitionRow>), StoreError> {
        let nodes = sqlx::query_as::<_, (String, i64, String, bool)>(
            "SELECT id, incarnation, url, heartbeat > now() - $1 * interval '1 millisecond' \
             FROM nodes ORDER BY id",
        )
        .bind(self.lease_ms)
        .fetch_all(&self.pool);
        let nodes = self.bounded(nodes).await?;
        let partitions = sqlx::query_as::<_, (i32, Option<String>, Option<i64>, i64, bool)>(
            "SELECT id, owner, owner_incarnation, epoch, lease_expires_at > now() \
             FROM partitions ORDER BY id",
        )
        .fetch_all(&self.pool);
        let partitions = self.bounded(partitions).await?;
        Ok((
            nodes
                .into_iter()
                .map(|(id, incarnation, url, live)| NodeRow {
                    id,
                    incarnation,
                    url,
                    live,
                })
                .collect(),
            partitions
                .into_iter()
                .filter_map(|(id, owner, owner_incarnation, epoch, leased)| {
                    Some(PartitionRow {
                        id: u32::try_from(id).ok()?,
                        owner,
                        owner_incarnation,
                        epoch,
                        leased,
                    })
                })
                .collect(),
        ))
    }

    /// Acquires those of `wanted` whose lease has expired (or that this incarnation still
    /// holds), incrementing their epochs: a compare-and-set, so two kernels never both get a
    /// partition. Returns the partitions acquired with their new epochs.
    pub async fn acquire(&self, wanted: &[u32]) -> Result<Vec<(u32, i64)>, StoreError> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let ids = to_ids(wanted);
        let acquire = sqlx::query_as::<_, (i32, i64)>(
            "UPDATE partitions SET owner = $1, owner_incarnation = $2, epoch = epoch + 1, \
             lease_expires_at = now() + $3 * interval '1 millisecond', acquired_at = now() \
             WHERE id = ANY($4) AND (lease_expires_at <= now() \
             OR (owner = $1 AND owner_incarnation = $2)) RETURNING id, epoch",
        )
        .bind(&self.node)
        .bind(self.incarnation)
        .bind(self.lease_ms)
        .bind(&ids)
        .fetch_all(&self.pool);
        Ok(from_ids(self.bounded(acquire).await?))
    }

    /// Ends the leases of `partitions` now (owner and epoch kept), so that another kernel can
    /// acquire them at once.
    pub async fn release(&self, partitions: &[u32]) -> Result<(), StoreError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let ids = to_ids(partitions);
        let release = sqlx::query(
            "UPDATE partitions SET lease_expires_at = now() \
             WHERE id = ANY($3) AND owner = $1 AND owner_incarnation = $2",
        )
        .bind(&self.node)
        .bind(self.incarnation)
        .bind(&ids)
        .execute(&self.pool);
        self.bounded(release).await.map(|_| ())
    }

    /// Leaves the cluster: ends every lease of this incarnation and marks its heartbeat as
    /// gone, so the others reassign its partitions on their next tick.
    pub async fn leave(&self, announce: Option<&str>) -> Result<(), StoreError> {
        let leave = sqlx::query(
            "WITH released AS (UPDATE partitions SET lease_expires_at = now() \
             WHERE owner = $1 AND owner_incarnation = $2 RETURNING id) \
             UPDATE nodes SET heartbeat = '-infinity' WHERE id = $1 AND incarnation = $2",
        )
        .bind(&self.node)
        .bind(self.incarnation)
        .execute(&self.pool);
        let mut outcome = self.bounded(leave).await.map(|_| ());
        if let (Ok(()), Some(channel)) = (&outcome, announce) {
            outcome = self.notify(channel).await;
        }
        self.pool.close().await;
        outcome
    }

    /// Sends a notification on `channel` (its own statement, never inside a transaction that
    /// writes events: a NOTIFY takes a database-wide lock at commit).
    pub async fn notify(&self, channel: &str) -> Result<(), StoreError> {
        let notify = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(&self.node)
            .execute(&self.pool);
        self.bounded(notify).await.map(|_| ())
    }

    /// Runs one statement, failing with `Unavailable` when it outlives the timeout.
    async fn bounded<T>(
        &self,
        operation: impl std::future::Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, operation).await {
            Ok(result) => result.map_err(map_sqlx_error),
            Err(_) => Err(StoreError::Unavailable(format!(
                "cluster statement did not finish within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

/// Partition ids as the `INTEGER` column holds them.
fn to_ids(partitions: &[u32]) -> Vec<i32> {
    partitions
        .iter()
        .filter_map(|id| i32::try_from(*id).ok())
        .collect()
}

/// `(id, epoch)` rows back to partition ids.
fn from_ids(rows: Vec<(i32, i64)>) -> Vec<(u32, i64)> {
    rows.into_iter()
        .filter_map(|(id, epoch)| Some((u32::try_from(id).ok()?, epoch)))
        .collect()
}
