//! Roles, scopes and which role may use which route (docs/security.md has the table).

use std::fmt;

use axum::http::Method;
use keel_actors::policy::rules::Glob;
use serde::{Deserialize, Serialize};

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Keys and everything else.
    Admin,
    /// Create, cancel, signal, answer approvals, read everything.
    Operator,
    /// Streams, intents and step results of its agent ids; creations for them.
    Agent,
    /// Streams, capabilities, tools, started and results of its runner ids.
    Runner,
    /// Answers approvals; reads.
    Approver,
    /// Reads.
    Reader,
}

impl Role {
    /// Every role, in the order docs and tests list them.
    pub const ALL: [Role; 6] = [
        Role::Admin,
        Role::Operator,
        Role::Agent,
        Role::Runner,
        Role::Approver,
        Role::Reader,
    ];

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Agent => "agent",
            Role::Runner => "runner",
            Role::Approver => "approver",
            Role::Reader => "reader",
        }
    }

    /// Parses a lowercase name.
    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == text)
    }

    /// Whether this role reads executions, events, the feed and the console's lists.
    pub fn reads(self) -> bool {
        matches!(
            self,
            Role::Admin | Role::Operator | Role::Approver | Role::Reader
        )
    }

    /// Whether this role answers approvals (the approvals API and the `step.approve` /
    /// `step.deny` signals).
    pub fn answers_approvals(self) -> bool {
        matches!(self, Role::Admin | Role::Operator | Role::Approver)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a key is limited to. An empty list does not limit; agent keys need `agents` and runner
/// keys `runners` (checked when the key is created).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scopes {
    /// Agent-id globs an agent key serves and creates executions for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Runner-id globs a runner key serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runners: Vec<String>,
    /// Tool-id globs a runner key may advertise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// `key=value` labels (value `*`: any value) executions created with this key may carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

impl Scopes {
    /// Checks every glob and label pattern; the message names the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        for pattern in self.agents.iter().chain(&self.runners).chain(&self.tools) {
            Glob::new(pattern).map_err(|problem| format!("scope {pattern:?}: {problem}"))?;
        }
        for label in &self.labels {
            match label.split_once('=') {
                Some((key, _)) if !key.is_empty() => {}
                _ => return Err(format!("label scope {label:?} must be key=value")),
            }
        }
        Ok(())
    }

    /// Whether `agent_id` is one of the key's agents (any when unlimited).
    pub fn allows_agent(&self, agent_id: &str) -> bool {
        any_glob(&self.agents, agent_id)
    }

    /// Whether `runner_id` is one of the key's runners (any when unlimited).
    pub fn allows_runner(&self, runner_id: &str) -> bool {
        any_glob(&self.runners, runner_id)
    }

    /// Whether the key may serve `tool_id` (any when unlimited).
    pub fn allows_tool(&self, tool_id: &str) -> bool {
        any_glob(&self.tools, tool_id)
    }

    /// Whether a creation may carry the label `key` = `value`.
    pub fn allows_label(&self, key: &str, value: &str) -> bool {
        self.labels.is_empty()
            || self
                .labels
                .iter()
                .any(|pattern| match pattern.split_once('=') {
                    Some((k, v)) => k == key && (v == "*" || v == value),
                    None => false,
                })
    }
}

fn any_glob(patterns: &[String], text: &str) -> bool {
    patterns.is_empty()
        || patterns
            .iter()
            .any(|pattern| Glob::new(pattern).is_ok_and(|glob| glob.is_match(text)))
}

/// Who may call a route, before its handler looks at the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, readiness, the console's sign-in page and assets).
    Public,
    /// Roles that read.
    Read,
    /// Admin and operator.
    Operate,
    /// Admin, operator, and agent keys for their agents (the handler checks the body).
    Create,
    /// Admin, operator, and approvers for `step.approve`/`step.deny` (the handler checks).
    Signal,
    /// Admin, operator, approver.
    Approve,
    /// Admin, and agent keys for the `agent_id` of the query.
    AgentStream,
    /// Admin and agent keys (the session names the execution).
    AgentWork,
    /// Admin, and runner keys for the `runner_id` of the query.
    RunnerStream,
    /// Admin, and runner keys for the `{id}` of the path.
    RunnerPath,
    /// Admin, operator, and runner keys for the `{id}` of the path (unregister).
    RunnerRemove,
    /// Admin and runner keys (the handler checks the body's `runner_id`).
    RunnerBody,
    /// Reading roles, agents and runners (the tool catalogue).
    Tools,
    /// Admin only (keys).
    Admin,
}

/// The access rule of `route` (the matched path, e.g. `/v0/runners/{id}/results`).
pub fn access(method: &Method, route: &str) -> Access {
    let route = route.strip_suffix('/').unwrap_or(route);
    let get = method == Method::GET;
    match route {
        "/v0/health" | "/v0/ready" => Access::Public,
        "/v0/executions" if !get => Access::Create,
        "/v0/executions/{id}/cancel" | "/v0/executions/{id}/steps/{step_id}/reconcile" => {
            Access::Operate
        }
        "/v0/executions/{id}/signal" => Access::Signal,
        "/v0/agents/stream" => Access::AgentStream,
        "/v0/agents/intent"
        | "/v0/agents/step-result"
        | "/v0/executions/{id}/llm/{provider}/v1/chat/completions"
        | "/v0/executions/{id}/llm/{provider}/v1/embeddings"
        | "/v0/executions/{id}/llm/{provider}/v1/messages"
        | "/v0/executions/{id}/llm/{provider}/{*rest}"
        | "/v0/executions/{id}/mcp" => Access::AgentWork,
        "/v0/runners/stream" => Access::RunnerStream,
        "/v0/runners/steps/{step_id}/started" | "/v0/runners/steps/{step_id}/progress" => {
            Access::RunnerBody
        }
        "/v0/runners/{id}" if method == Method::DELETE => Access::RunnerRemove,
        "/v0/runners/{id}/results"
        | "/v0/runners/{id}/capabilities"
        | "/v0/runners/{id}/tools"
        | "/v0/runners/{id}/tool-changes" => Access::RunnerPath,
        "/v0/runners/{id}/tool-changes/accept" => Access::Operate,
        "/v0/tools" => Access::Tools,
        "/v0/approvals" if !get => Access::Approve,
        "/v0/approvals/{id}" => Access::Approve,
        "/v0/keys" | "/v0/keys/{name}" | "/v0/keys/{name}/rotate" => Access::Admin,
        _ if get => Access::Read,
        _ => Access::Admin,
    }
}

/// Why a route refuses a role, when it does (the handler's body checks come later).
pub fn refusal(access: Access, role: Role) -> Option<&'static str> {
    let allowed = match access {
        Access::Public => true,
        Access::Read => role.reads(),
        Access::Operate => matches!(role, Role::Admin | Role::Operator),
        Access::Create => matches!(role, Role::Admin | Role::Operator | Role::Agent),
        Access::Signal | Access::Approve => role.answers_approvals(),
        Access::AgentStream | Access::AgentWork => matches!(role, Role::Admin | Role::Agent),
        Access::RunnerStream | Access::RunnerPath | Access::RunnerBody => {
            matches!(role, Role::Admin | Role::Runner)
        }
        Access::RunnerRemove => matches!(role, Role::Admin | Role::Operator | Role::Runner),
        Access::Tools => true,
        Access::Admin => role == Role::Admin,
    };
    (!allowed).then_some("the key's role does not allow this route")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_limit_only_when_set() {
        let open = Scopes::default();
        assert!(open.allows_agent("a") && open.allows_label("team", "x"));
        let scoped = Scopes {
            agents: vec!["billing-*".to_owned()],
            labels: vec!["team=billing".to_owned(), "ticket=*".to_owned()],
            ..Scopes::default()
        };
        assert!(scoped.allows_agent("billing-eu"));
        assert!(!scoped.allows_agent("support"));
        assert!(scoped.allows_label("team", "billing"));
        assert!(!scoped.allows_label("team", "support"));
        assert!(scoped.allows_label("ticket", "T-1"));
        assert!(!scoped.allows_label("other", "x"));
        assert!(
            Scopes {
                tools: vec!["[".to_owned()],
                ..Scopes::default()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn every_write_route_is_closed_to_readers() {
        for (method, route) in [
            (Method::POST, "/v0/executions"),
            (Method::POST, "/v0/executions/{id}/cancel"),
            (Method::POST, "/v0/executions/{id}/signal"),
            (Method::POST, "/v0/agents/intent"),
            (Method::POST, "/v0/runners/{id}/results"),
            (Method::POST, "/v0/keys"),
            (Method::POST, "/v0/approvals/{id}"),
            (Method::POST, "/v0/something/new"),
        ] {
            assert!(
                refusal(access(&method, route), Role::Reader).is_some(),
                "{method} {route}"
            );
        }
        assert!(refusal(access(&Method::GET, "/v0/executions"), Role::Reader).is_none());
        assert!(refusal(access(&Method::GET, "/v0/executions"), Role::Agent).is_some());
    }

    #[test]
    fn the_mcp_endpoint_is_agent_work_whatever_the_method() {
        for method in [Method::GET, Method::POST, Method::DELETE] {
            let rule = access(&method, "/v0/executions/{id}/mcp");
            assert_eq!(rule, Access::AgentWork, "{method}");
            for role in [Role::Reader, Role::Operator, Role::Approver, Role::Runner] {
                assert!(refusal(rule, role).is_some(), "{method} {role}");
            }
            assert!(refusal(rule, Role::Agent).is_none() && refusal(rule, Role::Admin).is_none());
        }
    }
}
