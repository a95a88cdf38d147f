//! The admin API of API keys (src/http/keys.rs) and the approval answers
//! (src/http/approvals.rs); docs/security.md: paths and schemas.

#![allow(dead_code)] // The functions and types only carry the attributes.

use utoipa::ToSchema;

use super::schemas::Error;

/// Limits of a key; an empty list does not limit.
#[derive(ToSchema)]
pub struct KeyScopes {
    /// Agent-id globs (agent keys: required).
    agents: Option<Vec<String>>,
    /// Runner-id globs (runner keys: required).
    runners: Option<Vec<String>>,
    /// Tool-id globs a runner key may serve.
    tools: Option<Vec<String>>,
    /// `key=value` labels (`key=*`: any value) its creations may carry.
    labels: Option<Vec<String>>,
}

/// Body of `POST /v0/keys`.
#[derive(ToSchema)]
pub struct NewKey {
    /// Unique: 1-64 letters, digits or `-_.@:`.
    name: String,
    /// `admin`, `operator`, `agent`, `runner`, `approver` or `reader`.
    role: String,
    scopes: Option<KeyScopes>,
    /// RFC 3339; the key stops working then.
    expires_at: Option<String>,
}

/// A key as listed (never its secret nor its hash).
#[derive(ToSchema)]
pub struct Key {
    /// Public id (the part after `keel_`).
    id: String,
    name: String,
    role: String,
    scopes: KeyScopes,
    /// `active`, `revoked` or `expired`.
    state: String,
    created_at: String,
    /// Principal that created it.
    created_by: String,
    expires_at: Option<String>,
    revoked_at: Option<String>,
    rotated_at: Option<String>,
    /// Last authenticated request (written every few seconds).
    last_used_at: Option<String>,
}

/// Answer of `GET /v0/keys`.
#[derive(ToSchema)]
pub struct KeyList {
    /// By name.
    keys: Vec<Key>,
}

/// A new or rotated key: the only response that carries its secret.
#[derive(ToSchema)]
pub struct IssuedKey {
    key: Key,
    /// `keel_<id>_<secret>`: shown once, stored only as a hash.
    secret: String,
}

/// A revoked key.
#[derive(ToSchema)]
pub struct RevokedKey {
    key: Key,
}

#[utoipa::path(get, path = "/v0/keys", tag = "keys",
    responses(
        (status = 200, description = "Every key, revoked and expired ones included", body = KeyList),
        (status = 401, description = "Missing, unknown, revoked or expired key", body = Error),
        (status = 403, description = "Not an admin key", body = Error),
    ))]
fn list_keys() {}

#[utoipa::path(post, path = "/v0/keys", tag = "keys", request_body = NewKey,
    responses(
        (status = 201, description = "Created; the secret is in this response only", body = IssuedKey),
        (status = 400, description = "Invalid name, role, scope or expiry", body = Error),
        (status = 401, description = "Missing, unknown, revoked or expired key", body = Error),
        (status = 403, description = "Not an admin key", body = Error),
        (status = 409, description = "The name is taken", body = Error),
    ))]
fn create_key() {}

#[utoipa::path(post, path = "/v0/keys/{name}/rotate", tag = "keys",
    params(("name" = String, Path, description = "Key name")),
    responses(
        (status = 200, description = "A new secret; the old one stops working and its streams end", body = IssuedKey),
        (status = 400, description = "The key is revoked", body = Error),
        (status = 401, description = "Missing, unknown, revoked or expired key", body = Error),
        (status = 403, description = "Not an admin key", body = Error),
        (status = 404, description = "No key of that name", body = Error),
    ))]
fn rotate_key() {}

#[utoipa::path(delete, path = "/v0/keys/{name}", tag = "keys",
    params(("name" = String, Path, description = "Key name")),
    responses(
        (status = 200, description = "Revoked (kept, listed as revoked); its streams end", body = RevokedKey),
        (status = 401, description = "Missing, unknown, revoked or expired key", body = Error),
        (status = 403, description = "Not an admin key", body = Error),
        (status = 404, description = "No key of that name", body = Error),
    ))]
fn revoke_key() {}

/// One answer to an approval.
#[derive(ToSchema)]
pub struct ApprovalAnswer {
    /// `<execution id>.<step id>` (batch only).
    id: Option<String>,
    /// `approve` or `deny`.
    decision: String,
    /// Recorded; a deny reason is sent to the agent.
    reason: Option<String>,
}

/// Body of `POST /v0/approvals`.
#[derive(ToSchema)]
pub struct ApprovalAnswers {
    /// 1 to 100 answers, each applied on its own.
    answers: Vec<ApprovalAnswer>,
}

/// What an answer recorded.
#[derive(ToSchema)]
pub struct AnsweredApproval {
    id: String,
    execution_id: String,
    step_id: String,
    approved: bool,
    reason: Option<String>,
    /// Principal that answered.
    answered_by: String,
}

/// Answer of `POST /v0/approvals/{id}`.
#[derive(ToSchema)]
pub struct ApprovalAnswered {
    approval: AnsweredApproval,
}

/// One outcome of a batch.
#[derive(ToSchema)]
pub struct ApprovalOutcome {
    id: String,
    /// 200, or the status the answer alone would have had (403, 404, 409, ...).
    status: u16,
    approval: Option<AnsweredApproval>,
    code: Option<String>,
    error: Option<String>,
}

/// Answer of `POST /v0/approvals`.
#[derive(ToSchema)]
pub struct ApprovalOutcomes {
    results: Vec<ApprovalOutcome>,
}

#[utoipa::path(post, path = "/v0/approvals/{id}", tag = "approvals", request_body = ApprovalAnswer,
    params(("id" = String, Path, description = "`<execution id>.<step id>`")),
    responses(
        (status = 200, description = "Answered; the agent is told", body = ApprovalAnswered),
        (status = 400, description = "Invalid id, decision or reason; or the step is not the one waiting", body = Error),
        (status = 401, description = "Missing, unknown, revoked or expired key", body = Error),
        (status = 403, description = "The key may not answer approvals, or it created the execution", body = Error),
        (status = 404, description = "No such execution", body = Error),
        (status = 409, description = "Already answered, or the execution ended", body = Error),
    ))]
fn answer_approval() {}

#[utoipa::path(post, path = "/v0/approvals", tag = "approvals", request_body = ApprovalAnswers,
    responses(
        (status = 200, description = "Each answer's outcome", body = ApprovalOutcomes),
        (status = 400, description = "No answers, too many, or one without an id", body = Error),
        (status = 401, description = "Missing, unknown, revoked or expired key", body = Error),
        (status = 403, description = "The key may not answer approvals", body = Error),
    ))]
fn answer_approvals() {}
