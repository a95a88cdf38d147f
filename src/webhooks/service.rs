//! The webhook service: one delivery task per subscription of the `--webhooks` file, and the
//! reload of that file. The file is read again every [`WebhookOptions::poll`]; when its bytes
//! change and it still loads, subscriptions that were removed or changed stop, and new or
//! changed ones start (a changed one keeps its acknowledged position). A file that no longer
//! loads is logged and the subscriptions in force keep running. Reloads are counted in
//! `keel_webhook_reloads_total{result}`.
//!
//! In cluster mode delivery is singleton work: only the kernel elected for it (the holder of
//! partition 0, [`Elected`]) runs the subscriptions. Every kernel loads and reloads the file;
//! each checks [`LEADERSHIP_CHECK`]-often whether it is elected, stops its deliveries (each saves
//! its position) when it no longer is, and starts them from the stored positions when it
//! becomes so.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use keel_actors::kernel::Kernel;
use keel_actors::metrics::ResultLabel;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{Subscription, load_file};
use super::deliver::Delivery;
use super::metrics::WebhookMetrics;

/// Settings of the service.
#[derive(Clone, Copy, Debug)]
pub struct WebhookOptions {
    /// How often the file is read again.
    pub poll: Duration,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
        }
    }
}

/// Whether this kernel may run singleton work now (cluster mode).
pub type Elected = Arc<dyn Fn() -> bool + Send + Sync>;

/// How often a cluster kernel checks whether it is elected for delivery.
pub const LEADERSHIP_CHECK: Duration = Duration::from_millis(200);

/// A running subscription.
struct Running {
    subscription: Arc<Subscription>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The running service.
pub struct WebhookService {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

struct Inner {
    kernel: Kernel,
    client: reqwest::Client,
    metrics: WebhookMetrics,
    reloads: Family<ResultLabel, Counter>,
    running: HashMap<String, Running>,
    /// The subscriptions of the file as last loaded.
    loaded: Vec<Subscription>,
    /// Cluster mode: whether this kernel is elected for delivery; `None` runs always.
    elected: Option<Elected>,
}

impl WebhookService {
    /// Loads `path` and starts its subscriptions. Fails when the file does not load (startup
    /// refuses a broken file, like a broken policy).
    pub async fn start(
        kernel: Kernel,
        path: PathBuf,
        options: WebhookOptions,
    ) -> Result<Self, String> {
        Self::start_elected(kernel, path, options, None).await
    }

    /// Like [`WebhookService::start`]; with `elected` (cluster mode) the subscriptions run only
    /// while it answers true.
    pub async fn start_elected(
        kernel: Kernel,
        path: PathBuf,
        options: WebhookOptions,
        elected: Option<Elected>,
    ) -> Result<Self, String> {
        let subscriptions = load_file(&path)?;
        let mut last = std::fs::read(&path).ok();
        let reloads = Family::<ResultLabel, Counter>::default();
        kernel.metrics().register(
            "webhook_reloads",
            "Reloads of the webhooks file, by result (ok, error)",
            reloads.clone(),
        );
        let mut inner = Inner {
            metrics: WebhookMetrics::register(&kernel),
            client: crate::outbound::client("webhook")?,
            kernel,
            reloads,
            running: HashMap::new(),
            loaded: Vec::new(),
            elected,
        };
        inner.apply(subscriptions).await;
        tracing::info!(webhooks = %path.display(), subscriptions = inner.running.len(), "webhooks loaded");
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(options.poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut leadership = tokio::time::interval(LEADERSHIP_CHECK);
            leadership.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    _ = leadership.tick(), if inner.elected.is_some() => {
                        inner.follow_election().await;
                        continue;
                    }
                    _ = tick.tick() => {}
                }
                let bytes = std::fs::read(&path).ok();
                if bytes.is_none() || bytes == last {
                    continue;
                }
                last = bytes;
                match load_file(&path) {
                    Ok(subscriptions) => {
                        inner.apply(subscriptions).await;
                        inner.count_reload("ok");
                        tracing::info!(webhooks = %path.display(), subscriptions = inner.running.len(), "webhooks reloaded");
                    }
                    Err(error) => {
                        inner.count_reload("error");
                        tracing::error!(error = %error, "webhooks file not reloaded; the subscriptions in force keep running");
                    }
                }
            }
            inner.stop_all().await;
        });
        Ok(Self { stop, task })
    }

    /// Stops every delivery (each saves its acknowledged position first) and the reloader.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

impl Inner {
    /// Whether this kernel runs the subscriptions now.
    fn is_elected(&self) -> bool {
        self.elected.as_ref().is_none_or(|elected| elected())
    }

    /// Starts the loaded subscriptions when this kernel became elected, stops them when it no
    /// longer is.
    async fn follow_election(&mut self) {
        let elected = self.is_elected();
        if elected && self.running.is_empty() && !self.loaded.is_empty() {
            tracing::info!(
                subscriptions = self.loaded.len(),
                "webhook delivery runs on this kernel now (elected for singleton work)"
            );
            self.apply(self.loaded.clone()).await;
        } else if !elected && !self.running.is_empty() {
            tracing::info!("webhook delivery stops on this kernel (no longer elected)");
            self.stop_all().await;
        }
    }

    /// Makes `subscriptions` the running set (none while another kernel is elected).
    async fn apply(&mut self, subscriptions: Vec<Subscription>) {
        self.loaded = subscriptions.clone();
        if !self.is_elected() {
            self.stop_all().await;
            return;
        }
        let wanted: HashMap<String, Subscription> = subscriptions
            .into_iter()
            .map(|subscription| (subscription.id.clone(), subscription))
            .collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(id, running)| wanted.get(*id) != Some(running.subscription.as_ref()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some(running) = self.running.remove(&id) {
                running.stop.cancel();
                // The old task saves its position and ends before a new one starts, so one
                // subscription never has two deliveries in flight.
                let _ = running.task.await;
            }
        }
        for (id, subscription) in wanted {
            if self.running.contains_key(&id) {
                continue;
            }
            let subscription = Arc::new(subscription);
            let stop = CancellationToken::new();
            let delivery = Delivery {
                subscription: subscription.clone(),
                kernel: self.kernel.clone(),
                client: self.client.clone(),
                metrics: self.metrics.clone(),
                stop: stop.clone(),
            };
            let task = tokio::spawn(delivery.run());
            self.running.insert(
                id,
                Running {
                    subscription,
                    stop,
                    task,
                },
            );
        }
    }

    fn count_reload(&self, result: &str) {
        self.reloads
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    async fn stop_all(&mut self) {
        for running in self.running.values() {
            running.stop.cancel();
        }
        for (_, running) in self.running.drain() {
            let _ = running.task.await;
        }
    }
}
