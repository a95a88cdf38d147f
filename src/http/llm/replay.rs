//! Re-runs get recorded answers: a call identical to one an earlier run of the execution
//! completed is answered from the log.

use axum::http::HeaderMap;
use keel_actors::events::{EventBody, LlmCall};
use keel_actors::ids::ExecutionId;
use keel_actors::kernel::{Kernel, KernelError};
use serde_json::Value;

/// Header that, set to `off`, makes a re-run's call go to the provider even when an earlier run
/// recorded the same call.
pub const REPLAY_HEADER: &str = "keel-replay";
/// Events read per page when a re-run's call is looked up in the log.
const JOURNAL_PAGE: i64 = 1000;

/// Returns whether the caller accepts a recorded answer (no `Keel-Replay: off`).
pub(super) fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get(REPLAY_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_none_or(|value| !value.eq_ignore_ascii_case("off"))
}

/// The answer an earlier run recorded for the same call (provider, model, request digest,
/// streamed or not): the n-th such call of this run gets the n-th one recorded by earlier runs
/// (their own live calls, not their replays). Returns its sequence and answer.
pub(super) async fn journal_answer(
    kernel: &Kernel,
    id: &ExecutionId,
    call: &LlmCall,
) -> Result<Option<(i64, Value)>, KernelError> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = kernel.events(id, after, JOURNAL_PAGE).await?;
        let done = i64::try_from(page.len()).unwrap_or(i64::MAX) < JOURNAL_PAGE;
        if let Some(last) = page.last() {
            after = last.sequence;
        }
        events.extend(page);
        if done {
            break;
        }
    }
    let run_start = events
        .iter()
        .rev()
        .find(|event| matches!(event.body, EventBody::ExecutionStarted { .. }))
        .map_or(0, |event| event.sequence);
    let mut recorded = Vec::new();
    let mut made = 0usize;
    for event in &events {
        let EventBody::LlmCalled(earlier) = &event.body else {
            continue;
        };
        let same = earlier.provider == call.provider
            && earlier.model == call.model
            && earlier.request_digest == call.request_digest
            && earlier.stream == call.stream;
        if !same {
            continue;
        }
        if event.sequence > run_start {
            made += 1;
        } else if earlier.replay_of.is_none() && earlier.outcome == "ok" {
            recorded.push((event.sequence, earlier.response.clone()));
        }
    }
    Ok(recorded
        .into_iter()
        .nth(made)
        .and_then(|(sequence, answer)| answer.map(|answer| (sequence, answer))))
}
