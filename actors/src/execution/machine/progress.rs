//! `step.progress`: a runner relays what a running tool reports about its progress (an MCP
//! server's `notifications/progress`). The events are informational and bounded: at most
//! [`MAX_PROGRESS_EVENTS`] per step, each message cut to [`MAX_PROGRESS_MESSAGE_BYTES`].

use super::Transition;
use crate::events::{EventBody, MAX_PROGRESS_EVENTS, MAX_PROGRESS_MESSAGE_BYTES, NewEvent};
use crate::execution::rejection::Rejection;
use crate::execution::state::ExecutionState;
use crate::ids::{RunnerId, StepId};
use crate::status::StepStatus;

/// One progress report of a running step.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Progress so far.
    pub progress: f64,
    /// Total, when known.
    pub total: Option<f64>,
    /// What the tool said.
    pub message: Option<String>,
}

/// Records a progress report of a step a runner holds; nothing (no error) when the step is
/// not running on that runner any more, or already has [`MAX_PROGRESS_EVENTS`] reports.
pub fn step_progress(
    state: &ExecutionState,
    step_id: &StepId,
    runner_id: &RunnerId,
    report: Progress,
) -> Result<Transition, Rejection> {
    let step = state
        .step(step_id)
        .ok_or_else(|| Rejection::StepNotFound(step_id.to_string()))?;
    let mut transition = Transition::default();
    let running = matches!(step.status, StepStatus::Dispatched | StepStatus::Running)
        && !step.awaiting_approval
        && step
            .runner_id
            .as_ref()
            .is_none_or(|holder| holder == runner_id);
    if !running || step.progress_events >= MAX_PROGRESS_EVENTS {
        return Ok(transition);
    }
    let finite = |value: f64| value.is_finite().then_some(value);
    let Some(progress) = finite(report.progress) else {
        return Ok(transition);
    };
    transition.event(NewEvent::step(
        step_id,
        EventBody::StepProgress {
            progress,
            total: report.total.and_then(finite),
            message: report
                .message
                .map(|text| cut(text, MAX_PROGRESS_MESSAGE_BYTES)),
        },
    ));
    Ok(transition)
}

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut.
pub fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut short = text[..end].to_owned();
    short.push(ellipsis);
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short".to_owned(), 10), "short");
        let cut_text = cut("é".repeat(400), 512);
        assert!(cut_text.len() <= 512 && cut_text.ends_with('…'));
        assert_eq!(cut("abcdef".to_owned(), 5), "ab…");
    }
}
