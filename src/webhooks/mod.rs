//! Durable webhook subscriptions (docs/events.md): matching events of the kernel-wide feed are
//! POSTed, signed, in position order, at least once, to each subscription's endpoint; each
//! subscription's acknowledged position is kept in the store (`webhook_positions`).

pub mod config;
mod deliver;
pub mod metrics;
mod service;
pub mod sign;

pub use config::{Start, Subscription, load_file};
pub use service::{Elected, WebhookOptions, WebhookService};
