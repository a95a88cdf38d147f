//! Answering approvals (docs/security.md): `POST /v0/approvals/{id}` and the batch
//! `POST /v0/approvals`, and the checks every answer goes through — the rebuno
//! `step.approve` signal included: only roles that answer approvals (`auth.rs`), never the
//! key that created the execution, once (a second answer is 409, from the state machine), and
//! the answering principal recorded in the signal's payload (`answered_by`).
//!
//! An approval's id is `<execution id>.<step id>` (both kernel-made UUIDs), as
//! `GET /v0/approvals` lists it.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use keel_actors::ids::ExecutionId;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::read_json;
use super::error::ApiError;
use crate::auth::{Principal, Role};
use keel_actors::approvals::Approvers;

/// Most answers one batch may carry.
const MAX_BATCH: usize = 100;

/// One answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// `<execution id>.<step id>` (batch only; the path names it otherwise).
    #[serde(default)]
    id: Option<String>,
    /// `approve` or `deny`.
    decision: String,
    /// Why (recorded; a deny reason reaches the agent).
    #[serde(default)]
    reason: Option<String>,
}

/// Body of the batch answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    answers: Vec<Answer>,
}

/// Splits an approval id.
fn split_id(id: &str) -> Result<(ExecutionId, String), ApiError> {
    super::text::refuse_nul("approval id", id)?;
    match id.split_once('.') {
        Some((execution, step)) if !execution.is_empty() && !step.is_empty() => {
            Ok((ExecutionId::new(execution.to_owned()), step.to_owned()))
        }
        _ => Err(ApiError::validation(
            "approval id must be <execution_id>.<step_id>",
        )),
    }
}

/// Why a key may not answer an approval ([`refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The rule names other approvers.
    NotAnApprover,
    /// The key created the execution and the rule does not allow self-approval.
    OwnExecution,
}

impl Refusal {
    /// The 403's message.
    pub fn message(self) -> &'static str {
        match self {
            Self::NotAnApprover => "forbidden: this key is not among the approvers the rule names",
            Self::OwnExecution => {
                "forbidden: a key cannot answer an approval of an execution it created"
            }
        }
    }
}

/// Who may answer an approval, the one check behind the approvals API, the `step.approve`
/// signal and the console's approve/deny controls: a key among the rule's `approvers` (any
/// key, when they name nobody), and not the key that created the execution (`creator`)
/// unless the rule allows `self_approval`. `keyed` is false for the shared bearer token and
/// open kernels, which have no identity to tell apart and are not checked.
pub fn refusal(
    keyed: bool,
    role: Role,
    name: &str,
    approvers: &Approvers,
    self_approval: bool,
    creator: Option<&str>,
) -> Option<Refusal> {
    if !keyed {
        None
    } else if !approvers.admit(role.as_str(), name) {
        Some(Refusal::NotAnApprover)
    } else if !self_approval && creator == Some(name) {
        Some(Refusal::OwnExecution)
    } else {
        None
    }
}

/// Checks that this key may answer the approval of `step_id` ([`refusal`], against the
/// execution's state).
pub async fn check_answerer(
    state: &AppState,
    principal: &Principal,
    execution_id: &ExecutionId,
    step_id: Option<&str>,
) -> Result<(), ApiError> {
    let keyed = principal.revoked.is_some();
    if !keyed {
        return Ok(());
    }
    // The execution's state (in memory, or rebuilt once), not a scan of its log.
    // (No step id: no step's request, only the creator.)
    let step_id = keel_actors::ids::StepId::new(step_id.unwrap_or_default().to_owned());
    let facts = state.kernel.approval_facts(execution_id, &step_id).await?;
    let (approvers, self_approval) = facts
        .request
        .map(|request| {
            (
                request.approvers.clone().unwrap_or_default(),
                request.self_approval,
            )
        })
        .unwrap_or_default();
    let refused = refusal(
        keyed,
        principal.role,
        &principal.name,
        &approvers,
        self_approval,
        facts.created_by.as_deref(),
    );
    match refused {
        None => Ok(()),
        Some(refused) => {
            let why = match refused {
                Refusal::NotAnApprover => "answer refused: not an approver of this rule",
                Refusal::OwnExecution => "self-approval refused",
            };
            tracing::warn!(key = %principal.name, execution.id = %execution_id, "{why}");
            Err(forbidden(refused.message()))
        }
    }
}

fn forbidden(message: &str) -> ApiError {
    ApiError::Forbidden {
        rule_id: String::new(),
        message: message.to_owned(),
    }
}

/// Adds who answered to a `step.approve` payload (an object; anything else is left for the
/// state machine to refuse).
pub fn with_answerer(mut payload: Value, principal: &Principal) -> Value {
    if let Value::Object(object) = &mut payload {
        object.insert("answered_by".to_owned(), json!(&*principal.name));
    }
    payload
}

/// Answers one approval; returns what was recorded.
async fn answer(
    state: &AppState,
    principal: &Principal,
    id: &str,
    answer: &Answer,
) -> Result<Value, ApiError> {
    let (execution_id, step_id) = split_id(id)?;
    let approved = match answer.decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return Err(ApiError::validation(format_args!(
                "decision must be approve or deny, not {other:?}"
            )));
        }
    };
    let reason = answer.reason.clone().filter(|reason| !reason.is_empty());
    if reason.as_ref().is_some_and(|reason| reason.len() > 4096) {
        return Err(ApiError::validation("reason is longer than 4096 bytes"));
    }
    check_answerer(state, principal, &execution_id, Some(&step_id)).await?;
    let mut payload = json!({"step_id": step_id, "approved": approved});
    if let Some(reason) = &reason {
        payload["reason"] = json!(reason);
    }
    let payload = with_answerer(payload, principal);
    state
        .kernel
        .signal_from(
            &execution_id,
            "step.approve".to_owned(),
            payload,
            principal.recorded_name(),
        )
        .await?;
    tracing::info!(key = %principal.name, approval = %id, approved, "approval answered");
    Ok(json!({
        "id": id,
        "execution_id": execution_id,
        "step_id": step_id,
        "approved": approved,
        "reason": reason,
        "answered_by": &*principal.name,
    }))
}

/// `POST /v0/approvals/{id}` `{"decision": "approve"|"deny", "reason"}`.
pub async fn answer_one(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let id = super::executions::path_id(path)?;
    let principal = super::keys::principal_of(&request);
    let body: Answer = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    if body.id.as_ref().is_some_and(|given| *given != id) {
        return Err(ApiError::validation(
            "the body's id differs from the path's",
        ));
    }
    Ok(Json(
        json!({ "approval": answer(&state, &principal, &id, &body).await? }),
    ))
}

/// `POST /v0/approvals` `{"answers": [{"id", "decision", "reason"}, …]}`: several approvals
/// (parallel tool calls) in one request, each answered on its own: the result lists each
/// one's outcome (`status` 200, or the error's status and envelope).
pub async fn answer_many(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let principal = super::keys::principal_of(&request);
    let body: Batch = read_json(
        request,
        state.settings.body_limit,
        state.settings.body_read_timeout,
    )
    .await?;
    if body.answers.is_empty() || body.answers.len() > MAX_BATCH {
        return Err(ApiError::validation(format_args!(
            "answers must hold 1 to {MAX_BATCH} answers"
        )));
    }
    let Some(missing) = body.answers.iter().position(|answer| answer.id.is_none()) else {
        let mut results = Vec::with_capacity(body.answers.len());
        for item in &body.answers {
            let id = item.id.clone().unwrap_or_default();
            let result = match answer(&state, &principal, &id, item).await {
                Ok(recorded) => json!({"id": id, "status": 200, "approval": recorded}),
                Err(error) => {
                    let (status, code) = error.status_and_code();
                    let message = if status.is_server_error() {
                        "service unavailable".to_owned()
                    } else {
                        error.to_string()
                    };
                    json!({"id": id, "status": status.as_u16(), "code": code, "error": message})
                }
            };
            results.push(result);
        }
        return Ok(Json(json!({ "results": results })));
    };
    Err(ApiError::validation(format_args!(
        "answers[{missing}].id is required"
    )))
}
