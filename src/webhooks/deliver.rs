//! One subscription's delivery loop: resumes after the acknowledged position stored for it,
//! reads matching events from the log one page at a time ([`FeedReader`]), and POSTs them one by
//! one in position order, retrying each until the endpoint answers 2xx (at-least-once). The
//! acknowledged position is written to the store after deliveries (at most every
//! [`SAVE_EVERY`], and always before waiting), so a restart resends at most what was delivered
//! since the last save and loses nothing. A dead endpoint only holds one page in memory; its
//! backlog stays in the log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_actors::feed::FeedEvent;
use keel_actors::kernel::Kernel;
use tokio_util::sync::CancellationToken;

use super::config::{Start, Subscription};
use super::metrics::WebhookMetrics;
use super::sign::{SIGNATURE_HEADER, TIMESTAMP_HEADER, signature};
use crate::feed::{FeedReader, event_json};

/// Longest time between two saves of the acknowledged position while delivering.
pub const SAVE_EVERY: Duration = Duration::from_millis(200);
/// Delay before retrying a failed store read or write.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// What a delivery loop needs.
pub struct Delivery {
    /// The subscription.
    pub subscription: Arc<Subscription>,
    /// The kernel whose log is read.
    pub kernel: Kernel,
    /// HTTP client for the deliveries.
    pub client: reqwest::Client,
    /// Metrics.
    pub metrics: WebhookMetrics,
    /// Cancelled when the subscription is removed or changed, or the kernel stops.
    pub stop: CancellationToken,
}

impl Delivery {
    /// Runs until stopped.
    pub async fn run(self) {
        let Some(start) = self.start_position().await else {
            return;
        };
        let mut reader = FeedReader::new(
            &self.kernel,
            self.subscription.filter.clone(),
            start,
            crate::feed::reader::READ_BYTES,
        );
        let mut acked = start;
        let mut saved = start;
        let label = WebhookMetrics::label(&self.subscription.id);
        loop {
            if self.stop.is_cancelled() {
                break;
            }
            if reader.needs_read() {
                let events = match reader.read().await {
                    Ok(events) => events,
                    Err(error) => {
                        tracing::warn!(webhook.id = %self.subscription.id, error = %error, "webhook feed read failed");
                        if !self.pause(STORE_RETRY).await {
                            break;
                        }
                        continue;
                    }
                };
                self.metrics
                    .buffered
                    .get_or_create(&label)
                    .set(events.len() as i64);
                let mut last_save = Instant::now();
                for (index, event) in events.iter().enumerate() {
                    if !self.deliver(event).await {
                        self.save(acked, &mut saved).await;
                        return;
                    }
                    acked = event.position;
                    self.metrics
                        .buffered
                        .get_or_create(&label)
                        .set((events.len() - index - 1) as i64);
                    if last_save.elapsed() >= SAVE_EVERY {
                        self.save(acked, &mut saved).await;
                        last_save = Instant::now();
                    }
                }
                // Events the filter skipped are acknowledged too, so a restart does not scan them again.
                acked = acked.max(reader.cursor());
                self.update_lag(acked, None).await;
                continue;
            }
            self.save(acked, &mut saved).await;
            tokio::select! {
                () = self.stop.cancelled() => break,
                changed = reader.changed() => if !changed { break },
            }
        }
        self.save(acked, &mut saved).await;
    }

    /// Returns the stored position, or sets one from `start` for a new subscription. `None`
    /// when stopped first.
    async fn start_position(&self) -> Option<i64> {
        loop {
            let stored = self.kernel.webhook_positions().await.map(|positions| {
                positions
                    .into_iter()
                    .find(|(id, _)| *id == self.subscription.id)
                    .map(|(_, position)| position)
            });
            let position = match stored {
                Ok(Some(position)) => return Some(position),
                Ok(None) => match self.subscription.start {
                    Start::Beginning => Ok(0),
                    Start::Latest => self.kernel.head_position().await,
                },
                Err(error) => Err(error),
            };
            let saved = match position {
                Ok(position) => self
                    .kernel
                    .set_webhook_position(&self.subscription.id, position)
                    .await
                    .map(|()| position),
                Err(error) => Err(error),
            };
            match saved {
                Ok(position) => return Some(position),
                Err(error) => {
                    tracing::warn!(webhook.id = %self.subscription.id, error = %error, "webhook position unavailable");
                    if !self.pause(STORE_RETRY).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Delivers one event, retrying with backoff until a 2xx answer. Returns `false` when
    /// stopped first.
    async fn deliver(&self, event: &FeedEvent) -> bool {
        let subscription = &self.subscription;
        let body = event_json(event).to_string();
        let mut backoff = subscription.min_backoff;
        loop {
            let ok = self.attempt(event, &body).await;
            self.metrics.attempt(&subscription.id, ok);
            if ok {
                return true;
            }
            self.update_lag(event.position - 1, Some(event)).await;
            if !self.pause(backoff).await {
                return false;
            }
            backoff = (backoff * 2).min(subscription.max_backoff);
        }
    }

    /// One POST; `true` on a 2xx answer.
    async fn attempt(&self, event: &FeedEvent, body: &str) -> bool {
        let subscription = &self.subscription;
        let timestamp = chrono::Utc::now().timestamp();
        let request = self
            .client
            .post(&subscription.url)
            .timeout(subscription.timeout)
            .header("content-type", "application/json")
            .header("keel-webhook-id", subscription.id.as_str())
            .header("keel-event-id", event.event.id.as_str())
            .header("keel-event-position", event.position.to_string())
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(
                SIGNATURE_HEADER,
                signature(subscription.secret.as_bytes(), timestamp, body.as_bytes()),
            )
            .body(body.to_owned());
        let outcome = tokio::select! {
            () = self.stop.cancelled() => return false,
            outcome = request.send() => outcome,
        };
        match outcome {
            Ok(response) if response.status().is_success() => true,
            Ok(response) => {
                tracing::debug!(webhook.id = %subscription.id, status = response.status().as_u16(), "webhook delivery refused");
                false
            }
            Err(error) => {
                tracing::debug!(
                    webhook.id = %subscription.id,
                    origin = %crate::outbound::origin(&subscription.url),
                    error = %crate::outbound::describe(error),
                    "webhook delivery failed"
                );
                false
            }
        }
    }

    /// Saves `acked` when it moved past `saved`.
    async fn save(&self, acked: i64, saved: &mut i64) {
        if acked <= *saved {
            return;
        }
        match self
            .kernel
            .set_webhook_position(&self.subscription.id, acked)
            .await
        {
            Ok(()) => *saved = acked,
            // Kept in memory; the next save writes it (a crash before then only resends).
            Err(error) => {
                tracing::warn!(webhook.id = %self.subscription.id, error = %error, "webhook position not saved");
            }
        }
    }

    /// Updates the lag gauges; `waiting` is the event being retried, if any.
    async fn update_lag(&self, acked: i64, waiting: Option<&FeedEvent>) {
        let label = WebhookMetrics::label(&self.subscription.id);
        if let Ok(head) = self.kernel.head_position().await {
            self.metrics
                .lag_positions
                .get_or_create(&label)
                .set((head - acked).max(0));
        }
        let age = waiting.map_or(0.0, |event| {
            (chrono::Utc::now() - event.event.timestamp)
                .to_std()
                .map_or(0.0, |age| age.as_secs_f64())
        });
        self.metrics.lag_seconds.get_or_create(&label).set(age);
    }

    /// Sleeps `delay`; `false` when stopped first.
    async fn pause(&self, delay: Duration) -> bool {
        tokio::select! {
            () = self.stop.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }
}
