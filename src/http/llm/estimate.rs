//! What a model call is estimated to spend before it goes to the provider, reserved against
//! its execution's budget while it is in flight (docs/llm.md, "Budgets").

use keel_actors::guardrails::reservations::LlmEstimate;
use serde_json::Value;

use super::Route;
use crate::gateway::Price;
use crate::gateway::usage::{self, Usage};

/// Output tokens assumed for a call that names no output limit.
const DEFAULT_OUTPUT_TOKENS: u64 = 4096;
/// Request bytes per input token assumed (text runs about four characters a token; the JSON
/// around it makes this an over-estimate).
const BYTES_PER_TOKEN: u64 = 4;

/// Estimates a call from its request: input tokens from the body's size, output tokens from the
/// request's own limit (`max_completion_tokens`, `max_tokens`) or [`DEFAULT_OUTPUT_TOKENS`]
/// (none for embeddings), priced like its answer will be.
pub(super) fn estimate(
    route: Route,
    request: &Value,
    body_len: usize,
    price: Option<&Price>,
) -> LlmEstimate {
    let input = (body_len as u64).div_ceil(BYTES_PER_TOKEN).max(1);
    let output = match route {
        Route::Embeddings => 0,
        Route::Chat | Route::Messages => ["max_completion_tokens", "max_tokens"]
            .iter()
            .find_map(|field| request.get(*field).and_then(Value::as_u64))
            .unwrap_or(DEFAULT_OUTPUT_TOKENS),
    };
    let usage = Usage {
        input: Some(input),
        output: Some(output),
        cached: None,
    };
    LlmEstimate {
        tokens: input + output,
        cost: usage::cost(Some(&usage), price).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_requests_output_limit_and_size_make_the_estimate() {
        let price = Price {
            input: 1.0,
            output: 2.0,
            cached_input: None,
        };
        let request = json!({"model": "m", "max_tokens": 100});
        let estimate = estimate(Route::Messages, &request, 400, Some(&price));
        assert_eq!(estimate.tokens, 200);
        assert_eq!(estimate.cost["tokens"], 200.0);
        assert!((estimate.cost["usd"] - (100.0 + 200.0) / 1e6).abs() < 1e-12);
        let open = super::estimate(Route::Chat, &json!({}), 3, None);
        assert_eq!(open.tokens, 1 + DEFAULT_OUTPUT_TOKENS);
        assert!(!open.cost.contains_key("usd"));
        assert_eq!(
            super::estimate(Route::Embeddings, &json!({}), 8, None).tokens,
            2
        );
    }
}
