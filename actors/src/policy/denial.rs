//! Who refused a tool call. The policy actor and the execution set the kind where they make the
//! denial; the agent's error text, the `intent.denied` reason and the intent metrics are derived
//! from it, so no caller reads the kind back out of the reason text.
//!
//! The one exception is an `intent.denied` event read back from the log: the wire has no kind
//! field, so [`DenialKind::from_stored`] recovers it from the reason (the texts the guardrails
//! write begin with a fixed phrase).

/// What denied a tool call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DenialKind {
    /// A policy rule (or the engine's default) decided `deny`.
    #[default]
    Rule,
    /// The matching rule's rate limit was reached.
    RateLimited,
    /// The execution's budget would be exceeded.
    BudgetExceeded,
    /// The tool's circuit breaker is open (or half-open with its probe running).
    CircuitOpen,
    /// The tool is at its `max_concurrent_steps` (a local call).
    ConcurrencyLimit,
    /// A `pre_tool` hook aborted the call.
    Hook,
}

/// Reason prefixes of the guardrail denials whose text names itself.
const SELF_NAMED: [(&str, DenialKind); 4] = [
    ("rate limit exceeded", DenialKind::RateLimited),
    ("budget exceeded", DenialKind::BudgetExceeded),
    ("circuit open", DenialKind::CircuitOpen),
    ("circuit half-open", DenialKind::CircuitOpen),
];

impl DenialKind {
    /// Returns the `decision` label of `keel_intents_total` for a denial of this kind.
    pub fn intent_decision(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::BudgetExceeded => "budget_exceeded",
            Self::CircuitOpen => "circuit_open",
            Self::Rule | Self::ConcurrencyLimit | Self::Hook => "denied",
        }
    }

    /// Returns whether the reason names the guardrail itself: the agent's error text is then
    /// the reason as is, not `policy denied: <reason>`.
    pub fn names_itself(self) -> bool {
        matches!(
            self,
            Self::RateLimited | Self::BudgetExceeded | Self::CircuitOpen
        )
    }

    /// Returns the text of a denial as the agent receives it.
    pub fn agent_text(self, reason: &str, rule_id: &str) -> String {
        if self.names_itself() {
            format!("{reason} (rule: {rule_id})")
        } else {
            format!("policy denied: {reason} (rule: {rule_id})")
        }
    }

    /// Recovers the kind of a denial stored in an `intent.denied` event (which carries only the
    /// reason and the rule id): the fixed phrase a guardrail's reason begins with, else a hook
    /// (rule id `hook:<id>`), else a rule. Gives the agent's text of every stored denial exactly
    /// as the kernel first wrote it.
    pub fn from_stored(reason: &str, rule_id: &str) -> Self {
        if let Some((_, kind)) = SELF_NAMED
            .iter()
            .find(|(prefix, _)| reason.starts_with(prefix))
        {
            *kind
        } else if reason.starts_with("concurrency limit:") {
            Self::ConcurrencyLimit
        } else if rule_id.starts_with("hook:") {
            Self::Hook
        } else {
            Self::Rule
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DenialKind::{self, *};

    #[test]
    fn stored_denials_read_back_as_the_kind_that_made_them() {
        for (reason, rule_id, kind) in [
            ("rate limit exceeded: max 2 per 1m", "r", RateLimited),
            (
                "budget exceeded: max_tool_calls 3 reached for tool x",
                "r",
                BudgetExceeded,
            ),
            (
                "circuit open for tool pay: 3 failures within 1m",
                "r",
                CircuitOpen,
            ),
            (
                "circuit half-open for tool pay: a probe call is running",
                "r",
                CircuitOpen,
            ),
            (
                "concurrency limit: max_concurrent_steps 1 reached",
                "r",
                ConcurrencyLimit,
            ),
            ("not on fridays", "hook:audit", Hook),
            ("No policy engine configured", "secure-default", Rule),
            // A rule's own reason that merely mentions a guardrail is the rule's.
            ("over the rate limit exceeded", "r", Rule),
        ] {
            assert_eq!(DenialKind::from_stored(reason, rule_id), kind, "{reason}");
        }
    }

    #[test]
    fn the_agent_text_prefixes_only_denials_that_do_not_name_themselves() {
        assert_eq!(
            RateLimited.agent_text("rate limit exceeded: max 1 per 1m", "lim"),
            "rate limit exceeded: max 1 per 1m (rule: lim)"
        );
        for kind in [Rule, ConcurrencyLimit, Hook] {
            assert_eq!(
                kind.agent_text("no", "r"),
                "policy denied: no (rule: r)",
                "{kind:?}"
            );
        }
        let decisions: Vec<_> = [
            Rule,
            RateLimited,
            BudgetExceeded,
            CircuitOpen,
            ConcurrencyLimit,
            Hook,
        ]
        .map(DenialKind::intent_decision)
        .into();
        assert_eq!(
            decisions,
            [
                "denied",
                "rate_limited",
                "budget_exceeded",
                "circuit_open",
                "denied",
                "denied"
            ]
        );
    }
}
