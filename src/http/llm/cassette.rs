//! A kernel started with `--llm-cassette FILE` answers model calls from the cassette instead of
//! any provider, and refuses, loudly, a call the cassette does not hold.

use axum::http::StatusCode;
use axum::response::Response;
use tracing::error;

use super::recorder::{Recorder, recorded_answer};
use super::refusal::{invalid, refusal};
use crate::gateway::Format;
use crate::gateway::cassette::Cassette;
use crate::gateway::usage::Usage;

/// Answers `call` from `cassette` (recorded on the execution as an `ok` call with the recorded
/// usage), or refuses it naming the call that is missing.
pub(super) async fn serve(cassette: &Cassette, mut call: Recorder, format: Format) -> Response {
    let Some(pending) = call.call.as_ref() else {
        return invalid(
            format,
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the call was already answered",
        );
    };
    let (provider, model, stream, digest) = (
        pending.provider.clone(),
        pending.model.clone(),
        pending.stream,
        pending.request_digest.clone(),
    );
    let Some(recorded) = cassette.answer(&provider, &model, stream, &digest) else {
        let others = cassette.recorded_for(&provider, &model);
        error!(cassette = %cassette.path().display(), provider = %provider, model = %model,
               stream, request_digest = %digest,
               "LLM gateway: a model call is not in the cassette; refused");
        call.abandon().await;
        return refusal(
            format,
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_in_cassette",
            &format!(
                "the cassette {} holds no call to {provider}/{model} (stream: {stream}) with \
                 request digest {digest}; it holds {others} other calls to that model",
                cassette.path().display()
            ),
        );
    };
    call.usage(Some(Usage {
        input: recorded.input_tokens,
        output: recorded.output_tokens,
        cached: recorded.cached_tokens,
    }));
    if call.provider.store_bodies {
        call.response(recorded.response.clone());
    }
    call.finish("ok", Some(StatusCode::OK), None).await;
    recorded_answer(stream, recorded.response)
}
