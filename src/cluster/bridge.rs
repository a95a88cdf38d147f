//! Agents connected to any kernel (docs/architecture.md, "Cluster", matching): the kernel
//! holding an agent's stream also connects that consumer, under the same `agent_id` and
//! `consumer_id`, to every other live kernel of the cluster, and relays their pushes into the
//! agent's stream. Every kernel therefore sees every consumer of an agent and matches the
//! executions it owns with the rules of one kernel: round-robin over all consumers, the
//! disconnect grace, re-binding on reconnect, cancellation notices. The agent's intents and
//! step results name their execution and are forwarded to its owner.
//!
//! A bridged connection carries `Keel-Forwarded-By` and is never bridged again. The peers are
//! the live kernels of the last view, whether they hold partitions yet or not, so a kernel
//! that is about to acquire some already sees every consumer. A peer's stream that ends,
//! fails or stays silent past [`SILENCE`] is opened again on the next round ([`ROUND`]); a
//! kernel that leaves the view has its connection closed (its consumer then gets the
//! disconnect grace there).
//!
//! A runner's bridge first sends the peer the runner's published tools as this kernel knows
//! them then ([`Prelude`]), so a kernel that joined (or restarted) after the runner published
//! lists them in its directory, as the kernels that received the publication's copies do.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, info};

use super::forward::{FORWARDED_BY, Routing};

/// How often the set of peers is compared with the cluster view.
const ROUND: Duration = Duration::from_secs(1);

/// A peer stream silent this long is reopened (peers send a heartbeat every 15 s).
const SILENCE: Duration = Duration::from_secs(40);

/// Bound of the prelude sent before a peer's stream opens.
const PRELUDE_TIMEOUT: Duration = Duration::from_secs(2);

/// Pushes relayed from one peer that the agent's stream has not taken yet.
const BUFFER: usize = 64;

/// A request sent to each peer before its stream is opened: a POST to `path` with the body
/// `body` returns then (`None`: nothing to send).
#[derive(Clone)]
pub struct Prelude {
    /// Path of the POST (`/v0/runners/{id}/tools`).
    pub path: String,
    /// The JSON body, computed at each (re)opening so that it is current.
    pub body: Arc<dyn Fn() -> Option<Bytes> + Send + Sync>,
}

/// The bridged connections of one agent (or runner) stream; dropping it closes them all.
pub struct Bridge {
    frames: mpsc::Receiver<Bytes>,
    _stop: DropGuard,
}

impl Bridge {
    /// Opens `path_and_query` (`/v0/agents/stream?…`) on every other live kernel with the
    /// request's `headers` (its credentials), and keeps them open while the bridge lives.
    pub fn open(
        routing: Arc<Routing>,
        path_and_query: String,
        headers: &HeaderMap,
        prelude: Option<Prelude>,
    ) -> Self {
        let (sender, frames) = mpsc::channel(BUFFER);
        let stop = CancellationToken::new();
        let mut forwarded = HeaderMap::new();
        for name in [axum::http::header::AUTHORIZATION] {
            if let Some(value) = headers.get(&name) {
                forwarded.insert(name, value.clone());
            }
        }
        if let Ok(node) = HeaderValue::from_str(routing.node_id()) {
            forwarded.insert(HeaderName::from_static(FORWARDED_BY), node);
        }
        let peers = Peers {
            routing,
            path_and_query,
            headers: forwarded,
            prelude,
            sender,
            open: HashMap::new(),
        };
        tokio::spawn(peers.run(stop.clone()));
        Self {
            frames,
            _stop: stop.drop_guard(),
        }
    }

    /// The bridge of a stream request to `path` with query `raw` in cluster mode; `None` in
    /// the one-kernel mode and for a request that is itself a bridge. `prelude` is sent to
    /// each peer before its stream opens.
    pub fn for_stream(
        routing: Option<&Arc<Routing>>,
        path: &str,
        raw: Option<&str>,
        headers: &HeaderMap,
        prelude: Option<Prelude>,
    ) -> Option<Self> {
        let routing = routing?;
        if headers.contains_key(FORWARDED_BY) {
            return None;
        }
        let path_and_query = format!("{path}?{}", raw.unwrap_or_default());
        Some(Self::open(
            routing.clone(),
            path_and_query,
            headers,
            prelude,
        ))
    }

    /// The next message relayed from a peer (an SSE frame); never resolves once all ended.
    pub async fn next(&mut self) -> Bytes {
        match self.frames.recv().await {
            Some(frame) => frame,
            None => std::future::pending().await,
        }
    }
}

/// The connections of one bridge, by peer node id.
struct Peers {
    routing: Arc<Routing>,
    path_and_query: String,
    headers: HeaderMap,
    prelude: Option<Prelude>,
    sender: mpsc::Sender<Bytes>,
    open: HashMap<String, JoinHandle<()>>,
}

impl Peers {
    async fn run(mut self, stop: CancellationToken) {
        let mut round = tokio::time::interval(ROUND);
        round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = round.tick() => {}
            }
            let peers = self.routing.live_peers();
            self.open.retain(|node, task| {
                let keep = !task.is_finished() && peers.iter().any(|peer| &peer.node == node);
                if !keep {
                    task.abort();
                }
                keep
            });
            for peer in peers {
                if self.open.contains_key(&peer.node) {
                    continue;
                }
                let url = format!("{}{}", peer.url.trim_end_matches('/'), self.path_and_query);
                let prelude = self.prelude.as_ref().and_then(|prelude| {
                    let body = (prelude.body)()?;
                    let url = format!("{}{}", peer.url.trim_end_matches('/'), prelude.path);
                    Some((url, body))
                });
                let task = tokio::spawn(relay(
                    self.routing.client().clone(),
                    url,
                    prelude,
                    peer.node.clone(),
                    self.headers.clone(),
                    self.sender.clone(),
                ));
                self.open.insert(peer.node, task);
            }
        }
        for task in self.open.values() {
            task.abort();
        }
    }
}

/// Sends the prelude (when there is one), then relays one peer's stream until it ends, fails
/// or falls silent.
async fn relay(
    client: reqwest::Client,
    url: String,
    prelude: Option<(String, Bytes)>,
    node: String,
    headers: HeaderMap,
    sender: mpsc::Sender<Bytes>,
) {
    if let Some((prelude_url, body)) = prelude {
        let sent = client
            .post(&prelude_url)
            .headers(headers.clone())
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send();
        match tokio::time::timeout(PRELUDE_TIMEOUT, sent).await {
            Ok(Ok(answer)) if answer.status().is_success() => {}
            Ok(Ok(answer)) => {
                debug!(peer = %node, status = answer.status().as_u16(), "bridge prelude refused");
            }
            Ok(Err(error)) => debug!(peer = %node, error = %error, "bridge prelude failed"),
            Err(_) => debug!(peer = %node, "bridge prelude timed out"),
        }
    }
    let response = match client.get(&url).headers(headers).send().await {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => {
            debug!(peer = %node, status = response.status().as_u16(), "bridged stream refused");
            return;
        }
        Err(error) => {
            debug!(peer = %node, error = %error, "bridged stream failed to open");
            return;
        }
    };
    info!(peer = %node, "bridged stream open");
    // Heartbeats are comments, which the event parser drops: silence is measured on bytes.
    let seen = Arc::new(std::sync::Mutex::new(tokio::time::Instant::now()));
    let stamp = seen.clone();
    let bytes = response.bytes_stream().inspect(move |_| {
        *stamp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tokio::time::Instant::now();
    });
    let mut events = bytes.eventsource();
    loop {
        let event = match tokio::time::timeout(ROUND, events.next()).await {
            Ok(Some(Ok(event))) => event,
            Ok(_) => {
                debug!(peer = %node, "bridged stream ended");
                return;
            }
            Err(_) => {
                let last = *seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if last.elapsed() > SILENCE {
                    debug!(peer = %node, "bridged stream silent; reopening it");
                    return;
                }
                continue;
            }
        };
        let frame = format!("event: {}\ndata: {}\n\n", event.event, event.data);
        if sender.send(Bytes::from(frame)).await.is_err() {
            return;
        }
    }
}
