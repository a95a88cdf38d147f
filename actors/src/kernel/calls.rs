//! Calls into the actors on behalf of a request: an execution actor (rebuilt from the store
//! if it is passivated) or an agent group, each with the call timeout. The session errors of
//! WIRE.md §9.2 are mapped here.

use ractor::{ActorRef, RpcReplyPort};
use serde_json::Value;

use super::context::call;
use super::handle::Kernel;
use super::types::KernelError;
use crate::agent_group::{AgentGroupMsg, AgentSupervisorMsg};
use crate::events::LlmCall;
use crate::execution::machine::Reconciliation;
use crate::execution::{
    Capabilities, ExecutionMsg, Intent, IntentReply, LlmAdmission, Rejection, StepOutcome,
    StepResultReply,
};
use crate::guardrails::reservations::LlmEstimate;
use crate::ids::{AgentId, ExecutionId, SessionId, StepId};
use crate::store::ExecutionRow;

impl Kernel {
    /// Returns an execution's projection (`Rejected(ExecutionNotFound)` when unknown).
    pub async fn execution(&self, id: &ExecutionId) -> Result<ExecutionRow, KernelError> {
        self.ctx
            .store
            .execution(id)
            .await?
            .ok_or_else(|| Rejection::ExecutionNotFound(id.to_string()).into())
    }

    /// Whether `session_id` is the live session of `execution_id` (the LLM gateway's proof that
    /// a caller holds the execution).
    pub fn session_holds(&self, session_id: &SessionId, execution_id: &ExecutionId) -> bool {
        self.ctx.session_owner(session_id).as_ref() == Some(execution_id)
    }

    /// Asks an execution whether a model call of `model_id` (`provider/model`) may be
    /// forwarded now. With `ask_approval`, a call over a `require_approval` budget blocks the
    /// execution on a raise ([`LlmAdmission::AwaitingApproval`]).
    pub async fn admit_llm_call(
        &self,
        id: &ExecutionId,
        model_id: &str,
        ask_approval: bool,
        estimate: &LlmEstimate,
    ) -> Result<LlmAdmission, KernelError> {
        self.ctx
            .ask_execution(id, |reply| ExecutionMsg::AdmitLlmCall {
                model_id: model_id.to_owned(),
                ask_approval,
                estimate: estimate.clone(),
                reply,
            })
            .await
    }

    /// Ends the execution's budget wait that no operator answered in time (nothing when none
    /// is pending).
    pub async fn end_budget_wait(&self, id: &ExecutionId) -> Result<(), KernelError> {
        self.ask(id, |reply| ExecutionMsg::EndBudgetWait { reply })
            .await
    }

    /// Records a finished model call on its execution (`llm.called`; `None`: a call that never
    /// reached the provider) and releases its reservation.
    pub async fn record_llm_call(
        &self,
        id: &ExecutionId,
        call: Option<LlmCall>,
        reservation: Option<u64>,
    ) -> Result<(), KernelError> {
        let call = call.map(Box::new);
        self.ask(id, |reply| ExecutionMsg::RecordLlmCall {
            call: call.clone(),
            reservation,
            reply,
        })
        .await
    }

    /// Returns what an answer to the approval of `step_id` is checked against (the
    /// execution's creator and the approval's terms), from the execution's state.
    pub async fn approval_facts(
        &self,
        id: &ExecutionId,
        step_id: &StepId,
    ) -> Result<crate::execution::ApprovalFacts, KernelError> {
        self.ask(id, |reply| ExecutionMsg::GetApproval {
            step_id: step_id.clone(),
            reply,
        })
        .await
    }

    /// Cancels an execution; returns its projection afterwards.
    pub async fn cancel(&self, id: &ExecutionId) -> Result<ExecutionRow, KernelError> {
        self.ask(id, |reply| ExecutionMsg::Cancel { reply }).await
    }

    /// Answers a step whose outcome is unknown (`step.outcome_unknown`) on behalf of `by`.
    pub async fn reconcile_step(
        &self,
        id: &ExecutionId,
        step_id: &StepId,
        answer: Reconciliation,
        by: Option<String>,
    ) -> Result<(), KernelError> {
        self.ask(id, |reply| ExecutionMsg::ReconcileStep {
            step_id: step_id.clone(),
            answer: answer.clone(),
            by: by.clone(),
            reply,
        })
        .await
    }

    /// Sends a signal to an execution.
    pub async fn signal(
        &self,
        id: &ExecutionId,
        signal_type: String,
        payload: Value,
    ) -> Result<(), KernelError> {
        self.signal_from(id, signal_type, payload, None).await
    }

    /// Sends a signal to an execution on behalf of `sent_by` (recorded on its
    /// `signal.received`).
    pub async fn signal_from(
        &self,
        id: &ExecutionId,
        signal_type: String,
        payload: Value,
        sent_by: Option<String>,
    ) -> Result<(), KernelError> {
        self.ask(id, |reply| ExecutionMsg::DeliverSignal {
            signal_type: signal_type.clone(),
            payload: payload.clone(),
            sent_by: sent_by.clone(),
            reply,
        })
        .await
    }

    /// Submits an agent intent (from an agent that speaks the rebuno protocol only).
    pub async fn submit_intent(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        intent: Intent,
    ) -> Result<IntentReply, KernelError> {
        self.submit_intent_with(execution_id, session_id, intent, Capabilities::default())
            .await
    }

    /// Submits an agent intent from an agent with `capabilities` (`Keel-Capabilities`).
    pub async fn submit_intent_with(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        intent: Intent,
        capabilities: Capabilities,
    ) -> Result<IntentReply, KernelError> {
        let owner = self.ctx.session_owner(session_id);
        self.ask(execution_id, |reply| ExecutionMsg::SubmitIntent {
            session_id: session_id.clone(),
            session_owner: owner.clone(),
            intent: intent.clone(),
            capabilities,
            reply,
        })
        .await
        .map_err(|error| self.session_error(error, execution_id, session_id))
    }

    /// Records a step result reported by the agent holding the session (an agent that speaks
    /// the rebuno protocol only).
    pub async fn agent_step_result(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        outcome: StepOutcome,
    ) -> Result<(), KernelError> {
        self.agent_step_result_with(execution_id, session_id, outcome, Capabilities::default())
            .await
            .map(drop)
    }

    /// Records a step result reported by the agent holding the session, an agent with
    /// `capabilities` (`Keel-Capabilities`).
    pub async fn agent_step_result_with(
        &self,
        execution_id: &ExecutionId,
        session_id: &SessionId,
        outcome: StepOutcome,
        capabilities: Capabilities,
    ) -> Result<StepResultReply, KernelError> {
        let owner = self.ctx.session_owner(session_id);
        self.ask(execution_id, |reply| ExecutionMsg::ReportStepResult {
            session_id: session_id.clone(),
            session_owner: owner.clone(),
            outcome: outcome.clone(),
            capabilities,
            reply,
        })
        .await
        .map_err(|error| self.session_error(error, execution_id, session_id))
    }

    /// Calls an execution actor, rebuilding it from the store if it is passivated.
    pub(super) async fn ask<T: Send + 'static>(
        &self,
        id: &ExecutionId,
        build: impl Fn(RpcReplyPort<Result<T, KernelError>>) -> ExecutionMsg,
    ) -> Result<T, KernelError> {
        self.ctx.ask_execution(id, build).await?
    }

    /// Returns the agent group of `agent_id`, spawning it if needed.
    pub(super) async fn group(
        &self,
        agent_id: &AgentId,
    ) -> Result<ActorRef<AgentGroupMsg>, KernelError> {
        let agents = self
            .ctx
            .agents()
            .ok_or_else(|| KernelError::Unavailable("agent supervisor is not running".into()))?;
        let message = |reply| AgentSupervisorMsg::GetOrSpawn(agent_id.clone(), reply);
        call(&agents, message, self.timeout(), "agent supervisor")
            .await?
            .ok_or_else(|| KernelError::Unavailable("agent group could not start".into()))
    }

    /// Maps an unknown execution addressed with a session into the session error of WIRE.md §9.2.
    fn session_error(
        &self,
        error: KernelError,
        execution_id: &ExecutionId,
        session_id: &SessionId,
    ) -> KernelError {
        match error {
            KernelError::Rejected(Rejection::ExecutionNotFound(_)) => {
                match self.ctx.session_owner(session_id) {
                    Some(_) => Rejection::SessionMismatch {
                        session: session_id.to_string(),
                        execution: execution_id.to_string(),
                    }
                    .into(),
                    None => Rejection::SessionNotFound(session_id.to_string()).into(),
                }
            }
            other => other,
        }
    }
}
