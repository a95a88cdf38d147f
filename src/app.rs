//! Startup and shutdown wiring of a kernel process: [`run`] opens the store, loads the policy,
//! starts the actor tree, serves the HTTP router on the given listener, and on the shutdown
//! signal stops everything in order under one deadline. `main`, `keel bench --embedded` and
//! the integration tests all go through it. `anyhow` is used here and in `main` only.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use keel_actors::hooks::HookSpec;
use keel_actors::kernel;
use keel_actors::policy::{PermissiveEngine, PolicyEngine, SecureDefaultEngine};
use keel_actors::store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{Config, Mode, Settings};
use crate::http::{AppState, ConnectionTimeouts, router};
use crate::policy::{PolicyReloader, PolicyStatus, ReloadOptions};
use crate::store::StoreOptions;

mod announce;
mod settings;

use announce::{announce, describe_auth, describe_hooks, describe_policy};
use settings::{http_settings, kernel_config, llm_gateway};

/// Share of the shutdown deadline kept for the actor tree after the HTTP drain.
const KERNEL_SHARE_OF_DEADLINE: u32 = 4;

/// Runs a kernel on `listener` until `shutdown` resolves, then shuts down gracefully: stop
/// accepting connections and end SSE streams, drain in-flight requests, stop the actor tree.
/// The whole sequence is bounded by `--shutdown-timeout`.
///
/// Fails before serving when the configuration is invalid, the database cannot be opened, the
/// policy does not load (every problem is in the error) or the actor tree does not start.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let settings = config
        .validate()
        .map_err(|error| anyhow!("invalid configuration:\n{error}"))?;
    let address = listener
        .local_addr()
        .context("cannot read the listener's address")?;
    info!(
        mode = settings.mode.as_str(),
        version = env!("CARGO_PKG_VERSION"),
        "keel starting"
    );

    // The policy first: it is cheap, and a typo in it should not wait for a database.
    let (policy, hooks) = load_policy(&settings).await?;
    let hooks_in_force = describe_hooks(&hooks);
    let policy_digest = policy.digest();
    let policy_status = Arc::new(PolicyStatus::new(
        settings
            .policy
            .as_ref()
            .map(|path| path.display().to_string()),
        policy.as_ref(),
    ));
    let ownership = settings
        .cluster
        .as_ref()
        .map(|cluster| Arc::new(crate::cluster::Ownership::new(cluster.partitions)));
    let store = open_store(&settings, ownership.clone()).await?;
    refuse_open_exposure(&settings, address, &store).await?;
    let cluster = match (&settings.cluster, ownership) {
        (Some(cluster), Some(ownership)) => Some(
            crate::cluster::Cluster::start(cluster, &settings.db.connection_string(), ownership)
                .await
                .map_err(|error| anyhow!("cannot join the cluster: {error}"))?,
        ),
        _ => None,
    };
    let phase = Instant::now();
    let hook_caller = Arc::new(
        crate::hook_caller::HttpHookCaller::new()
            .map_err(|error| anyhow!("{error}"))?
            .with_answer_limit(settings.large_body_limit),
    );
    let mut config = kernel_config(&settings, store, policy);
    config.hook_caller = Some(hook_caller.clone());
    config.hooks = hooks;
    // Cluster mode: each partition's open executions are loaded when it is acquired.
    config.recover_at_start = cluster.is_none();
    if let Some(cluster) = &cluster {
        let ownership = cluster.ownership().clone();
        config.owns = Some(Arc::new(move |id: &keel_actors::ids::ExecutionId| {
            let partition = crate::store::partition_of(id.as_str(), ownership.partitions());
            ownership.epoch(partition).is_some()
        }));
    }
    let kernel = kernel::start(config)
        .await
        .map_err(|error| anyhow!("cannot start the actor tree: {error}"))?;
    let handover = cluster.as_ref().map(|cluster| {
        crate::cluster::handover::Handover::start(kernel.clone(), cluster.ownership().clone())
    });
    hook_caller.register(&kernel);
    info!(elapsed_ms = millis(phase.elapsed()), "actor tree started");
    let reloader = match settings.policy.clone() {
        Some(path) => PolicyReloader::start_with_status(
            kernel.clone(),
            path,
            policy_digest,
            ReloadOptions::default(),
            Some(policy_status.clone()),
        ),
        None => PolicyReloader::without_policy(ReloadOptions::default()),
    };
    let webhooks = match settings.webhooks.clone() {
        Some(path) => Some(
            crate::webhooks::WebhookService::start_elected(
                kernel.clone(),
                path,
                Default::default(),
                cluster
                    .as_ref()
                    .map(|cluster| singleton_election(cluster.ownership())),
            )
            .await
            .map_err(|error| anyhow!("{error}; refusing to start"))?,
        ),
        None => None,
    };

    let streams_end = CancellationToken::new();
    let stop_accepting = CancellationToken::new();
    let mut http = http_settings(&settings);
    if let (Some(cluster_settings), Some(cluster)) = (&settings.cluster, &cluster) {
        let routing = crate::cluster::forward::Routing::new(
            cluster.ownership().clone(),
            &cluster_settings.node_id,
            settings.large_body_limit,
        )
        .map_err(|error| anyhow!("{error}"))?;
        http.cluster = Some(Arc::new(routing));
    }
    let (gateway, llm_in_force) = llm_gateway(&settings)?;
    http.gateway = gateway;
    let state =
        AppState::new(kernel.clone(), http, streams_end.clone()).with_policy_status(policy_status);
    // The API keys are read before the first request (a store that cannot answer is retried
    // by the first request that needs them).
    if let Err(error) = state.keys.ensure_loaded().await {
        warn!(error = %error, "reading API keys failed; retrying on the first request");
    }
    let keys_in_use = state.keys.has_keys();
    let app = router(state);
    let timeouts = ConnectionTimeouts {
        header_read: settings.header_read_timeout,
        idle: settings.idle_timeout,
        first_byte: settings.exposure.first_byte_timeout,
        max_connections: settings.exposure.max_connections,
        write_stall: settings.exposure.write_stall_timeout,
    };
    let mut server: JoinHandle<std::io::Result<()>> = tokio::spawn(crate::http::serve(
        listener,
        app,
        timeouts,
        stop_accepting.clone().cancelled_owned(),
    ));
    announce(&settings, address);
    info!(
        console = %format!("http://{address}/"),
        db = %settings.db.redacted(),
        cluster = %settings.cluster.as_ref().map_or_else(|| "off".to_owned(), |cluster| format!("node {} at {}", cluster.node_id, cluster.advertise_url)),
        policy = %describe_policy(&settings),
        auth = %describe_auth(&settings, keys_in_use),
        hooks = %hooks_in_force,
        webhooks = %settings.webhooks.as_ref().map_or_else(|| "off".to_owned(), |path| path.display().to_string()),
        llm = %llm_in_force,
        otel = %settings.otel_endpoint.as_deref().map_or_else(|| "off".to_owned(), |endpoint| format!("traces to {}", crate::config::redact::redact_url(endpoint))),
        "kernel ready"
    );

    let server_ended_early = tokio::select! {
        () = shutdown => None,
        result = &mut server => Some(result),
    };
    let started = Instant::now();
    let deadline = started + settings.shutdown_timeout;
    let http_deadline = deadline - settings.shutdown_timeout / KERNEL_SHARE_OF_DEADLINE;
    info!(
        timeout_ms = millis(settings.shutdown_timeout),
        "shutdown started"
    );

    reloader.stop().await;
    if let Some(webhooks) = webhooks {
        webhooks.stop().await;
    }
    streams_end.cancel();
    stop_accepting.cancel();
    let server_result = match server_ended_early {
        Some(result) => result,
        None => drain_http(&mut server, http_deadline.into()).await,
    };

    if let Some(handover) = handover {
        handover.stop();
    }
    let phase = Instant::now();
    match tokio::time::timeout_at(deadline.into(), kernel.shutdown()).await {
        Ok(()) => info!(
            elapsed_ms = millis(phase.elapsed()),
            "shutdown: actor tree stopped"
        ),
        Err(_) => warn!(
            elapsed_ms = millis(phase.elapsed()),
            "shutdown: actor tree did not stop before the deadline"
        ),
    }
    drop(kernel);
    if let Some(cluster) = cluster {
        cluster.leave().await;
    }
    info!(elapsed_ms = millis(started.elapsed()), "shutdown complete");

    match server_result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(anyhow!(error).context("the HTTP server failed")),
        Err(error) if error.is_cancelled() => Ok(()),
        Err(error) => Err(anyhow!(error).context("the HTTP server task failed")),
    }
}

/// Waits for the HTTP server to finish its in-flight requests; past `deadline` it is aborted,
/// which closes the remaining connections.
async fn drain_http(
    server: &mut JoinHandle<std::io::Result<()>>,
    deadline: tokio::time::Instant,
) -> Result<std::io::Result<()>, tokio::task::JoinError> {
    let phase = Instant::now();
    match tokio::time::timeout_at(deadline, &mut *server).await {
        Ok(result) => {
            info!(
                elapsed_ms = millis(phase.elapsed()),
                "shutdown: HTTP drained and closed"
            );
            result
        }
        Err(_) => {
            warn!(
                elapsed_ms = millis(phase.elapsed()),
                "shutdown: HTTP requests still in flight at the deadline; closing their connections"
            );
            server.abort();
            (&mut *server).await
        }
    }
}

/// `keel serve` does not listen beyond loopback when no request would need credentials (no
/// token, no API key in the database), unless `--allow-unauthenticated` says so.
async fn refuse_open_exposure(
    settings: &Settings,
    address: SocketAddr,
    store: &Arc<dyn Store>,
) -> anyhow::Result<()> {
    if settings.mode != Mode::Serve || settings.bearer_token.is_some() || address.ip().is_loopback()
    {
        return Ok(());
    }
    let keys = crate::auth::KeyRegistry::new(store.clone());
    keys.ensure_loaded()
        .await
        .map_err(|error| anyhow!("cannot read the API keys: {error}"))?;
    match settings.exposure.refusal(address, keys.has_keys()) {
        Some(refusal) => Err(anyhow!(refusal)),
        None => Ok(()),
    }
}

/// Opens (creating and migrating) the configured database.
async fn open_store(
    settings: &Settings,
    ownership: Option<Arc<crate::cluster::Ownership>>,
) -> anyhow::Result<Arc<dyn Store>> {
    let phase = Instant::now();
    for parameter in settings.db.unrecognized_parameters() {
        warn!(parameter = %parameter, "--db-url: ignoring an unrecognized parameter");
    }
    let options = StoreOptions {
        max_read_connections: settings.db_max_conns,
        cluster_partitions: settings.cluster.as_ref().map(|cluster| cluster.partitions),
        ..StoreOptions::default()
    };
    let url = settings.db.connection_string();
    let opened = match ownership {
        Some(ownership) => crate::store::open_cluster(&url, &options, ownership).await,
        None => crate::store::open(&url, &options).await,
    };
    let store = opened.map_err(|error| {
        anyhow!(
            "cannot open the database {}: {error}",
            settings.db.redacted()
        )
    })?;
    info!(db = %settings.db.redacted(), elapsed_ms = millis(phase.elapsed()), "database open");
    Ok(store)
}

/// Loads `--policy` (its engine and hooks), or picks the mode's built-in engine when none is
/// given. A policy with problems stops startup with every problem listed.
async fn load_policy(
    settings: &Settings,
) -> anyhow::Result<(Arc<dyn PolicyEngine>, Vec<HookSpec>)> {
    let Some(path) = settings.policy.clone() else {
        let engine: Arc<dyn PolicyEngine> = match settings.mode {
            Mode::Dev => {
                info!("no --policy given: every tool call is allowed (keel dev)");
                Arc::new(PermissiveEngine)
            }
            Mode::Serve => {
                warn!(
                    "no --policy given: every tool call is denied (secure default); pass --policy to allow tools"
                );
                Arc::new(SecureDefaultEngine)
            }
        };
        return Ok((engine, Vec::new()));
    };
    let phase = Instant::now();
    let shown = path.display().to_string();
    let loaded = tokio::task::spawn_blocking(move || crate::policy::load_path(&path))
        .await
        .context("policy loading task failed")?;
    match loaded {
        Ok(policy) => {
            for warning in &policy.warnings {
                warn!(policy = %shown, warning = %warning, "policy warning");
            }
            info!(
                policy = %shown,
                files = policy.files.len(),
                digest = %policy.digest,
                elapsed_ms = millis(phase.elapsed()),
                "policy loaded"
            );
            Ok((policy.engine, policy.hooks))
        }
        Err(errors) => Err(anyhow!(
            "policy {shown} is invalid ({} problem(s)); refusing to start:\n{errors}",
            errors.problems.len()
        )),
    }
}

/// Returns a duration in whole milliseconds, for log fields.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Cluster mode: singleton work (webhook delivery) runs on the kernel holding partition 0, so
/// it is elected by the partition leases (and their self-fence) and moves with that partition
/// when its holder dies or leaves.
fn singleton_election(ownership: &Arc<crate::cluster::Ownership>) -> crate::webhooks::Elected {
    let ownership = ownership.clone();
    Arc::new(move || ownership.epoch(0).is_some())
}
