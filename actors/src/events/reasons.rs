//! The `reason` of `execution.blocked` and `execution.resumed` as enums. On the wire and in the
//! log they stay the strings the kernel has always written (`tool`, `signal received: <type>`,
//! `approval granted`, ...): each enum has one `parse` and one `Display`, and serde goes through
//! them, so the state machine writes and the event fold reads variants, never matched text.
//!
//! A string the kernel does not write itself is kept verbatim as `Other`, so any stored log
//! replays; [`ResumeReason::cleared`] and [`BlockReason::blocker`] give `Other` the meaning the
//! fold has always given unknown text.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What an `execution.blocked` event blocks on (its `reason`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum BlockReason {
    /// Tool steps are running (`tool`).
    Tool,
    /// A `wait` intent waits for a signal (`signal`).
    Signal,
    /// A step waits for an operator's approval (`approval`).
    Approval,
    /// A model call waits for an operator to raise the spent budget (`budget`).
    Budget,
    /// Any other text, kept as stored (read as an approval, as it always was).
    Other(String),
}

/// The blocker an `execution.blocked` event sets, as the event fold applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// Tool steps.
    Tool,
    /// A signal wait.
    Signal,
    /// An approval.
    Approval,
    /// A budget raise.
    Budget,
}

impl BlockReason {
    /// Reads a stored reason.
    pub fn parse(text: &str) -> Self {
        match text {
            "tool" => Self::Tool,
            "signal" => Self::Signal,
            "approval" => Self::Approval,
            "budget" => Self::Budget,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Returns the blocker this reason sets.
    pub fn blocker(&self) -> Blocker {
        match self {
            Self::Tool => Blocker::Tool,
            Self::Signal => Blocker::Signal,
            Self::Approval | Self::Other(_) => Blocker::Approval,
            Self::Budget => Blocker::Budget,
        }
    }
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tool => "tool",
            Self::Signal => "signal",
            Self::Approval => "approval",
            Self::Budget => "budget",
            Self::Other(text) => text,
        })
    }
}

/// Why an `execution.resumed` event cleared a blocker (its `reason`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ResumeReason {
    /// The last running tool step ended (`step completed`).
    StepCompleted,
    /// The awaited signal arrived (`signal received: <type>`).
    SignalReceived(String),
    /// The operator approved the gated step (`approval granted`).
    ApprovalGranted,
    /// The operator denied it (`approval denied`).
    ApprovalDenied,
    /// The agent gave up its signal wait with another intent (`wait abandoned`).
    WaitAbandoned,
    /// An operator raised the spent budget (`budget raised`).
    BudgetRaised,
    /// An operator refused to raise it (`budget raise denied`).
    BudgetRaiseDenied,
    /// No answer came within the model call's wait (`budget approval timed out`).
    BudgetApprovalTimedOut,
    /// Any other text, kept as stored.
    Other(String),
}

/// The blocker an `execution.resumed` event clears, as the event fold applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cleared<'a> {
    /// Tool steps no longer block.
    Tool,
    /// The signal of this type was consumed (and a wait for it ends).
    Signal(&'a str),
    /// The approval is over.
    Approval,
    /// The signal wait ended without a signal.
    Wait,
    /// The budget wait is over.
    Budget,
}

/// Prefix of [`ResumeReason::SignalReceived`].
const SIGNAL_RECEIVED: &str = "signal received: ";

impl ResumeReason {
    /// Reads a stored reason.
    pub fn parse(text: &str) -> Self {
        if let Some(signal_type) = text.strip_prefix(SIGNAL_RECEIVED) {
            return Self::SignalReceived(signal_type.to_owned());
        }
        match text {
            "step completed" => Self::StepCompleted,
            "approval granted" => Self::ApprovalGranted,
            "approval denied" => Self::ApprovalDenied,
            "wait abandoned" => Self::WaitAbandoned,
            "budget raised" => Self::BudgetRaised,
            "budget raise denied" => Self::BudgetRaiseDenied,
            "budget approval timed out" => Self::BudgetApprovalTimedOut,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Returns the blocker this reason clears. Text the kernel never wrote is read as the fold
    /// always read it: an `approval…` text ends the approval, anything else the tool block.
    pub fn cleared(&self) -> Cleared<'_> {
        match self {
            Self::StepCompleted => Cleared::Tool,
            Self::SignalReceived(signal_type) => Cleared::Signal(signal_type),
            Self::ApprovalGranted | Self::ApprovalDenied => Cleared::Approval,
            Self::WaitAbandoned => Cleared::Wait,
            Self::BudgetRaised | Self::BudgetRaiseDenied | Self::BudgetApprovalTimedOut => {
                Cleared::Budget
            }
            Self::Other(text) if text.starts_with("approval") => Cleared::Approval,
            Self::Other(_) => Cleared::Tool,
        }
    }
}

impl fmt::Display for ResumeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StepCompleted => f.write_str("step completed"),
            Self::SignalReceived(signal_type) => write!(f, "{SIGNAL_RECEIVED}{signal_type}"),
            Self::ApprovalGranted => f.write_str("approval granted"),
            Self::ApprovalDenied => f.write_str("approval denied"),
            Self::WaitAbandoned => f.write_str("wait abandoned"),
            Self::BudgetRaised => f.write_str("budget raised"),
            Self::BudgetRaiseDenied => f.write_str("budget raise denied"),
            Self::BudgetApprovalTimedOut => f.write_str("budget approval timed out"),
            Self::Other(text) => f.write_str(text),
        }
    }
}

macro_rules! string_conversions {
    ($name:ident) => {
        impl From<String> for $name {
            fn from(text: String) -> Self {
                Self::parse(&text)
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self::parse(text)
            }
        }

        impl From<$name> for String {
            fn from(reason: $name) -> Self {
                reason.to_string()
            }
        }
    };
}

string_conversions!(BlockReason);
string_conversions!(ResumeReason);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_reason_the_kernel_writes_round_trips() {
        for (text, reason, blocker) in [
            ("tool", BlockReason::Tool, Blocker::Tool),
            ("signal", BlockReason::Signal, Blocker::Signal),
            ("approval", BlockReason::Approval, Blocker::Approval),
            ("budget", BlockReason::Budget, Blocker::Budget),
        ] {
            assert_eq!(BlockReason::parse(text), reason);
            assert_eq!(reason.to_string(), text);
            assert_eq!(reason.blocker(), blocker);
        }
        let unknown = BlockReason::parse("gate");
        assert_eq!(unknown, BlockReason::Other("gate".into()));
        assert_eq!(unknown.to_string(), "gate");
        assert_eq!(unknown.blocker(), Blocker::Approval);
    }

    #[test]
    fn every_resume_reason_the_kernel_writes_round_trips() {
        let cases = [
            ("step completed", ResumeReason::StepCompleted),
            (
                "signal received: payment.done",
                ResumeReason::SignalReceived("payment.done".into()),
            ),
            // A signal type is any client text, including the separator itself.
            (
                "signal received: a: b",
                ResumeReason::SignalReceived("a: b".into()),
            ),
            ("approval granted", ResumeReason::ApprovalGranted),
            ("approval denied", ResumeReason::ApprovalDenied),
            ("wait abandoned", ResumeReason::WaitAbandoned),
            ("budget raised", ResumeReason::BudgetRaised),
            ("budget raise denied", ResumeReason::BudgetRaiseDenied),
            (
                "budget approval timed out",
                ResumeReason::BudgetApprovalTimedOut,
            ),
        ];
        for (text, reason) in cases {
            assert_eq!(ResumeReason::parse(text), reason, "{text}");
            assert_eq!(reason.to_string(), text);
            let json = serde_json::to_value(&reason).unwrap();
            assert_eq!(json, serde_json::json!(text));
            assert_eq!(
                serde_json::from_value::<ResumeReason>(json).unwrap(),
                reason
            );
        }
    }

    #[test]
    fn resume_reasons_clear_what_the_fold_always_cleared() {
        let cleared = |text: &str| ResumeReason::parse(text).cleared().to_owned_kind();
        assert_eq!(cleared("step completed"), "tool");
        assert_eq!(cleared("signal received: go"), "signal go");
        assert_eq!(cleared("approval granted"), "approval");
        assert_eq!(cleared("approval denied"), "approval");
        assert_eq!(cleared("wait abandoned"), "wait");
        assert_eq!(cleared("budget raised"), "budget");
        assert_eq!(cleared("budget raise denied"), "budget");
        assert_eq!(cleared("budget approval timed out"), "budget");
        // Text the kernel never wrote: `approval…` ends the approval, the rest the tool block.
        assert_eq!(cleared("approval expired"), "approval");
        assert_eq!(cleared("r"), "tool");
        assert_eq!(ResumeReason::parse("r").to_string(), "r");
    }

    impl Cleared<'_> {
        fn to_owned_kind(self) -> String {
            match self {
                Cleared::Tool => "tool".into(),
                Cleared::Signal(signal_type) => format!("signal {signal_type}"),
                Cleared::Approval => "approval".into(),
                Cleared::Wait => "wait".into(),
                Cleared::Budget => "budget".into(),
            }
        }
    }
}
