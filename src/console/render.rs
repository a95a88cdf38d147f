//! Small pieces of markup the views share: status badges that carry their meaning in text and
//! a symbol (colour only adds to it), times, JSON blocks and the view response itself.

use axum::response::{Html, IntoResponse, Response};
use keel_actors::status::ExecutionStatus;
use keel_actors::time::{self, Timestamp};
use maud::{Markup, html};
use serde_json::Value;

use super::shell::harden;

/// A view: server-rendered HTML the shell's script inserts into the page.
pub fn view(markup: Markup) -> Response {
    harden(Html(markup.into_string()).into_response())
}

/// The symbol shown next to a status (the word is always shown too).
pub fn symbol(status: ExecutionStatus) -> &'static str {
    match status {
        ExecutionStatus::Pending => "○",
        ExecutionStatus::Running => "▶",
        ExecutionStatus::Blocked => "‖",
        ExecutionStatus::Completed => "✔",
        ExecutionStatus::Failed => "✖",
        ExecutionStatus::Cancelled => "⊘",
    }
}

/// A status badge: symbol and word, coloured by class.
pub fn badge(status: ExecutionStatus) -> Markup {
    html! {
        span class={ "badge s-" (status.as_str()) } data-status=(status.as_str()) {
            span aria-hidden="true" { (symbol(status)) } " " (status.as_str())
        }
    }
}

/// A time element: machine-readable RFC 3339, shown as UTC to the second.
pub fn when(at: &Timestamp) -> Markup {
    html! {
        time datetime=(time::format(at)) { (at.format("%Y-%m-%d %H:%M:%S UTC").to_string()) }
    }
}

/// Pretty-printed JSON in a `pre`.
pub fn json_block(value: &Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre class="json" { (text) } }
}

/// A compact one-line JSON preview, cut to `max` characters.
pub fn json_preview(value: &Value, max: usize) -> String {
    let text = value.to_string();
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}
