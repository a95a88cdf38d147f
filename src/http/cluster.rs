//! `GET /v0/cluster`: the kernels of the cluster and the partitions each holds, as this kernel's
//! last view shows them (`src/cluster/view.rs`); `{"mode": "single"}` on a one-kernel database.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;

/// The handler.
pub async fn view(State(state): State<AppState>) -> Json<Value> {
    Json(match &state.settings.cluster {
        Some(routing) => serde_json::to_value(routing.view()).unwrap_or_else(|_| json!({})),
        None => json!({ "mode": "single" }),
    })
}
